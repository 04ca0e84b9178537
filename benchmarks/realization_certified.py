r"""Certified (arb ball) evaluation of Lemma 6's realized network vs plain mpmath.

Both evaluate the same realized standard Transformer g (exact rational params at the
plan's lam, epsilon) at the same working precision (the plan's bits) on the same
cube-interior points, in the same run:

* certified: ``Realized.apply_certified`` (``exact.ball``: arb balls, exact affine
  pieces per active ReLU set, one arb_mat product per feed-forward run) -> mid, rad;
* reference: a plain mpmath evaluation, layer by layer (params converted to mpf once;
  heads with W_O = 0 and feed-forward halves with W_2 = 0, b_2 = 0 skipped; softmax
  with the row max subtracted; ReLU as max(0, .)): what a careful user would write.

Also times ``certify_interiors`` (every cube interior) at the largest configuration.

    python benchmarks/realization_certified.py --configs=1,3,8:1,3,16 --points=4 \
        --output_dir=/tmp/bench

writes ``realization_certified_bench.json`` into ``--output_dir`` (default
runs/benchmarks; ``--output_dir=results/benchmarks`` updates the record; an existing
file is refused before the work unless --overwrite).
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import os
import sys
import time
from fractions import Fraction

from absl import flags
import mpmath
import numpy as np

from transformer_ua import outputs, provenance
from transformer_ua.targets import functions as targets_lib
from transformer_ua.yun import build_approximator
from transformer_ua.yun.bounds import decomposition
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.realization import plan

FLAGS = flags.FLAGS
flags.DEFINE_string('configs', '1,3,8:1,3,16', 'Theorem 2 configurations d,n,N separated by :')
flags.DEFINE_string('target', 'token_times_mean', 'built-in target')
flags.DEFINE_integer('points', 4, 'cube-interior points per configuration')
flags.DEFINE_bool('certify', True, 'also certify every cube interior of the last configuration')
JSON_NAME = 'realization_certified_bench.json'
_OUT = cli.define_output_dir('runs/benchmarks', f'Directory of {JSON_NAME} '
                             '(--output_dir=results/benchmarks: the record).')
cli.define_overwrite()


def mp_params(g):
  """Per-layer mpf params; zero heads / zero feed-forwards dropped."""
  conv = lambda v: mpmath.mpf(Fraction(v).numerator) / Fraction(v).denominator  # noqa: E731
  params = g.exact_params()
  layers = []
  for i, seg in enumerate(g.segments):
    att, ff = params[f'segment_{i}']['attention'], params[f'segment_{i}']['feedforward']
    for layer in range(seg.depth):
      heads = []
      for h in range(att['W_O'].shape[1]):
        if not np.any(att['W_O'][layer, h] != 0):
          continue
        heads.append(tuple(np.vectorize(conv, otypes=[object])(att[k][layer, h])
                           for k in ('W_Q', 'b_Q', 'W_K', 'W_V', 'W_O')))
      f = None
      if np.any(ff['W_2'][layer] != 0) or np.any(ff['b_2'][layer] != 0):
        f = tuple(np.vectorize(conv, otypes=[object])(ff[k][layer])
                  for k in ('W_1', 'b_1', 'W_2', 'b_2'))
      layers.append((heads, f))
  e = np.vectorize(conv, otypes=[object])(params['E']) if g.positional else None
  return layers, e


def mp_forward(layers, e, x):
  """Plain mpmath evaluation of one point [n, d] (call inside mpmath.workprec)."""
  z = np.vectorize(mpmath.mpf, otypes=[object])(np.asarray(x, np.float64))
  if e is not None:
    z = z + e
  n = z.shape[0]
  for heads, f in layers:
    upd = np.zeros_like(z)
    for w_q, b_q, w_k, w_v, w_o in heads:
      q = z @ w_q.T + b_q            # [n, m]
      k = z @ w_k.T
      v = z @ w_v.T
      s = q @ k.T                    # s[j, k]
      for j in range(n):
        top = max(s[j])
        w = [mpmath.exp(t - top) for t in s[j]]
        tot = sum(w)
        mixed = sum(w[kk] / tot * v[kk] for kk in range(n))
        upd[j] = upd[j] + w_o @ mixed
    z = z + upd
    if f is not None:
      w_1, b_1, w_2, b_2 = f
      pre = z @ w_1.T + b_1
      act = np.vectorize(lambda t: t if t > 0 else mpmath.mpf(0), otypes=[object])(pre)
      z = z + act @ w_2.T + b_2
  return z


def bench_config(d, n, N, target, points, log):
  net = build_approximator(target, d=d, n=n, resolution=N)
  t0 = time.perf_counter()
  p = plan.plan_realization(net)
  plan_s = time.perf_counter() - t0
  g = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact')
  x = decomposition.interior_points(np.random.default_rng(0), points, Grid(d, n, N))
  t0 = time.perf_counter()
  g.apply_certified(x[:1])                      # builds the ball network (rounded params)
  build_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  mid, rad = g.apply_certified(x)
  cert_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  layers, e = mp_params(g)
  mp_build_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  with mpmath.workprec(p.bits):
    ref = [mp_forward(layers, e, xb) for xb in x]
  mp_s = time.perf_counter() - t0
  with mpmath.workprec(p.bits):
    # mpmath rounds (no enclosure): allow its own rounding on top of rad
    worst_out = max(float(abs(r - mpmath.mpf(m)) - mpmath.mpf(rr))
                    for rb, mb, rab in zip(ref, mid, rad)
                    for r, m, rr in zip(rb.ravel(), mb.ravel(), rab.ravel()))
  gbar = net.apply(x)
  row = {'d': d, 'n': n, 'resolution': N, 'layers': sum(s.depth for s in g.segments),
         't_r': float(net.g_bar.contextual.t_r), 'bits': p.bits, 'lam': float(p.lam),
         'epsilon': float(p.epsilon), 'points': points, 'plan_s': plan_s,
         'certified_build_s': build_s, 'certified_s': cert_s,
         'certified_per_point_s': cert_s / points, 'mpmath_build_s': mp_build_s,
         'mpmath_s': mp_s, 'mpmath_per_point_s': mp_s / points,
         'speedup_eval': mp_s / cert_s, 'speedup_end_to_end': (mp_s + mp_build_s) /
         (cert_s + build_s), 'max_rad': float(np.max(rad)),
         'max_abs_g_minus_g_bar': float(np.max(np.abs(mid - gbar) + rad)),
         'mpmath_outside_ball_by': worst_out}
  log(f'(d,n,N)=({d},{n},{N}) {row["layers"]} blocks, {p.bits} bits: certified '
      f'{row["certified_per_point_s"]:.3f} s/point (+{build_s:.2f} s build), mpmath '
      f'{row["mpmath_per_point_s"]:.3f} s/point (+{mp_build_s:.2f} s params): '
      f'{row["speedup_eval"]:.1f}x (end to end {row["speedup_end_to_end"]:.1f}x); '
      f'max rad {row["max_rad"]:.2g}, max |g - g_bar| <= {row["max_abs_g_minus_g_bar"]:.2g}')
  return row, g


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  try:
    configs = [tuple(int(v) for v in c.split(',')) for c in FLAGS.configs.split(':')]
  except ValueError:
    configs = None
  if not configs or any(len(c) != 3 for c in configs):
    raise cli.BadInput(f'--configs={FLAGS.configs!r}: expected d,n,N[:d,n,N...], '
                       'e.g. 1,3,8:1,3,16.')
  if FLAGS.target not in targets_lib.BUILTIN_TARGETS:
    raise cli.BadInput(f'--target={FLAGS.target!r}; allowed: '
                       f'{sorted(targets_lib.BUILTIN_TARGETS)}.')
  if FLAGS.points < 1:
    raise cli.BadInput(f'--points={FLAGS.points}; it must be >= 1.')
  cli.output_dir(_OUT.value, writes=(JSON_NAME,))  # before the work
  prov = provenance.record(' '.join(['python'] + sys.argv))
  rows, g = [], None
  for d, n, N in configs:
    row, g = bench_config(d, n, N, FLAGS.target, FLAGS.points, print)
    rows.append(row)
  cert = None
  if FLAGS.certify and g is not None:
    cert = g.certify_interiors()
    print(f'certify_interiors at {configs[-1]}: {cert["cubes"]} cubes, max |g - g_bar| <= '
          f'{cert["max_abs_error"]:.3g} (certified: {cert["certified"]}), {cert["bits"]} bits, '
          f'{cert["seconds"]:.1f} s with {cert["workers"]} workers')
  out = {'provenance': prov, 'rows': rows, 'certify_interiors': cert,
         'reference': 'plain mpmath (mpf, same bits), zero heads/FF skipped'}
  path = os.path.join(_OUT.value, JSON_NAME)
  outputs.atomic_json(path, out, indent=1, default=str)
  print(f'wrote {path}')


if __name__ == '__main__':
  cli.run(main)
