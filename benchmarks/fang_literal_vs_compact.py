r"""Fang et al.'s C^q at f2 size: the literal network vs its compact equivalent.

    python benchmarks/fang_literal_vs_compact.py [--tokens=2002,4368] [--points=4] \
        [--compact_points=50000] [--rounds=3] [--output_dir=runs/benchmarks]

Both paths evaluate the same model (Q = f2 of Section 5, d = 10, q = 5, B = 6.5) in
float64 on the same inputs: n = 2002 uses the theory's lattice directions, n = 4368
(the paper's token count) random directions with the minimum-norm ridge solve.

* literal: ``PolynomialTransformer.apply`` -- F(x) then q = 5 Lemma 3.1 blocks through
  ``modules.Network`` (one head of size n + 1, dense [n, n+q+2] tokens, an [n, n] score
  matrix per input: ~5 (3 n^2 D + n^2 (n+1)) multiply-adds per input, D = n + q + 2);
* compact: ``apply_compact`` -- t = x F^T, the powers by the same recurrence, beta . slots.

Reported: seconds per input (median over rounds after a warm-up/compile call),
the speed ratio, and the largest |literal - compact| / max(1, |compact|) on the
shared inputs. Writes ``fang_literal_vs_compact.json`` into ``--output_dir`` (default
runs/benchmarks) and appends one line to the log ``benchmarks.md`` there
(``--output_dir=results/benchmarks`` updates the record; an existing JSON is refused
before the work unless --overwrite).
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import os
import statistics
import time

from absl import flags
import numpy as np

from transformer_ua import fang, outputs, provenance
from transformer_ua.fang import regression

FLAGS = flags.FLAGS
flags.DEFINE_list('tokens', ['2002', '4368'], 'Token counts n (2002 = n_q lattice).')
flags.DEFINE_integer('points', 4, 'Inputs timed through the literal network per round.')
flags.DEFINE_integer('compact_points', 50000, 'Inputs timed through the compact path.')
flags.DEFINE_integer('rounds', 3, 'Timed rounds (median reported).')
JSON_NAME = 'fang_literal_vs_compact.json'
LOG_NAME = provenance.BENCHMARK_LOG   # the log every benchmark appends to
_OUT = cli.define_output_dir('runs/benchmarks', f'Directory of {JSON_NAME} and the log '
                             f'{LOG_NAME} (appended; --output_dir=results/benchmarks: the '
                             'record).')
cli.define_overwrite()

BOUND = 6.5  # covers Section 5's f2 data (largest norm 6.39)


def timed(fn, rounds, warm_up=True):
  if warm_up:
    fn()  # compile
  ts = []
  for _ in range(rounds):
    t0 = time.perf_counter()
    fn()
    ts.append(time.perf_counter() - t0)
  return statistics.median(ts)


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  try:
    tokens = [int(t) for t in FLAGS.tokens]
  except ValueError:
    raise cli.BadInput(f'--tokens must be integers, got {FLAGS.tokens}.') from None
  if not tokens or any(t < 2002 for t in tokens):
    raise cli.BadInput('--tokens: each n must be >= n_q = 2002 for d = 10, q = 5.')
  for name in ('points', 'compact_points', 'rounds'):
    if getattr(FLAGS, name) < 1:
      raise cli.BadInput(f'--{name} must be >= 1.')
  cli.output_dir(_OUT.value, writes=(JSON_NAME,))
  prov = provenance.record()
  rng = np.random.default_rng(0)
  x = rng.normal(size=(FLAGS.compact_points, 10))
  x *= BOUND * rng.uniform(0, 1, size=(len(x), 1)) ** 0.1 / np.linalg.norm(x, axis=1,
                                                                           keepdims=True)
  x[0] *= BOUND / np.linalg.norm(x[0])  # one boundary input
  xl = x[:FLAGS.points]
  rows = []
  for n in tokens:
    t0 = time.perf_counter()
    kw = {} if n == 2002 else dict(directions='random', num_tokens=n, seed=0)
    model = fang.build_polynomial_transformer(regression.F2, d=10, bound=BOUND, **kw)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    lit = model.apply(xl)
    first_call = time.perf_counter() - t0
    # The first call compiled (and ran) the literal path; time the rounds only.
    t_lit = timed(lambda: model.apply(xl), FLAGS.rounds, warm_up=False) / len(xl)
    t_comp_same = timed(lambda: model.apply_compact(xl), FLAGS.rounds) / len(xl)
    t_comp = timed(lambda: model.apply_compact(x), FLAGS.rounds) / len(x)
    comp = model.apply_compact(xl)
    rows.append({'tokens': n, 'build_s': build, 'literal_first_call_s': first_call,
                 'literal_s_per_input': t_lit,
                 'compact_s_per_input_same_inputs': t_comp_same,
                 'compact_s_per_input_batch': t_comp, 'compact_batch': len(x),
                 'speedup_compact_batch_over_literal': t_lit / t_comp,
                 'max_rel_literal_vs_compact': float(np.max(
                     np.abs(lit - comp) / np.maximum(1.0, np.abs(comp)))),
                 'literal_inputs': len(xl)})
    print(rows[-1], flush=True)
    del model
  result = {'benchmark': 'fang literal vs compact (f2 size, float64)', 'rows': rows,
            'provenance': prov}
  outputs.atomic_json(os.path.join(_OUT.value, JSON_NAME), result, indent=1)
  summary = ('Fang C^q at f2 size (d=10, q=5, float64): ' + '; '.join(
      f"n={r['tokens']}: literal {r['literal_s_per_input']:.3g} s/input, compact "
      f"{r['compact_s_per_input_batch'] * 1e6:.3g} us/input (batch {r['compact_batch']}), "
      f"{r['speedup_compact_batch_over_literal']:.3g}x, max rel. diff "
      f"{r['max_rel_literal_vs_compact']:.2g}" for r in rows))
  line = provenance.append_benchmark_line(os.path.join(_OUT.value, LOG_NAME), summary, prov)
  print(line, end='')


if __name__ == '__main__':
  cli.run(main)
