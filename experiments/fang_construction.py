r"""Fang et al. 2022, Sections 3 and 6 measured: M per block, ridge conditioning, float64
accuracy of the literal network at the experiments' sizes, error vs B, exact mode,
and Corollary 3.7 (sup error vs q) (``fang.measure``, ``reports.fang_construction``).

    python experiments/fang_construction.py [--f2_literal_points=16] [--skip_corollary]
    python experiments/fang_construction.py --certify_only --output_dir=results/fang --overwrite

Writes fang_construction.md (+ .json) and fang_corollary37.png to --output_dir
(default runs/fang_construction; ``--output_dir=results/fang --overwrite`` updates the
record). ``--certify_only`` adds the certified float64 sup (``fang.float_bound``) to the
record already there, without re-measuring it (``reports.fang_construction.
write_certificates``).
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import os

from absl import app, flags

from transformer_ua import provenance
from transformer_ua.reports import fang_construction

_F2_POINTS = flags.DEFINE_integer('f2_literal_points', 16,
                                  'Inputs run through the f2-size literal network (~n^3 each).')
_SKIP_COR = flags.DEFINE_bool('skip_corollary', False, 'Skip Corollary 3.7.')
_CERTIFY = flags.DEFINE_bool('certify_only', False, 'Add the float64 certificates to the '
                             'record in --output_dir (its JSON) instead of measuring.')
_RESULTS = cli.define_output_dir('runs/fang_construction', 'Output directory (results/fang: '
                                 'the record, with --overwrite).')
cli.define_overwrite()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if _F2_POINTS.value < 0:
    raise app.UsageError('--f2_literal_points must be >= 0.')
  results_dir = cli.output_dir(os.path.join(ROOT, _RESULTS.value),
                               writes=fang_construction.OUTPUTS)
  if _CERTIFY.value:
    try:
      fang_construction.write_certificates(results_dir, prov=provenance.record())
    except ValueError as e:
      raise cli.BadInput(str(e)) from e
    return
  fang_construction.write(results_dir, f2_literal_points=_F2_POINTS.value,
                          corollary=not _SKIP_COR.value, prov=provenance.record())


if __name__ == '__main__':
  cli.run(main)
