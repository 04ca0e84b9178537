"""Run with XLA_FLAGS=--xla_force_host_platform_device_count=8 (see test_parallel.py).

    python tests/scripts/sharded_verify_check.py full|broken|limbs

Prints one JSON line: the real whole-grid verifier (``verify_contextual_mapping``)
sharded over all 8 devices vs the same call on 1 device, for one case:

* ``full``:    a whole full grid (N=3, d=1, n=3: 64 points), int64, Lemma 9 included,
  plus the sharding of one chunk's per-point outputs (must be split over 8 devices);
* ``broken``:  the same grid on a deliberately broken construction (one sweep layer's
  output zeroed, as in test_verify_contextual_mapping.py): violations are non-zero;
* ``limbs``:   a multiset grid in limb arithmetic (N=3, d=1, n=3).

Chunk sizes are small and not multiples of 8: several chunks, padding in the last.
"""

import json
import sys

import jax
import numpy as np

from transformer_ua import parallel
from transformer_ua.verify import contextual_mapping as vc
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import contextual, value
from transformer_ua.yun.variants.paper import Paper

KEYS = ('violations', 'grid_points', 'categories', 'multiset_categories', 'multiset_points',
        'max_abs_output', 'category_1_classes')


def _broken():
  cm = contextual.ContextualMapping.build(Grid(1, 3, 3))
  with jax.enable_x64(True):
    att = dict(cm.exact_params['segment_0']['attention'])
    att['W_O'] = att['W_O'].at[1].set(0)
    broken = dict(cm.exact_params, segment_0={'attention': att})
  return type(cm)(**{**cm.__dict__, 'exact_params': broken})


def both(cm, **kw):
  out = {}
  for devices in (8, 1):
    r = vc.verify_contextual_mapping(cm, progress=False, num_devices=devices, **kw)
    out[devices] = {k: r.get(k) for k in KEYS}
    out[devices]['devices'] = r['devices']
    out[devices]['chunk_size'] = r['chunk_size']
  return {'sharded': out[8], 'single': out[1]}


def chunk_sharding():
  cm = contextual.ContextualMapping.build(Grid(1, 3, 3))
  mesh = parallel.make_mesh()
  with jax.enable_x64(True):
    multiset_chunk, _ = vc._make_chunk_fns(cm, 64, mesh=mesh)  # pylint: disable=protected-access
    params = parallel.replicate(cm.exact_params, mesh)
    counts, _, payload = multiset_chunk(params, np.int64(0), np.int64(20))
    q = payload[0]
    return {'q_devices': len(q.sharding.device_set),
            'q_fully_replicated': bool(q.sharding.is_fully_replicated),
            'q_shard_rows': sorted({s.data.shape[0] for s in q.addressable_shards}),
            'points': int(counts['points'])}


if __name__ == '__main__':
  case = sys.argv[1]
  out = {'devices': len(jax.devices()), 'case': case}
  if case == 'full':
    cm = contextual.ContextualMapping.build(Grid(1, 3, 3))
    paper = Paper(Grid(1, 3, 3))
    vm = value.build_value_mapping(cm, value.random_targets(paper, seed=0), variant=paper,
                                   denominator=2)
    out.update(both(cm, enumeration='full', chunk_size=20, value_mapping=vm))
    out['chunk'] = chunk_sharding()
  elif case == 'broken':
    out.update(both(_broken(), enumeration='full', chunk_size=20))
  elif case == 'limbs':
    cm = contextual.ContextualMapping.build(Grid(1, 3, 3), arithmetic='limbs')
    out.update(both(cm, enumeration='multiset', chunk_size=7))
  else:
    raise SystemExit(f'unknown case {case!r}; expected full, broken or limbs.')
  print(json.dumps(out))
