r"""Train to certify: the smallest trained standard Transformer whose certificate meets epsilon.

``train_and_certify(f, epsilon, d=, n=)`` trains small standard Transformers on f, certifies
each with ``network_certificate.certify_network`` (d_p(f, fl(g)) <= total over the whole
cube [0, 1]^{n x d}, in the arithmetic asked for) and returns the first candidate, in
increasing parameter count, whose certified total is at most epsilon.

The candidates (``candidates``: the search rule). One architecture A = (L, h, m, D, r):

    g = readout o (Attn_L, FF_L) o ... o (Attn_1, FF_1) o pad,    pad: X -> [X, 0] in R^{n x D}
    Attn: h softmax heads of size m (eq. (1), query bias, no scale); FF: r ReLUs (eq. (2));
    readout: the first d coordinates of Z_L (``modules.Network(embed_width=D)``)

with m = 1 and D = d + h (one coordinate of the residual per head's output, as in the
hand-built product network: x, then the mean). The ladder is

    (L, h) in SHAPES = ((1, 1), (1, 2), (2, 1), (2, 2)),  r in 8, 16, 32, ..., max_width,

and every A of the ladder is tried in increasing parameter count (ties: in ladder order),
so the first certified A is the smallest of the ladder: start small (L = 1, h = 1, m = 1,
D = d + 1, r = 8), double r up to the cap, add heads and depth where they are cheaper.
``architectures`` names what is tried: 'ladder' (this ladder, the default) and any of the
stock encoder blocks of ``stock_candidates`` (post-LN / pre-LN x relu / gelu, D = 8, h = 2,
biases and LayerNorms, r = 8, ..., max_width), all in one increasing parameter count (ties:
the ladder first, then the names' order). A stock candidate trains the same way (its own
init, flax's), and is certified from its (Flax module, variables) pair, which
``certify_network`` reads through ``flax_import`` and checks against the Flax apply.

Training one candidate (``train``), in float64 (jax x64 inside a context, never set for
the caller): parameters from ``seed`` (the candidate's seed is seed + its index in the
ladder, recorded; ``init_params``: ``layers``' initializers, then W_Q, W_K scaled by 1/10
so that attention starts near the uniform mean, and b_1 = -W_1 u with u uniform in
[0, 1]^D per unit, so that each ReLU's kink passes through a random point of the cube
where the residual stream starts, not all through the origin), a pool of ``pool``
uniform points of the cube with f's values, Adam with a cosine-decayed learning rate,
``steps`` steps on minibatches of ``batch`` points of the pool, on the loss

    (1/B) sum_b sum_ji (g(X_b)_ji - f(X_b)_ji)^2          (an estimate of d_2(f, g)^2).

A candidate whose sampled d_p (2 10^4 uniform points, ``network_apply.apply`` in the
certified arithmetic's storage dtype) is above margin x epsilon is not certified (its
certificate, an upper bound of the true d_p, could not be below epsilon by the margin the
certificate's overhead needs); it is recorded as such. The margin starts at
``sample_fraction``; a certificate that misses epsilon with total T for a sampled d_p s
lowers it to s / T when that is smaller (the overhead seen on this target, learned).
Otherwise it is certified; while the total is above epsilon but at most ``refine_within``
epsilon, up to ``refine_rounds`` rounds add ``refine_points`` points drawn uniformly in
boxes of half-width ``refine_radius`` around the certificate's worst box centres to the
pool, train ``refine_steps`` more steps at a tenth of the learning rate, and certify
again.

For a float32 (tf32, bfloat16) certificate the trained weights are rounded to float32
first: the network certified, returned and saved is the one a float32 runtime stores. For a
TF32 or bfloat16 certificate a stock candidate trains with its matmul operands reduced to
the operand format, straight-through (``stock_candidates.operand_dot_general``); the ladder
trains in float64 for every arithmetic.

Everything is stopped by the budget ``max_minutes`` (training and certificates together):
each certificate gets at most ``certify_minutes`` and what is left. The result says
whether epsilon was reached; when it was not, it holds the candidate with the smallest
certified total (or, with no certificate at all, none).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import numbers
import os
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from transformer_ua import decimal_text, layers, modules, outputs, provenance, rounding
from transformer_ua.certify import independent_check, network_certificate, stock_candidates
from transformer_ua.networks import flat_onnx, network_apply, network_dict, project_import
from transformer_ua.targets import distances
from transformer_ua.targets import functions as targets_lib

#: (depth L, heads h) of the ladder, in order; m = 1 and D = d + h for each.
SHAPES = ((1, 1), (1, 2), (2, 1), (2, 2))
#: The first FF width of the ladder (doubled up to max_width).
FIRST_WIDTH = 8
#: Uniform points on which the sampled d_p of each candidate is measured.
CHECK_POINTS = 20000
#: Seed of the check points (the training pool uses the run's seed).
CHECK_SEED = 12345
#: What the certifier's refusal of a network whose estimate exceeds its budget says (that
#: candidate is recorded as not certified; any other ValueError is the caller's).
BUDGET_REFUSAL = 'above max_minutes'
#: Storage dtype of each arithmetic (the weights a runtime holds) and its bits.
STORAGE = {'exact': (np.float64, 53), 'float64': (np.float64, 53), 'float32': (np.float32, 24),
           'tf32': (np.float32, 24), 'bfloat16': (np.float32, 24),
           'tf32-a100': (np.float32, 24), 'tf32-h100': (np.float32, 24)}


@dataclasses.dataclass(frozen=True)
class Candidate:
  """One architecture of the ladder (module doc)."""

  depth: int
  heads: int
  head_size: int
  embed_width: int
  width: int

  #: The training recipe (steps, lr, batch) a ladder candidate gets unless the caller gives
  #: its own (``train_and_certify``'s steps=, lr=, batch=).
  RECIPE = (6000, 1e-2, 2048)

  def network(self) -> modules.Network:
    seg = layers.Segment('block', self.depth, num_heads=self.heads, head_size=self.head_size,
                         normalizer='softmax', width=self.width)
    return modules.Network(segments=(seg,), embed_width=self.embed_width,
                          param_dtype=jnp.float64)

  def num_params(self) -> int:
    D, h, m, r = self.embed_width, self.heads, self.head_size, self.width
    return self.depth * (4 * h * m * D + h * m + 2 * r * D + r + D)

  def label(self) -> str:
    return (f'L={self.depth} h={self.heads} m={self.head_size} D={self.embed_width} '
            f'r={self.width}')

  def init(self, seed: int, n: int, d: int):
    return init_params(self.network(), seed, n, d)

  def training_network(self, operand_bits: int | None) -> modules.Network:
    """The ladder trains in float64 whatever the arithmetic (``operand_bits`` unused: the
    operand-reduced training is the stock blocks', module doc)."""
    del operand_bits
    return self.network()

  def stored(self, params, d: int, n: int, dtype):
    """(params, Net, g): the rounded weights, their Net, and g = the Net (``_stored``)."""
    params, net = _stored(self.network(), params, d, n, dtype)
    return params, net, net

  def certify_context(self, dtype):
    return contextlib.nullcontext()


def candidates(d: int, max_width: int, shapes=SHAPES, architectures=('ladder',)) -> list:
  """The candidates (module doc) in the order they are tried: increasing parameter count,
  ties in ladder order (``shapes``, then r = FIRST_WIDTH, 2 FIRST_WIDTH, ..., <= max_width),
  then the stock candidates of ``architectures`` in their order."""
  architectures = stock_candidates.check_architectures(architectures)
  ladder = []
  for depth, heads in (shapes if 'ladder' in architectures else ()):
    r = FIRST_WIDTH
    while r <= max_width:
      ladder.append(Candidate(depth, heads, 1, d + heads, r))
      r *= 2
  ladder += stock_candidates.candidates(d, max_width, architectures, FIRST_WIDTH)
  return sorted(ladder, key=lambda c: c.num_params())   # stable: ties keep ladder order


@dataclasses.dataclass
class Trial:
  """What happened to one candidate: its seed, sampled errors, certificates, seconds."""

  candidate: Candidate
  seed: int
  steps: int
  recipe: tuple        # (steps, lr, batch) it was trained with
  train_rms: float
  sampled_dp: float
  certified_total: float | None
  reached: bool
  rounds: int
  seconds: float
  note: str

  def row(self) -> dict:
    return {'architecture': self.candidate.label(), 'params': self.candidate.num_params(),
            'seed': self.seed, 'steps': self.steps,
            'recipe': dict(zip(('steps', 'lr', 'batch'), self.recipe)), 'train_rms': self.train_rms,
            'sampled_dp': self.sampled_dp, 'certified_total': self.certified_total,
            'reached': self.reached, 'refine_rounds': self.rounds,
            'seconds': round(self.seconds, 1), 'note': self.note}


@dataclasses.dataclass
class TrainedCertificate:
  """The result: the network (a ``network_dict.Net``, and the project's ``modules.Network``
  or a stock candidate's Flax module, with its params), its certificate, whether epsilon
  was reached, and every trial."""

  net: network_dict.Net | None
  network: object | None
  params: dict | None
  certificate: object | None
  reached: bool
  epsilon: float
  arithmetic: str
  p: float
  seed: int
  trials: list
  seconds: float

  def __repr__(self) -> str:
    """One line: the verdict, the size, the total (rounded up) and g's hash; ``line()``
    holds the whole certificate."""
    if self.certificate is None:
      return (f'TrainedCertificate(no certificate, epsilon={self.epsilon:g} not reached, '
              f'{len(self.trials)} trials, {self.seconds:.0f} s)')
    total = math.nextafter(float(self.certificate.total), math.inf)   # >= the rational
    return (f'TrainedCertificate(epsilon={self.epsilon:g}, reached={self.reached}, '
            f'arithmetic={self.arithmetic!r}, p={self.p:g}, params={self.net.count_params()}, '
            f'total <= {decimal_text.bound_text(total, 4)}, '
            f'g={self.certificate.params_hash[:19]}, {len(self.trials)} trials, '
            f'{self.seconds:.0f} s)')

  def line(self) -> str:
    if self.certificate is None:
      return (f'no candidate was certified within the budget ({len(self.trials)} trained, '
              f'{self.seconds:.0f} s); epsilon={self.epsilon:g} not reached.')
    verdict = 'reached' if self.reached else 'NOT reached (best total shown)'
    return (f'epsilon={self.epsilon:g} {verdict}: {self.net.count_params()} parameters '
            f'({self.net.architecture()}); {self.certificate.line()}')


# ---------------------------------------------------------------------------
# Checks at the boundary.
# ---------------------------------------------------------------------------


def _check_args(f, epsilon, d, n, p, arithmetic, max_minutes, max_width):
  def positive(name, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) \
        or v <= 0:
      raise ValueError(f'{name}={v!r}; it must be a positive finite number.')
    return float(v)

  def integer(name, v, low):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
      raise ValueError(f'{name}={v!r}; it must be an integer >= {low}.')
    return int(v)

  epsilon = positive('epsilon', epsilon)
  d, n = integer('d', d, 1), integer('n', n, 1)
  p = distances.check_p(p, allow_inf=True)
  arithmetic = rounding.check_network_arithmetic(arithmetic)
  max_minutes = positive('max_minutes', max_minutes)
  max_width = integer('max_width', max_width, FIRST_WIDTH)
  target = targets_lib.get_target(f, d=d, n=n)
  return target, epsilon, d, n, p, arithmetic, max_minutes, max_width


def _check_shapes(shapes) -> tuple:
  try:
    out = tuple((int(a), int(b)) for a, b in shapes)
  except (TypeError, ValueError):
    out = ()
  if not out or any(v < 1 for s in out for v in s) or \
      any(float(v) != int(v) for s in shapes for v in s):
    raise ValueError(f'shapes={shapes!r}; it must be a non-empty list of (depth, heads) '
                     'pairs of positive integers.')
  return out


# ---------------------------------------------------------------------------
# Training (float64, inside an x64 context).
# ---------------------------------------------------------------------------


def _train_program(network: modules.Network, tx):
  """jit (params, opt_state, x [P, n, d], y [P, n, d], idx [S, B]) -> (params, opt_state,
  losses [S]): S Adam steps on the minibatches x[idx[s]]."""
  def loss_fn(params, x, y):
    g = network.apply({'params': params}, x)
    return jnp.mean(jnp.sum((g - y) ** 2, axis=(1, 2)))

  def run(params, opt_state, x, y, idx):
    def body(carry, ids):
      params, opt_state = carry
      loss, grads = jax.value_and_grad(loss_fn)(params, x[ids], y[ids])
      updates, opt_state = tx.update(grads, opt_state, params)
      return (optax.apply_updates(params, updates), opt_state), loss
    (params, opt_state), losses = jax.lax.scan(body, (params, opt_state), idx)
    return params, opt_state, losses

  return jax.jit(run)


#: Scale of W_Q and W_K at initialization (``init_params``).
QK_INIT_SCALE = 0.1


def init_params(network: modules.Network, seed: int, n: int, d: int):
  """Initial parameters (module doc): ``network.init`` from ``seed``, W_Q and W_K scaled
  by QK_INIT_SCALE, b_1 = -W_1 u (u ~ U[0, 1]^D per unit, from ``seed``). Call inside
  ``jax.enable_x64``."""
  params = network.init(jax.random.PRNGKey(seed), jnp.zeros((1, n, d), jnp.float64))
  params = jax.tree_util.tree_map(np.asarray, params['params'])
  rng = np.random.default_rng([seed, 1])
  for i, _ in enumerate(network.segments):
    seg = params[f'segment_{i}']
    if 'attention' in seg:
      seg['attention']['W_Q'] = seg['attention']['W_Q'] * QK_INIT_SCALE
      seg['attention']['W_K'] = seg['attention']['W_K'] * QK_INIT_SCALE
    if 'feedforward' in seg:
      w_1 = seg['feedforward']['W_1']                       # [L, r, D]
      seg['feedforward']['b_1'] = -np.einsum('lrD,lrD->lr', w_1, rng.random(w_1.shape))
  return jax.tree_util.tree_map(jnp.asarray, params)


def train(network: modules.Network, params, x, y, *, steps: int, lr: float, batch: int,
          seed: int, deadline: float, chunk: int = 250):
  """``steps`` Adam steps (cosine-decayed rate from ``lr``) on minibatches of (x, y), or
  fewer when ``deadline`` (time.monotonic) passes. Call inside ``jax.enable_x64``.
  Returns (params, steps done, mean loss of the last chunk)."""
  if steps <= 0:
    return params, 0, float('nan')
  tx = optax.adam(optax.cosine_decay_schedule(lr, steps, alpha=1e-3))
  opt_state = tx.init(params)
  program = _train_program(network, tx)
  rng = np.random.default_rng(seed)
  xj, yj = jnp.asarray(x, jnp.float64), jnp.asarray(y, jnp.float64)
  done, last = 0, float('nan')
  batch = min(batch, len(x))
  while done < steps and time.monotonic() < deadline:
    s = min(chunk, steps - done)
    idx = jnp.asarray(rng.integers(0, len(x), size=(s, batch)), jnp.int32)
    params, opt_state, losses = program(params, opt_state, xj, yj, idx)
    done += s
    last = float(np.mean(np.asarray(losses)))
  return params, done, last


def sampled_dp(target, net: network_dict.Net, x: np.ndarray, dtype, p: float) -> float:
  """d_p(f, g) sampled on the points x [P, n, d]: (mean_b sum_ji |g - f|^p)^(1/p), g run
  by ``network_apply.apply`` in ``dtype``; p = inf: max_b max_ji |g - f|."""
  err = np.abs(network_apply.apply(net, x, dtype).astype(np.float64) - target(x))
  if math.isinf(p):
    return float(np.max(err))
  return float(np.mean(np.sum(err ** p, axis=(1, 2))) ** (1 / p))


def _near(centres: np.ndarray, count: int, radius: float, rng) -> np.ndarray:
  """``count`` points uniform in boxes of half-width ``radius`` around the centres
  [k, n, d] (cycled), clipped to the cube."""
  centres = np.asarray(centres, np.float64)
  pick = centres[np.arange(count) % len(centres)]
  return np.clip(pick + rng.uniform(-radius, radius, size=pick.shape), 0.0, 1.0)


def _stored(network: modules.Network, params, d: int, n: int, dtype):
  """(params, Net) with every weight rounded to ``dtype`` (held as float64): the network
  a ``dtype`` runtime stores, as the project's params and as a ``Net`` for n tokens (the
  n the certificate's identity hash is taken with)."""
  params = jax.tree_util.tree_map(lambda a: np.asarray(a, dtype).astype(np.float64), params)
  return params, network_dict.check(project_import.from_network(network, params, d=d), d=d,
                                    n=n)


def _certify(target, g, *, d, n, p, arithmetic, epsilon, max_minutes, lipschitz, certifier,
             second_order=None):
  """The certificate of g, a ``Net`` or a stock candidate's (module, variables) pair
  (``certifier``, default ``certify_network``); ``second_order``: the caller's
  {'jacobian': J, 'hessian': H}, passed only when given."""
  certifier = certifier or network_certificate.certify_network
  return certifier(target, g, d=d, n=n, p=p, arithmetic=arithmetic, epsilon=epsilon,
                   max_minutes=max_minutes, lipschitz=lipschitz, **(second_order or {}))


def train_and_certify(f, epsilon, *, d: int, n: int, p=2, arithmetic: str = 'float64',
                      max_minutes: float = 20, seed: int = 0, lipschitz=None,
                      jacobian=None, hessian=None,
                      max_width: int = 64, shapes=SHAPES, architectures=('ladder',),
                      steps: int | None = None, lr: float | None = None,
                      batch: int | None = None, pool: int = 65536,
                      sample_fraction: float = 0.5,
                      refine_within: float = 2.0, refine_rounds: int = 2, refine_points: int = 8192,
                      refine_radius: float = 1 / 32, refine_steps: int = 2000,
                      certify_minutes: float = 5, certifier: Callable | None = None,
                      progress: Callable[[str], None] | None = None) -> TrainedCertificate:
  """The smallest candidate of the ladder whose certificate reaches epsilon (module doc).

  Args:
    f: a built-in target name, a ``targets.Target`` or a callable [B, n, d] -> [B, n, d].
    epsilon: the d_p(f, fl(g)) to certify (> 0).
    d, n: token width and token count.
    p: the exponent of d_p (>= 1, or inf).
    arithmetic: the arithmetic g is certified in (``rounding.NETWORK_ARITHMETICS``).
    max_minutes: the budget for training and certifying all candidates.
    seed: candidate i of the ladder trains from seed + i (its pool and its init).
    lipschitz: passed to the certifier (a callable target needs it, or the next two).
    jacobian, hessian: a callable target's second-order bound, passed to the certifier
      (``certify_network``'s jacobian= and hessian=) when given.
    max_width: the cap of the FF width r.
    shapes: the (depth, heads) pairs of the ladder (default ``SHAPES``).
    architectures: names of ``stock_candidates.ARCHITECTURES``: 'ladder' (the default,
      alone) and the stock blocks 'stock_post_relu', 'stock_post_gelu', 'stock_pre_relu',
      'stock_pre_gelu' (module doc).
    steps, lr, batch, pool: the training of one candidate (module doc); steps, lr or batch
      None: each candidate's own ``RECIPE`` (the ladder's Candidate.RECIPE = (6000, 1e-2,
      2048); a stock block's StockCandidate.RECIPE = (40000, 3e-3, 256)).
    sample_fraction: a candidate is certified only when its sampled d_p is at most
      margin * epsilon; the margin starts here and is learned (module doc).
    refine_within: refine only a candidate whose total is at most this times epsilon.
    refine_rounds, refine_points, refine_radius, refine_steps: training near the worst
      boxes after a certificate above epsilon.
    certify_minutes: the most one certificate may take.
    certifier: the certifying function (default ``certify_network``); a test may pass a
      stand-in with the same signature.
    progress: called with one line per event (None: silent).
  Raises:
    ValueError: bad arguments, in one line.
  """
  target, epsilon, d, n, p, arithmetic, max_minutes, max_width = _check_args(
      f, epsilon, d, n, p, arithmetic, max_minutes, max_width)
  say = progress or (lambda line: None)
  second_order = None if jacobian is None and hessian is None else {
      'jacobian': jacobian, 'hessian': hessian}
  dtype, _ = STORAGE[arithmetic]
  model = rounding.MATMUL_MODELS.get(arithmetic)
  operand_bits = model.operand_bits if model is not None and model.operand_rel else None
  start = time.monotonic()
  deadline = start + 60 * max_minutes
  check_x = np.random.default_rng(CHECK_SEED).random((CHECK_POINTS, n, d))
  trials, best = [], None
  margin = sample_fraction
  for index, cand in enumerate(candidates(d, max_width, _check_shapes(shapes), architectures)):
    if time.monotonic() >= deadline:
      say('budget spent; stopping the search.')
      break
    t0 = time.monotonic()
    run_seed = seed + index
    rng = np.random.default_rng(run_seed)
    x = rng.random((pool, n, d))
    y = target(x)
    network = cand.training_network(operand_bits)
    c_steps, c_lr, c_batch = (own if given is None else given
                              for own, given in zip(cand.RECIPE, (steps, lr, batch)))
    with jax.enable_x64(True):
      params = cand.init(run_seed, n, d)
      params, done, loss = train(network, params, x, y, steps=c_steps, lr=c_lr, batch=c_batch,
                                 seed=run_seed, deadline=deadline)
    params, net, g = cand.stored(params, d, n, dtype)
    dp = sampled_dp(target, net, check_x, dtype, p)
    say(f'[{cand.label()}: {cand.num_params()} params, seed {run_seed}] {done} steps, '
        f'train rms {math.sqrt(loss):.3g}, sampled d_p {dp:.3g}')
    total, reached, rounds, note, cert = None, False, 0, '', None
    if dp > margin * epsilon:
      note = f'not certified: sampled d_p {dp:.3g} > {margin:.3g} epsilon'
    while dp <= margin * epsilon:
      left = (deadline - time.monotonic()) / 60
      if left <= 0:
        note = 'budget spent before its certificate'
        break
      try:
        with cand.certify_context(dtype):
          cert = _certify(target, g, d=d, n=n, p=p, arithmetic=arithmetic,
                          epsilon=epsilon, max_minutes=min(certify_minutes, left),
                          lipschitz=lipschitz, certifier=certifier,
                          second_order=second_order)
      except ValueError as e:
        if BUDGET_REFUSAL not in str(e):
          raise
        note = f'not certified: {e}'          # the certifier's estimate exceeds the budget
        say(f'  {note}')
        break
      total, reached = float(cert.total), bool(cert.reached) and cert.total <= epsilon
      say(f'  certificate (round {rounds}): {cert.line()}')
      if best is None or total < float(best[3].total):
        best = (cand, network, params, cert, net)
      if not reached and dp > 0:
        margin = min(margin, dp / total)
      if reached or rounds >= refine_rounds or total > refine_within * epsilon or \
          time.monotonic() >= deadline:
        break
      rounds += 1
      extra = _near(cert.worst_centres, refine_points, refine_radius, rng)
      x = np.concatenate([x, extra])
      y = np.concatenate([y, target(extra)])
      with jax.enable_x64(True):
        params, more, loss = train(network, params, x, y, steps=refine_steps, lr=c_lr / 10,
                                   batch=c_batch, seed=run_seed * 1000 + rounds,
                                   deadline=deadline)
      params, net, g = cand.stored(params, d, n, dtype)
      done += more
      dp = sampled_dp(target, net, check_x, dtype, p)
      say(f'  refined near {len(cert.worst_centres)} worst boxes: {more} steps, sampled '
          f'd_p {dp:.3g}')
    trials.append(Trial(cand, run_seed, done, (c_steps, c_lr, c_batch), math.sqrt(loss), dp,
                        total, reached, rounds, time.monotonic() - t0, note))
    if reached:
      break
  seconds = time.monotonic() - start
  if best is None:
    return TrainedCertificate(None, None, None, None, False, epsilon, arithmetic, p, seed,
                              trials, seconds)
  cand, network, params, cert, net = best
  reached = bool(cert.reached) and cert.total <= epsilon
  return TrainedCertificate(net, network, params, cert, reached, epsilon, arithmetic, p,
                            seed, trials, seconds)


# ---------------------------------------------------------------------------
# The job of experiments/train_and_certify.py: one call, its files.
# ---------------------------------------------------------------------------

#: The files ``run`` writes into its output directory.
OUTPUT_FILES = ('network.npz', 'network.onnx', 'certificate.txt', 'record.json')
#: The config fields passed to ``train_and_certify`` as keywords.
_TRAINING_FIELDS = ('max_minutes', 'seed', 'max_width', 'steps', 'lr', 'batch', 'pool',
                    'sample_fraction', 'refine_within', 'refine_rounds', 'refine_points', 'refine_radius',
                    'refine_steps', 'certify_minutes')


def validate(c) -> None:
  """The config's arguments checked as ``train_and_certify`` checks them (one line)."""
  _check_args(c.target, c.epsilon, c.d, c.n, c.p, c.arithmetic, c.max_minutes, c.max_width)
  _check_shapes(c.shapes)
  stock_candidates.check_architectures(c.get('architectures', ('ladder',)))


def run(c, output_dir: str, *, command: str | None = None, progress=print) -> dict:
  """``train_and_certify`` on the config ``c``, then into ``output_dir`` (which exists):

      network.npz      the network-dict arrays under their ``Net.arrays`` names
                       (``blocks.0.W_Q``, ...), float64 (float32 values for a float32
                       certificate); with the row's ``settings`` (``Net.settings``: scale,
                       mask, activation, norm, LayerNorm eps) ``network_dict.from_flat``
                       rebuilds the net
      network.onnx     the same network as a flat ONNX graph (``flat_onnx.write``) in
                       the certified storage dtype, with its params_hash in the metadata
      certificate.txt  the certificate's line (or why there is none)
      record.json      the config, seeds, trials, the row (parameters, non-zero, bits,
                       total, sampled d_p by NumPy on 2 10^4 uniform points, and
                       ``independent_check.check``: fl(g) by JAX and onnxruntime on as many
                       points plus the worst boxes' centres), provenance (command,
                       revision, machine, load before and after), seconds
  Returns the record.
  """
  prov = provenance.record(command)
  kwargs = {k: c[k] for k in _TRAINING_FIELDS}
  if c.get('lipschitz') is not None:                     # a callable target states its L
    kwargs['lipschitz'] = c.lipschitz
  for field in ('jacobian', 'hessian'):                  # or its second-order bound
    if c.get(field) is not None:
      kwargs[field] = c[field]
  result = train_and_certify(c.target, c.epsilon, d=c.d, n=c.n, p=c.p,
                             arithmetic=c.arithmetic, shapes=tuple(map(tuple, c.shapes)),
                             architectures=tuple(c.get('architectures', ('ladder',))),
                             progress=progress, **kwargs)
  target = targets_lib.get_target(c.target, d=c.d, n=c.n)
  dtype, bits = STORAGE[result.arithmetic]
  row = None
  if result.net is not None:
    x = np.random.default_rng(c.seed + 1).random((CHECK_POINTS, c.n, c.d))
    runs = independent_check.check(target, result.net, result.certificate,
                                   points=CHECK_POINTS, seed=c.seed + 1)
    row = {
        'target': c.target if isinstance(c.target, str) else target.name,
        'd': c.d, 'n': c.n, 'p': result.p, 'epsilon': result.epsilon,
        'arithmetic': result.arithmetic, 'reached': result.reached,
        'parameters': result.net.count_params(),
        'nonzero_parameters': result.net.count_nonzero(), 'bits_per_parameter': bits,
        'certified_total': float(result.certificate.total),
        'certified_total_exact': str(result.certificate.total),
        'sampled_dp_numpy': sampled_dp(target, result.net, x, dtype, result.p),
        'independent_check': runs,
        'params_hash': result.certificate.params_hash,
        'architecture': result.net.architecture(),
        'settings': result.net.settings(),
        'family': (f'stock_{result.network.norm}_{result.network.activation}'
                   if isinstance(result.network, stock_candidates.StockBlock) else 'ladder')}
    arrays = {name: np.asarray(a, np.float64) for name, a in result.net.arrays()}
    with outputs.atomic_open(os.path.join(output_dir, 'network.npz'), 'wb') as f:
      np.savez(f, **arrays)
    flat_onnx.write(result.net, os.path.join(output_dir, 'network.onnx'),
                    dtype=np.dtype(dtype).name, overwrite=True,
                    props={'params_hash': row['params_hash'],
                           'certificate': result.certificate.line()})
  line = result.line()
  outputs.atomic_write(os.path.join(output_dir, 'certificate.txt'), line + '\n')
  load_after = provenance.load_1min()
  record = {'row': row, 'line': line, 'seconds': round(result.seconds, 1),
            'seed': result.seed, 'trials': [t.row() for t in result.trials],
            'search_rule': 'candidates(d, max_width, shapes, architectures) in increasing '
                           'parameter count (certify.trainer module doc)',
            'config': c.to_dict(), 'provenance': prov,
            'load_average_1min_at_end': load_after}
  outputs.atomic_json(os.path.join(output_dir, 'record.json'), record, indent=1,
                      default=str)
  progress(line)
  return record
