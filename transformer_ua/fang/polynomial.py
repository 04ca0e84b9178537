"""Fang et al. 2022, Theorem 3.5: C^q(x) = beta . concat(T^q(x)) + b equals Q on ||x|| <= B.

Shape glossary:  batch, d (input), n (tokens = ridge directions), q (degree = blocks),
D = n + q + 2 (token width).

The literal network (the reference):

    tokens  = F(x)                      [batch, n, D]   z_i = [t_i, e_i, 0_q, 1]
    T^q(x)  = (B^q o A^q o ... o B^1 o A^1)(tokens)     q fixed Lemma 3.1 blocks,
              one ``layers.Segment('block', depth=q, heads=1, head_size=n+1,
              normalizer='onehot_max', width=2)`` run by lax.scan
    C^q(x)  = sum_{i, j} beta_full[i, j] T^q(x)[i, j] + b        beta_full: [n, D]

Block k writes slot_k = -t * slot_(k-1) (slot_0 = the constant 1), so after q blocks
slot_k = (-t)^k = (-1)^k t^k; beta_full[i, slot k] = (-1)^k beta_{i,k} (Lemma 3.3's
coefficients; the signs are absorbed) and is 0 elsewhere.

The compact equivalent (same numbers, no attention): t = x F^T, slot_k by the same
recurrence, C = sum_{i,k} beta_slots[i, k-1] slot_k + b. Tests prove it equal to the
literal network (float64 to rounding; Fractions exactly).

Bounds (M per block, ``multiply_block.theorem_blocks``): with T = B max_i ||xi_i||
(= B for unit directions), block 1 has operands |t| <= T, |1| <= 1 and block k has
|t| <= T, |slot_(k-1)| <= T^(k-1); by default M_k^2 is the smallest power of two
>= (1 + 1/16) X_k Y_k ('product' rule). The diagonal of every block's score matrix
then wins by >= M_k^2/9 for every input with ||x|| <= B, the boundary included, and
still wins for ||x|| up to B (1+1/16)^(1/k) > B: inputs that round across the
boundary are safe. Inputs with ||x|| > B (1 + BOUNDARY_RTOL) are refused (or NaN).

Float64 error of the literal network (measured in results/fang/fang_construction.md):
each block rounds only fl(x y + 2M_k^2), an absolute error <= ulp(4 M_k^2)/2 ~
2^-52 * 4 X_k Y_k, and the next block multiplies it by |t| <= T. So slot k carries an
absolute error ~ k 2^-50 T^k independent of how small x is, and the output's error is
~ sum_{k,i} |beta_{i,k}| k 2^-50 T^k: it grows like T^q and with the size of beta
(the conditioning of the ridge solve), not with Q(x).

Counts (Theorem 3.5): free parameters n d (F) + n q (beta's non-zero pattern) + 1
(b) <= d^(q+1) + q d^q + 1, since n_q = C(d-1+q, q) <= d^q; non-zeros
nnz(F) + nnz(beta) + [b != 0] + q (2n + 8) <= d^(q+1) + 3q d^q + 8q + 1
(paper form of the blocks; the stored factored W^V = W_O W_V adds one per block).
Both hold with equality only when d = 1 or q = 1 (n_q = d^q), so we assert <=.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import layers, modules
from transformer_ua.fang import exact, multiply_block, ridge
from transformer_ua.fang.tokens import Layout, input_map

# Relative slack on ||x||^2 <= B^2 for float inputs (rounding of the norm).
BOUNDARY_RTOL = 1e-12
OUTSIDE_MODES = ('raise', 'nan')
NONZERO_FORMS = ('paper', 'stored')
# Literal path: tokens per chunk so that one [chunk, n, D] array stays ~2^24 entries.
LITERAL_CHUNK_ELEMENTS = 2 ** 24


@functools.partial(jax.jit, static_argnames=('q', 'trace'))
def _literal_forward(block_params, F, beta_full, b, x, *, q, trace=False):
  tokens = input_map(F, x, q=q)                                    # [batch, n, D]
  seg = multiply_block.block_segment(F.shape[0], q)
  net = modules.Network([seg])
  if trace:
    out, outs = net.apply({'params': {'segment_0': block_params}}, tokens, True)
  else:
    out, outs = net.apply({'params': {'segment_0': block_params}}, tokens), None
  y = jnp.einsum('bnk,nk->b', out, beta_full) + b                  # beta . concat(T) + b
  return (y, outs[0]) if trace else y


@jax.jit
def _compact_forward(F, beta_slots, b, x):
  t = x @ F.T                                                      # [batch, n]
  slot = jnp.ones_like(t)
  acc = jnp.zeros_like(t)
  for k in range(beta_slots.shape[1]):
    slot = -t * slot                                               # slot_k = -t slot_(k-1)
    acc = acc + beta_slots[:, k] * slot
  return jnp.sum(acc, axis=-1) + b


class PolynomialNetwork(nn.Module):
  """C^q as one Linen module: x [batch, d] -> C(x) [batch] (no domain check).

  Params: {'F': [n, d], 'beta': [n, q] (beta_slots: coefficient of slot k),
  'b': [] , 'blocks': {'segment_0': the q stacked blocks}}; ``PolynomialTransformer.
  float_params()`` is this pytree, so ``network().apply({'params': float_params()}, x)``
  is the literal network.
  """

  n: int
  d: int
  q: int
  param_dtype: Any = jnp.float64

  @property
  def segments(self) -> tuple:
    return (multiply_block.block_segment(self.n, self.q),)

  @nn.compact
  def __call__(self, x):
    zeros = nn.initializers.zeros
    F = self.param('F', zeros, (self.n, self.d), self.param_dtype)
    beta = self.param('beta', zeros, (self.n, self.q), self.param_dtype)
    b = self.param('b', zeros, (), self.param_dtype)
    tokens = input_map(F, x, q=self.q)                              # [batch, n, D]
    out = modules.Network(self.segments, param_dtype=self.param_dtype, name='blocks')(tokens)
    lay = Layout(self.n, self.q)
    slots = jnp.stack([out[..., lay.slot(k)] for k in range(1, self.q + 1)], axis=-1)
    return jnp.einsum('bnk,nk->b', slots, beta) + b               # beta . concat(T) + b


def _check_bound(bound) -> float:
  if isinstance(bound, bool) or \
      not isinstance(bound, (int, float, np.integer, np.floating, Fraction)):
    raise ValueError(f'bound must be a finite number B > 0, got {bound!r}.')
  B = float(bound)
  if not (math.isfinite(B) and B > 0):
    raise ValueError(f'bound must be a finite number B > 0, got {bound!r}.')
  return B


@dataclasses.dataclass(frozen=True, eq=False)
class PolynomialTransformer:
  """Fang et al.'s single-head Transformer C^q with fixed blocks (Theorem 3.5).

  Fields (numpy, float64): F [n, d] (rows unit norm), beta_slots [n, q]
  (coefficient of slot k = (-t)^k), b, bound B, the stacked block params
  (``{'attention': ..., 'feedforward': ...}`` with leaves [q, ...]), m_squared [q].
  Optional exact data (Fractions) for ``apply_exact``; ``poly`` and the ridge report
  when built from a polynomial.
  """

  d: int
  q: int
  bound: float
  F: np.ndarray
  beta_slots: np.ndarray
  b: float
  block_params: dict
  m_squared: tuple
  m_rule: str = 'product'
  poly: Mapping | None = None
  ridge_report: list | None = None
  F_exact: Any = None        # list of n rows of d Fractions (||row|| exact), or None
  beta_exact: Any = None     # list of n rows of q Fractions (beta_slots), or None
  b_exact: Any = None

  # -- structure ------------------------------------------------------------
  @property
  def n(self) -> int:
    return int(self.F.shape[0])

  @property
  def layout(self) -> Layout:
    return Layout(self.n, self.q)

  @property
  def operand_bound(self) -> float:
    """T = B max_i ||xi_i||, the bound on |t_i| over the ball."""
    return self.bound * float(np.max(np.linalg.norm(self.F, axis=1)))

  def __repr__(self) -> str:
    return (f'PolynomialTransformer(d={self.d}, q={self.q}, {self.n} tokens, '
            f'bound={self.bound:g}, {self.depth()} blocks, {self.num_free_params()} free '
            f'parameters{", exact" if self.beta_exact is not None else ""})')

  # -- the construction contract (``transformer_ua.construction``) ----------
  def depth(self) -> int:
    """Blocks of the literal network: q."""
    return self.q

  def layer_counts(self) -> dict:
    """{'blocks': {'block': q}}: the q multiplication blocks (Lemma 3.1)."""
    return {'blocks': {'block': self.q}}

  def network(self) -> PolynomialNetwork:
    """The literal network as one module (input map, q blocks, read-out)."""
    return PolynomialNetwork(n=self.n, d=self.d, q=self.q)

  def float_params(self) -> dict:
    """``network()``'s float64 params: F, beta (= beta_slots), b and the blocks."""
    f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    return {'F': f64(self.F), 'beta': f64(self.beta_slots), 'b': f64(self.b),
            'blocks': {'segment_0': jax.tree_util.tree_map(f64, self.block_params)}}

  def num_params(self) -> int:
    """Every stored weight of the literal network: F [n, d], the q blocks, beta over
    the slots [n, q] and b."""
    return (int(self.F.size) + layers.count_params(self.block_params)
            + int(self.beta_slots.size) + 1)

  def beta_full(self) -> np.ndarray:
    """beta as the paper's sparse vector over concat(T^q(x)), shaped [n, D]."""
    lay = self.layout
    out = np.zeros((self.n, lay.width))
    for k in range(1, self.q + 1):
      out[:, lay.slot(k)] = self.beta_slots[:, k - 1]
    return out

  def num_free_params(self) -> int:
    """|F| + |beta's non-zero pattern| + |b| = n d + n q + 1 (the blocks are fixed)."""
    return self.n * self.d + self.n * self.q + 1

  def num_nonzeros(self, form: str = 'paper') -> int:
    """Non-zero entries of F, beta, b and the q blocks.

    form 'paper': blocks counted as the paper's W^Q, W^K, W^V, W_1, W_2, b_1, b_2
    (2n + 8 each); 'stored': the factored params as stored (W_V and W_O, 2n + 9).
    """
    if form not in NONZERO_FORMS:
      raise ValueError(f'form={form!r}; allowed: {NONZERO_FORMS}.')
    base = (int(np.count_nonzero(self.F)) + int(np.count_nonzero(self.beta_slots))
            + int(self.b != 0))
    if form == 'stored':
      return base + layers.count_nonzero(self.block_params)
    return base + sum(multiply_block.paper_nonzeros(layers.unstack_layer(self.block_params, k))
                      for k in range(self.q))

  def theorem_bounds(self) -> dict:
    """Theorem 3.5's bounds for this (d, q): free params and non-zeros."""
    d, q = self.d, self.q
    return {'free_params': d ** (q + 1) + q * d ** q + 1,
            'nonzeros': d ** (q + 1) + 3 * q * d ** q + 8 * q + 1}

  # -- domain ---------------------------------------------------------------
  def in_domain(self, x) -> np.ndarray:
    """Boolean mask [...]: ||x|| <= B (float inputs: with relative slack 1e-12)."""
    x = np.asarray(x, np.float64)
    return np.sum(x * x, axis=-1) <= self.bound ** 2 * (1 + BOUNDARY_RTOL)

  def _prepare(self, x, outside):
    if outside not in OUTSIDE_MODES:
      raise ValueError(f'outside={outside!r}; allowed: {OUTSIDE_MODES}.')
    if isinstance(x, jax.core.Tracer):
      raise ValueError('apply() checks the domain eagerly; inside jit use '
                       'model.literal_fn() / model.compact_fn(), which return NaN outside.')
    x = np.asarray(x)
    if x.ndim < 1 or x.shape[-1] != self.d:
      raise ValueError(f'x must have shape [..., d] with d = {self.d}, got {x.shape}.')
    if not np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.complexfloating):
      raise ValueError(f'x must be a real array, got dtype {x.dtype}.')
    x = x.astype(np.float64)
    if not np.all(np.isfinite(x)):
      raise ValueError('x contains non-finite values.')
    mask = self.in_domain(x)
    if outside == 'raise' and not np.all(mask):
      norms = np.linalg.norm(x, axis=-1)
      raise ValueError(
          f'{int(np.sum(~mask))} of {mask.size} inputs lie outside the ball ||x|| <= B = '
          f'{self.bound:g} (largest norm {float(np.max(norms)):.6g}); the construction is '
          "exact only inside. Pass outside='nan' to get NaN for those rows.")
    return x, mask

  # -- evaluation -----------------------------------------------------------
  def apply(self, x, *, outside: str = 'raise', chunk: int | None = None) -> np.ndarray:
    """The literal network C^q(x) in float64. x: [..., d] -> [...].

    Inputs outside ||x|| <= B raise ValueError (``outside='raise'``) or give NaN
    (``outside='nan'``). Runs in chunks of ``chunk`` inputs (default: ~2^24 entries
    per token array).
    """
    x, mask = self._prepare(x, outside)
    flat = x.reshape(-1, self.d)
    if chunk is None:
      chunk = max(1, LITERAL_CHUNK_ELEMENTS // (self.n * self.layout.width))
    out = np.empty(flat.shape[0])
    with jax.enable_x64(True):
      args = self._jax_args(jnp.float64)
      for start in range(0, flat.shape[0], chunk):
        part = flat[start:start + chunk]
        pad = chunk - part.shape[0] if flat.shape[0] > chunk else 0
        xs = np.concatenate([part, np.zeros((pad, self.d))]) if pad else part
        y = _literal_forward(*args, jnp.asarray(xs), q=self.q)
        out[start:start + part.shape[0]] = np.asarray(y)[:part.shape[0]]
    out = out.reshape(x.shape[:-1])
    return np.where(mask, out, np.nan)

  def trace(self, x) -> np.ndarray:
    """Every block's output tokens, float64: [q, batch, n, D] (x inside the ball)."""
    x, _ = self._prepare(x, 'raise')
    with jax.enable_x64(True):
      _, outs = _literal_forward(*self._jax_args(jnp.float64),
                                 jnp.asarray(x.reshape(-1, self.d)), q=self.q, trace=True)
      return np.asarray(outs)

  def apply_compact(self, x, *, outside: str = 'raise') -> np.ndarray:
    """The compact equivalent (ridge features and their powers) in float64."""
    x, mask = self._prepare(x, outside)
    with jax.enable_x64(True):
      y = _compact_forward(jnp.asarray(self.F), jnp.asarray(self.beta_slots),
                           jnp.asarray(self.b), jnp.asarray(x.reshape(-1, self.d)))
      out = np.asarray(y).reshape(x.shape[:-1])
    return np.where(mask, out, np.nan)

  def _jax_args(self, dtype):
    bp = jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), self.block_params)
    return (bp, jnp.asarray(self.F, dtype), jnp.asarray(self.beta_full(), dtype),
            jnp.asarray(self.b, dtype))

  def _traced_bound2(self, dtype) -> float:
    """B^2 with the rounding slack of ``sum(x * x)`` in ``dtype`` (the M margin of
    1/16 covers any input accepted this way)."""
    eps = float(jnp.finfo(dtype).eps)
    return self.bound ** 2 * (1 + max(BOUNDARY_RTOL, 4 * (self.d + 1) * eps))

  def literal_fn(self, dtype=jnp.float32):
    """A pure jnp function x [batch, d] -> C(x) [batch] (NaN outside the ball), for
    use inside jit. Float32 by default; call under ``jax.enable_x64`` for float64."""
    args = self._jax_args(dtype)
    B2 = self._traced_bound2(dtype)

    def f(x):
      y = _literal_forward(*args, x, q=self.q)
      return jnp.where(jnp.sum(x * x, axis=-1) <= B2, y, jnp.nan)
    return f

  def compact_fn(self, dtype=jnp.float32):
    """Like ``literal_fn`` for the compact path."""
    F, beta, b = (jnp.asarray(a, dtype) for a in (self.F, self.beta_slots, self.b))
    B2 = self._traced_bound2(dtype)

    def f(x):
      return jnp.where(jnp.sum(x * x, axis=-1) <= B2, _compact_forward(F, beta, b, x), jnp.nan)
    return f

  # -- exact mode -----------------------------------------------------------
  def apply_exact(self, x_rows, *, path: str = 'literal') -> np.ndarray:
    """C(x) in exact rational arithmetic (see ``fang.exact``): an object array of
    Fractions shaped like ``apply`` ([...] for x [..., d]; x_rows: rationals, e.g. a list
    of rows of d Fractions).

    path: 'literal' (the network's math on Fractions), 'compact' or 'integer' (the JAX
    network in planned int64)."""
    try:
      x = np.asarray(x_rows, dtype=object)
    except ValueError:   # ragged rows: fang.exact says which row is wrong
      x = None
    if x is not None and x.ndim >= 2 and x.shape[-1] == self.d:
      shape, rows = x.shape[:-1], x.reshape(-1, self.d).tolist()
    else:
      rows = list(x_rows)
      shape = (len(rows),)
    out = np.empty(len(rows), dtype=object)
    out[:] = exact.apply_exact(self, rows, path=path)
    return out.reshape(shape)


def _stack_numpy(blocks):
  """Stacks per-block numpy params into a segment's [q, ...] params (numpy)."""
  return jax.tree_util.tree_map(lambda *a: np.stack(a), *blocks)


def from_params(*, F, beta_slots, b, bound, m_rule: str = 'product',
                normalize: bool = True) -> PolynomialTransformer:
  """A PolynomialTransformer from (possibly trained) F [n, d], beta_slots [n, q], b.

  With ``normalize`` the rows of F are scaled to unit norm (Section 2.1 asks
  ||xi_i|| <= 1; Lemma 3.3 uses = 1) and beta absorbs the scales exactly in the
  math: t_i' = t_i / r_i, beta'_{i,k} = beta_{i,k} r_i^k. Zero rows stay zero.
  """
  B = _check_bound(bound)
  F = np.asarray(F, np.float64)
  beta = np.asarray(beta_slots, np.float64)
  if F.ndim != 2 or beta.ndim != 2 or beta.shape[0] != F.shape[0]:
    raise ValueError(f'F must be [n, d] and beta_slots [n, q]; got {F.shape}, {beta.shape}.')
  for name, a in (('F', F), ('beta_slots', beta), ('b', np.asarray(b, np.float64))):
    if not np.all(np.isfinite(a)):
      raise ValueError(f'{name} has non-finite entries.')
  n, d = F.shape
  q = beta.shape[1]
  if normalize:
    r = np.linalg.norm(F, axis=1)
    safe = np.where(r > 0, r, 1.0)
    F = F / safe[:, None]
    beta = beta * safe[:, None] ** np.arange(1, q + 1)[None, :]
  T = B * max(float(np.max(np.linalg.norm(F, axis=1))), np.finfo(float).tiny)
  blocks, m2s = multiply_block.theorem_blocks(n=n, q=q, operand_bound=T, m_rule=m_rule,
                                              ball_bound=B)
  return PolynomialTransformer(d=d, q=q, bound=B, F=F, beta_slots=beta, b=float(b),
                               block_params=_stack_numpy(blocks),
                               m_squared=tuple(m2s), m_rule=m_rule)


def build_polynomial_transformer(poly, *, d: int, bound, degree: int | None = None,
                                 directions: str = 'lattice', num_tokens: int | None = None,
                                 seed: int = 0, m_rule: str = 'product',
                                 exact: bool = False) -> PolynomialTransformer:
  """Theorem 3.5: the Transformer C^q with C^q(x) = Q(x) on ||x|| <= B.

  Args:
    poly: dict exponent tuple (length d, non-negative ints) -> finite real coefficient.
    d: input dimension.
    bound: B > 0, radius of the ball where C^q = Q.
    degree: q (default: Q's degree, at least 1); must be >= Q's degree.
    directions: 'lattice' (default, n = n_q) or 'random' (``num_tokens`` >= n_q).
    num_tokens: n for 'random' directions.
    seed: seed of 'random' directions.
    m_rule: 'product' (default), 'paper_strict' or 'paper' (see multiply_block).
    exact: solve beta in exact rationals (small n only, n <= 120) with small-
      denominator rational unit directions, so ``apply_exact`` reproduces Q exactly.
  """
  clean = ridge.validate_poly(poly, d)
  B = _check_bound(bound)
  q_min = max(1, ridge.degree(clean))
  if degree is None:
    q = q_min
  else:
    if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or degree < q_min:
      raise ValueError(f'degree must be an integer >= {q_min} (the polynomial has degree '
                       f'{ridge.degree(clean)}), got {degree!r}.')
    q = int(degree)
  if m_rule not in multiply_block.M_RULES:
    raise ValueError(f'm_rule={m_rule!r}; allowed: {multiply_block.M_RULES}.')
  if exact and ridge.n_q(d, q) > ridge.EXACT_SOLVE_MAX_TOKENS:
    raise ValueError(f'exact=True needs n_q = C(d-1+q, q) <= {ridge.EXACT_SOLVE_MAX_TOKENS}; '
                     f'got {ridge.n_q(d, q)} for d={d}, q={q}.')
  max_den = ridge.EXACT_DENOMINATOR if exact else ridge.FLOAT_DENOMINATOR
  F_exact, F = ridge.ridge_directions(d=d, q=q, kind=directions, num=num_tokens, seed=seed,
                                      max_denominator=max_den)
  const = clean.get((0,) * d, 0)
  signs = np.asarray([(-1.0) ** k for k in range(1, q + 1)])
  if exact:
    beta_e = ridge.ridge_coefficients_exact(clean, F_exact, q)
    beta_slots_e = [[v * (-1) ** k for k, v in enumerate(row, start=1)] for row in beta_e]
    beta_slots = np.asarray([[float(v) for v in row] for row in beta_slots_e])
    _, report = ridge.ridge_coefficients(clean, F, q)  # conditioning of the same system
    b_exact = Fraction(const)
  else:
    beta, report = ridge.ridge_coefficients(clean, F, q)
    beta_slots = beta * signs[None, :]
    beta_slots_e = None
    b_exact = None
  base = from_params(F=F, beta_slots=beta_slots, b=float(const), bound=B, m_rule=m_rule,
                     normalize=False)
  return dataclasses.replace(base, poly=clean, ridge_report=report, F_exact=F_exact,
                             beta_exact=beta_slots_e, b_exact=b_exact)
