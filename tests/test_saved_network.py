"""saved_network: save then load round-trips exactly; changed, truncated and foreign files
get one line each; a loaded certificate re-checks.

Oracles: the Approximation saved (its parameters through ``project_import.from_realized``,
its exact params, its Certificate), the bytes of the file edited by hand, and
``yun.certify_lp`` re-run on the rebuilt network.
"""

import io
from fractions import Fraction
import json

import numpy as np
import pytest

from transformer_ua import yun
from transformer_ua.networks import exact_json, network_dict, project_import, saved_network

import saved_file_helpers

pytestmark = pytest.mark.filterwarnings(
    'ignore::transformer_ua.yun.realization.plan.FloatRealizationWarning')


@pytest.fixture(scope='module')
def float64_result():
  return yun.approximate('token_times_mean', 0.2, d=1, n=2, arithmetic='float64')


@pytest.fixture(scope='module')
def exact_result():
  """Yun et al.'s network (ties='complete'), certified in exact arithmetic (Fraction
  params)."""
  return yun.approximate('token_times_mean', 0.45, arithmetic='exact', d=1, n=2, workers=1,
                         construction='ties_complete')


#: The exact network's realization plans its lam and bits (~45 s on the 2-core machine).
BOTH = ['float64_result', pytest.param('exact_result', marks=pytest.mark.slow)]


@pytest.mark.parametrize('which', BOTH)
def test_save_then_load_round_trips_exactly(which, request, tmp_path):
  res = request.getfixturevalue(which)
  path = saved_network.save(res, tmp_path / 'g.npz')
  loaded = saved_network.load(path)
  net = project_import.from_realized(res.g)
  assert loaded.params_hash == network_dict.params_hash(net)
  for (a_name, a), (b_name, b) in zip(loaded.net.arrays(), net.arrays(), strict=True):
    assert a_name == b_name and np.array_equal(a, b)
  # the certificate: every field, numbers equal (not merely close), details included
  assert loaded.certificate == res.certificate
  assert loaded.certificate.details == res.certificate.details
  assert loaded.certificate.total == res.certificate.total
  assert loaded.arithmetic == res.arithmetic and loaded.epsilon == res.epsilon
  assert loaded.written_by['git_revision'] and loaded.written_by['package_version']
  # the exact parameters, as exact rationals
  want = dict(saved_network._flatten(res.g.exact_params()))  # pylint: disable=protected-access
  assert set(loaded.exact) == set(want)
  for name, a in want.items():
    assert loaded.exact[name].shape == a.shape
    assert all(x == y for x, y in zip(loaded.exact[name].ravel(), a.ravel())), name
  x = np.random.default_rng(0).random((50, 2, 1))
  if res.arithmetic == 'float64':
    assert np.array_equal(loaded.apply(x), res.g.apply(x))


def test_exact_numbers_round_trip_as_strings():
  """Rationals of 94 bits (no float holds them), floats, arrays and nested dicts come back
  equal, not close."""
  big = Fraction(2 ** 93 + 1, 3 ** 59)
  value = {'a': big, 'b': 0.1, 'c': [1, (2, Fraction(1, 3))], (1, 2): None,
           'd': np.asarray([[big, Fraction(-7, 2 ** 80)]], dtype=object), 'e': True}
  encoded = json.loads(json.dumps(exact_json.encode(value)))
  back = exact_json.decode(encoded)
  assert back['a'] == big and isinstance(back['a'], Fraction) and back['b'] == 0.1
  assert back['c'] == [1, [2, Fraction(1, 3)]] and back[(1, 2)] is None and back['e'] is True
  assert back['d'].shape == (1, 2) and back['d'][0, 0] == big

  class G:  # what save reads of g's exact params
    def exact_params(self):
      return {'segment_0': {'feedforward': {'b_1': np.asarray([big, 1], dtype=object)}}}
  strings = saved_network._exact_strings(G())  # pylint: disable=protected-access
  assert strings == {'segment_0/feedforward/b_1': {'shape': [2], 'values': [str(big), '1']}}
  assert saved_network._exact_arrays(strings)['segment_0/feedforward/b_1'][0] == big  # pylint: disable=protected-access


def test_a_changed_weight_is_refused(float64_result, tmp_path):
  path = saved_network.save(float64_result, tmp_path / 'g.npz')

  def weight(files):
    a = np.load(io.BytesIO(files['params/blocks.0.W_1.npy'])).copy()
    a.flat[0] = np.nextafter(a.flat[0], np.inf)      # one ulp
    files['params/blocks.0.W_1.npy'] = saved_file_helpers.npy(a)
  saved_file_helpers.rewrite(path, weight)
  with pytest.raises(ValueError, match='was changed after saving: its parameters hash') as e:
    saved_network.load(path)
  assert '\n' not in str(e.value)


def test_a_changed_certificate_or_exact_string_is_refused(float64_result, tmp_path):
  for what, edit in (
      ('certificate', lambda m: m['certificate']['dict'][2].__setitem__(1, {'float': '0.01'})),
      ('exact', lambda m: next(iter(m['exact_params'].values()))['values'].__setitem__(0, '7'))):
    path = saved_network.save(float64_result, tmp_path / f'{what}.npz')

    def change(files, edit=edit):
      m = saved_file_helpers.manifest(files)
      edit(m)
      saved_file_helpers.set_manifest(files, m)
    saved_file_helpers.rewrite(path, change)
    with pytest.raises(ValueError, match='was changed after saving') as e:
      saved_network.load(path)
    assert '\n' not in str(e.value)


def test_a_changed_exact_string_with_its_manifest_hash_redone_is_still_refused(
    float64_result, tmp_path):
  path = saved_network.save(float64_result, tmp_path / 'g.npz')

  def change(files):
    m = saved_file_helpers.manifest(files)
    next(iter(m['exact_params'].values()))['values'][0] = '7'
    saved_file_helpers.set_manifest(files, m, rehash=True)
  saved_file_helpers.rewrite(path, change)
  with pytest.raises(ValueError, match='exact parameters do not match'):
    saved_network.load(path)


def test_truncated_foreign_and_other_version_files_get_one_line(float64_result, tmp_path):
  path = saved_network.save(float64_result, tmp_path / 'g.npz')
  data = path and open(path, 'rb').read()
  for cut in (len(data) // 2, len(data) - 10, 100):
    (tmp_path / 'cut.npz').write_bytes(data[:cut])
    with pytest.raises(ValueError, match='truncated or not a saved network') as e:
      saved_network.load(tmp_path / 'cut.npz')
    assert '\n' not in str(e.value)

  def version(files):
    m = saved_file_helpers.manifest(files)
    m['format_version'] = 99
    saved_file_helpers.set_manifest(files, m)
  saved_file_helpers.rewrite(path, version)
  with pytest.raises(ValueError, match='format version 99; this transformer_ua reads versions 1, 2'):
    saved_network.load(path)
  np.savez(tmp_path / 'other.npz', a=np.zeros(3))
  with pytest.raises(ValueError, match='not a saved network'):
    saved_network.load(tmp_path / 'other.npz')
  with pytest.raises(ValueError, match='is not a file'):
    saved_network.load(tmp_path / 'missing.npz')


def test_save_refuses_bad_input_and_writes_nothing(float64_result, tmp_path):
  for args, match in (((float64_result.g, tmp_path / 'a.npz'), 'needs what yun.approximate'),
                      ((float64_result, tmp_path / 'no' / 'a.npz'), 'does not exist'),
                      ((float64_result, tmp_path), 'is a directory')):
    with pytest.raises(ValueError, match=match):
      saved_network.save(*args)
  assert not list(tmp_path.iterdir())
  (tmp_path / 'g.npz').write_text('keep')
  with pytest.raises(FileExistsError, match='already exists'):
    saved_network.save(float64_result, tmp_path / 'g.npz')
  assert (tmp_path / 'g.npz').read_text() == 'keep'
  saved_network.save(float64_result, tmp_path / 'g.npz', overwrite=True)
  assert saved_network.load(tmp_path / 'g.npz').certificate == float64_result.certificate


@pytest.mark.parametrize('which', BOTH)
def test_recheck_from_the_file_alone(which, request, tmp_path):
  res = request.getfixturevalue(which)
  loaded = saved_network.load(saved_network.save(res, tmp_path / 'g.npz'))
  again = saved_network.recheck(loaded)
  assert again['same_total'] and again['total'] == res.certificate.total


def _my_f(x):
  """A callable target: f(X)_j = x_j * mean(X) (token_times_mean's formula)."""
  return x * np.mean(x, axis=-2, keepdims=True)


def test_recheck_of_a_callable_needs_f_again(tmp_path):
  res = yun.approximate(_my_f, 0.2, d=1, n=2, lipschitz=2.0, arithmetic='float64')
  loaded = saved_network.load(saved_network.save(res, tmp_path / 'g.npz'))
  with pytest.raises(ValueError, match='pass it again as recheck'):
    saved_network.recheck(loaded)
  again = saved_network.recheck(loaded, _my_f)
  assert again['same_total'], (again['total'], res.certificate.total)


def test_the_docs_example_runs(tmp_path, monkeypatch):
  """docs/portable.md's example, as a user copies it (also run by test_readme --runslow)."""
  import os
  import re
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with open(os.path.join(root, 'docs', 'portable.md'), encoding='utf-8') as f:
    (code,) = re.findall(r'^```python\n(.*?)^```', f.read(), flags=re.S | re.M)
  monkeypatch.chdir(tmp_path)
  exec(compile(code, 'docs/portable.md', 'exec'), {'__name__': 'docs'})  # pylint: disable=exec-used
  assert sorted(p.name for p in tmp_path.iterdir()) == ['g.npz', 'g.onnx', 'product.npz']
