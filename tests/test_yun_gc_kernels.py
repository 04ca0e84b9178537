"""yun.stages.gc_kernels: one registry of g_c kernels, each returning a GcResult."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import contextual_ties, gc_kernels
from transformer_ua.yun.stages import contextual


def test_registry_holds_every_kernel_once_the_package_is_imported():
  code = ('from transformer_ua.yun.stages import gc_kernels, contextual; '
          'print(sorted(gc_kernels.KERNELS))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                       check=True).stdout
  assert out.strip() == str(sorted(['core', 'fast', 'sweep']))


@pytest.mark.parametrize('arithmetic', ['int64', 'limbs'])
def test_every_kernel_gives_the_same_result(arithmetic):
  cm = contextual.ContextualMapping.build(Grid(1, 3, 3), arithmetic=arithmetic)
  k = np.stack(np.meshgrid(*[np.arange(-1, 3)] * 3, indexing='ij'), -1).reshape(-1, 3, 1)
  ref = gc_kernels.evaluate(cm, k)
  assert isinstance(ref, gc_kernels.GcResult)
  assert ref.ids.shape[:2] == (len(k), 3) and ref.z.shape[:3] == (len(k), 3, 1)
  for name in gc_kernels.KERNELS:
    out = gc_kernels.evaluate(cm, k, name)
    for field in ('sweep_ids', 'ids', 'z'):
      np.testing.assert_array_equal(np.asarray(getattr(out, field)),
                                    np.asarray(getattr(ref, field)), err_msg=name)
    assert int(out.inexact) == 0
  assert set(cm.forward(k)) == {'sweep_ids', 'ids', 'z', 'inexact'}


def test_result_is_a_pytree_and_reads_like_the_old_dict():
  cm = contextual.ContextualMapping.build(Grid(1, 2, 2))
  with jax.enable_x64(True):
    out = jax.jit(gc_kernels.kernel_fn(cm, 'fast'))(cm.exact_params,
                                                     jnp.asarray([[[0], [1]]]))
  np.testing.assert_array_equal(out['ids'], out.ids)
  assert out.as_dict().keys() == {'sweep_ids', 'ids', 'z', 'inexact'}


def test_unknown_kernel_and_double_registration_are_refused():
  cm = contextual.ContextualMapping.build(Grid(1, 2, 2))
  with pytest.raises(ValueError, match="kernel='turbo'; allowed"):
    gc_kernels.kernel_fn(cm, 'turbo')
  with pytest.raises(ValueError, match='registered twice'):
    gc_kernels.register('core')(lambda cm: None)


def test_sweep_kernel_refuses_the_tie_complete_map():
  cm = contextual_ties.build(Grid(1, 2, 2))
  with pytest.raises(ValueError, match="kernel='sweep' runs the paper's g_c"):
    gc_kernels.kernel_fn(cm, 'sweep')
