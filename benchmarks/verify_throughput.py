r"""Grid points per second: the JAX whole-grid verifier vs a NumPy implementation.

    python benchmarks/verify_throughput.py --output_json=results/verify_throughput.json

For each configuration, in the same process:

* ``jax``   -- the verifier's jit-compiled chunk function on full-grid chunks
  (decode on device, g_c in exact int64 or limbs, Properties 8.1/8.3/8.4, Lemma 10
  bounds, equivariance lookup), timed after compilation, with both kernels:
  ``core`` (the core's attention layers / generic limb layers: the same algorithm as
  the NumPy baseline) and ``fast`` (the shared-projection identity, the verifier's
  default);
* ``numpy`` -- a straightforward vectorized NumPy evaluation of the *same layers*
  (``reference.numpy_apply_segment``: int64 where the planner allows it, Python-int
  ``object`` arrays otherwise) on decoded points, forward pass only (so the baseline
  does strictly less work).

Reports points/s for both and the speed-up, writes JSON, and appends one line per
configuration to runs/benchmarks/benchmarks.md (command, revision, machine;
``--markdown=results/benchmarks.md`` updates the record).
"""

import json
import os
import sys
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import cli, provenance, yun
from transformer_ua.exact import reference
from transformer_ua.verify import contextual_mapping as vc
from transformer_ua.yun import grids

FLAGS = flags.FLAGS
flags.DEFINE_string('configs', '3,2,6;4,2,5;8,2,4',
                    'Semicolon-separated N,d,n triples.')
flags.DEFINE_integer('chunk_size', 32768, 'Points per jit call.')
flags.DEFINE_integer('jax_chunks', 6, 'Timed JAX chunks per configuration.')
flags.DEFINE_float('numpy_seconds', 20.0, 'Approximate NumPy time budget per configuration.')
flags.DEFINE_string('output_json', '', 'Write results here.')
flags.DEFINE_string('markdown', 'runs/benchmarks/benchmarks.md',
                    'Append a line per configuration (results/benchmarks.md for the record).')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _numpy_params(cm):
  """The exact scaled params as NumPy: int64 where the plan allows it, else objects."""
  dtype = 'int64' if cm.arithmetic.kind == 'int64' else 'object'
  _, exact = yun.contextual_mapping_params(d=cm.d, n=cm.n, resolution=cm.resolution,
                                           dtype=dtype)
  return jax.tree_util.tree_map(np.asarray, exact)


def _numpy_forward(cm, params, k):
  """The same layers in NumPy (``reference.numpy_apply_segment``), then u^T."""
  dtype = np.int64 if cm.arithmetic.kind == 'int64' else object
  S, N = cm.scale, cm.resolution
  x = np.where(k < 0, -S * cm.out_of_range, k * (S // N)).astype(dtype)
  y, _, _ = reference.numpy_apply_segment(cm.segments[0], params['segment_0'], x)
  y, _, _ = reference.numpy_apply_segment(cm.segments[1], params['segment_1'], y)
  return y @ np.asarray(cm.u, dtype=dtype)


def _time_kernel(cm, kernel, chunk, jax_chunks, total, table, rng):
  _, full_chunk = vc._make_chunk_fns(cm, chunk, None, kernel)  # pylint: disable=protected-access
  t0 = time.time()
  jax.block_until_ready(full_chunk(cm.exact_params, jnp.int64(0), jnp.int64(total), table))
  compile_s = time.time() - t0
  starts = rng.integers(0, max(1, total - chunk), size=jax_chunks)
  t0 = time.time()
  for s in starts:
    jax.block_until_ready(full_chunk(cm.exact_params, jnp.int64(int(s)), jnp.int64(total), table))
  return jax_chunks * chunk / (time.time() - t0), compile_s


def bench(N, d, n, chunk, jax_chunks, numpy_seconds):
  cm = yun.build_contextual_mapping(d=d, n=n, resolution=N)
  total = grids.grid_size(d, n, N, 'full')
  m = grids.grid_size(d, n, N, 'multiset')
  codec = grids.make_codec(d, n, N)
  with jax.enable_x64(True):
    # Equivariance table: q of a prefix of the representatives suffices for timing
    # (the lookup cost does not depend on the values).
    reps = codec['decode_multiset'](jnp.arange(min(m, 4 * chunk)))
    table = cm.forward(np.asarray(reps))['ids']
    table = jnp.concatenate([table] * (-(-m // table.shape[0])))[:m]
    rng = np.random.default_rng(0)
    rates = {}
    for kernel in ('fast', 'core'):
      rates[kernel] = _time_kernel(cm, kernel, chunk, jax_chunks, total, table, rng)
    jax_rate, compile_s = rates['fast']
    # NumPy: grow the batch until the time budget is used.
    np_params = _numpy_params(cm)
    batch, np_points, np_s = 256, 0, 0.0
    while np_s < numpy_seconds:
      idx = jnp.asarray(rng.integers(0, total, size=batch))
      k = np.asarray(codec['decode_full'](idx))
      t0 = time.time()
      q_np = _numpy_forward(cm, np_params, k)
      np_s += time.time() - t0
      np_points += batch
      batch = min(batch * 2, 1 << 16)
    q_jax = cm.ops.to_python(cm.forward(k)['ids'])
    agree = bool(np.all(q_np.astype(object) == q_jax))
  np_rate = np_points / np_s
  return {'N': N, 'd': d, 'n': n, 'grid_points': total, 'arithmetic': cm.arithmetic.describe(),
          'numpy_dtype': 'int64' if cm.arithmetic.kind == 'int64' else 'object (Python ints)',
          'jax_points_per_s': round(jax_rate), 'numpy_points_per_s': round(np_rate),
          'speedup': round(jax_rate / np_rate, 1), 'jax_compile_s': round(compile_s, 2),
          'jax_core_kernel_points_per_s': round(rates['core'][0]),
          'speedup_core_kernel': round(rates['core'][0] / np_rate, 1),
          'jax_timed_points': jax_chunks * chunk, 'numpy_timed_points': np_points,
          'outputs_agree': agree}


def _markdown_path() -> str:
  return os.path.join(ROOT, FLAGS.markdown) if not os.path.isabs(FLAGS.markdown) else FLAGS.markdown


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if FLAGS.output_json:
    cli.output_file(FLAGS.output_json, '--output_json')
  if FLAGS.markdown:
    cli.output_file(_markdown_path(), '--markdown')
  try:
    configs = [tuple(int(v) for v in t.split(',')) for t in FLAGS.configs.split(';')]
  except ValueError:
    configs = []
  if not configs or any(len(c) != 3 for c in configs):
    raise app.UsageError(f'--configs={FLAGS.configs}: expected N,d,n triples separated by ";".')
  prov = provenance.record()
  rows = []
  for N, d, n in configs:
    row = bench(N, d, n, FLAGS.chunk_size, FLAGS.jax_chunks, FLAGS.numpy_seconds)
    rows.append(row)
    print(json.dumps(row))
  result = {'benchmark': 'verify_throughput', 'rows': rows, 'provenance': prov}
  if FLAGS.output_json:
    with open(FLAGS.output_json, 'w') as f:
      json.dump(result, f, indent=2)
  if FLAGS.markdown:
    path = _markdown_path()
    for r in rows:
      provenance.append_benchmark_line(path, (
          f"verify_throughput N={r['N']} d={r['d']} n={r['n']} ({r['arithmetic']}): "
          f"JAX verifier {r['jax_points_per_s']:,} points/s (fast kernel; core kernel "
          f"{r['jax_core_kernel_points_per_s']:,}) vs NumPy ({r['numpy_dtype']}) "
          f"{r['numpy_points_per_s']:,} points/s = {r['speedup']}x "
          f"({r['speedup_core_kernel']}x with the core kernel); outputs agree: "
          f"{r['outputs_agree']}"), prov)
  sys.exit(0 if all(r['outputs_agree'] for r in rows) else 1)


if __name__ == '__main__':
  cli.run(main)
