"""Planted faults for the certifier: faulty networks, states, executors, callables and
float runtimes, each of which must be caught, and the checks whose removal lets one through.

A fault is caught when ``certify_lp`` / ``approximate`` refuses it (one line), or
certifies a bound that covers it as measured independently: a Monte Carlo of d_2(f, g)
with g the float64 network (JAX, ``layers``; no code shared with the certificate's arb
evaluation) and f evaluated one point at a time (so a function of the batch is
measured as the per-point function it was meant to be), 95% lower confidence bound.

The network: the shallow-wide one-attention-layer net (``one_layer_wide``) for
token_times_mean, d = 1, n = 3, N = 4, margin 2^-17 (windows small, so the interiors
decide the total): honestly certified 0.1033, measured d_2 ~0.093. The float path
(``FLOAT_FAULTS``): the integer-id network certified for g as runtimes execute it, with
faults in g and in the runtime (``float_base``, ``runtime_orders``).

Run as a script to write the table "fault | how it was caught":

    PYTHONPATH=. python tests/planted_faults.py results/yun/planted_faults.md
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import functools
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from fractions import Fraction

import jax
import numpy as np

import low_precision_runs
import runtime_orders
from transformer_ua import decimal_text
from transformer_ua import executor, executor_state, rounding
from transformer_ua.networks import export_onnx
from transformer_ua.targets import callable_checks
from transformer_ua.targets import functions as targets
from transformer_ua.yun import search
from transformer_ua.yun.bounds import certificate
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.single_attention import integer_ids_realized, one_layer_wide
from transformer_ua.yun.variants.one_layer_wide import OneLayerWide

#: The cube-interior margin of every planted network.
TIGHT = Fraction(1, 2 ** 17)
#: Monte Carlo points of the independent measure.
POINTS = 4000


@dataclasses.dataclass(frozen=True)
class Outcome:
  """What became of one fault: caught (refused, or a bound covering the measure)."""

  fault: str
  caught: bool
  how: str
  false_certificate: bool = False     # certified below the independent measure


# -- the network and its faults --------------------------------------------------------


def wide(target, n: int = 3, N: int = 4):  # pylint: disable=invalid-name
  return one_layer_wide.build(target, OneLayerWide(Grid(1, n, N)))


@functools.lru_cache(maxsize=None)
def base():
  """(net, g): the honest network at margin 2^-17."""
  net = wide('token_times_mean')
  return net, net.realize(margin=TIGHT)


def _copy(tree):
  if isinstance(tree, dict):
    return {k: _copy(v) for k, v in tree.items()}
  return np.array(tree, dtype=object) if isinstance(tree, np.ndarray) else tree


def edited(g, edit):
  """g with its exact params edited in place by ``edit(params)`` (a copy)."""
  exact = _copy(g.exact)
  edit(exact)
  return dataclasses.replace(g, exact=exact, params=exact)


def _ff(segment: int):
  return lambda e: e[f'segment_{segment}']['feedforward']


def flipped_bump(g):
  """g with one bump's output weights (class 20's id) times -20: one cube class wrong,
  honestly certified 1.10, measured ~0.16, and all of it in chunk 0."""
  def edit(e):
    e['segment_1']['feedforward']['W_2'][0, 0, 80:84] *= -20
  return edited(g, edit)


def measured(net, g, f=None, points: int = POINTS, seed: int = 0):
  """(estimate, 95% lower bound) of d_2(f, g): float64 g (JAX), f point by point."""
  f = f or net.target
  gf = dataclasses.replace(g, dtype='float64', params=g.float_params())
  x = np.random.default_rng(seed).random((points, net.n, net.d))
  fx = np.concatenate([np.asarray(f(x[b:b + 1].copy())) for b in range(points)])
  h = np.sum(np.abs(fx - gf.apply(x)) ** 2, axis=(1, 2))
  mean, se = float(h.mean()), float(h.std(ddof=1) / math.sqrt(points))
  return math.sqrt(mean), math.sqrt(max(0.0, mean - 1.96 * se))


def judge(name: str, run, net, g, f=None) -> Outcome:
  """Runs ``run()`` (a certificate); refused or covering the measure is caught."""
  try:
    cert = run()
  except ValueError as e:
    return Outcome(name, True, f'refused: {_short(_untmp(str(e)))}')
  est, low = measured(net, g, f)
  total = decimal_text.bound_text(cert.total, 4)
  if cert.total >= low:
    return Outcome(name, True, f'certified {total} >= measured d_2 {est:.3g} (95% low '
                               f'{low:.3g})')
  return Outcome(name, False, f'FALSE CERTIFICATE {total} < measured d_2 {est:.3g} '
                              f'(95% low {low:.3g})', True)


def _untmp(text: str) -> str:
  """A message without this run's temporary directory."""
  return ' '.join(w if not w.startswith(tempfile.gettempdir()) else 'STATE_DIR/' +
                  os.path.basename(w) for w in text.split(' '))


def _short(text: str, limit: int = 150) -> str:
  text = text.replace('|', '/')
  return text if len(text) <= limit else text[:limit - 3] + '...'


def _certify(net, g, **kw):
  return lambda: certificate.certify_lp(net, g, margin=TIGHT, **{'workers': 1, **kw})


def network_fault(name: str, make):
  def fault(tmp):
    del tmp
    net, g = base()
    bad = make(net, g)
    return judge(name, _certify(net, bad), net, bad)
  return fault


def _scale_lowered(e):
  att = e['segment_1']['attention']
  att['W_Q'] = att['W_Q'] * 0
  att['b_Q'] = att['b_Q'] * 0


def _clamp_dropped(e):
  e['segment_2']['feedforward']['b_1'][0, :] = 0


def _clamp_narrowed(e):
  e['segment_2']['feedforward']['b_1'][0, 0] += Fraction(1, 4)      # top 49/64 -> 33/64


def _wrong_table(scale):
  """A net whose .target is token_times_mean but whose value table is scale * it."""
  def make(net, g):
    del g
    other = wide(lambda x: scale * x * x.mean(axis=1, keepdims=True))
    base_net = dataclasses.replace(other.base, target=net.target, f_bar=net.base.f_bar)
    fake = dataclasses.replace(other, base=base_net)
    return fake.realize(margin=TIGHT)
  return make


def wrong_table_fault(name: str, scale):
  def fault(tmp):
    del tmp
    net0, _ = base()
    g = _wrong_table(scale)(net0, None)
    return judge(name, _certify(g.source, g), g.source, g)
  return fault


NETWORK_FAULTS = {
    'one value weight of g nudged by 2^-30': lambda net, g: edited(
        g, lambda e: e['segment_1']['feedforward']['W_2'].__setitem__(
            (0, 0, 0), e['segment_1']['feedforward']['W_2'][0, 0, 0] + Fraction(1, 2 ** 30))),
    'one value weight sign-flipped': lambda net, g: edited(
        g, lambda e: e['segment_1']['feedforward']['W_2'].__setitem__(
            (0, 0, 0), -e['segment_1']['feedforward']['W_2'][0, 0, 0])),
    'a quantization ramp moved half a cell into the cube interiors': lambda net, g: edited(
        g, lambda e: e['segment_0']['feedforward']['b_1'].__setitem__(
            (0, slice(0, 2)), e['segment_0']['feedforward']['b_1'][0, 0:2] - Fraction(1, 8))),
    "a bump's ramp moved (value layer biases of one bump shifted by 1/8)": lambda net, g: edited(
        g, lambda e: e['segment_1']['feedforward']['b_1'].__setitem__(
            (0, slice(80, 84)), e['segment_1']['feedforward']['b_1'][0, 80:84] + Fraction(1, 8))),
    "one bump's output weights times -20": lambda net, g: flipped_bump(g),
    'the output (clamp) biases dropped': lambda net, g: edited(g, _clamp_dropped),
    'an output bias of 1/16 added': lambda net, g: edited(
        g, lambda e: e['segment_1']['feedforward'].__setitem__(
            'b_2', e['segment_1']['feedforward']['b_2'] + Fraction(1, 16))),
    "the clamp's range narrowed (top 49/64 -> 33/64)": lambda net, g: edited(g, _clamp_narrowed),
    'softmax query scale zeroed (W_Q = b_Q = 0: uniform weights, ids move ~1e-5)':
        lambda net, g: edited(g, _scale_lowered),
    'the id scale W_V times 0.999 (ids slide off their bumps)': lambda net, g: edited(
        g, lambda e: e['segment_1']['attention'].__setitem__(
            'W_V', e['segment_1']['attention']['W_V'] * Fraction(999, 1000))),
    'the attention output zeroed (W_O = 0)': lambda net, g: edited(
        g, lambda e: e['segment_1']['attention'].__setitem__(
            'W_O', e['segment_1']['attention']['W_O'] * 0)),
    'every value weight doubled': lambda net, g: edited(
        g, lambda e: e['segment_1']['feedforward'].__setitem__(
            'W_2', e['segment_1']['feedforward']['W_2'] * 2)),
}


# -- states and executors -----------------------------------------------------------


def _chunks(directory):
  return sorted(glob.glob(os.path.join(directory, 'certification_0', 'chunk_*.json')))


def _rewrite(path, edit):
  with open(path, encoding='utf-8') as f:
    rec = json.load(f)
  edit(rec)
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(rec, f)


def _state_run(net, g, directory, recheck=0.0):
  return _certify(net, g, workers=executor.Workers(1, state_dir=directory, recheck=recheck))


def state_zeroed(tmp):
  net, g = base()
  bad = flipped_bump(g)
  _state_run(net, bad, tmp)()
  for path in _chunks(tmp):
    _rewrite(path, lambda r: r['result'].__setitem__('worst', 0.0))
  return judge('edited state file: every chunk worst = 0', _state_run(net, bad, tmp), net, bad)


def state_one_edited(tmp):
  net, g = base()
  bad = flipped_bump(g)
  _state_run(net, bad, tmp)()
  _rewrite(_chunks(tmp)[0], lambda r: r['result'].__setitem__('worst', 0.0))
  return judge('edited state file: only the worst chunk lowered (recheck=1)',
               _state_run(net, bad, tmp, recheck=1.0), net, bad)


def state_foreign(tmp):
  net, g = base()
  bad = flipped_bump(g)
  _state_run(net, g, tmp)()            # the honest network's state, resumed for the bad one
  return judge('state of another network (one bump edited since) resumed',
               _state_run(net, bad, tmp), net, bad)


def state_forged_identity(tmp):
  net, g = base()
  bad = flipped_bump(g)
  _state_run(net, g, tmp)()
  other = tempfile.mkdtemp(dir=tmp)
  _state_run(net, bad, other)()
  ident = json.load(open(os.path.join(other, 'certification_0', 'identity.json'),
                         encoding='utf-8'))
  shutil.copy(os.path.join(other, 'certification_0', 'identity.json'),
              os.path.join(tmp, 'certification_0', 'identity.json'))
  for path in _chunks(tmp):
    _rewrite(path, lambda r: r.__setitem__('identity', ident))
  return judge("another network's chunks under this run's identity (recheck=1)",
               _state_run(net, bad, tmp, recheck=1.0), net, bad)


def state_old_code(tmp):
  net, g = base()
  _state_run(net, g, tmp)()
  stale = lambda r: r.__setitem__('code_version', '0.0.9 0123456789abcdef')
  _rewrite(os.path.join(tmp, 'certification_0', 'identity.json'), stale)
  for path in _chunks(tmp):
    _rewrite(path, lambda r: stale(r['identity']))
  return judge('state written by other code (code_version differs)', _state_run(net, g, tmp),
               net, g)


def state_span_widened(tmp):
  net, g = base()
  bad = flipped_bump(g)
  _state_run(net, bad, tmp)()
  paths = _chunks(tmp)
  for path in paths[:-1]:
    os.remove(path)
  _rewrite(paths[-1], lambda r: r.__setitem__('span', [0, 20]))   # one tiny chunk for all
  return judge('state file whose span was widened to every cube', _state_run(net, bad, tmp),
               net, bad)


class Lying(cf.Executor):
  """Answers every chunk with worst = ``value`` without computing (``only``: the spans
  starting there; ``shift``: computes a disjoint span of the same length instead)."""

  def __init__(self, value=0.0, only=None, shift=0):
    self.value, self.only, self.shift = value, only, shift

  def submit(self, fn, *args, **kwargs):  # pylint: disable=arguments-differ
    f = cf.Future()
    chunk, key, blob, start, stop = args        # fn is executor._run
    if self.shift:       # the next span of the same length (the first for the last)
      width = stop - start
      a = stop if stop + width <= 20 else 0
      f.set_result(fn(chunk, key, blob, a, a + width))
    elif self.only is None or start in self.only:
      f.set_result({'worst': self.value, 'index': start, 'cube': [[0]] * 3})
    else:
      f.set_result(fn(chunk, key, blob, start, stop))
    return f


def executor_fault(name, liar, recheck=0.0):
  def fault(tmp):
    del tmp
    net, g = base()
    bad = flipped_bump(g)
    workers = executor.Workers(executor=liar, recheck=recheck)
    return judge(name, _certify(net, bad, workers=workers), net, bad)
  return fault


# -- callables ------------------------------------------------------------------------


def batch_mean(x):
  return x * x.mean()                 # the mean over the whole batch: an easy slip


def complex_valued(x):
  return x * (1 + 0.5j)


def mutating(x):
  x -= 0.5
  return x + 0.5


def nan_corner(x):
  return np.where(x > 0.97, np.nan, x)


def wiggle(x):
  """x + 0.3 sin(8 pi (x - 1/8)): x at every centre of N = 4, true constant ~8.5."""
  return x + 0.3 * np.sin(2 * np.pi * 4 * (x - 0.125))


def zero_between(x):
  """~0 at every centre of N = 4, up to 0.3 between them."""
  return 0.3 * np.sin(2 * np.pi * 4 * (x - 0.125))


def prefix(x):
  return np.cumsum(x, axis=1) / 2


def callable_fault(name, f, must_refuse=False, epsilon=0.3, **kw):
  """``approximate(f, 0.3, d=1, n=2, arithmetic='exact')`` (the exact real g, whose
  float64 run the measure evaluates); ``must_refuse``: a fault that only a refusal
  catches (a certificate would be about another f than the one given, or another
  theorem than the one asked for)."""
  def fault(tmp):
    del tmp
    try:
      res = search.approximate(f, epsilon, d=1, n=2, workers=1, arithmetic='exact', **kw)
    except ValueError as e:
      return Outcome(name, True, f'refused: {_short(str(e))}')
    if must_refuse:
      return Outcome(name, False, f'accepted: certified '
                                  f'{decimal_text.bound_text(res.certificate.total, 4)} with '
                                  f'{res.construction}, not refused')
    return judge(name, lambda: res.certificate, res.net, res.g, f)
  return fault


def certify_callable_fault(name, f, **kw):
  """certify_lp on a net built from f at N = 4, n = 2 (refutations in cubes)."""
  def fault(tmp):
    del tmp
    try:
      net = wide(f, n=2)
      g = net.realize(margin=TIGHT)
    except ValueError as e:
      return Outcome(name, True, f'refused at build: {_short(str(e))}')
    return judge(name, _certify(net, g, **kw), net, g, f)
  return fault


FAULTS = {
    **{name: network_fault(name, make) for name, make in NETWORK_FAULTS.items()},
    'value table built from the wrong target (1.25 f)': wrong_table_fault(
        'value table built from the wrong target (1.25 f)', 1.25),
    'value table from a target nudged by 2^-30': wrong_table_fault(
        'value table from a target nudged by 2^-30', 1 + 2.0 ** -30),
    'edited state file: every chunk worst = 0': state_zeroed,
    'edited state file: only the worst chunk lowered (recheck=1)': state_one_edited,
    'state of another network (one bump edited since) resumed': state_foreign,
    "another network's chunks under this run's identity (recheck=1)": state_forged_identity,
    'state written by other code (code_version differs)': state_old_code,
    'state file whose span was widened to every cube': state_span_widened,
    'lying executor: worst = 0 without computing': executor_fault(
        'lying executor: worst = 0 without computing', Lying()),
    'executor lying on one chunk only (recheck=1)': executor_fault(
        'executor lying on one chunk only (recheck=1)', Lying(only={0}), recheck=1.0),
    'executor returning NaN': executor_fault('executor returning NaN', Lying(math.nan)),
    'executor computing the next span instead': executor_fault(
        'executor computing the next span instead', Lying(shift=1)),
    'callable of the batch (x * x.mean()), lipschitz=2': callable_fault(
        'callable of the batch (x * x.mean()), lipschitz=2', batch_mean, lipschitz=2.0),
    'callable of the batch, lipschitz=2, refutation_points=0 (epsilon 0.1)': callable_fault(
        'callable of the batch, lipschitz=2, refutation_points=0 (epsilon 0.1)', batch_mean,
        lipschitz=2.0, refutation_points=0, epsilon=0.1),
    'complex-valued callable': callable_fault('complex-valued callable', complex_valued,
                                              lipschitz=2.0),
    'callable mutating its input': callable_fault('callable mutating its input', mutating,
                                                  must_refuse=True, lipschitz=1.0),
    'callable NaN on a corner (x > 0.97)': callable_fault(
        'callable NaN on a corner (x > 0.97)', nan_corner, lipschitz=1.0),
    'understated lipschitz (1.0000001, true ~8.5), before building': callable_fault(
        'understated lipschitz (1.0000001, true ~8.5), before building', wiggle,
        lipschitz=1.0000001),
    'understated lipschitz (1.0000001, true ~8.5), in certify_lp': certify_callable_fault(
        'understated lipschitz (1.0000001, true ~8.5), in certify_lp', wiggle,
        lipschitz=1.0000001),
    'understated modulus (1e-12, true ~0.3)': certify_callable_fault(
        'understated modulus (1e-12, true ~0.3)', zero_between,
        modulus=lambda c, delta: np.full(c.shape, 1e-12)),
    'non-equivariant callable under Theorem 2 (positional=False)': callable_fault(
        'non-equivariant callable under Theorem 2 (positional=False)', prefix,
        must_refuse=True, lipschitz=1.0),
}


# -- the float path: the integer-id network as runtimes execute it -------------------------
#
# token_times_mean, d = 1, n = 3: float64 at epsilon 0.1 (N = 5), float32 at 0.2 (N = 3).
# A fault is in g (refused, or certified above the measure of the faulty g) or in the
# runtime (the honest certificate against the measure of g run that way: the NumPy
# interpreter ``runtime_orders``, which shares no code with the certificate or JAX).


@functools.lru_cache(maxsize=None)
def float_base(arithmetic: str = 'float64'):
  """(net, g, certificate) of the honest integer-id network in ``arithmetic``."""
  res = search.approximate('token_times_mean', 0.1 if arithmetic == 'float64' else 0.2,
                           d=1, n=3, arithmetic=arithmetic, construction='integer_ids',
                           progress=False)
  return res.net, res.g, res.certificate


def measured_run(net, run, points: int = POINTS, seed: int = 0):
  """(estimate, 95% lower bound) of d_2(f, g run by ``run``) on uniform points."""
  x = np.random.default_rng(seed).random((points, net.n, net.d))
  h = np.sum(np.abs(net.target(x) - run(x)) ** 2, axis=(1, 2))
  mean, se = float(h.mean()), float(h.std(ddof=1) / math.sqrt(points))
  return math.sqrt(mean), math.sqrt(max(0.0, mean - 1.96 * se))


def float_judge(name: str, certify, net, run) -> Outcome:
  """``certify()`` refused (ValueError, or AssertionError: g is not its construction), or
  its total at or above the measure of g as ``run`` runs it."""
  try:
    cert = certify()
  except (ValueError, AssertionError) as e:
    return Outcome(name, True, f'refused: {_short(str(e))}')
  est, low = measured_run(net, run)
  total = decimal_text.bound_text(cert.total, 4)
  if cert.total >= low:
    return Outcome(name, True, f'certified {total} >= measured d_2 {est:.3g} (95% low '
                               f'{low:.3g})')
  return Outcome(name, False, f'FALSE CERTIFICATE {total} < measured d_2 {est:.3g} '
                              f'(95% low {low:.3g})', True)


def _float_edited(g, edit):
  exact = _copy(g.exact)
  edit(exact)
  return dataclasses.replace(g, exact=exact)


def _numpy_run(g, arithmetic, **kw):
  return lambda x: runtime_orders.run(g.params, x.astype(arithmetic).astype(np.float64),
                                      positional=False, dtype=arithmetic, **kw)


def float_g_fault(name: str, edit, arithmetic: str = 'float64'):
  """A faulty g: certify_lp on it, measured as the NumPy interpreter runs it."""
  def fault(tmp):
    del tmp
    net, g, _ = float_base(arithmetic)
    bad = _float_edited(g, edit)
    return float_judge(name, lambda: certificate.certify_lp(net, bad, arithmetic=arithmetic),
                       net, _numpy_run(bad, arithmetic, bias_at=0))
  return fault


def float_runtime_fault(name: str, arithmetic: str, excluded: str | None = None, **kw):
  """A faulty runtime: the honest certificate against g run that way. ``excluded``: a
  runtime outside the certificate's model, caught when its line states the assumption that
  excludes it (the words ``excluded``) and asking the certificate for it is refused."""
  def fault(tmp):
    del tmp
    net, g, cert = float_base(arithmetic)
    out = float_judge(name, lambda: cert, net, _numpy_run(g, arithmetic, **kw))
    if out.caught or excluded is None:
      return out
    stated = excluded in str(cert)
    try:
      rounding.check_arithmetic(kw['operands'])
      refused = False
    except ValueError:
      refused = True
    how = (f'outside the model, stated in the line ("{excluded}") and refused when asked '
           f'(arithmetic={kw["operands"]!r}); run that way: certified '
           f'{out.how.split(" ", 2)[2]}')
    return Outcome(name, stated and refused, how if stated and refused else out.how, False)
  return fault


def float_refusal_fault(name: str, attempt, arithmetic: str = 'float64'):
  """A use outside the certificate that must be refused: ``attempt(g, tmp)``."""
  def fault(tmp):
    net, g, _ = float_base(arithmetic)
    try:
      attempt(g, tmp)
    except ValueError as e:
      return Outcome(name, True, f'refused: {_short(_untmp(str(e)))}')
    del net
    return Outcome(name, False, 'accepted: ran without a word')
  return fault


def _value_weight_ulp(e):
  w = e[f'segment_{integer_ids_realized.VALUE}']['feedforward']['W_2']
  v = float(w[0, 0, 0])
  w[0, 0, 0] = Fraction(float(np.nextafter(v, np.inf)))


def _ramp_moved(e):
  """The first quantization ramp (both its units' biases) moved by 1/8 in x."""
  b = e['segment_0']['feedforward']['b_1']
  b[0, 0:2] = b[0, 0:2] - Fraction(1, 8) / float_base('float64')[1].ramp


def _clamp_biases_dropped(e):
  e['segment_5']['feedforward']['b_1'][0, :] = 0


def _sigma_2_52(e):
  for seg, row in ((integer_ids_realized.SNAP, 1), (integer_ids_realized.ATTENTION, 2)):
    e[f'segment_{seg}']['feedforward']['b_2'][0, row] = Fraction(2 ** 52)


def _sigma_in_quantizer_bias(e):
  snap = e[f'segment_{integer_ids_realized.SNAP}']['feedforward']['b_2']
  e['segment_0']['feedforward']['b_2'][0, 1] = snap[0, 1]
  snap[0, 1] = Fraction(0)


def _x64_off(g, tmp):
  del tmp
  with jax.enable_x64(False):
    g.network()


def _float32_graph(g, tmp):
  export_onnx.export_onnx(g, os.path.join(tmp, 'g32.onnx'), dtype='float32')


def _tf32(g, tmp):
  del g, tmp
  search.approximate('token_times_mean', 0.2, d=1, n=3, arithmetic='tf32', progress=False)


FLOAT_FAULTS = {
    'integer ids, float64: one value weight nudged by 1 ulp': float_g_fault(
        'integer ids, float64: one value weight nudged by 1 ulp', _value_weight_ulp),
    'integer ids, float64: a quantization ramp moved 1/8 into the cube interiors':
        float_g_fault('integer ids, float64: a quantization ramp moved 1/8 into the cube '
                      'interiors', _ramp_moved),
    "integer ids, float64: the clamp's biases dropped": float_g_fault(
        "integer ids, float64: the clamp's biases dropped", _clamp_biases_dropped),
    'integer ids, float64: sigma = 2^52 (not 2^52 + 1) in both snaps': float_g_fault(
        'integer ids, float64: sigma = 2^52 (not 2^52 + 1) in both snaps', _sigma_2_52),
    "integer ids, float64: sigma back in the quantizer's bias, run bias-first": float_g_fault(
        "integer ids, float64: sigma back in the quantizer's bias, run bias-first",
        _sigma_in_quantizer_bias),
    'integer ids, float64 runtime: every bias added first': float_runtime_fault(
        'integer ids, float64 runtime: every bias added first', 'float64', bias_at=0),
    'integer ids, float32 runtime: every bias added first': float_runtime_fault(
        'integer ids, float32 runtime: every bias added first', 'float32', bias_at=0),
    'integer ids, float64 runtime: softmax weights 3 ulp off 1/n': float_runtime_fault(
        'integer ids, float64 runtime: softmax weights 3 ulp off 1/n', 'float64',
        softmax_ulps=3),
    'integer ids, float32 runtime: TF32 matmul operands': float_runtime_fault(
        'integer ids, float32 runtime: TF32 matmul operands', 'float32',
        excluded='no TF32 or bfloat16 matmul passes', operands='tf32'),
    'integer ids, float32 runtime: bfloat16 matmul operands': float_runtime_fault(
        'integer ids, float32 runtime: bfloat16 matmul operands', 'float32',
        excluded='no TF32 or bfloat16 matmul passes', operands='bfloat16'),
    "integer ids: arithmetic='tf32' asked of the certificate": float_refusal_fault(
        "integer ids: arithmetic='tf32' asked of the certificate", _tf32),
    'integer ids: a float32 graph of a float64 g': float_refusal_fault(
        'integer ids: a float32 graph of a float64 g', _float32_graph),
    'integer ids: a float64 g run with x64 off (float32)': float_refusal_fault(
        'integer ids: a float64 g run with x64 off (float32)', _x64_off),
}
FAULTS.update(FLOAT_FAULTS)


# -- the graph probe: a runtime that fuses across operations ----------------------------
#
# runtime_graph.check_graph runs the network's whole graph as a runtime runs it against the
# certified D at adversarial points (the standalone probe of runtime_probe cannot see a
# fused epilogue). The network: low_precision_runs.residual_net; the fault: its FF's second
# matmul with the residual and bias folded into the accumulator and truncated to the operand
# format with the operands (low_precision_runs.fused_epilogue). Caught when refused: the
# report is not ok (some output leaves D under every weight reduction), while the honest
# emulated run of the same model passes.


def graph_fault(name: str, arithmetic: str):
  def fault(tmp):
    del tmp
    from transformer_ua.certify import runtime_graph   # noqa: PLC0415
    net = low_precision_runs.residual_net()
    honest = runtime_graph.check_graph(
        lambda x: low_precision_runs.run(net, x, arithmetic, mode='truncate',
                                         accumulate='toward_zero'), net, arithmetic,
        points=256)
    rep = runtime_graph.check_graph(low_precision_runs.fused_epilogue(net, arithmetic), net,
                                    arithmetic, points=256)
    if rep.ok or not honest.ok:
      return Outcome(name, False, f'NOT refused: {_short(rep.line())} (honest run: '
                                  f'{_short(honest.line(), 80)})')
    ratios = ', '.join(f'{m} {r:.3g}' for m, r in rep.ratios.items())
    return Outcome(name, True, f'refused: {arithmetic} graph probe, max /run - g/ / D = '
                               f'{ratios} (the honest emulated run: '
                               f'{max(honest.ratios.values()):.2g})')
  return fault


GRAPH_FAULTS = {
    f'{a} runtime: a fused FF epilogue (residual and bias reduced with the operands)':
        graph_fault(f'{a} runtime: a fused FF epilogue (residual and bias reduced with the '
                    'operands)', a)
    for a in ('tf32', 'bfloat16')}
FAULTS.update(GRAPH_FAULTS)


# -- the checks, and a fault each lets through when reverted ------------------------


class FirstSpansSample:
  """A stand-in for ``random.SystemRandom`` that re-runs the last k spans (the luck of
  a foreign state whose one differing chunk, chunk 0, is not sampled: 4/7 per run)."""

  def sample(self, population, k):
    return list(population)[-k:]


def _no_identity(monkeypatch):
  monkeypatch.setattr(executor_state.State,  # pylint: disable=protected-access
                      '_refuse_unless_same',
                      lambda self, stored, path: None)
  monkeypatch.setattr(executor.random, 'SystemRandom', FirstSpansSample)


def _no_batch_check(monkeypatch):
  monkeypatch.setattr(targets, 'check_callable', lambda target, d, n: None)


def _no_complex_check(monkeypatch):
  real = targets.check_output

  def lenient(name, out, shape):
    out = np.asarray(out)
    return real(name, out.real if np.iscomplexobj(out) else out, shape)
  monkeypatch.setattr(targets, 'check_output', lenient)
  _no_batch_check(monkeypatch)        # (its probes would meet the complex values first)


def _no_mutation_check(monkeypatch):
  monkeypatch.setattr(targets.np, 'array_equal', lambda a, b, equal_nan=False: True)


def _no_sampled_refutation(monkeypatch):
  real = callable_checks.refute_in_cubes
  monkeypatch.setattr(callable_checks, 'refute_in_cubes',
                      lambda *a, **k: {**real(*a, **{**k, 'points': 0})})
  monkeypatch.setattr(callable_checks, 'refute_lipschitz', lambda *a, **k: Fraction(0))


def _no_equivariance_refusal(monkeypatch):
  monkeypatch.setattr(targets, 'equivariance_error', lambda target, d, n: None)


def _no_structure_check(monkeypatch):
  monkeypatch.setattr(integer_ids_realized.IntegerIdsRealized, '_structure_check',
                      property(lambda self: {}))


def _no_recheck_no_mac(monkeypatch):
  monkeypatch.setattr(executor, 'recheck', lambda *a, **k: 0)
  monkeypatch.setattr(executor_state.hmac, 'compare_digest', lambda a, b: True)


REVERTS = [
    ("the state chunks' HMAC-SHA256 (executor_state.State.load) and their re-run "
     '(executor.recheck)', _no_recheck_no_mac, 'edited state file: every chunk worst = 0'),
    ('re-run of chunks from a state or an executor (executor.recheck)',
     lambda mp: mp.setattr(executor, 'recheck', lambda *a, **k: 0),
     'lying executor: worst = 0 without computing'),
    ("state identity (work_sha256, code_version), with a re-run sample that misses chunk 0",
     _no_identity, 'state of another network (one bump edited since) resumed'),
    ('one point at a time = batch (targets.check_callable)', _no_batch_check,
     'callable of the batch, lipschitz=2, refutation_points=0 (epsilon 0.1)'),
    ('real output (targets.check_output)', _no_complex_check, 'complex-valued callable'),
    ('input not mutated (targets.evaluate)', _no_mutation_check, 'callable mutating its input'),
    ('difference quotients at sampled points (callable_checks)', _no_sampled_refutation,
     'understated lipschitz (1.0000001, true ~8.5), in certify_lp'),
    ('difference quotients at sampled points (callable_checks)', _no_sampled_refutation,
     'understated modulus (1e-12, true ~0.3)'),
    ('behavioural equivariance under positional=False (search.approximate)',
     _no_equivariance_refusal, 'non-equivariant callable under Theorem 2 (positional=False)'),
    ("integer ids: every parameter is the construction's (IntegerIdsRealized._structure_check)",
     _no_structure_check, 'integer ids, float64: a quantization ramp moved 1/8 into the cube '
     'interiors'),
    ("integer ids: every parameter is the construction's (IntegerIdsRealized._structure_check)",
     _no_structure_check, "integer ids, float64: the clamp's biases dropped"),
]


#: Reverts that another check backs up: the fault is still caught (reported, not required).
BACKED_UP = [
    ('one point at a time = batch (targets.check_callable)', _no_batch_check,
     'callable of the batch (x * x.mean()), lipschitz=2'),
    ('lipschitz= refuted before building (search.approximate)',
     lambda mp: mp.setattr(callable_checks, 'refute_lipschitz', lambda *a, **k: Fraction(0)),
     'understated lipschitz (1.0000001, true ~8.5), before building'),
]


def run(name: str) -> Outcome:
  tmp = tempfile.mkdtemp()
  try:
    return FAULTS[name](tmp)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


class _Patch:
  """A minimal monkeypatch for the script (pytest's in the tests)."""

  def __init__(self):
    self.undo = []

  def setattr(self, obj, name, value):
    self.undo.append((obj, name, getattr(obj, name)))
    setattr(obj, name, value)

  def close(self):
    for obj, name, value in reversed(self.undo):
      setattr(obj, name, value)


def main(path: str) -> None:
  rows = [run(name) for name in FAULTS]
  reverts = []
  for check, patch, fault in REVERTS + BACKED_UP:
    mp = _Patch()
    try:
      patch(mp)
      reverts.append((check, run(fault)))
    finally:
      mp.close()
  rev = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True,
                       text=True, check=False).stdout.strip()
  load = os.getloadavg()[0]
  lines = [
      '# Planted faults for the certifier', '',
      f'Generated by `PYTHONPATH=. python tests/planted_faults.py {path}` at git {rev} '
      f'(2-core, load {load:.1f}); the same faults run in CI as '
      '`tests/test_certifier_planted_faults.py`.', '',
      'Network: `one_layer_wide` for token_times_mean, d = 1, n = 3, N = 4, margin 2^-17 '
      '(honest certificate 0.1033, float64 Monte Carlo d_2 ~0.093). A fault is caught when '
      'it is refused (one line) or certified with a bound at or above the independent '
      'measure: a 4000-point Monte Carlo of d_2(f, g) with g the float64 network (JAX) and '
      'f evaluated one point at a time, 95% lower confidence bound.', '',
      'The rows "integer ids" are the float path: the integer-id network for '
      'token_times_mean (d = 1, n = 3) certified for g as runtimes execute it, float64 at '
      'epsilon 0.1 (N = 5, honest certificate 0.08504) and float32 at 0.2 (N = 3, 0.1571). '
      'A fault in g is refused or certified above the Monte Carlo of the faulty g; a fault '
      'in the runtime (the bias added first, softmax weights 3 ulp off, TF32 or bfloat16 '
      'operands) is measured by a NumPy interpreter of the parameters in that arithmetic '
      '(`tests/runtime_orders.py`, no code shared with the certificate or JAX) against the '
      'honest certificate; a runtime outside the certificate\'s model counts as caught only '
      'when its line states the assumption that excludes it and asking for it is refused.',
      '',
      f'{sum(r.caught for r in rows)} of {len(rows)} caught.', '',
      '| fault | how it was caught |', '|---|---|']
  lines += [f'| {r.fault} | {r.how if r.caught else "NOT CAUGHT: " + r.how} |' for r in rows]
  lines += ['', '## Each check reverted: a fault it catches slips through', '',
            'Each new check monkeypatched off in turn (the identity row also lets the random '
            're-run sample miss the one differing chunk, a 4/7 chance per run); the last '
            'rows are checks that another check backs up: reverted alone, their fault is '
            'still refused.', '',
            '| check reverted | fault | outcome |', '|---|---|---|']
  lines += [f'| {c} | {o.fault} | {"still caught: " if o.caught else "slips: "}{o.how} |'
            for c, o in reverts]
  with open(path, 'w', encoding='utf-8') as f:
    f.write('\n'.join(lines) + '\n')
  print('\n'.join(lines))


if __name__ == '__main__':
  main(sys.argv[1])
