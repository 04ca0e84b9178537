"""The main job's certificates: the headline network and the paper's network, certified.

``run_headline``: ``yun.approximate(target, certify_epsilon, arithmetic=certify_arithmetic)``,
the network with the fewest parameters whose certificate holds for g in that arithmetic;
a float headline is written beside the report as ``g.onnx`` (``export_onnx``'s 'auto' layout:
the flat graph of standard operators for these shallow networks, which onnxruntime, PyTorch's
onnx2torch and the verifiers read) and run in onnxruntime and, where torch and onnx2torch
import, in PyTorch on uniform points (each run's difference from the JAX run and the sampled
d_p(f, g)), with the one-line commands a reader can run; every headline is saved beside the
report as ``g.npz`` (``saved_network.save``: parameters, certificate, hash). ``run_paper_certified``: the paper's network at the main
resolution, certified in exact arithmetic as built, with the output clamp and (Theorem 2)
with ties='complete'. ``studies.approximation`` (the main job) calls ``run_certificates``.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np
import onnx

from transformer_ua.networks import saved_network
from transformer_ua.networks.export_onnx import export_onnx
from transformer_ua.verify import float_certificate
from transformer_ua.yun import search
from transformer_ua.yun.bounds import certificate
from transformer_ua.yun.realization import plan as yun_plan
from transformer_ua.yun.variants import registry


def _certify(net, c, clamp: bool, workers=None) -> tuple:
  """(g, Certificate) of net's exact realization at the planned lam, ramp and bits."""
  planned = yun_plan.plan_realization(net, tolerance=c.certify_tolerance,
                                      margin=c.certify_margin)
  g = net.realize(lam=planned.lam, epsilon=planned.epsilon, dtype='exact', clamp=clamp)
  return g, certificate.certify_lp(net, g, p=c.p, margin=c.certify_margin, workers=workers)


def _blocks(g) -> int:
  return sum(s.depth for s in g.segments)


#: The headline network's ONNX file, written beside the report.
ONNX_NAME = 'g.onnx'
#: The headline saved with its certificate (``saved_network``), beside the report.
SAVED_NAME = 'g.npz'
#: g.npz and g.onnx are written here first and moved beside the report once the report is
#: written (``approximation.run``): a run stopped midway leaves no network newer than its
#: report, and its rerun with the same --output_dir is not refused for them.
PENDING_DIR = '.pending'
#: Uniform points of the headline's onnxruntime check (``float_certificate.batched``).
ONNX_CHECK_POINTS = 20000
#: Uniform points of the headline's PyTorch check.
PYTORCH_CHECK_POINTS = 10000


def onnx_check_line(path: str, c) -> str:
  """A one-line command that runs the ONNX file in onnxruntime on uniform points and prints
  the sampled d_p(f, g), to compare with the certified total."""
  return ("python -c \"import numpy as np, onnxruntime as ort; "
          "from transformer_ua.targets.functions import get_target; "
          f"x = np.random.default_rng(1).random((4000, {c.n}, {c.d})); "
          f"y = ort.InferenceSession('{path}').run(None, {{'X': x}})[0]; "
          f"f = get_target('{c.target}', d={c.d}, n={c.n})(x); "
          f"print('sampled d_{c.p:g}(f, g) =', np.mean(np.sum(np.abs(y - f) ** {c.p:g}, "
          f"axis=(1, 2))) ** (1 / {c.p:g}))\"")


def pytorch_check_line(path: str, c) -> str:
  """The same check in PyTorch: the flat file converted by onnx2torch."""
  dt = 'float32' if c.certify_arithmetic == 'float32' else 'float64'
  return ("python -c \"import numpy as np, onnx, onnx2torch, torch; "
          "from transformer_ua.targets.functions import get_target; "
          f"m = onnx2torch.convert(onnx.load('{path}')); "
          f"x = np.random.default_rng(1).random((4000, {c.n}, {c.d})); "
          f"y = m(torch.from_numpy(x.astype('{dt}'))).detach().numpy(); "
          f"f = get_target('{c.target}', d={c.d}, n={c.n})(x); "
          f"print('sampled d_{c.p:g}(f, g) =', np.mean(np.sum(np.abs(y - f) ** {c.p:g}, "
          f"axis=(1, 2))) ** (1 / {c.p:g}))\"")


def saved_check_line(path: str) -> str:
  """A one-line command that loads the saved network (its hashes checked) and prints it."""
  return ("python -c \"from transformer_ua.networks import saved_network; "
          f"print(saved_network.load('{path}').line())\"")


def _pytorch_check(g, path: str, c, target) -> dict:
  """The flat ONNX file converted by onnx2torch and run by PyTorch on
  ``PYTORCH_CHECK_POINTS`` uniform points: bit-identical to JAX?, max difference, sampled
  d_p(f, g); {'skipped': why} where torch or onnx2torch does not import."""
  def skipped(e):
    return {'skipped': f'torch / onnx2torch do not import here ({type(e).__name__}: '
                       f'{str(e).splitlines()[0] if str(e) else ""})'}
  try:
    # pylint: disable=import-outside-toplevel
    import onnx2torch
    import torch
  except ImportError as e:       # not installed: optional (the 'portable' extra)
    return skipped(e)
  except RuntimeError as e:      # torchvision's import fails where its ops do not load
    return skipped(e)
  try:
    module = onnx2torch.convert(onnx.load(path))
  except Exception as e:  # pylint: disable=broad-except -- e.g. a Scan file
    return {'skipped': f'onnx2torch cannot convert {os.path.basename(path)} '
                       f'({type(e).__name__})'}
  dt = np.float32 if c.certify_arithmetic == 'float32' else np.float64
  x = np.random.default_rng(c.seed).random((PYTORCH_CHECK_POINTS, c.n, c.d)).astype(dt)
  with torch.no_grad():
    y = float_certificate.batched(
        lambda b: module(torch.from_numpy(np.ascontiguousarray(b, dt))).numpy().astype(
            np.float64), x, g)
  jax_y = float_certificate.batched(g.apply, x, g)
  e = np.sum(np.abs(y - target(x.astype(np.float64))) ** c.p, axis=(1, 2))
  return {'points': len(x), 'torch': torch.__version__,
          'bit_identical_to_jax': bool(np.array_equal(y, jax_y)),
          'max_abs_pytorch_minus_jax': float(np.max(np.abs(y - jax_y))),
          'sampled_dp': float(np.mean(e) ** (1 / c.p))}


def _onnx_check(g, path: str, c, target) -> dict:
  """The ONNX file in onnxruntime on ``ONNX_CHECK_POINTS`` uniform points (batched): its
  largest difference from ``g.apply`` (JAX) and the sampled d_p(f, g)."""
  import onnxruntime as ort  # pylint: disable=import-outside-toplevel
  sess = ort.InferenceSession(path)
  x = np.random.default_rng(c.seed).random((ONNX_CHECK_POINTS, c.n, c.d))
  y = float_certificate.batched(lambda b: sess.run(None, {'X': b})[0], x, g)
  e = np.sum(np.abs(y - target(x)) ** c.p, axis=(1, 2))
  jax_y = float_certificate.batched(g.apply, x, g)
  return {'points': len(x), 'max_abs_onnx_minus_jax': float(np.max(np.abs(y - jax_y))),
          'sampled_dp': float(np.mean(e) ** (1 / c.p))}


def run_headline(c, positional, log, outdir: str, workers=None) -> dict:
  """The headline: ``yun.approximate`` at ``certify_epsilon`` in ``certify_arithmetic``
  (the [certified] network), its ONNX file beside the report and onnxruntime's run of it."""
  t0 = time.time()
  found = search.approximate(c.target, c.certify_epsilon, d=c.d, n=c.n, p=c.p,
                             positional=positional, workers=workers, progress=log,
                             arithmetic=c.certify_arithmetic)
  cert, g = found.certificate, found.g
  bits = g.bits_per_param() if hasattr(g, 'bits_per_param') else cert.bits
  head = {'epsilon': c.certify_epsilon, 'construction': found.construction,
          'arithmetic': found.arithmetic, 'resolution': cert.resolution, 'blocks': _blocks(g),
          'weights': g.num_params(), 'bits_per_param': bits, 'certificate': cert.as_dict(),
          'attempts': list(found.attempts), 'seconds': round(time.time() - t0, 2)}
  t = cert.terms
  N = cert.resolution
  runs = ('run in IEEE ' + ('binary64' if found.arithmetic == 'float64' else 'binary32')
          + ' by a runtime that meets the model in its line' if found.arithmetic != 'exact'
          else 'with exact weights')
  log(f'[certified] CERTIFIED: d_p(f, g) <= {cert.total:.4g} <= {c.certify_epsilon:g} '
      f'(p={c.p:g}) over [0,1]^(n x d) for a standard Transformer g {runs}: softmax attention, '
      f'ReLU feed-forward, {head["blocks"]} blocks, {head["weights"]:,} weights of {bits} bits, '
      f'N={N}, construction {found.construction!r} (the fewest parameters whose certificate '
      f'holds) ({head["seconds"]:.1f} s)')
  log(f'  proof: d_p(f, f_bar) <= {t["f_fbar"]:.4g} ({cert.f_term_method}) + '
      f'd_p(f_bar, g_bar) <= {t["fbar_gbar"]:.3g} + d_p(g_bar, g) <= {t["gbar_g"]:.3g} '
      f'(interiors {100 * cert.interior_fraction:.6g}% of the volume, max |g - g_bar| <= '
      f'{cert.interior_sup:.3g}; ramp windows {cert.window_measure:.3g} of the volume, '
      f'|g - g_bar| <= {cert.window_sup:.3g} there; ramp 2^{math.log2(cert.epsilon):.0f}, '
      f'{cert.bits} bits){cert._arithmetic_note()}')  # pylint: disable=protected-access
  pending = os.path.join(outdir, PENDING_DIR)
  os.makedirs(pending, exist_ok=True)
  saved = saved_network.save(found, os.path.join(pending, SAVED_NAME), overwrite=True)
  final_saved = os.path.join(outdir, SAVED_NAME)
  head['saved'] = {'file': SAVED_NAME, 'params_hash': saved_network.load(saved).params_hash,
                   'command': saved_check_line(final_saved)}
  log(f'  saved: {final_saved} (parameters, certificate, {head["saved"]["params_hash"]}); '
      f'load it: {head["saved"]["command"]}')
  if found.arithmetic != 'exact':
    path = export_onnx(g, os.path.join(pending, ONNX_NAME), overwrite=True)  # the binary checked
    final = os.path.join(outdir, ONNX_NAME)
    layout = {p.key: p.value for p in onnx.load(path).metadata_props}['layout']
    head['onnx'] = {'file': ONNX_NAME, 'layout': layout,
                    **_onnx_check(g, path, c, found.net.target),
                    'command': onnx_check_line(final, c),
                    'pytorch': {**_pytorch_check(g, path, c, found.net.target),
                                'command': pytorch_check_line(final, c)}}
    o, pt = head['onnx'], head['onnx']['pytorch']
    log(f'  ONNX: {final} ({found.arithmetic}, {layout} layout); onnxruntime on '
        f'{o["points"]:,} uniform points: max |onnxruntime - JAX| = '
        f'{o["max_abs_onnx_minus_jax"]:.3g}, sampled d_p(f, g) = {o["sampled_dp"]:.4g} <= '
        f'{cert.total:.4g} certified. Check it yourself:')
    log(f'    {o["command"]}')
    if 'skipped' in pt:
      log(f'  PyTorch: skipped: {pt["skipped"]}.')
    else:
      log(f'  PyTorch {pt["torch"]} (onnx2torch) on {pt["points"]:,} uniform points: '
          f'max |PyTorch - JAX| = {pt["max_abs_pytorch_minus_jax"]:.3g}, sampled d_p(f, g) = '
          f'{pt["sampled_dp"]:.4g}. Check it yourself:')
      log(f'    {pt["command"]}')
  return head


def _certified_reason(row, cert, values_max) -> str:
  """Why a certified d_p(f, g) of the [paper] table is what it is (one clause)."""
  t = cert['terms']
  if not row['clamp'] and t['gbar_g'] > max(t['f_fbar'], t['fbar_gbar']):
    return (f'the ramp windows ({cert["window_measure"]:.2g} of the volume): nothing bounds '
            f'the paper\'s g there, its certified enclosure reaches {cert["window_sup"]:.3g} '
            f'(4-ReLU ramps of slope 1/epsilon = 2^{-math.log2(cert["epsilon"]):.0f} on ids '
            f'up to t_r) against |g_bar| <= {values_max:.3g}')
  if row['clamp'] and row['ties'] == 'paper':
    return (f'the output clamp keeps g within g_bar\'s range in the windows; most of it is '
            f'd_p(f_bar, g_bar) <= {t["fbar_gbar"]:.3g}, the bad set where g_bar is 0')
  return (f'no bad set; most of it is d_p(f, f_bar) <= {t["f_fbar"]:.3g}, the grid\'s own '
          'error at this N')


def run_paper_certified(c, positional, log, workers=None) -> list:
  """The certified d_p(f, g) of the [paper] network at the main resolution: as built, with
  the output clamp, and (Theorem 2) with ties='complete'."""
  rows = []
  variants = [('paper', False), ('paper', True)] + ([] if positional else [('complete', True)])
  log(f'[paper] certified at N={c.resolution} over the whole cube (exact weights; cube '
      f'interiors shrunk by {c.certify_margin:.3g} delta):')
  for ties, clamp in variants:
    t1 = time.time()
    net = registry.build_approximator(c.target, d=c.d, n=c.n, resolution=c.resolution,
                                          positional=positional, ties=ties)
    g, cert = _certify(net, c, clamp, workers)
    label = ('ties=complete, output clamp' if ties == 'complete' else
             'with the output clamp' if clamp else 'as the paper builds it')
    rows.append({'ties': ties, 'clamp': clamp, 'label': label, 'blocks': _blocks(g),
                 'weights': g.num_params(), 'certificate': cert.as_dict(),
                 'seconds': round(time.time() - t1, 2)})
    values_max = float(np.max(np.abs(net.values))) if net.values.size else 0.0
    log(f'  {label:<30} d_p(f, g) <= {cert.total:.4g}: '
        + _certified_reason(rows[-1], rows[-1]['certificate'], values_max)
        + f' (d_p(g_bar, g) <= {cert.terms["gbar_g"]:.3g}; {_blocks(g)} blocks, '
        f'{cert.bits} bits, {rows[-1]["seconds"]:.1f} s)')
  return rows


def run_certificates(c, positional, log, outdir: str, workers=None) -> dict:
  """The headline ([certified]) and the [paper] network's certified rows."""
  head = run_headline(c, positional, log, outdir, workers)
  log('')
  return {'headline': head,
          'main_resolution': run_paper_certified(c, positional, log, workers)}


def publish_pending(outdir: str) -> None:
  """Moves g.npz and g.onnx from ``PENDING_DIR`` beside the report (called once the report
  is written)."""
  pending = os.path.join(outdir, PENDING_DIR)
  for name in (SAVED_NAME, ONNX_NAME):
    if os.path.exists(os.path.join(pending, name)):
      os.replace(os.path.join(pending, name), os.path.join(outdir, name))
  if os.path.isdir(pending) and not os.listdir(pending):
    os.rmdir(pending)
