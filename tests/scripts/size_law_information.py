"""The size law's token_times_mean line (d=1, n=3, integer_ids, binary64), as what it is.

    PYTHONPATH=. python tests/scripts/size_law_information.py           # the law, the estimates
    PYTHONPATH=. python tests/scripts/size_law_information.py --build   # the N = 43 network

Prints, from the code (no size-law row is rerun):

  * the law's parts: T1(N) = d_2(f, f_bar) (``f_term``, exact rationals) and N T1(N) for
    growing N, against c_f = lim N T1(N) from the first-order expansion
    c_f^2 = (1/12) E_X sum_j |grad f_j(X)|^2 (f_j = x_j mean_k x_k, X uniform), computed
    here in exact rationals, independently of f_term;
  * the closed-form parameter count P(N) (``integer_ids.predicted_size``) and the slopes
    of log P against log epsilon between consecutive certified rows of the record;
  * with --build (about 15 s, instead of the rest): the epsilon = 0.01 network at N = 43, built and certified by
    ``yun.approximate``, its dense and non-zero parameter counts, the value table's
    V ids and b fraction bits, and V b against the dense count x 53;
  * the two reference estimates at epsilon = 0.01, with their arithmetic.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
from fractions import Fraction

import jax
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
EPSILON = 0.01


def c_f_squared(n: int) -> Fraction:
  """(1/12) E sum_j |grad f_j|^2 for f_j = x_j m, m = mean_k x_k, x uniform on [0, 1]^n:
  df_j/dx_j = m + x_j / n, df_j/dx_k = x_j / n (k != j). With E x = 1/2, E x^2 = 1/3:
  E m^2 = (1/n) E x^2 + (1 - 1/n) (E x)^2, E m x_j = (E x^2 + (n - 1) (E x)^2) / n."""
  ex, ex2 = Fraction(1, 2), Fraction(1, 3)
  em2 = ex2 / n + (1 - Fraction(1, n)) * ex ** 2
  emx = (ex2 + (n - 1) * ex ** 2) / n
  per_j = em2 + 2 * emx / n + ex2 / n ** 2 + (n - 1) * ex2 / n ** 2
  return n * per_j / 12


def rows(d: int):
  data = json.loads((ROOT / 'results/yun/size_law/size_law.json').read_text())
  return sorted((r for r in data['rows'] if r['target'] == 'token_times_mean' and r['d'] == d
                 and r['construction'] == 'integer_ids' and r['arithmetic'] == 'float64'
                 and r['status'] == 'certified'), key=lambda r: -r['epsilon'])


def main(build: bool) -> None:
  if build:
    return built()
  from transformer_ua.studies import size_law
  from transformer_ua.yun.bounds import f_term
  from transformer_ua.yun.single_attention import integer_ids
  d, n = 1, 3
  cf = math.sqrt(c_f_squared(n))
  print(f'c_f = sqrt({c_f_squared(n)}) = {cf:.5f} (first-order expansion, exact)')
  for N in (9, 22, 43, 100):  # pylint: disable=invalid-name
    t1 = f_term.bound('token_times_mean', d=d, n=n, resolution=N, p=2.0).bound
    print(f'N={N}: T1 = {t1:.6f}, N T1 = {N * t1:.5f}, E(N) (grid lower bound) = '
          f'{size_law.grid_error("token_times_mean", d, n, N):.6f}')
  for eps in (0.05, 0.02, 0.01):
    first = next(N for N in range(2, 1000) if f_term.bound(
        'token_times_mean', d=d, n=n, resolution=N, p=2.0).bound <= 0.9 * eps)
    lower = next(N for N in range(2, 1000)
                 if size_law.grid_error('token_times_mean', d, n, N) <= eps)
    print(f'epsilon={eps}: smallest N with T1 <= 0.9 epsilon: {first}; c_f / (0.9 epsilon) '
          f'= {cf / (0.9 * eps):.1f}; grid lower bound N = {lower}')
  size = lambda N: integer_ids.predicted_size(d, n, N, positional=False)
  for N in (38, 43):
    s = size(N)
    print(f'P({N}) = {s["params"]:,} parameters, {s["ids"]:,} ids, '
          f'7 N^2 (N + 1) = {7 * N * N * (N + 1):,}')
  print(f'P(43) / P(38) = {size(43)["params"] / size(38)["params"]:.3f}')
  for dd in (1, 2):
   rs = rows(dd)
   for a, b in zip(rs, rs[1:]):
    s = math.log(b['params'] / a['params']) / math.log(b['total'] / a['total'])
    print(f'd={dd}: slope between epsilon {a["epsilon"]} (N={a["resolution"]}) and {b["epsilon"]} '
          f'(N={b["resolution"]}): {s:.2f}')
  # Reference estimates at epsilon = 0.01.
  k = next(k for k in range(1, 100) if math.sqrt(n * d) / (2 * k * k) <= EPSILON)
  D = d + 2
  weights = (4 * D + 1) + 2 * k * 4 + 4 + D
  print(f'structure-aware: k = {k} pieces per square (sup error 1/(2k^2) = '
        f'{1 / (2 * k * k):.4f}, d_2 <= sqrt(nd)/(2k^2) = {math.sqrt(n * d) / (2 * k * k):.5f});'
        f' weights 4D+1 + 2k*4 + 4 + D = {weights}')
  for N in (38, 43):
    e = size_law.grid_error('token_times_mean', d, n, N)
    slack = math.sqrt(EPSILON ** 2 - e ** 2)
    b = next(b for b in range(1, 60) if math.sqrt(n * d) * 2.0 ** -(b + 1) <= slack)
    V = size(N)['ids']
    print(f'bit-packing: N = {N}, E(N) = {e:.6f}, rounding slack sqrt(eps^2 - E^2) = '
          f'{slack:.6f}, b = {b} (sqrt(nd) 2^-(b+1) = {math.sqrt(n * d) * 2.0 ** -(b + 1):.6f});'
          f' V = {V:,}; V b / 53 = {V * b / 53:,.0f} units, x 7 = {7 * V * b / 53:,.0f} '
          f'weights')


def built() -> None:
  """The epsilon = 0.01 network, built and certified: its parameters and value table."""
  from transformer_ua import yun
  d, n = 1, 3
  res = yun.approximate('token_times_mean', EPSILON, d=d, n=n, construction='integer_ids')
  leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(res.g.params)]
  dense = sum(x.size for x in leaves)
  nonzero = sum(int(np.count_nonzero(x)) for x in leaves)
  V, bits = res.net.num_ids, res.net.value_bits
  print(f'built: N={res.net.resolution}, certified {float(res.certificate.total):.6f}; '
        f'dense {dense:,} (num_params {res.g.num_params():,}), non-zero {nonzero:,} '
        f'({100 * nonzero / dense:.1f}%); V = {V:,} ids, b = {bits}; V b = {V * bits:,} '
        f'bits against dense x 53 = {dense * 53:,}')


if __name__ == '__main__':
  main('--build' in sys.argv[1:])
