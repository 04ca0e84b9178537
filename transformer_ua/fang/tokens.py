"""Fang et al. 2022, Section 2.1: the input map F(x) and the token layout.

Shape glossary (token-major, as everywhere in ``transformer_ua``):

    d  input dimension          n  tokens (ridge directions, rows of F)
    q  storage slots = number of multiplication blocks = polynomial degree
    D  = n + q + 2, the token width

The paper writes ``F(x) = [z_1, ..., z_n] in R^{(n+q+2) x n}`` (tokens are columns);
here ``tokens[..., i, :] = z_i``. With ``t = F x`` (``F in R^{n x d}``, rows xi_i):

    z_i = [ t_i , e_i , 0_q , 1 ]        t_i = <xi_i, x>
          index 0    1..n   n+1..n+q   n+q+1        (0-based)

The paper's 1-based positions are ours + 1: ``t`` at 1, ``e_i`` at 2..n+1, the q
storage slots at n+2..n+q+1, the constant 1 at n+q+2. Slot ``j`` (1-based, 1..q)
lives at index ``n + j``.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class Layout:
  """Token positions for ``n`` tokens and ``q`` storage slots (0-based indices)."""

  n: int
  q: int

  def __post_init__(self):
    for name in ('n', 'q'):
      v = getattr(self, name)
      if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
        raise ValueError(f'Layout.{name} must be a positive integer, got {v!r}.')

  @property
  def width(self) -> int:
    """D = n + q + 2."""
    return self.n + self.q + 2

  @property
  def t(self) -> int:
    """Index of the ridge feature t_i."""
    return 0

  def onehot(self, i: int) -> int:
    """Index of e_i's entry i (0-based token i)."""
    return 1 + i

  def slot(self, j: int) -> int:
    """Index of storage slot j, 1-based j in 1..q (the paper's position n+1+j)."""
    if not 1 <= j <= self.q:
      raise ValueError(f'storage slot {j} out of range; allowed 1..{self.q}.')
    return self.n + j

  @property
  def const(self) -> int:
    """Index of the constant 1."""
    return self.n + self.q + 1


def input_map(F, x, *, q: int, xp=jnp):
  """F(x): ``[..., d] -> [..., n, n+q+2]`` tokens ``z_i = [t_i, e_i, 0_q, 1]``.

  Args:
    F: [n, d], rows xi_i (the paper requires ||xi_i|| <= 1).
    x: [..., d].
    q: number of storage slots.
    xp: array namespace (``jax.numpy``; ``numpy`` for object arrays of Fractions).
  Returns:
    tokens [..., n, n + q + 2] in the dtype of ``t = x F^T``.
  """
  n = F.shape[0]
  t = xp.einsum('...d,nd->...n', x, F)  # [..., n]
  lay = Layout(n, q)
  dt = t.dtype  # object arrays (Fractions) get Python ints 0/1, exact in arithmetic
  batch = t.shape[:-1]
  eye_b = xp.broadcast_to(xp.eye(n, dtype=dt), batch + (n, n))
  zeros = xp.zeros(batch + (n, q), dt)
  ones = xp.ones(batch + (n, 1), dt)
  tokens = xp.concatenate([t[..., None], eye_b, zeros, ones], axis=-1)
  assert tokens.shape[-1] == lay.width
  return tokens
