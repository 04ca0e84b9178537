r"""B_n codes: M integers whose n-multiset sums are pairwise distinct (Bose and Chowla 1962).

The integer-id network (``integer_ids``) gives token j the code phi(m_j) of its cell and
sums the codes over the tokens with one attention head. The sum identifies the multiset of
cells exactly when phi is a B_n code:

    sum_{j} phi(m_j) = sum_{j} phi(m'_j)   =>   {m_1, .., m_n} = {m'_1, .., m'_n}   (multisets)

Bose-Chowla: let q be a prime, f a primitive polynomial of degree n over GF(q) and theta
= x mod f a generator of GF(q^n)^*. The q exponents

    A = { a in [0, q^n - 1) : theta^a - theta in GF(q) }        (theta^a = theta + c, c in GF(q))

have pairwise distinct n-multiset sums modulo q^n - 1. A sum of n exponents is the
exponent of prod_i (theta + c_i) = theta^n + e_1 theta^(n-1) + .. + e_n (e_k the elementary
symmetric functions of the c_i). theta^n is not in the basis 1, theta, .., theta^(n-1):
reduce it by f(x) = x^n + f_(n-1) x^(n-1) + .. + f_0, theta^n = -(f_(n-1) theta^(n-1) + ..
+ f_0), so the product has the coordinates e_k - f_(n-k) in that basis. f is fixed, so the
element determines (e_1, .., e_n), hence prod (X + c_i) and the multiset of the c_i. Distinct modulo q^n - 1 means
distinct as integers. The code takes the M smallest elements of A (M <= q, q the
smallest prime >= M) shifted to start at 0: codes below q^n - 1, sums below n (q^n - 1).

Nothing downstream trusts the theorem: the network's builder checks that its ids are
distinct (``integer_ids``), and the tests check every n-multiset sum for small q and n.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

#: Largest q^n enumerated (the exponents of GF(q^n)^* are walked one by one).
MAX_FIELD = 50_000_000


def is_prime(q: int) -> bool:
  if q < 2:
    return False
  return all(q % p for p in range(2, math.isqrt(q) + 1))


def next_prime(m: int) -> int:
  """The smallest prime >= m (>= 2)."""
  q = max(2, m)
  while not is_prime(q):
    q += 1
  return q


def _prime_factors(x: int) -> list:
  out, p = [], 2
  while p * p <= x:
    if x % p == 0:
      out.append(p)
      while x % p == 0:
        x //= p
    p += 1
  if x > 1:
    out.append(x)
  return out


def _mulmod(a: tuple, b: tuple, f: tuple, q: int) -> tuple:
  """a b mod f over GF(q); polynomials as coefficient tuples, lowest degree first; f monic
  of degree n given by its n low coefficients (x^n = -sum f_i x^i)."""
  n = len(f)
  prod = [0] * (2 * n - 1)
  for i, ai in enumerate(a):
    if ai:
      for j, bj in enumerate(b):
        prod[i + j] = (prod[i + j] + ai * bj) % q
  for k in range(2 * n - 2, n - 1, -1):   # reduce x^k = x^(k-n) x^n
    c = prod[k]
    if c:
      prod[k] = 0
      for i in range(n):
        prod[k - n + i] = (prod[k - n + i] - c * f[i]) % q
  return tuple(prod[:n])


def _powmod(base: tuple, e: int, f: tuple, q: int) -> tuple:
  n = len(f)
  result = (1,) + (0,) * (n - 1)
  while e:
    if e & 1:
      result = _mulmod(result, base, f, q)
    base = _mulmod(base, base, f, q)
    e >>= 1
  return result


def primitive_polynomial(q: int, n: int) -> tuple:
  """The low coefficients (f_0, .., f_{n-1}) of the first monic f = x^n + sum f_i x^i (in
  lexicographic order of the coefficients) for which x has order q^n - 1 mod f; such an f is
  irreducible (the powers of x are then q^n - 1 distinct units, so GF(q)[x]/f is a field)."""
  order = q ** n - 1
  factors = _prime_factors(order)
  x = (0, 1) + (0,) * (n - 2)
  one = (1,) + (0,) * (n - 1)
  for f in itertools.product(range(q), repeat=n):
    if f[0] == 0:
      continue
    if _powmod(x, order, f, q) != one:
      continue
    if all(_powmod(x, order // r, f, q) != one for r in factors):
      return f
  raise ValueError(f'no primitive polynomial of degree {n} over GF({q}) (q must be prime).')


@functools.lru_cache(maxsize=16)
def bose_chowla(q: int, n: int) -> tuple:
  """The q Bose-Chowla exponents (module docstring), sorted. q prime, n >= 2."""
  if not is_prime(q) or n < 2:
    raise ValueError(f'bose_chowla needs a prime q and n >= 2, got q={q}, n={n}.')
  if q ** n > MAX_FIELD:
    raise ValueError(f'a B_{n} code from GF({q}^{n}) walks {q ** n:,} field elements; at most '
                     f'{MAX_FIELD:,}.')
  f = primitive_polynomial(q, n)
  power = [1] + [0] * (n - 1)       # theta^0
  found = []
  for a in range(q ** n - 1):
    if n >= 2 and power[1] == 1 and not any(power[2:]):
      found.append(a)               # theta^a = theta + power[0]
    top = power[-1]                 # multiply by theta: shift, then reduce x^n
    power = [0] + power[:-1]
    if top:
      power = [(c - top * fi) % q for c, fi in zip(power, f)]
  if len(found) != q:
    raise AssertionError(f'Bose-Chowla found {len(found)} exponents, expected {q}.')
  return tuple(found)


def code(cells: int, n: int) -> np.ndarray:
  """phi [cells] int64: a B_n code for ``cells`` symbols (the smallest ``cells`` Bose-Chowla
  exponents of the smallest prime q >= cells, shifted to start at 0); increasing."""
  if cells < 1 or n < 2:
    raise ValueError(f'a B_n code needs cells >= 1 and n >= 2, got {cells}, {n}.')
  q = next_prime(cells)
  a = np.asarray(bose_chowla(q, n)[:cells], np.int64)
  return a - a[0]


def sums_distinct(phi, n: int) -> bool:
  """Checks, by enumeration, that every n-multiset of ``phi`` has its own sum."""
  phi = [int(v) for v in phi]
  seen = set()
  for combo in itertools.combinations_with_replacement(range(len(phi)), n):
    s = sum(phi[i] for i in combo)
    if s in seen:
      return False
    seen.add(s)
  return True
