"""Shared helpers for the whole-grid verifier tests: the equivariance class table."""

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua.yun import enumeration


def class_table(cm):
  """g_c's ids of every multiset-class representative (the equivariance table), writable."""
  with jax.enable_x64(True):
    reps = enumeration.make_codec(cm.grid)['decode_multiset'](
        jnp.arange(enumeration.grid_size(cm.grid, 'multiset')))
    return np.array(cm.forward(np.asarray(reps))['ids'])
