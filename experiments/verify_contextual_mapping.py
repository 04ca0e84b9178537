r"""Verifies Yun et al.'s Theorem 2 construction exactly on a whole grid.

    python experiments/verify_contextual_mapping.py --d=2 --n=3 --resolution=2 \
        --grid=full --output_dir=/tmp/cm

Builds g_q (Lemma 7), g_c (Lemma 8) and g_v (Lemma 9) for (d, n, N = resolution),
plans the exact arithmetic (int64 or limbs) from proven bounds, and checks on every
point of the grid (``--grid=full``: all (N+1)^(nd) ordered points of G+_delta;
``--grid=multiset``: one point per permutation class) Properties 8.1-8.4, Lemma 10's
bounds and one-to-one claim, permutation equivariance (full), exact tie averages,
exact point/category counts, Lemma 9 end to end for a random permutation-equivariant
target (compact g_v on every point, literal g_v on a sample), and Lemma 7 on random
real inputs and on an exact rational grid. Prints a summary, writes the JSON to
--output_dir as ``contextual_mapping_N{resolution}_d{d}_n{n}_{grid}.json``
(``--contextual=one_layer``: ``d{d}_n{n}_N{resolution}.json``), and exits with status 0
only if every property holds (1 if one fails, 2 on bad input).

Speed and long runs. By default g_c runs on column ids (``--kernel=sweep``: the rank-one
identity, one ``lax.fori_loop`` over the sweep in the narrowest proven integer type) and
the full grid in blocks decoded in-kernel, one per core (one XLA host device per core);
``--kernel=fast`` / ``core`` run the literal layers instead (same integers, tested).
Compiled XLA programs are kept in JAX's persistent compilation cache
(``--compilation_cache``, default ``~/.cache/transformer_ua/jax_compilation_cache``;
empty turns it off), so a later run of the same configuration skips compiling (about
4 s at N=3, d=2, n=6). ``--chunk_size`` is capped at the grid size and at a memory budget, and runs whose
global checks would hold more than ``--max_bytes`` are refused up front, so peak RSS
stays under 2 GB. Long full-grid runs print progress with an ETA and save the
completed blocks and partial counts to ``--state_file`` (default: the JSON's path
+ ``.state``); ``--resume`` continues from it:

    python experiments/verify_contextual_mapping.py --d=1 --n=19 --resolution=2 \
        --nolemma9 --output_dir=/tmp/n19                   # ... interrupted, then
    python experiments/verify_contextual_mapping.py --d=1 --n=19 --resolution=2 \
        --nolemma9 --output_dir=/tmp/n19 --resume

Scaling out. The grid pass shards each chunk of grid indices over every device JAX
sees (``--num_devices`` limits it) with ``jax.sharding``; violation counts are summed
across devices and equal the one-device counts exactly. Several hosts: start the same
command on each, with process 0's address as coordinator:

    python experiments/verify_contextual_mapping.py --d=2 --n=6 --resolution=3 \
        --coordinator_address=host0:1234 --num_processes=2 --process_id=0   # host 0
    ... --coordinator_address=host0:1234 --num_processes=2 --process_id=1   # host 1

(``jax.distributed.initialize``); the mesh then spans all hosts' devices, and only
process 0 prints and writes into ``--output_dir``. To try it on one CPU machine, force
several host devices: ``XLA_FLAGS=--xla_force_host_platform_device_count=8``.
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import os
import sys
from fractions import Fraction

# One XLA host device per core, before JAX starts: the full-grid pass runs one block
# per device (XLA:CPU runs one computation on one core).
if 'xla_force_host_platform_device_count' not in os.environ.get('XLA_FLAGS', ''):
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' --xla_force_host_platform_'
                             f'device_count={os.cpu_count() or 1}').strip()

from absl import app
from absl import flags

from transformer_ua import outputs, parallel, provenance
from transformer_ua.verify import one_layer as verify_one_layer
from transformer_ua.verify import theorem2
from transformer_ua.yun.stages import gc_kernels

FLAGS = flags.FLAGS
flags.DEFINE_string('d', '1', 'Embedding dimension d: an integer >= 1.')
flags.DEFINE_string('n', '2', 'Sequence length n: an integer >= 2.')
flags.DEFINE_string('resolution', '2', 'Grid resolution N = 1/delta: an integer >= 2.')
flags.DEFINE_string('grid', 'full', "'full' (every ordered point of G+) or 'multiset' "
                    '(one point per permutation class).')
flags.DEFINE_string('arithmetic', 'auto', "'auto', 'int64' (refused when too narrow), "
                    "'limbs' or 'limbs:K[:w]'.")
flags.DEFINE_string('chunk_size', str(1 << 20), 'Most grid points per jit call; capped at the grid '
                    'size and at a memory budget (see verify.contextual_mapping.chunk_cap).')
flags.DEFINE_string('kernel', 'sweep', "'sweep': g_c on column ids (a max, a min, two "
                    'compares, a select and an add per layer; full grids in resumable '
                    "blocks); the literal layers as the cross-check: 'fast' (W_Q = W_K = W_V, "
                    "one projection) or 'core' (the core layers / generic limb layers). "
                    'Same integers.')
flags.DEFINE_string('state_file', '', "Full grid, kernel 'sweep': save completed blocks and "
                    "partial counts here (default: the JSON's path + '.state' when "
                    '--output_dir is set).')
flags.DEFINE_bool('resume', False, 'Continue a full-grid run from its state file.')
flags.DEFINE_string('lemma7_samples', '20000', 'Random real inputs for Lemma 7.')
flags.DEFINE_bool('lemma9', True, 'Also check Lemma 9 end to end (random target).')
flags.DEFINE_string('lemma9_literal_points', '256',
                    'Grid points run through the literal value-mapping network.')
flags.DEFINE_string('target_seed', '0', 'Seed of the random Lemma 9 target and samples.')
flags.DEFINE_string('max_points', str(theorem2.MAX_POINTS),
                    'Refuse grids with more points than this.')
flags.DEFINE_string('max_bytes', str(theorem2.MAX_BYTES),
                    'Refuse runs whose global checks would hold more bytes than this.')
flags.DEFINE_string('float_points', '0', 'Also run the paper-valued float64/float32 network on '
                    'this many class representatives and report where it departs from the '
                    'exact integers (observation, not a verified property).')
cli.define_output_dir('', 'Write the result JSON into this directory (named after the '
                      'run, see above); empty: write nothing.')
cli.define_overwrite()
flags.DEFINE_string('compilation_cache', cli.DEFAULT_COMPILATION_CACHE,
                    "JAX's persistent compilation cache: a later run of the same "
                    'configuration skips compiling its XLA programs. Empty: off.')
flags.DEFINE_bool('progress', True, 'Show progress bars.')
flags.DEFINE_string('num_devices', '0', 'Shard the grid over this many devices (0: all).')
flags.DEFINE_string('coordinator_address', '', 'Multi-host: host:port of process 0 '
                    '(jax.distributed.initialize); empty for one host.')
flags.DEFINE_string('num_processes', '1', 'Multi-host: number of processes.')
flags.DEFINE_string('process_id', '0', 'Multi-host: this process, in [0, num_processes).')

flags.DEFINE_string('contextual', 'paper', "'paper': Lemma 8's N^d + 1 hardmax layers (the "
                    "checks above); 'one_layer': one softmax attention layer "
                    '(yun.single_attention.one_layer), certified in arb ball arithmetic on every context '
                    '(verify.one_layer); takes --d, --n, --resolution, --lam, --id_bits, '
                    '--mpmath_samples and --output_dir.')
flags.DEFINE_string('lam', '', "--contextual=one_layer: softmax scale ('' = the planned "
                    "one; a rational such as 1/1024 or 2^-10; 0 = the plain mean; 'search' "
                    '= the power of two with the largest certified gap).')
flags.DEFINE_string('id_bits', '', "--contextual=one_layer: arb precision of the id "
                    "enclosures ('' = the planned one).")
flags.DEFINE_string('mpmath_samples', '64', '--contextual=one_layer: ids re-evaluated by '
                    'mpmath (plus the closest pair).')

GRIDS = ('full', 'multiset')
CONTEXTUALS = ('paper', 'one_layer')
#: Exit status on bad input (a one-line message on stderr, no traceback).
USAGE_ERROR = cli.USAGE_ERROR


#: A flag value outside the allowed set (one line, exit USAGE_ERROR).
BadInput = cli.BadInput


def _int_flag(name: str, low: int) -> int:
  raw = getattr(FLAGS, name)
  try:
    value = int(raw)
  except (TypeError, ValueError):
    value = None
  if value is None or str(value) != str(raw).strip().lstrip('+') or value < low:
    raise BadInput(f'--{name}={raw}: must be an integer >= {low}.')
  return value


def _json_path(name: str) -> str:
  """``--output_dir/name``, checked before the work ('' when --output_dir is empty)."""
  if not FLAGS.output_dir:
    return ''
  cli.output_dir(FLAGS.output_dir, writes=(name,))
  return os.path.join(FLAGS.output_dir, name)


def main(argv):
  if len(argv) > 1:
    raise BadInput(f'unexpected arguments: {" ".join(argv[1:])}')
  if FLAGS.contextual not in CONTEXTUALS:
    raise BadInput(f'--contextual={FLAGS.contextual}: allowed values are '
                   f'{" and ".join(CONTEXTUALS)}.')
  if FLAGS.contextual == 'one_layer':
    run_one_layer()
    return
  num_processes = _int_flag('num_processes', 1)
  process_id = _int_flag('process_id', 0)
  try:  # before anything touches JAX's devices
    parallel.initialize_distributed(FLAGS.coordinator_address or None, num_processes,
                                    process_id)
  except ValueError as e:
    raise BadInput(str(e)) from None
  num_devices = _int_flag('num_devices', 0) or None
  d = _int_flag('d', 1)
  n = _int_flag('n', 2)
  resolution = _int_flag('resolution', 2)
  if FLAGS.kernel not in gc_kernels.KERNELS:
    kernels = sorted(gc_kernels.KERNELS, reverse=True)  # sweep, fast, core
    raise BadInput(f'--kernel={FLAGS.kernel}: allowed values are '
                   f'{", ".join(kernels[:-1])} and {kernels[-1]}.')
  if FLAGS.resume and not (FLAGS.state_file or FLAGS.output_dir):
    raise BadInput('--resume needs --state_file or --output_dir (its state file).')
  if FLAGS.grid not in GRIDS:
    raise BadInput(f'--grid={FLAGS.grid}: allowed values are {" and ".join(GRIDS)}.')
  json_path = _json_path(f'contextual_mapping_N{resolution}_d{d}_n{n}_{FLAGS.grid}.json')
  state_file = FLAGS.state_file or (json_path + '.state' if json_path else '')
  if state_file:
    cli.output_file(state_file, '--state_file', overwrite=True if FLAGS.resume else None)
    cli.resumable(state_file, cli.own_command(add=['--resume']))
  cli.compilation_cache(FLAGS.compilation_cache)
  kwargs = dict(chunk_size=_int_flag('chunk_size', 1), lemma7_samples=_int_flag('lemma7_samples', 1),
                lemma9_literal_points=_int_flag('lemma9_literal_points', 1),
                target_seed=_int_flag('target_seed', 0), max_points=_int_flag('max_points', 1),
                max_bytes=_int_flag('max_bytes', 1),
                float_points=_int_flag('float_points', 0), num_devices=num_devices,
                state_path=state_file or None, resume=FLAGS.resume)
  try:
    result = theorem2.verify_theorem2(d=d, n=n, resolution=resolution, grid=FLAGS.grid,
                                      arithmetic=FLAGS.arithmetic, lemma9=FLAGS.lemma9,
                                      progress=FLAGS.progress, kernel=FLAGS.kernel, **kwargs)
  except ValueError as e:
    raise BadInput(str(e)) from None
  if process_id:  # every process computed the same result; process 0 reports it
    sys.exit(0 if result['all_hold'] else 1)
  print(f"d={d} n={n} N={resolution} grid={FLAGS.grid}: {result['grid_points']:,} points, "
        f"arithmetic {result['arithmetic_detail']}, kernel {result['kernel']}, "
        f"{result['devices']} device(s), "
        f"{result['seconds']} s "
        f"(grid check {result['grid_check_seconds']} s)")
  print('  seconds by phase: ' + ', '.join(f'{k} {v}' for k, v in
                                           result['phase_seconds'].items()))
  width = max(len(k) for k in result['violations'])
  for prop, count in result['violations'].items():
    print(f"  {prop:<{width}}  {'ok' if count == 0 else f'{count} VIOLATIONS'}")
  if 'float' in result:
    for name in ('float64', 'float32'):
      print(f"  paper-valued {name} network on {result['float']['points']:,} classes: "
            f"{result['float'][name]}")
  print('ALL PROPERTIES HOLD' if result['all_hold'] else 'SOME PROPERTY FAILED')
  if json_path:
    outputs.atomic_json(json_path, result, indent=2, default=str)
  sys.exit(0 if result['all_hold'] else 1)


def _lam_flag():
  raw = FLAGS.lam.strip()
  if not raw:
    return None
  if raw == 'search':
    return raw
  try:
    lam = (Fraction(2) ** int(raw[2:]) if raw.startswith('2^') else Fraction(raw))
  except (ValueError, ZeroDivisionError):
    lam = None
  if lam is None or lam < 0:
    raise BadInput(f'--lam={FLAGS.lam}: must be a rational >= 0 (e.g. 1/1024 or 2^-10), '
                   "'search', or empty for the planned lam.")
  return lam


def run_one_layer():
  """--contextual=one_layer: the certified whole-grid check of ``verify.one_layer``."""
  d, n, resolution = _int_flag('d', 1), _int_flag('n', 2), _int_flag('resolution', 2)
  lam = _lam_flag()
  bits = _int_flag('id_bits', 16) if FLAGS.id_bits.strip() else None
  samples = _int_flag('mpmath_samples', 0)
  json_path = _json_path(f'd{d}_n{n}_N{resolution}.json')
  prov = provenance.record()
  try:
    r = verify_one_layer.verify_one_layer(d=d, n=n, resolution=resolution, lam=lam,
                                          bits=bits, samples=samples)
  except ValueError as e:
    raise BadInput(str(e)) from None
  print(f"one softmax attention layer, d={d} n={n} N={resolution}: {r['contexts']:,} "
        f"contexts, {r['ids']:,} (context, token) ids ({r['ids_with_repeated_tokens']:,} "
        f"with repeated tokens), lam={r['lam']:.6g}, {r['bits']} bits, {r['seconds']:.2f} s "
        f"(enclosures {r['enclosure_seconds']:.2f} s)")
  print(f"  certified min id gap {r['certified_min_id_gap']:.4g} (proved bound "
        f"{r['proved_min_id_gap']:.4g}); mean gap {r['certified_min_gap_mean']:.4g} >= "
        f"required {r['required_gap_mean']:.4g}: "
        + ('ok' if not r['violations'] else
           f"{r['violations']} VIOLATIONS ({r['overlaps']} overlapping)"))
  m = r['mpmath']
  print(f"  mpmath ({m['precision_bits']} bits) on {m['rows']} ids: "
        + ('all inside the enclosures' if not m['outside'] else f"{m['outside']} OUTSIDE"))
  f = r['float64']
  print(f"  float64 brute-force sort: {f['pairs_checked']:,} resolvable adjacent pairs, "
        f"{f['disagreements']} disagreements, {f['pairs_below_float64_resolution']:,} below "
        'float64 resolution')
  print('ALL PROPERTIES HOLD' if r['all_hold'] else 'SOME PROPERTY FAILED')
  if json_path:
    outputs.atomic_json(json_path, {'provenance': prov, **r}, indent=2, default=str)
  sys.exit(0 if r['all_hold'] else 1)


if __name__ == '__main__':
  cli.run(main)
