r"""One call that verifies Lemmas 7-10 of Yun et al.'s Theorem 2 construction.

``verify_theorem2(Grid(d, n, N), enumeration=...)`` builds g_q, g_c, g_v, plans the
exact arithmetic, refuses configurations that would not fit the ``max_points`` /
``max_bytes`` budgets (``ValueError``), and returns one result dict:

    d, n, resolution, grid, grid_points, violations {property: count}, arithmetic,
    bits_required, seconds, lemma7 {...}, lemma9 {...}, provenance, all_hold

Lemma 7's checks (small host and JAX work on g_q) run in a second thread beside the
build and the whole-grid pass, whose XLA programs leave the Python interpreter idle
while they compute; their ``phase_seconds`` entry is their own duration, overlapped.

``verify.entry.verify`` calls it for the ``Paper`` variant
(``experiments/verify_contextual_mapping.py`` is the command-line front end).
"""

from __future__ import annotations

import concurrent.futures
import math
import time

from transformer_ua import provenance
from transformer_ua.exact import planner
from transformer_ua.verify import (contextual_mapping, floating, quantization, sweep_kernel,
                                   timing, value_mapping)
from transformer_ua.yun import enumeration as enumeration_lib
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import contextual, value
from transformer_ua.yun.stages import contextual_params
from transformer_ua.yun.variants.paper import Paper

#: Default refusal thresholds: points enumerated and bytes held for global checks (the
#: class table of a full grid among them). With the process (~0.5 GB) and one chunk's
#: working set (capped at 0.5 GiB, see ``contextual_mapping.chunk_cap`` /
#: ``sweep_kernel.BLOCK_BUDGET``) peak RSS stays near 3 GB (2.53 GB measured at N=2,
#: d=3, n=7, whose class table is 718 MB).
MAX_POINTS = 2 * 10 ** 9
MAX_BYTES = 2 ** 30
#: Budget (layers x points) of the literal value-mapping check.
LITERAL_BUDGET = 2 * 10 ** 8


def _fmt(count: int) -> str:
  return f'{count:,}' if count < 10 ** 15 else f'{float(count):.3e}'


def plan_resources(grid: Grid, enumeration: str, arithmetic: str = 'auto',
                   lemma9: bool = True, kernel: str = 'sweep') -> dict:
  """Points, bytes and the arithmetic a run on ``grid`` (a ``yun.grid.Grid``) needs,
  before anything runs."""
  d, n, N = grid.d, grid.n, grid.N
  if enumeration not in enumeration_lib.GRIDS:
    raise ValueError(f'enumeration={enumeration!r}; allowed: '
                     f'{", ".join(enumeration_lib.GRIDS)}.')
  bound = contextual_params.contextual_mapping_bound(grid)
  arith = planner.plan(bound, arithmetic)
  words = 1 if arith.kind == 'int64' else arith.num_limbs
  multisets = enumeration_lib.grid_size(grid, 'multiset')
  classes = math.comb(N ** d, n)
  points = (enumeration_lib.grid_size(grid, enumeration)
            + (multisets if enumeration == 'full' else 0))
  # cat-1 values + l~_n on the host (x2 for sorting), the class table in full mode
  # (kernel 'sweep' holds it only within sweep_kernel.TABLE_BUDGET, else it recomputes
  # each point's representative), and the value mapping's per-class arrays.
  table = sweep_kernel.table_bytes(grid, words) if enumeration == 'full' else 0
  if kernel == 'sweep' and table > sweep_kernel.TABLE_BUDGET:
    table = 0
  nbytes = 8 * words * (3 * classes * (n + 1) + (classes * n * (3 * d + 2) if lemma9 else 0))
  nbytes += table
  return {'points': points, 'bytes': nbytes, 'arithmetic': arith, 'classes': classes,
          'multisets': multisets}


def _timed(fn, *args, **kwargs):
  """(fn(*args, **kwargs), its seconds)."""
  t = time.time()
  return fn(*args, **kwargs), time.time() - t


def _grid_checks(grid: Grid, phases: dict, *, enumeration: str, arithmetic: str,
                 chunk_size: int, lemma9: bool, target_seed: int, progress: bool,
                 kernel: str, num_devices, state_path, resume) -> tuple:
  """g_c built and verified on the grid (Lemmas 8, 10), with g_v (Lemma 9) when ``lemma9``:
  (g_c, the grid check's result, the value mapping or None, the Lemma 9 record); ``phases``
  gets the seconds of the build and of the grid check (and of its compiling, included)."""
  tp = time.time()
  cm = contextual.ContextualMapping.build(grid, arithmetic=arithmetic)
  phases['build_g_c'] = time.time() - tp
  vm = None
  lemma9_result = {}
  if lemma9:
    tb = time.time()
    targets = value.random_targets(Paper(grid), seed=target_seed)
    vm = value.build_value_mapping(cm, targets, variant=Paper(grid), denominator=2,
                                   chunk_size=min(chunk_size, 1 << 14), kernel=kernel)
    lemma9_result = {'target': f'random integers in [-8, 8] / 2 per class (seed {target_seed}), '
                               'extended by permutation equivariance',
                     'num_layers': vm.depth(), 'num_params': vm.num_params(),
                     'bump_layers': Paper(grid).num_bump_layers(),
                     'build_seconds': round(time.time() - tb, 3)}
  with timing.CompileClock(this_thread=True) as clock:
    result = contextual_mapping.verify_contextual_mapping(cm, enumeration=enumeration,
                                                          chunk_size=chunk_size,
                                                          progress=progress, value_mapping=vm,
                                                          kernel=kernel,
                                                          num_devices=num_devices,
                                                          state_path=state_path, resume=resume)
  phases['grid_check'] = result['seconds']
  phases['grid_check_compiling'] = clock.seconds()['total']
  return cm, result, vm, lemma9_result


def verify_theorem2(grid: Grid, *, enumeration: str = 'multiset',
                    arithmetic: str = 'auto', chunk_size: int = contextual_mapping.DEFAULT_CHUNK,
                    lemma7_samples: int = 20000, lemma9: bool = True,
                    lemma9_literal_points: int = 256, target_seed: int = 0,
                    max_points: int = MAX_POINTS, max_bytes: int = MAX_BYTES,
                    progress: bool = True, kernel: str = 'sweep',
                    float_points: int = 0, num_devices: int | None = None,
                    state_path: str | None = None, resume: bool = False) -> dict:
  """Builds and verifies g_q (Lemma 7), g_c (Lemmas 8, 10), g_v (Lemma 9) on ``grid`` (a
  ``yun.grid.Grid``), exactly, on the ``enumeration`` ('full' | 'multiset') of G+.

  The whole-grid pass is sharded over ``num_devices`` devices (default: all; see
  ``contextual_mapping.verify_contextual_mapping``); the other checks are small and
  run on the default device.

  Raises:
    ValueError: bad configuration, an arithmetic too narrow for the planned bits, or a
      grid beyond ``max_points`` / ``max_bytes``.
  """
  t0 = time.time()
  prov = provenance.record()  # at the start: the revision that runs
  d, n, resolution = grid.d, grid.n, grid.N
  res = plan_resources(grid, enumeration, arithmetic, lemma9, kernel)
  if res['points'] > max_points:
    raise ValueError(f'grid={enumeration} for d={d}, n={n}, resolution={resolution} has '
                     f'{_fmt(res["points"])} points to evaluate; at most {max_points:,} allowed '
                     f'(use {"--grid=multiset, " if enumeration == "full" else ""}smaller '
                     'd/n/resolution, or raise --max_points).')
  if res['bytes'] > max_bytes:
    raise ValueError(f'this run would hold about {res["bytes"] / 2 ** 30:.1f} GiB for its '
                     f'global checks; at most {max_bytes / 2 ** 30:.1f} GiB allowed (smaller '
                     'configuration, --nolemma9, or raise --max_bytes).')
  phases = {}  # seconds of each part of the run
  with concurrent.futures.ThreadPoolExecutor(1) as lemma7_thread:
    lemma7_run = lemma7_thread.submit(_timed, quantization.verify_quantization, grid,
                                      samples=lemma7_samples, seed=target_seed)
    cm, result, vm, lemma9_result = _grid_checks(
        grid, phases, enumeration=enumeration, arithmetic=arithmetic, chunk_size=chunk_size,
        lemma9=lemma9, target_seed=target_seed, progress=progress, kernel=kernel,
        num_devices=num_devices, state_path=state_path, resume=resume)
    lemma7, phases['lemma7'] = lemma7_run.result()
  violations = dict(result['violations'])
  violations['lemma7_real_inputs'] = lemma7['lemma7_real_inputs']
  violations['lemma7_exact_rational'] = lemma7['lemma7_exact_rational']
  lemma7.pop('provenance')
  tp = time.time()
  if vm is not None:
    budget_points = max(1, LITERAL_BUDGET // vm.depth())
    count = min(lemma9_literal_points, budget_points)
    pts = value_mapping.sample_points(grid, count, seed=target_seed)
    lit = value_mapping.verify_literal_value_mapping(vm, pts)
    lit.pop('provenance')
    violations['lemma9_literal_equals_compact'] = lit['lemma9_literal_equals_compact']
    lemma9_result.update(lit)
  phases['lemma9_literal'] = time.time() - tp
  if vm is not None:
    phases['build_g_v'] = lemma9_result['build_seconds']
  result['grid_check_seconds'] = result['seconds']
  if float_points:
    result['float'] = floating.float_breakdown(cm, max_points=float_points)
  result.update({
      'violations': violations,
      'all_hold': not any(violations.values()),
      'lemma7': lemma7, 'lemma9': lemma9_result,
      'layer_counts': {'quantization': lemma7['num_layers'], 'contextual': cm.depth(),
                       'value': Paper(grid).value_layers()},
      'seconds': round(time.time() - t0, 3),
      'phase_seconds': {k: round(v, 3) for k, v in phases.items()},
      'provenance': prov,
  })
  return result
