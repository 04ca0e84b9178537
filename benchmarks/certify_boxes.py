r"""Per-box bounds on sup |f - g|: the network certifier against auto_LiRPA's CROWN.

Claim measured: how many boxes per second the certifier bounds, and how tight its bound on
sup_B |f - g| is on each box, against the same bound built from auto_LiRPA's output bounds
(CROWN, and IBP) on the same network and the same boxes.

For each k in --boxes_per_axis the grid of k^(n d) boxes over [0,1]^(n x d) is made. At
most --max_boxes of its boxes are used, a seeded sample. On each box B:

    certifier  E_B: ``box_bound``'s per-box bound for the exact g
               (arithmetic='exact'), min(mean-value form, natural interval form)
    CROWN      [g_lo, g_hi] from auto_LiRPA's compute_bounds(method=) on a torch copy of g
               (float64), joined with f's interval enclosure [f_lo, f_hi] over B
               (``target_enclosures``, the f side the certifier uses too):
                   U_B = max(f_hi - g_lo, g_hi - f_lo)     (per output coordinate)
    sampled    the largest |f - g| over --samples_per_box uniform points of B (NumPy,
               float64): a lower bound of sup_B |f - g|, against which both are read

Reported per method: boxes per second (batched: all boxes of one k in one call), and the
mean, median and max of the bound over boxes and output coordinates. Also the median
ratio U_B / E_B, the share of entries where CROWN's bound is the smaller, and each bound's
mean over the sampled lower bound.

The two sides are not equally strong. E_B is outward rounded, a proof. auto_LiRPA rounds
to nearest in float64, a bound of the real network up to its own rounding. Neither bounds
fl(g) here; the certifier's float term is separate (``network_enclosure``).

Networks (--network):
    hand_built  ``certify.hand_built.hand_built_product_network(--units)`` for
                token_times_mean (d = 1, D = 2: the uniform-mean head and one ReLU product
                layer), whose sup |f - g| = h^2/4 (h = 2/units) is known in closed form.
    random      a seeded untrained network of --width, --heads, --head_size, --ff.

auto_LiRPA is not a dependency of the project. Its PyPI release (0.3) pins torch < 1.13,
which has no wheels for Python 3.11. The maintained repository (0.7.1, May 2026) declares
torch < 2.9, but imports and runs with torch 2.13 from a checkout on PYTHONPATH (plus
appdirs and graphviz); results/benchmarks/README.md gives the commands. Without it the
CROWN rows say why they were not run.

    PYTHONPATH=.:<auto_LiRPA checkout>:<its deps> python benchmarks/certify_boxes.py \
        --network=hand_built --boxes_per_axis=2,4,8,16 --output_dir=results/benchmarks

Writes certify_boxes_<network>.json into --output_dir (default runs/benchmarks; an existing file is
refused before the work unless --overwrite) and appends one line to benchmarks.md there.
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import math
import os
import time
import warnings

from absl import flags
import numpy as np

from transformer_ua import outputs, provenance
from transformer_ua.certify import box_bound, hand_built, network_certificate, target_enclosures
from transformer_ua.certify import intervals as iv
from transformer_ua.networks import network_apply, network_dict
from transformer_ua.targets import functions as targets_lib

JSON_NAME = 'certify_boxes_{network}.json'   # one file per --network
LOG_NAME = provenance.BENCHMARK_LOG
METHODS = ('IBP', 'CROWN', 'alpha-CROWN')

FLAGS = flags.FLAGS
flags.DEFINE_enum('network', 'hand_built', ['hand_built', 'random'], 'the network g')
flags.DEFINE_string('target', 'token_times_mean', 'built-in target f (hand_built: '
                    'token_times_mean, d=1)')
flags.DEFINE_integer('d', 1, 'token dimension')
flags.DEFINE_integer('n', 3, 'tokens')
flags.DEFINE_integer('units', 16, 'hand_built: ReLU units (a multiple of 4)')
flags.DEFINE_integer('width', 4, 'random: residual width D')
flags.DEFINE_integer('heads', 2, 'random: heads')
flags.DEFINE_integer('head_size', 2, 'random: head size m')
flags.DEFINE_integer('ff', 16, 'random: feed-forward width')
flags.DEFINE_integer('seed', 0, 'seed of the random network, the box sample and the points')
flags.DEFINE_list('boxes_per_axis', ['2', '4', '8', '16'], 'grid sizes k (k^(n d) boxes)')
flags.DEFINE_integer('max_boxes', 512, 'boxes used per grid (a seeded sample)')
flags.DEFINE_integer('samples_per_box', 64, 'points per box of the sampled lower bound')
flags.DEFINE_list('methods', ['IBP', 'CROWN'], f'auto_LiRPA methods, of {", ".join(METHODS)}')
flags.DEFINE_float('certify_minutes', 0.25, 'budget of one end-to-end certify_network run '
                   '(its boxes per second; 0: skip)')
cli.define_output_dir('runs/benchmarks', f'Directory of {JSON_NAME} and the log {LOG_NAME} '
                      '(appended; --output_dir=results/benchmarks: the record).')
cli.define_overwrite()


# -- the networks ----------------------------------------------------------------


def random_network(width: int, heads: int, head_size: int, ff: int, seed: int) -> dict:
  rng = np.random.default_rng(seed)

  def g(*shape):
    return rng.normal(size=shape) / math.sqrt(shape[-1])

  return {'blocks': [{'W_Q': g(heads, head_size, width), 'W_K': g(heads, head_size, width),
                      'W_V': g(heads, head_size, width), 'W_O': g(heads, width, head_size),
                      'W_1': g(ff, width), 'b_1': rng.normal(size=ff) * 0.1,
                      'W_2': g(width, ff), 'b_2': rng.normal(size=width) * 0.1}]}


def torch_module(net: network_dict.Net):
  """g as a float64 torch module of matmuls, reshapes, softmax and ReLU, as auto_LiRPA
  parses them (no einsum; the zero padding and the first-d readout as matmuls)."""
  import torch  # pylint: disable=import-outside-toplevel

  def const(a):
    return torch.nn.Parameter(torch.tensor(np.asarray(a, np.float64)), requires_grad=False)

  class TorchNet(torch.nn.Module):
    """network_apply.apply in torch (its docstring's equations)."""

    def __init__(self):
      super().__init__()
      self.embed = const(net.embed.T if net.embed is not None else np.eye(net.D, net.d).T)
      self.positional = None if net.positional is None else const(net.positional)
      self.readout = const(net.readout.T if net.readout is not None
                           else np.eye(net.D, net.d))
      self.params = torch.nn.ParameterList()
      self.shapes = []
      for b in net.blocks:
        entry = {}
        if b.attention is not None:
          a = b.attention
          w_q, b_q, w_k, w_v, w_o = a.w_q, a.b_q, a.w_k, a.w_v, a.w_o
          h, m, dd = w_q.shape
          entry['attention'] = (h, m, len(self.params))
          self.params.extend([const(w_q.reshape(h * m, dd).T), const(b_q.reshape(h * m)),
                              const(w_k.reshape(h * m, dd).T), const(w_v.reshape(h * m, dd).T),
                              const(np.transpose(w_o, (0, 2, 1)).reshape(h * m, dd))])
        if b.ff is not None:
          w_1, b_1, w_2, b_2 = b.ff.w_1, b.ff.b_1, b.ff.w_2, b.ff.b_2
          entry['ff'] = len(self.params)
          self.params.extend([const(w_1.T), const(b_1), const(w_2.T), const(b_2)])
        self.shapes.append(entry)

    def forward(self, x):
      n = x.shape[1]
      z = torch.matmul(x, self.embed)
      if self.positional is not None:
        z = z + self.positional
      p = self.params
      for entry in self.shapes:
        if 'attention' in entry:
          h, m, i = entry['attention']
          q = (torch.matmul(z, p[i]) + p[i + 1]).reshape(-1, n, h, m).transpose(1, 2)
          k = torch.matmul(z, p[i + 2]).reshape(-1, n, h, m).transpose(1, 2)
          v = torch.matmul(z, p[i + 3]).reshape(-1, n, h, m).transpose(1, 2)
          a = torch.softmax(torch.matmul(q, k.transpose(2, 3)), dim=-1)
          o = torch.matmul(a, v).transpose(1, 2).reshape(-1, n, h * m)
          z = z + torch.matmul(o, p[i + 4])
        if 'ff' in entry:
          i = entry['ff']
          hidden = torch.relu(torch.matmul(z, p[i]) + p[i + 1])
          z = z + torch.matmul(hidden, p[i + 2]) + p[i + 3]
      return torch.matmul(z, self.readout)

  return TorchNet()


# -- the bounds ------------------------------------------------------------------


def grid_boxes(k: int, n: int, d: int, limit: int, rng):
  """lo, hi [B, n, d] of at most ``limit`` boxes of the k-per-axis grid (a seeded sample)."""
  total = k ** (n * d)
  pick = np.sort(rng.choice(total, limit, replace=False)) if total > limit else np.arange(total)
  idx = np.stack(np.unravel_index(pick, (k,) * (n * d)), axis=1).reshape(-1, n, d)
  return idx / k, (idx + 1) / k


def summary(bound: np.ndarray) -> dict:
  return {'mean': float(bound.mean()), 'median': float(np.median(bound)),
          'max': float(bound.max())}


def sampled_lower(target, net, lo, hi, count: int, rng) -> np.ndarray:
  """max over ``count`` uniform points of each box of |f - g| [B, n, d]."""
  pts = lo[:, None] + (hi - lo)[:, None] * rng.random((len(lo), count) + lo.shape[1:])
  flat = pts.reshape((-1,) + lo.shape[1:])
  err = np.abs(np.asarray(target(flat), np.float64) - network_apply.apply(net, flat))
  return err.reshape(pts.shape).max(axis=1)


def load_auto_lirpa():
  """(auto_LiRPA module, None) or (None, why it cannot be used)."""
  try:
    import torch  # pylint: disable=import-outside-toplevel
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      import auto_LiRPA  # pylint: disable=import-outside-toplevel
  except Exception as e:  # pylint: disable=broad-except
    return None, f'auto_LiRPA not importable: {type(e).__name__}: {e}'
  return auto_LiRPA, f'auto_LiRPA {auto_LiRPA.__version__}, torch {torch.__version__}'


def lirpa_bounds(lirpa, module, lo, hi, method: str):
  """(g_lo, g_hi [B, n, d], seconds) from auto_LiRPA's compute_bounds on the boxes."""
  import torch  # pylint: disable=import-outside-toplevel
  torch.set_default_dtype(torch.float64)   # auto_LiRPA's own matrices follow it
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    bounded = lirpa.BoundedModule(module, torch.zeros((1,) + lo.shape[1:]), device='cpu')
    x = lirpa.BoundedTensor(torch.tensor((lo + hi) / 2), lirpa.PerturbationLpNorm(
        norm=np.inf, x_L=torch.tensor(lo), x_U=torch.tensor(hi)))
    t0 = time.perf_counter()
    g_lo, g_hi = bounded.compute_bounds(x=(x,), method=method)
    seconds = time.perf_counter() - t0
  return g_lo.detach().numpy(), g_hi.detach().numpy(), seconds


def bench_grid(k, net, target, lirpa, status: str, module, methods, rng) -> dict:
  n, d = net.n, net.d
  lo, hi = grid_boxes(k, n, d, FLAGS.max_boxes, rng)
  _, evaluator = box_bound.build_evaluator(
      net.as_dict(), d, n, FLAGS.target, 'exact')
  evaluator.evaluate(lo[:2], hi[:2])                      # warm-up
  t0 = time.perf_counter()
  e_cert = evaluator.evaluate(lo, hi)[0]
  cert_s = time.perf_counter() - t0
  lower = sampled_lower(target, net, lo, hi, FLAGS.samples_per_box, rng)
  f_box = target_enclosures.interval_form(target)(iv.box(lo, hi))
  row = {'boxes_per_axis': k, 'boxes': len(lo), 'grid_boxes': k ** (n * d),
         'sampled_lower': summary(lower),
         'certifier': {'seconds': cert_s, 'boxes_per_second': len(lo) / cert_s,
                       'bound': summary(e_cert), 'over_sampled': float(np.mean(e_cert / lower)),
                       'below_sampled': int(np.sum(e_cert < lower))}}
  for method in methods:
    if lirpa is None:
      row[method] = {'not_run': status}
      continue
    try:
      lirpa_bounds(lirpa, module, lo[:2], hi[:2], method)  # warm-up (graph parse)
      g_lo, g_hi, seconds = lirpa_bounds(lirpa, module, lo, hi, method)
    except Exception as e:  # pylint: disable=broad-except
      row[method] = {'not_run': f'{type(e).__name__}: {str(e).splitlines()[0][:300]}'}
      continue
    bound = np.maximum(f_box.hi - g_lo, g_hi - f_box.lo)
    row[method] = {'seconds': seconds, 'boxes_per_second': len(lo) / seconds,
                   'bound': summary(bound), 'over_sampled': float(np.mean(bound / lower)),
                   'below_sampled': int(np.sum(bound < lower)),
                   'median_ratio_to_certifier': float(np.median(bound / e_cert)),
                   'share_tighter_than_certifier': float(np.mean(bound < e_cert))}
  return row



def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  ks = cli.int_list('boxes_per_axis', FLAGS.boxes_per_axis, 1)
  bad = [m for m in FLAGS.methods if m not in METHODS]
  if bad:
    raise cli.BadInput(f'--methods={",".join(FLAGS.methods)}; allowed: {", ".join(METHODS)}.')
  if FLAGS.network == 'hand_built' and (FLAGS.target, FLAGS.d) != ('token_times_mean', 1):
    raise cli.BadInput('--network=hand_built is built for --target=token_times_mean with '
                       f'--d=1, not {FLAGS.target} with --d={FLAGS.d}.')
  for name in ('d', 'n', 'units', 'width', 'heads', 'head_size', 'ff', 'max_boxes',
               'samples_per_box'):
    if getattr(FLAGS, name) < 1:
      raise cli.BadInput(f'--{name}={getattr(FLAGS, name)}; it must be >= 1.')
  if FLAGS.network == 'random' and FLAGS.width < FLAGS.d:
    raise cli.BadInput(f'--width={FLAGS.width} is below --d={FLAGS.d}.')
  if FLAGS.certify_minutes < 0:
    raise cli.BadInput(f'--certify_minutes={FLAGS.certify_minutes}; it must be >= 0.')
  try:
    target = targets_lib.get_target(FLAGS.target, d=FLAGS.d, n=FLAGS.n)
  except ValueError as e:
    raise cli.BadInput(str(e)) from e
  if target_enclosures.interval_form(target) is None:
    raise cli.BadInput(f'--target={FLAGS.target} has no interval form; allowed: '
                       f'{", ".join(target_enclosures.INTERVAL_FORMS)}.')
  closed_form = None
  if FLAGS.network == 'hand_built':
    try:
      built = hand_built.hand_built_product_network(FLAGS.units, FLAGS.n)
    except ValueError as e:
      raise cli.BadInput(str(e)) from e
    net = network_dict.check(built.net.as_dict(), d=FLAGS.d, n=FLAGS.n)
    closed_form = float(built.sup_error)
  else:
    net = network_dict.check(random_network(FLAGS.width, FLAGS.heads, FLAGS.head_size,
                                            FLAGS.ff, FLAGS.seed), d=FLAGS.d, n=FLAGS.n)
  json_name = JSON_NAME.format(network=FLAGS.network)
  out_dir = cli.output_dir(FLAGS.output_dir, writes=(json_name,))
  prov = provenance.record()
  lirpa, status = load_auto_lirpa()
  module = torch_module(net) if lirpa is not None else None
  if module is not None:
    import torch  # pylint: disable=import-outside-toplevel
    x = np.random.default_rng(FLAGS.seed).random((8, FLAGS.n, FLAGS.d))
    gap = float(np.max(np.abs(module(torch.tensor(x)).detach().numpy()
                              - network_apply.apply(net, x))))
    print(f'torch copy of g: max |torch - network_apply.apply| = {gap:.3g} on 8 points')
  rng = np.random.default_rng(FLAGS.seed)
  rows = []
  for k in ks:
    row = bench_grid(k, net, target, lirpa, status, module, FLAGS.methods, rng)
    rows.append(row)
    parts = [f"certifier {row['certifier']['boxes_per_second']:.0f} boxes/s, mean bound "
             f"{row['certifier']['bound']['mean']:.4g}"]
    for m in FLAGS.methods:
      r = row[m]
      parts.append(f"{m} not run ({r['not_run']})" if 'not_run' in r else
                   f"{m} {r['boxes_per_second']:.0f} boxes/s, mean bound "
                   f"{r['bound']['mean']:.4g} (median {r['median_ratio_to_certifier']:.3g}x "
                   "the certifier's)")
    print(f"k={k} ({row['boxes']} boxes, sampled mean {row['sampled_lower']['mean']:.4g}): "
          + '; '.join(parts))
  end_to_end = None
  if FLAGS.certify_minutes > 0:
    try:
      cert = network_certificate.certify_network(FLAGS.target, net, d=FLAGS.d, n=FLAGS.n,
                                                 p=math.inf, arithmetic='exact',
                                                 max_minutes=FLAGS.certify_minutes)
    except ValueError as e:                    # e.g. its estimate exceeds the budget
      end_to_end = {'refused': str(e)}
      print(f'certify_network refused: {e}')
    else:
      end_to_end = {'line': cert.line(), 'boxes': cert.boxes, 'seconds': cert.seconds,
                    'boxes_per_second': cert.boxes / max(cert.seconds, 1e-9),
                    'sup_bound': float(cert.total)}
      print(cert.line())
  result = {'provenance': prov, 'network': FLAGS.network, 'target': FLAGS.target,
            'd': FLAGS.d, 'n': FLAGS.n, 'params': net.count_params(),
            'architecture': net.architecture(), 'sup_error_closed_form': closed_form,
            'auto_lirpa': status,
            'reference': "auto_LiRPA's output bounds of g joined with f's interval "
                         'enclosure, on the same boxes; sampled |f - g| as the lower bound',
            'rows': rows, 'certify_network': end_to_end,
            'flags': {k: FLAGS[k].value for k in ('units', 'width', 'heads', 'head_size', 'ff',
                                                  'seed', 'max_boxes', 'samples_per_box',
                                                  'methods', 'certify_minutes')}}
  outputs.atomic_json(os.path.join(out_dir, json_name), result, indent=1, default=str)
  last = rows[-1]
  line = (f'certify_boxes ({FLAGS.network}, {FLAGS.target}, d={FLAGS.d}, n={FLAGS.n}, k='
          f'{last["boxes_per_axis"]}, {last["boxes"]} boxes): certifier '
          f'{last["certifier"]["boxes_per_second"]:.0f} boxes/s, mean bound '
          f'{last["certifier"]["bound"]["mean"]:.4g}; '
          + '; '.join(f'{m} ' + ('not run' if 'not_run' in last[m] else
                                 f'{last[m]["boxes_per_second"]:.0f} boxes/s, mean bound '
                                 f'{last[m]["bound"]["mean"]:.4g}') for m in FLAGS.methods)
          + f'; sampled lower bound mean {last["sampled_lower"]["mean"]:.4g}')
  provenance.append_benchmark_line(os.path.join(out_dir, LOG_NAME), line, prov)
  print(line)
  print(f'wrote {os.path.join(out_dir, json_name)}')


if __name__ == '__main__':
  cli.run(main)
