r"""Exact whole-grid check of the tie-complete contextual mapping (``ties='complete'``).

    python experiments/verify_ties.py --d=1 --n=4 --resolution=5 [--grid=multiset|full]
        [--arithmetic=auto] [--output_dir=runs/verify_ties]

Builds ``yun.stages.contextual_ties`` and runs ``verify.contextual_ties.verify`` (one-to-one on
every multiset with repeats, interval, Category 3 killed, equivariance on full grids,
exact ties, bits within plan). Prints one summary line; writes the JSON to --output_dir
as ``ties_contextual_N{resolution}_d{d}_n{n}_{grid}.json`` (never into results/ unless
asked). Exit status 1 when a property fails, 2 on bad input.
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import os
import sys

from absl import flags

from transformer_ua import outputs
from transformer_ua.verify import contextual_ties as verify_ties
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import contextual_ties
from transformer_ua.yun import enumeration

_D = flags.DEFINE_integer('d', 1, 'embedding dimension (>= 1).')
_N_TOKENS = flags.DEFINE_integer('n', 3, 'tokens (>= 2).')
_RES = flags.DEFINE_integer('resolution', 4, 'N = 1/delta (>= 2).')
_GRID = flags.DEFINE_string('grid', 'multiset', "'multiset' or 'full'.")
_ARITH = flags.DEFINE_string('arithmetic', 'auto', "'auto', 'int64', 'limbs', 'limbs:K[:w]'.")
_OUT = cli.define_output_dir('runs/verify_ties', 'Directory of the JSON (named after '
                             'the run: ties_contextual_N{resolution}_d{d}_n{n}_{grid}.json).')
cli.define_overwrite()


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  if _GRID.value not in enumeration.GRIDS:
    raise cli.BadInput(f'--grid={_GRID.value}; allowed: {", ".join(enumeration.GRIDS)}.')
  try:
    cm = contextual_ties.build(Grid(_D.value, _N_TOKENS.value, _RES.value),
                               arithmetic=_ARITH.value)
  except ValueError as e:
    raise cli.BadInput(str(e)) from None
  name = f'ties_contextual_N{_RES.value}_d{_D.value}_n{_N_TOKENS.value}_{_GRID.value}.json'
  cli.output_dir(_OUT.value, writes=(name,))  # before the work
  try:
    res = verify_ties.verify(cm, grid=_GRID.value)
  except ValueError as e:
    raise cli.BadInput(str(e)) from None
  outputs.atomic_json(os.path.join(_OUT.value, name), res, indent=1, default=str)
  bad = {k: v for k, v in res['violations'].items() if v}
  print(f'd={res["d"]} n={res["n"]} N={res["resolution"]} {res["grid"]}: '
        f'{res["grid_points"]} points, {res["distinct_ids"]} distinct ids '
        f'(expected {res["expected_ids"]}), {res["arithmetic"]}, observed '
        f'{res["max_abs_bits"]} bits, {res["num_layers"]} layers, {res["seconds"]} s: '
        + ('all properties hold' if not bad else f'VIOLATIONS {bad}'))
  sys.exit(0 if not bad else 1)


if __name__ == '__main__':
  cli.run(main)
