"""build_approximator and min_epsilon at sizes no network can have: one line each, naming
the size asked for and the limit, before anything of that size is computed."""

import time

import pytest

from transformer_ua import yun
from transformer_ua.yun import approximator
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.variants.paper import Paper


@pytest.mark.parametrize('kw, fragments', [
    ({'n': 10 ** 6}, ('n=1000000 tokens is too many', '3556 bits')),
    ({'n': 10 ** 9}, ('n=1000000000 tokens is too many',)),
    ({'n': 1000}, ('t_r = about', '(4002 bits)', 'more than the 3556 bits')),
    ({'resolution': 10 ** 6}, ('needs about 5e+17 layers', 'at most 2000000')),
    ({'n': 30, 'positional': True}, ('needs about 3.5e+19 layers',)),
    ({'n': '3'}, ("n='3' is not allowed", 'must be an integer >= 2')),
    ({'n': 3.0}, ('n=3.0 is not allowed', 'must be an integer >= 2')),
    ({'d': True}, ('d=True is not allowed',)),
])
def test_refused_in_one_line_at_once(kw, fragments):
  args = {'d': 1, 'n': 3, 'resolution': 4, **kw}
  t0 = time.time()
  with pytest.raises(ValueError) as e:
    yun.build_approximator('token_times_mean', **args)
  assert time.time() - t0 < 5
  msg = str(e.value)
  assert '\n' not in msg and len(msg) < 400, msg
  for f in fragments:
    assert f in msg, (f, msg)


def test_paper_layers_of_the_refused_resolution():
  # Theorem 2 at d=1, n=3, N=10^6: n C(N, n) bump layers (+ N + 1 + N + 1 + d + 1 + d).
  from math import comb
  N = 10 ** 6
  assert approximator.about(3 * comb(N, 3)) == 'about 5e+17'


def test_about():
  assert approximator.about(999_999_999_999) == '999999999999'
  assert approximator.about(10 ** 400) == 'about 1e+400'
  assert approximator.about(3 * 10 ** 5000) == 'about 3e+5000'   # past Python's 4300 digits


def test_min_epsilon_past_float64_is_refused():
  # t_r = 4^(2n) 3 at N=4, d=1 (Lemma 8): n = 200 fits float64 (2^801), n = 300 does not.
  assert approximator.min_epsilon(Paper(Grid(1, 200, 4))) > 1e200
  with pytest.raises(ValueError, match=r'exceeds the largest float64 .*no float realization'):
    approximator.min_epsilon(Paper(Grid(1, 300, 4)))
  with pytest.raises(ValueError, match='n=1000000 tokens is too many'):
    approximator.min_epsilon(Paper(Grid(1, 10 ** 6, 4)))
