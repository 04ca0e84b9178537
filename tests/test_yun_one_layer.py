"""One softmax attention layer as the contextual mapping (yun.single_attention.one_layer, verify.one_layer)."""

import itertools
import json
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

from transformer_ua.yun.single_attention import one_layer
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.variants.one_layer import OneLayer

from one_layer_fixtures import net, token_times_mean  # pylint: disable=unused-import


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


BINARY = os.path.join(ROOT, 'experiments', 'verify_contextual_mapping.py')


# -- end to end ---------------------------------------------------------------------


def test_g_bar_is_f_bar_on_every_cube(net):
  k = np.asarray(list(itertools.product(range(4), repeat=3)))[:, :, None]
  x = (k + 0.5) / 4
  np.testing.assert_array_equal(net.apply(x), token_times_mean(x))


def test_build_refuses_overlapping_ids():
  with pytest.raises(ValueError, match='positive'):
    one_layer.build('token_times_mean', OneLayer(Grid(1, 3, 4)), lam=0.0)
  # equal-sum contexts ({1, 3, 3}, {2, 2, 3}) differ by ~ lam at this scale: 2^-60 is
  # below what 40-bit enclosures resolve
  with pytest.raises(ValueError, match='overlap'):
    one_layer.build('token_times_mean', OneLayer(Grid(1, 3, 4)), lam=Fraction(1, 2 ** 60),
                    id_bits=40)


# -- the binary -----------------------------------------------------------------------


def _run(*args):
  return subprocess.run([sys.executable, BINARY, *args], capture_output=True, text=True,
                        timeout=300, cwd=ROOT)


def test_binary_one_layer(tmp_path):
  out = tmp_path / 'd1_n3_N4.json'
  r = _run('--contextual=one_layer', '--d=1', '--n=3', '--resolution=4',
           f'--output_dir={tmp_path}')
  assert r.returncode == 0, r.stderr
  assert 'ALL PROPERTIES HOLD' in r.stdout
  res = json.loads(out.read_text())
  assert res['ids'] == 40 and res['provenance']['command']


@pytest.mark.parametrize('args,fragment', [
    (('--contextual=hardmax',), 'allowed values are paper and one_layer'),
    (('--contextual=one_layer', '--d=2', '--n=4', '--resolution=64'), 'at most'),
    (('--contextual=one_layer', '--lam=-2'), '--lam=-2'),
])


def test_binary_bad_input_is_one_line(args, fragment):
  r = _run(*args)
  assert r.returncode == 2
  first = r.stderr.strip().splitlines()[0]
  assert first.startswith('error:') and fragment in first
  assert 'Traceback' not in r.stderr


# -- build_approximator dispatch --------------------------------------------------------


def test_build_approximator_dispatch():
  from transformer_ua import yun
  net = yun.build_approximator('token_times_mean', d=1, n=2, resolution=4,
                               contextual='one_layer')
  assert isinstance(net, one_layer.OneLayerApproximator)
  # n = 2, M = 4: 4 tokens x 4 partners = 16 ids, one bump each
  assert net.layer_counts()['value'] == {'feedforward': 16}
  with pytest.raises(ValueError, match="'paper', 'one_layer'"):
    yun.build_approximator('token_times_mean', d=1, n=2, resolution=4, contextual='hardmax')
  with pytest.raises(ValueError, match='positional=False'):
    yun.build_approximator('token_times_mean', d=1, n=2, resolution=4, positional=True,
                           contextual='one_layer')
