r"""The certified size-vs-epsilon law of every construction (``studies.size_law``).

    python experiments/size_law.py [--targets=token_times_mean:1:3,...]
        [--constructions=paper,...] [--epsilons=0.5,0.2,...] [--row_minutes=30]
        [--parallel=1] [--mc_points=1000] [--output_dir=runs/size_law] [--report_only]

Each row (target, construction, epsilon) is a certificate d_p(f, g) <= epsilon from
``yun.search.approximate`` with an independent stratified Monte Carlo; rows are kept one
JSON each under --output_dir/rows/, so the same command resumes an interrupted study.
Writes size_law.md, size_law.json and size_law.png into --output_dir.
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

from absl import flags

from transformer_ua.studies import size_law

FLAGS = flags.FLAGS
flags.DEFINE_string('targets', ','.join(f'{t}:{d}:{n}' for t, d, n in size_law.TARGETS),
                    'name:d:n, comma-separated')
flags.DEFINE_list('constructions', None, 'construction names (default: every one that applies)')
flags.DEFINE_list('epsilons', [f'{e:g}' for e in size_law.EPSILONS], 'epsilons to certify')
flags.DEFINE_float('row_minutes', 30.0, 'wall-clock limit of one row', lower_bound=0.1)
flags.DEFINE_integer('parallel', 1, 'rows run at once', lower_bound=1)
flags.DEFINE_integer('mc_points', 1000, 'Monte Carlo points per stratum', lower_bound=2)
flags.DEFINE_bool('report_only', False, 'write the report from the rows on disk; run none')
cli.define_output_dir('runs/size_law', 'Directory of rows/, size_law.md, .json and .png.')
cli.define_overwrite()


def main(argv):
  del argv
  try:
    eps = [float(e) for e in FLAGS.epsilons]
    specs = size_law.default_specs(size_law.parse_targets(FLAGS.targets), FLAGS.constructions,
                                   eps)
  except ValueError as e:
    cli.fail(f'{e}')
  out = cli.output_dir(FLAGS.output_dir, writes=(size_law.MARKDOWN, size_law.JSON,
                                                 size_law.FIGURE), rebuilds=True)
  size_law.study(specs, out, row_minutes=FLAGS.row_minutes, parallel=FLAGS.parallel,
                 mc_points=FLAGS.mc_points, report_only=FLAGS.report_only)


if __name__ == '__main__':
  cli.run(main)
