r"""Verifies Yun et al.'s Theorem 2 construction exactly on a whole grid.

    python experiments/verify_contextual_mapping.py --d=2 --n=3 --resolution=2 \
        --grid=full --output_dir=/tmp/cm

Builds g_q (Lemma 7), g_c (Lemma 8) and g_v (Lemma 9) for (d, n, N = resolution), plans
the exact arithmetic (int64 or limbs) from proven bounds, and checks on every point of
the grid (``--grid=full``: all (N+1)^(nd) ordered points of G+_delta; ``multiset``: one
point per permutation class) Properties 8.1-8.4, Lemma 10's bounds and one-to-one
claim, permutation equivariance (full), exact tie averages, exact point/category
counts, Lemma 9 end to end for a random permutation-equivariant target (compact g_v on
every point, literal g_v on a sample), and Lemma 7 on random real inputs and on an exact
rational grid (``verify.theorem2``); ``--contextual=one_layer`` certifies one softmax
attention layer instead (``verify.one_layer``). The variant is decided here once;
``verify.entry.verify_and_record`` runs its check, prints a summary and writes the JSON
to --output_dir as ``contextual_mapping_N{resolution}_d{d}_n{n}_{grid}.json``
(one_layer: ``d{d}_n{n}_N{resolution}.json``); its last line is the run's time split
(import, compile, checks, write). Exit status 0 only if every property holds (1 if one
fails, 2 on bad input).

Long runs (kernels, cache, memory, --state_file, --resume, devices): docs/performance.md.
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly
from transformer_ua import binary_interrupts

import os
import sys

cli.host_device_per_core()   # before JAX starts: the full-grid pass runs a block on each

from absl import flags

from transformer_ua import parallel
from transformer_ua.verify import entry, theorem2, timing
from transformer_ua.yun.stages import gc_kernels
from transformer_ua.yun.variants import registry

FLAGS = flags.FLAGS
for _name, _default, _help in (
    ('d', '1', 'Embedding dimension d: an integer >= 1.'),
    ('n', '2', 'Sequence length n: an integer >= 2.'),
    ('resolution', '2', 'Grid resolution N = 1/delta: an integer >= 2.'),
    ('contextual', 'paper', "'paper': the checks above; 'one_layer': one softmax attention "
     'layer, certified in arb balls on every context (takes --d, --n, --resolution, --lam, '
     '--id_bits, --mpmath_samples and --output_dir).'),
    ('grid', 'full', "'full' (every ordered point of G+) or 'multiset' (one per class)."),
    ('arithmetic', 'auto', "'auto', 'int64' (refused when too narrow), 'limbs' or 'limbs:K[:w]'."),
    ('chunk_size', str(1 << 20), 'Most points per jit call (capped: chunk_cap).'),
    ('kernel', 'sweep', "'sweep': g_c on column ids (resumable blocks); the literal layers, "
     "the cross-check: 'fast' (W_Q = W_K = W_V) or 'core'. Same integers."),
    ('state_file', '', "Full grid, 'sweep': state file (default: JSON path + '.state')."),
    ('lemma7_samples', '20000', 'Random real inputs for Lemma 7.'),
    ('lemma9_literal_points', '256', 'Grid points run through the literal value-mapping network.'),
    ('target_seed', '0', 'Seed of the random Lemma 9 target and samples.'),
    ('max_points', str(theorem2.MAX_POINTS), 'Refuse grids with more points than this.'),
    ('max_bytes', str(theorem2.MAX_BYTES), 'Refuse runs whose global checks hold more bytes.'),
    ('float_points', '0', 'Classes run by the float64/float32 network too (where it departs).'),
    ('compilation_cache', cli.DEFAULT_COMPILATION_CACHE, "JAX's compilation cache; empty: off."),
    ('num_devices', '0', 'Shard the grid over this many devices (0: all).'),
    ('coordinator_address', '', 'Multi-host: host:port of process 0; empty for one host.'),
    ('num_processes', '1', 'Multi-host: number of processes.'),
    ('process_id', '0', 'Multi-host: this process, in [0, num_processes).'),
    ('lam', '', "--contextual=one_layer: softmax scale ('': planned; a rational, e.g. 1/1024 "
     "or 2^-10; 0: the plain mean; 'search': the power of two of largest certified gap)."),
    ('id_bits', '', "--contextual=one_layer: arb precision of the ids ('': the planned one)."),
    ('mpmath_samples', '64', '--contextual=one_layer: ids re-checked by mpmath.')):
  flags.DEFINE_string(_name, _default, _help)
flags.DEFINE_bool('resume', False, 'Continue a full-grid run from its state file.')
flags.DEFINE_bool('lemma9', True, 'Also check Lemma 9 end to end (random target).')
flags.DEFINE_bool('progress', True, 'Show progress bars.')
cli.define_output_dir('', 'Directory of the result JSON (named after the run); empty: none.')
cli.define_overwrite()


def _int_flag(name: str, low: int) -> int:
  return cli.integer(name, getattr(FLAGS, name), low)


def _json_path(variant, enumeration_: str) -> str:
  """--output_dir/<the check's record name>, checked before the work ('' when unset)."""
  name = entry.kind(variant).record_name(enumeration_)
  return os.path.join(cli.output_dir(FLAGS.output_dir, writes=(name,)), name) \
      if FLAGS.output_dir else ''


def _paper(variant) -> tuple:
  """(enumeration, JSON path, options) of --contextual=paper: the whole grid, Lemmas 7-10."""
  try:  # before anything touches JAX's devices
    parallel.initialize_distributed(FLAGS.coordinator_address or None,
                                    _int_flag('num_processes', 1), _int_flag('process_id', 0))
  except ValueError as e:
    raise cli.BadInput(str(e)) from None
  if FLAGS.kernel not in gc_kernels.KERNELS:
    *rest, last = sorted(gc_kernels.KERNELS, reverse=True)  # sweep, fast, core
    raise cli.BadInput(f'--kernel={FLAGS.kernel}: allowed values are {", ".join(rest)} and {last}.')
  if FLAGS.resume and not (FLAGS.state_file or FLAGS.output_dir):
    raise cli.BadInput('--resume needs --state_file or --output_dir (its state file).')
  if FLAGS.grid not in (allowed := entry.kind(variant).enumerations):
    raise cli.BadInput(f'--grid={FLAGS.grid}: allowed values are {" and ".join(allowed)}.')
  json_path = _json_path(variant, FLAGS.grid)
  state_file = FLAGS.state_file or (json_path + '.state' if json_path else '')
  if state_file:
    cli.output_file(state_file, '--state_file', overwrite=True if FLAGS.resume else None)
    binary_interrupts.resumable(state_file,
                                binary_interrupts.own_command(add=['--resume']))
  cli.compilation_cache(FLAGS.compilation_cache)
  ints = {k: _int_flag(k, low) for k, low in (
      ('chunk_size', 1), ('lemma7_samples', 1), ('lemma9_literal_points', 1),
      ('target_seed', 0), ('max_points', 1), ('max_bytes', 1), ('float_points', 0))}
  return FLAGS.grid, json_path, dict(
      ints, arithmetic=FLAGS.arithmetic, lemma9=FLAGS.lemma9, progress=FLAGS.progress,
      kernel=FLAGS.kernel, num_devices=_int_flag('num_devices', 0) or None,
      state_path=state_file or None, resume=FLAGS.resume)


def _one_layer(variant) -> tuple:
  """(enumeration, JSON path, options) of --contextual=one_layer: every context, certified."""
  from transformer_ua.verify import one_layer  # pylint: disable=import-outside-toplevel
  try:
    lam = one_layer.parse_lam(FLAGS.lam)
  except ValueError as e:
    raise cli.BadInput(f'--{e}') from None
  bits = _int_flag('id_bits', 16) if FLAGS.id_bits.strip() else None
  return 'multiset', _json_path(variant, 'multiset'), dict(
      lam=lam, bits=bits, samples=_int_flag('mpmath_samples', 0))


def main(argv):
  import_seconds = timing.process_seconds()
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {" ".join(argv[1:])}')
  options = {'paper': _paper, 'one_layer': _one_layer}.get(FLAGS.contextual)
  if options is None:
    raise cli.BadInput(f'--contextual={FLAGS.contextual}: allowed values are paper and one_layer.')
  variant = registry.choose(_int_flag('d', 1), _int_flag('n', 2), _int_flag('resolution', 2),
                            contextual=FLAGS.contextual)
  enumeration_, json_path, kwargs = options(variant)
  try:  # every process computes the same result; process 0 reports it
    result = entry.verify_and_record(variant, enumeration=enumeration_, json_path=json_path,
                                     report=not _int_flag('process_id', 0),
                                     import_seconds=import_seconds, **kwargs)
  except ValueError as e:
    raise cli.BadInput(str(e)) from None
  status = 0 if result['all_hold'] else 1
  if _int_flag('num_processes', 1) > 1:  # jax.distributed shuts down at exit
    sys.exit(status)
  cli.exit_now(status)   # its JSON and state files are written and renamed


if __name__ == '__main__':
  cli.run(main)
