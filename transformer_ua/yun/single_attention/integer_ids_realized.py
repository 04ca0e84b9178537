r"""The realized integer-id network: its parameters, its exact evaluation and its proofs.

``integer_ids`` builds g_bar and its ids (the construction, in ASCII math, is that module's
docstring; the proofs are docs/proofs/integer_ids.md). This module holds the realized g
(``IntegerIdsRealized``, made by ``realize_network`` from ``integer_ids_params``' blocks):
its JAX run in the format its parameters are numbers of, its exact rational evaluation,
the exact check of every cube interior (``certify_interiors``: the code and value layers
evaluated from the parameters at every symbol and id by prefix sums over the sorted kinks,
``relu_sums``; each class's ids looked up), the window bound (the table's range) and the
float deviation |fl(g) - g| from the rounding model (``float_deviation``,
``transformer_ua.rounding``).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
import time
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import layers
from transformer_ua.yun import grid as grid_lib
from transformer_ua.yun.single_attention import integer_ids_params
from transformer_ua import rounding

#: Stage names of the blocks, in order.
STAGES = ('quantization', 'snap', 'code', 'attention', 'value', 'clamp')
#: What g does outside the certified domain, said in the float certificate's line.
DOMAIN_NOTE = ('on X in [0, 1]^(n x d), the closed cube (g.apply refuses X outside it in one '
               'line; an exported graph does not check, and its output there is not certified)')
#: Bytes of hidden activations one call of ``IntegerIdsRealized.apply`` may hold.
APPLY_BYTES = 2 ** 30
#: Live copies of the widest hidden layer a call holds (pre-activation, ReLU, product).
APPLY_COPIES = 3
#: The segment indices of the blocks that the proofs read.
QUANTIZATION, SNAP, CODE, ATTENTION, VALUE = range(5)


# ---------------------------------------------------------------------------
# g: the parameters.
# ---------------------------------------------------------------------------


def check_cube(x: np.ndarray) -> np.ndarray:
  """X if every entry lies in the closed cube [0, 1] (-0.0 included; x = 1 lies in the last
  cell), else ValueError (one line): the certificate covers nothing outside."""
  if x.size and not np.all((x >= 0) & (x <= 1)):
    bad = x[(x < 0) | (x > 1)]
    raise ValueError(f'X must lie in the closed cube [0, 1]^(n x d) (the certificate covers '
                     f'nothing outside it); got {bad.size} entries outside, from '
                     f'{float(bad.min())!r} to {float(bad.max())!r}.')
  return x


def realize_network(net, e: Fraction, margin: Fraction, clamp: bool) -> 'IntegerIdsRealized':
  """The realized g for ``net`` (an ``integer_ids.IntegerIdsApproximator``): the blocks of
  ``integer_ids_params.exact_blocks`` at the quantization ramp ``e`` = 1/s, with the
  cube-interior margin ``margin`` (``realize``)."""
  segments, params, kinks, bounds = integer_ids_params.exact_blocks(net, e, clamp)
  return IntegerIdsRealized(segments=segments, exact=params, source=net, ramp=e,
                            margin=margin, kinks=kinks, clamp=bounds)


def _float_array(a: np.ndarray, fmt) -> np.ndarray:
  """The exact rationals of ``a`` as float64, refusing any that is not a number of ``fmt``."""
  flat = [Fraction(v) for v in np.ravel(a)]
  for v in flat:
    if not fmt.representable(v):
      raise ValueError(f'parameter {v} is not a {fmt.name} number.')
  return np.asarray([float(v) for v in flat], np.float64).reshape(np.shape(a))


# ---------------------------------------------------------------------------
# g: evaluation and proofs.
# ---------------------------------------------------------------------------


def relu_sums(kinks, coefs, points) -> list:
  """[sum_u coefs_u ReLU(x - kinks_u) for x in points], exactly, by prefix sums over the
  sorted kinks (O((U + X) log U)); kinks, coefs, points exact rationals or ints."""
  order = sorted(range(len(kinks)), key=lambda i: kinks[i])
  ks = [kinks[i] for i in order]
  c1, c2 = [0], [0]
  for i in order:
    c1.append(c1[-1] + coefs[i])
    c2.append(c2[-1] + coefs[i] * kinks[i])
  out = []
  for x in points:
    j = bisect.bisect_left(ks, x)      # units with kink < x are on (kink = x gives 0)
    out.append(x * c1[j] - c2[j])
  return out


@dataclasses.dataclass(frozen=True, eq=False)
class IntegerIdsRealized(grid_lib.OfSource):
  """The realized integer-id g (module docstring).

  Attributes: segments; exact (the parameters as exact rationals, object arrays); source
  (the ``IntegerIdsApproximator``); ramp (1/s), margin (the cube-interior margin the ramps
  keep clear of), kinks (a_k); clamp: None or (lo, hi) exact. ``params`` are the same
  numbers as float64 arrays (each a number of ``number_format``), ``dtype`` is 'exact'.
  """

  segments: tuple
  exact: dict
  source: object
  ramp: Fraction
  margin: Fraction
  kinks: tuple
  clamp: tuple | None = None
  dtype: str = 'exact'

  @property
  def number_format(self) -> str:
    return self.source.number_format

  @property
  def format(self):
    return rounding.FORMATS[self.number_format]

  @functools.cached_property
  def params(self) -> dict:
    """The parameters as arrays of ``number_format`` (float64 or float32)."""
    return jax.tree_util.tree_map(
        lambda a: _float_array(a, self.format).astype(self.number_format), self.exact)

  @property
  def epsilon(self) -> Fraction:
    return self.ramp

  @property
  def quantization_epsilon(self) -> Fraction:
    return self.ramp

  @property
  def model_width(self) -> int:
    return self.d + 2

  # -- sizes ---------------------------------------------------------------

  def depth(self) -> int:
    return sum(s.depth for s in self.segments)

  def layer_counts(self) -> dict:
    return {STAGES[i]: {seg.kind: seg.depth} for i, seg in enumerate(self.segments)}

  def attention_layers(self) -> int:
    return 1

  def max_width(self) -> int:
    return max(s.width for s in self.segments)

  def num_params(self) -> int:
    return layers.count_params(self.exact)

  def bits_per_param(self) -> int:
    return self.format.precision

  def size(self) -> dict:
    return {'blocks': self.depth(), 'attention_layers': 1, 'max_width': self.max_width(),
            'params': self.num_params(), 'ids': self.source.num_ids,
            'model_width': self.model_width}

  def exact_params(self) -> dict:
    return self.exact

  def planned_bits(self, margin=None, tolerance: float = 1e-6) -> int:
    del margin, tolerance
    return self.format.precision

  def __repr__(self) -> str:
    return (f'IntegerIdsRealized({self.source.describe()}; ramp 2^{int(math.log2(self.ramp))}, '
            f'{"clamped" if self.clamp else "no clamp"})')

  # -- evaluation ------------------------------------------------------------

  def network(self):
    """The flax network; its params are ``params`` (arrays of ``number_format``). A float64 g
    needs JAX's x64: with x64 off JAX would run it in float32, which its certificate does
    not cover (the snap constant 2^52 + 1 is not a binary32 number), so that is refused."""
    from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
    if self.number_format == 'float64' and \
        jax.dtypes.canonicalize_dtype(jnp.float64) != jnp.float64:
      raise ValueError("this g is certified in float64 and JAX's x64 is off, so JAX would "
                       'run it in float32, which the certificate does not cover; turn x64 '
                       "on (jax.config.update('jax_enable_x64', True), or inside "
                       'jax.enable_x64(True)), or call g.apply(X), which does.')
    dt = jnp.float64 if self.number_format == 'float64' else jnp.float32
    return modules.Network(self.segments, positional=self.positional, num_tokens=self.n,
                          param_dtype=dt, embed_width=self.model_width)

  def apply_batch(self) -> int:
    """Points per call of ``apply``: hidden activations of about ``APPLY_BYTES`` (batch x n x
    widest layer x bytes per float x ``APPLY_COPIES`` live copies)."""
    per_point = self.n * self.max_width() * np.dtype(self.number_format).itemsize * APPLY_COPIES
    return max(1, APPLY_BYTES // per_point)

  def apply(self, x) -> np.ndarray:
    """fl(g)(X) [batch, n, d]: the JAX network in ``number_format`` (returned as float64),
    with x64 on and matmul precision HIGHEST (IEEE products: no TF32 or bfloat16 passes),
    ``apply_batch()`` points per call so that memory stays near ``APPLY_BYTES`` whatever the
    batch. X in the closed cube [0, 1]^(n x d) (``check_cube``)."""
    from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
    x = check_cube(grid_lib.check_input(x, self.n, self.d))
    dt = np.dtype(self.number_format)
    step = self.apply_batch()
    out = np.empty(x.shape, np.float64)
    with jax.enable_x64(True), jax.default_matmul_precision('highest'):
      params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, dt), self.params)
      fn = modules.jit_apply(self.network())
      for i in range(0, len(x), step):
        chunk = x[i:i + step].astype(dt)
        if len(x) > step and len(chunk) < step:        # one compiled shape: pad the last
          chunk = np.concatenate([chunk, np.zeros((step - len(chunk),) + x.shape[1:], dt)])
        out[i:i + step] = np.asarray(fn(params, jnp.asarray(chunk)), np.float64)[:len(x) - i]
    return out

  def apply_exact(self, x) -> np.ndarray:
    """The real network g(X) in exact rationals (object [batch, n, d]), layer by layer."""
    x = check_cube(grid_lib.check_input(x, self.n, self.d))
    D = self.model_width
    out = np.empty(x.shape, object)
    for b in range(x.shape[0]):
      z = np.full((self.n, D), Fraction(0), object)
      z[:, :self.d] = [[Fraction(float(v)) for v in row] for row in x[b]]
      if self.positional:
        z = z + self.exact['E']
      for i, seg in enumerate(self.segments):
        p = self.exact[f'segment_{i}']
        z = z + _exact_attention(p['attention'], z)
        ff = p['feedforward']
        pre = z.dot(ff['W_1'][0].T) + ff['b_1'][0]
        h = np.vectorize(lambda t: t if t > 0 else Fraction(0), otypes=[object])(pre)
        z = z + h.dot(ff['W_2'][0].T) + ff['b_2'][0]
      out[b] = z[:, :self.d]
    return out

  def apply_certified(self, x, bits: int | None = None):
    """(mid, rad) float64 [batch, n, d]: the exact g(X) lies in [mid - rad, mid + rad]
    (mid its float64 rounding, rad the rounding's size rounded up)."""
    del bits
    ex = self.apply_exact(x)
    mid = np.vectorize(float, otypes=[np.float64])(ex)
    rad = np.vectorize(lambda e, m: float(abs(Fraction(m) - e)) * (1 + 2 ** -50),
                       otypes=[np.float64])(ex, mid)
    return mid, rad

  # -- the certificate ---------------------------------------------------------

  def check_margin(self, margin) -> Fraction:
    """``margin`` if every quantization ramp lies off the cube interiors shrunk by it
    (checked exactly), else ValueError (one line)."""
    m, N = Fraction(margin), self.source.resolution
    for k, a in enumerate(self.kinks, start=1):
      if not (a <= Fraction(k, N) + m / N and a - self.ramp >= Fraction(k, N) - m / N):
        raise ValueError(f'margin={float(m):g}: the quantization ramp at {k}/N reaches into a '
                         f'cube interior (the ramps keep margin {float(self.margin):g}).')
    return m

  def _value_units(self, segment: int):
    """(kinks, coefficient per output coordinate) of the value layer, read from the params:
    unit u is ReLU(a_1 + a_2 - kink_u)."""
    ff = self.exact[f'segment_{segment}']['feedforward']
    sigma = self.format.snap
    kinks = [-ff['b_1'][0, u] - sigma for u in range(ff['b_1'].shape[1])]
    return kinks, [list(ff['W_2'][0, l]) for l in range(self.d)], list(ff['b_2'][0, :self.d])

  @functools.cached_property
  def _structure_check(self) -> dict:
    """Every block and parameter of g is the construction's for its source, ramp, margin
    and clamp (``realize_network`` rebuilt and compared exactly, entry by entry): the proofs
    read the code and value layers from the parameters, and rest on the structure of the
    rest (the quantization's ramps, the snaps, the head, the clamp), which this checks."""
    want = realize_network(self.source, self.ramp, self.margin, self.clamp is not None)
    if tuple(want.segments) != tuple(self.segments):
      raise AssertionError("g's blocks are not the construction's.")
    if want.kinks != self.kinks or want.clamp != self.clamp:
      raise AssertionError("g's ramps or clamp range are not the construction's.")
    entries = _differing(want.exact, self.exact, '')
    if entries:
      said = '1 entry differs' if len(entries) == 1 else f'{len(entries):,} entries differ'
      raise AssertionError(f"g's parameters are not the construction's: {said}, the first "
                           f'{entries[0]}.')
    return {'params': self.num_params()}

  @functools.cached_property
  def _code_check(self) -> dict:
    """The code layer's outputs on every integer m' in [0, K), read from the params, checked
    equal to (H - phi, phi)."""
    src, sigma, d = self.source, self.format.snap, self.d
    ff = self.exact[f'segment_{CODE}']['feedforward']
    K = len(src.phi)
    kinks = [-ff['b_1'][0, u] - sigma for u in range(1, K + 1)]
    pts = list(range(K))
    a1 = relu_sums(kinks, list(ff['W_2'][0, d, 1:]), pts)
    a2 = relu_sums(kinks, list(ff['W_2'][0, d + 1, 1:]), pts)
    if ff['W_2'][0, d, 0] != -1 or any(ff['W_1'][0, u, d] != 1 for u in range(K + 1)):
      raise AssertionError('the code layer is not the staircase of the construction.')
    for m in pts:
      if a1[m] + ff['b_2'][0, d] != src.high[m] - src.phi[m] or \
          a2[m] + ff['b_2'][0, d + 1] != src.phi[m]:
        raise AssertionError(f'the code layer gives the wrong code at m={m}.')
    return {'symbols': K}

  @functools.cached_property
  def _value_check(self) -> dict:
    """The value layer at every id, read from the params, checked equal to the table."""
    src = self.source
    kinks, coefs, bias = self._value_units(VALUE)
    ids = [int(t) for t in src.ids]
    scale = Fraction(1, 2 ** src.value_bits)
    for l in range(self.d):
      got = relu_sums(kinks, coefs[l], ids)
      for i, v in enumerate(got):
        if v + bias[l] != src.value_num[i, l] * scale:
          raise AssertionError(f'the value layer gives the wrong value at id {ids[i]}.')
    return {'ids': len(ids)}

  def certify_interiors(self, margin=None, bits: int | None = None, *, tolerance: float = 1e-6,
                        workers=None, check_plan: bool = False, executor=None,
                        state_dir: str | None = None) -> dict:
    """max |g - g_bar| over every cube interior (shrunk by margin delta per side), exactly:
    every parameter is the construction's (``_structure_check``), the ramps are off the
    interiors (``check_margin``), so each class is one exact point after the
    quantization; the code and value layers are evaluated from the parameters at
    every symbol and every id (``relu_sums``), each class's tokens are looked up (O(n +
    log P) a class). The answer is 0 or an AssertionError (the network is not its
    construction). Runs in process whatever ``workers`` / ``executor`` / ``state_dir`` say:
    nothing of it is computed elsewhere or resumed."""
    del bits, tolerance, check_plan, workers, executor, state_dir
    t0 = time.perf_counter()
    m = self.check_margin(self.margin if margin is None else margin)
    self._structure_check  # pylint: disable=pointless-statement
    self._code_check  # pylint: disable=pointless-statement
    self._value_check  # pylint: disable=pointless-statement
    src = self.source
    cells = src.variant.grid_classes()
    try:
      src.id_positions(src.token_ids(cells))
    except ValueError:
      raise AssertionError('a class has an id that is not in the table.') from None
    return {'max_abs_error': 0.0, 'classes': len(cells), 'margin': float(m),
            'seconds': time.perf_counter() - t0, 'lam': 1.0, 'epsilon': float(self.ramp),
            'method': 'exact: integer ids, every class evaluated'}

  def window_sup(self) -> np.ndarray:
    """[n, d] sup over the windows of |g - g_bar| (module docstring): both lie in the
    table's range, so b_i - a_i (rounded up)."""
    lo, hi = self.source.output_range()
    return np.tile([float(h - l) for l, h in zip(lo, hi)], (self.n, 1))

  @functools.cached_property
  def float_proof(self) -> dict:
    """The float certificate's checks and bound (module docstring) in ``number_format``:
    {'interior' (sup |fl(g) - g| on cube interiors), 'window' (on the windows: the distance
    of fl(g) from some table value; fl(g) and g need not agree there, both lie in the
    table's range), rounded up; 'steps' (each proved inequality as text), 'assumes',
    'format', 'domain'}; ValueError (one line) where a snap or an exact partial sum cannot
    be proved."""
    return float_deviation(self)


def _differing(want, got, path: str) -> list:
  """The entries (path and index) where the parameter trees differ exactly."""
  if isinstance(want, dict) or isinstance(got, dict):
    if not (isinstance(want, dict) and isinstance(got, dict)) or set(want) != set(got):
      return [path or 'the tree']
    return [p for k in sorted(want) for p in _differing(want[k], got[k], f'{path}/{k}')]
  a, b = np.asarray(want, object), np.asarray(got, object)
  if a.shape != b.shape:
    return [f'{path} (shape {b.shape}, not {a.shape})']
  same = np.asarray(a == b, bool)          # exact: == on Fractions and ints
  return [f'{path}{[int(i) for i in where]}' for where in np.argwhere(~same)]


def _exact_attention(p: dict, z: np.ndarray) -> np.ndarray:
  """The attention update in exact rationals: every head here has W_Q = W_K = 0 (all scores
  0, weights exactly 1/n); anything else is refused."""
  if any(v != 0 for v in np.ravel(p['W_Q'])) or any(v != 0 for v in np.ravel(p['W_K'])) \
      or any(v != 0 for v in np.ravel(p['b_Q'])):
    raise ValueError('exact evaluation covers heads with all scores 0 only.')
  n = z.shape[0]
  out = np.full(z.shape, Fraction(0), object)
  for h in range(p['W_V'].shape[1]):
    v = z.dot(p['W_V'][0, h].T)                    # [n, m]
    mean = v.sum(axis=0) * Fraction(1, n)           # [m]
    out = out + np.tile(p['W_O'][0, h].dot(mean), (n, 1))
  return out


# ---------------------------------------------------------------------------
# The float certificate.
# ---------------------------------------------------------------------------


def _up(x: Fraction) -> float:
  """float(x) rounded up."""
  f = float(x)
  return f if Fraction(f) >= x else float(np.nextafter(f, np.inf))


def float_deviation(g: IntegerIdsRealized) -> dict:
  """sup |fl(g) - g| on cube interiors, and sup of the distance of fl(g) from a table value on
  the windows, in g's format, from the rounding model (``transformer_ua.rounding``,
  docs/proofs/integer_ids.md, Claim 4); each step is an inequality checked in exact
  rationals."""
  fmt, src = g.format, g.source
  u, tau, limit = fmt.u, fmt.tiny, fmt.integer_limit
  d, n = src.d, src.n
  sigma = fmt.snap
  steps = []
  # 0. the snaps are blocks of their own: a zero dot product plus the bias sigma, so that
  #    each adds sigma once, to a finished value, whatever order a runtime sums in.
  for seg, row in ((SNAP, d), (ATTENTION, d + 1)):
    ff = g.exact[f'segment_{seg}']['feedforward']
    if any(v != 0 for v in np.ravel(ff['W_2'])) or ff['b_2'][0, row] != sigma or \
        any(v != 0 for i, v in enumerate(ff['b_2'][0]) if i != row):
      raise AssertionError(f'block {seg} is not a snap (zero dot product, bias sigma).')
  if g.exact['segment_0']['feedforward']['b_2'][0, d] != 0:
    raise AssertionError('the quantization adds a bias to a_1 (sigma has a block of its own).')
  steps.append('snaps: sigma added in blocks of their own (zero dot product + bias), once, '
               'to a finished value')
  # 1. quantize: the a_1 row (with Theorem 3's residual jM as one more term, in any order)
  #    is within 1/2 of the real jM + Q(x), an integer in [0, nM - 1] on interiors and a real
  #    in [0, nM - 1] anywhere; the snap block then makes it sigma + an integer.
  ff = g.exact['segment_0']['feedforward']
  s = 1 / g.ramp
  err, load, terms = Fraction(0), Fraction(0), 0
  for uu in range(ff['b_1'].shape[1]):
    w2 = abs(ff['W_2'][0, d, uu])
    if w2 == 0:
      continue
    beta = ff['b_1'][0, uu]
    ymax = max(abs(beta), abs(s + beta))
    err += w2 * (u * ymax + tau)
    load += w2 * ((1 + u) * max(Fraction(0), s + beta) + tau)
    terms += 1
  if src.positional:                   # the residual a_1 = jM, j < n
    terms += 1
    load += max(abs(v) for v in g.exact['E'][:, d])
  err += rounding.dot_error(fmt, terms, load)
  if not err < Fraction(1, 2):
    raise ValueError(f'{fmt.name}: the quantization sum is only within {float(err):.3g} of '
                     'its real value (needs < 1/2 for the snap); build for float64 '
                     "(arithmetic='float64') or use a smaller resolution (a larger epsilon).")
  steps.append(f'quantization within {_up(err):.3g} < 1/2 of an integer, in any order: '
               'snapped to it')
  # 2. code: integer partial sums below 2^p.
  ff = g.exact[f'segment_{CODE}']['feedforward']
  K = len(src.phi)
  reach = [K - 1 - k for k in range(K)]
  for row, extra in ((d, sigma + K), (d + 1, 0)):
    tot = extra + sum(abs(ff['W_2'][0, row, k + 1]) * reach[k] for k in range(K))
    if not tot < limit:
      raise ValueError(f'{fmt.name}: the code layer\'s sums reach {tot:,} >= 2^{fmt.precision}.')
  steps.append('code layer: integers, every partial sum below 2^p: exact')
  # 3. attention: the average is within 1/2 of phi_own + S, then snapped.
  phimax = max(src.phi)
  smax = n * phimax
  ew = rounding.SOFTMAX_ULPS * 2 * u / n
  mixed = ew * smax + fmt.gamma(n) * (Fraction(1, n) + ew) * smax + n * tau
  out = n * mixed + u * n * (Fraction(smax, n) + mixed) + tau
  a2 = out + u * (phimax + smax + out) + tau
  if not a2 < Fraction(1, 2):
    raise ValueError(f'{fmt.name}: the attention average is only within {float(a2):.3g} of '
                     'phi + S (needs < 1/2); use a smaller resolution (a larger epsilon).')
  steps.append(f'attention within {_up(a2):.3g} < 1/2 of phi(own) + S: snapped '
               f'(assumes {rounding.SOFTMAX_ASSUMPTION})')
  # 4. value: pre-activations exact integers; the products and sums exact or bounded.
  top = int(max(src.high)) + int(smax) + 1
  if not top + sigma + 2 < limit:
    raise ValueError(f'{fmt.name}: ids reach {top:,}; the value layer needs them below 2^(p-1).')
  kinks, coefs, bias = g._value_units(VALUE)  # pylint: disable=protected-access
  ids = [int(t) for t in src.ids]
  scale = 2 ** src.value_bits
  dev = Fraction(0)
  for l in range(d):
    c = [abs(x) for x in coefs[l]]
    exact_load = sum(ci * (ids[-1] - k) for ci, k in zip(c, kinks) if k < ids[-1]) + abs(bias[l])
    if exact_load * scale < limit:
      continue                          # every partial sum a multiple of 2^-b below 2^(p-b)
    # any-order bound at each id: gamma_K sum_on |W_2| ReLU(t - kink) + the bias add
    load1 = relu_sums(kinks, c, ids)
    order = sorted(kinks)
    for i, t in enumerate(ids):
      on = bisect.bisect_left(order, t)
      if on == 0:
        continue
      value = abs(src.value_num[i, l]) / Fraction(scale)
      dot = rounding.dot_error(fmt, on, load1[i])
      dev = max(dev, dot + u * (value + dot) + tau)
  if dev == 0:
    steps.append('value layer: b-bit dyadics times integer ids, every partial sum below '
                 '2^(p-b): exact')
  else:
    steps.append(f'value layer: any-order dot product bound {_up(dev):.3g} at the worst id')
  # 5. the zeroed o (one flushed subnormal at most) and the clamp.
  total = dev + tau
  if g.clamp is not None and dev > 0:
    lo, hi = g.clamp
    total += u * (max(abs(v) for v in lo + hi) + 2 * dev) + 2 * tau
  steps.append('o zeroed exactly up to one subnormal; '
               + ('clamp: identity on the table range' if dev == 0 else 'clamp: rounding added'))
  return {'interior': _up(total), 'window': _up(total), 'steps': steps,
          'assumes': '; '.join(rounding.INTEGER_ID_ASSUMPTIONS),
          'format': f'IEEE 754 {fmt.name} (u = 2^-{fmt.precision})', 'domain': DOMAIN_NOTE,
          'quantization_error': _up(err), 'attention_error': _up(a2)}
