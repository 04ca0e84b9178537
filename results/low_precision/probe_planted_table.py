"""The runtime probe's verdicts on the planted accumulators of
tests/test_runtime_probe_accumulators.py, as a Markdown table.

  PYTHONPATH=$PWD python results/low_precision/probe_planted_table.py > X.md
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'tests'))
from test_runtime_probe_accumulators import Blocked, Sequential  # noqa: E402

from transformer_ua.certify.runtime_probe import check_runtime  # noqa: E402
from transformer_ua.certify.runtimes import NumpyRuntime  # noqa: E402

NAMES = ('float32', 'tf32', 'bfloat16', 'tf32-a100', 'tf32-h100')
RUNTIMES = [NumpyRuntime(), Sequential(24, 'truncate'), Sequential(22, 'nearest'),
            Sequential(20, 'nearest'), Sequential(20, 'nearest', nonzero_only=True),
            Blocked(8, -1), Blocked(4, 1), Blocked(8, 2), Blocked(8, 1)]

print('| planted runtime | operand bits | accumulator sums / bound (float32, tf32, '
      'tf32-h100) | hardware match (a100, h100) | ok for |')
print('|---|---|---|---|---|')
for rt in RUNTIMES:
  r = check_runtime(rt, arithmetic='float32', samples=2000)
  acc = ', '.join(f'{r.accumulator_ratios[k]:.3g}' for k in ('float32', 'tf32', 'tf32-h100'))
  hw = ', '.join(f'{100 * r.hardware_match[k]:.1f}%' for k in ('tf32-a100', 'tf32-h100'))
  ok = ', '.join(k for k in NAMES if r.ok_for(k)) or 'none'
  print(f'| {rt.name} | {r.operand_bits} ({r.operand_rounding}) | {acc} | {hw} | {ok} |',
        flush=True)
