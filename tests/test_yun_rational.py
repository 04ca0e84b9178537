"""yun.realization.rational: exact (rational) params of g_bar."""

from fractions import Fraction

import jax
import numpy as np

from realization_fixtures import ties134  # pylint: disable=unused-import
from transformer_ua.yun.realization import rational


def test_ties_exact_params_equal_the_float_params(ties134):
  net, _, _ = ties134
  ex = rational.exact_params(net.g_bar, net.values)
  fl = net.g_bar.float_params(net.values)
  assert len(ex) == len(fl) == 7   # g_q, offset, sweep, min, max+count, kill, bumps
  for (path, a), (_, b) in zip(jax.tree_util.tree_flatten_with_path(ex)[0],
                               jax.tree_util.tree_flatten_with_path(fl)[0]):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, path
    if a.dtype != bool:
      assert all(isinstance(v, (int, Fraction)) for v in a.ravel()), path
    np.testing.assert_allclose(a.astype(np.float64), b, rtol=1e-12, atol=0, err_msg=str(path))
  assert ex['segment_1']['feedforward']['W_2'][0, 0, 0] == Fraction(1, 4)   # delta e_1
