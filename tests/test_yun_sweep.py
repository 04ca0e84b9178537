"""yun.stages.sweep: reading the sweep program and the global shift."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import sweep
from transformer_ua.yun.stages import contextual


def test_sweep_kernel_refuses_params_of_another_shape():
  cm = contextual.ContextualMapping.build(Grid(1, 2, 2))
  with jax.enable_x64(True):
    att = dict(cm.exact_params['segment_0']['attention'])
    att['W_V'] = att['W_V'] * 2
    other = dict(cm.exact_params, segment_0={'attention': att})
  with pytest.raises(ValueError, match='not of that shape'):
    sweep.read_program(type(cm)(**{**cm.__dict__, 'exact_params': other}))
  with pytest.raises(ValueError, match='needs .* bits'):
    sweep.read_program(contextual.ContextualMapping.build(Grid(2, 6, 3)), 'int32')


@pytest.mark.parametrize('sweep_bits', [45, 53, 63])
def test_global_shift_tie_mean_equals_python_floor_division(sweep_bits):
  """The tie average floor(sum / n) and its inexact flag, through float64 up to 53 bits
  and int64 division beyond, equal Python's // and % on ids near the bound."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  cm = contextual.ContextualMapping.build(Grid(1, 5, 2))
  prog = dataclasses.replace(sweep.read_program(cm), sweep_bits=sweep_bits)
  n, big = cm.n, 2 ** (min(sweep_bits, 63) - 1) // cm.n - 1   # |sum of n ids| < 2^(bits-1)
  rng = np.random.default_rng(sweep_bits)
  ids = rng.integers(-big, big, size=(n, 400), dtype=np.int64)
  ids[:, :100] = rng.integers(-3, 4, size=(n, 100))          # small sums, both signs
  ids[rng.random(ids.shape) < 0.3] = -prog.final_bias        # the mean branch
  ids[:, -5:] = [[big] * 5, [big] * 5, [big - 1] * 5, [-prog.final_bias] * 5, [big] * 5]
  with jax.enable_x64(True):
    q, _, inexact = sweep.global_shift(cm, prog, jnp.asarray(ids))
  ref = ids.astype(object)
  total = ref.sum(axis=0)
  sel = np.where(ref > -prog.final_bias, ref.max(axis=0),
                 np.where(ref < -prog.final_bias, ref.min(axis=0), total // n))
  expected = ref + prog.final_gain * sel
  # Compared modulo 2^64: the final gain makes q wrap int64 at 63 bits (sel is exact).
  got = np.asarray(q).astype(object) % 2 ** 64
  assert (got == expected % 2 ** 64).all()
  ties = (ref == -prog.final_bias) & (total % n != 0)[None]
  assert int(inexact) == int(ties.sum())
