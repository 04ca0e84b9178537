"""saved_network with what the certifier returns: a NetworkCertificate (with its g) and a
TrainedCertificate saved, loaded and re-checked; every committed version-1 file still loads;
the v2 layout keeps every leaf; TrainedCertificate's repr is one line.

Oracles: the certificate objects saved (their fields, exactly), ``network_dict.params_hash``
of the network given to the certifier, the hand-built network's closed-form L2 error
(``hand_built``: the certified total is at least it), the params_hash each committed
report records (approximate.json) and its g.onnx read by ``flat_onnx``, and files edited by
hand.
"""

import glob
import json
import math
import os

import numpy as np
import pytest

from transformer_ua import certify
from transformer_ua.certify import hand_built, network_certificate, trainer
from transformer_ua.networks import flat_onnx, network_apply, network_dict, saved_network

import saved_file_helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Every committed saved network (version 1, written by the approximation job).
COMMITTED = sorted(glob.glob(os.path.join(ROOT, 'results', '**', 'g.npz'), recursive=True))


@pytest.fixture(scope='module')
def product():
  """The hand-built product network (8 units, n = 2) and its float32 certificate, which
  reaches epsilon after a few rounds (a deterministic stop)."""
  hb = hand_built.hand_built_product_network(8, n=2)
  cert = network_certificate.certify_network('token_times_mean', hb.net, d=1, n=2, p=2,
                                             arithmetic='float32', epsilon=0.015,
                                             max_minutes=2)
  assert cert.reached and cert.rounds > 1
  return hb, cert


def _my_f(x):
  """A callable target: token_times_mean's formula."""
  return x * np.mean(x, axis=-2, keepdims=True)


def test_a_network_certificate_round_trips_exactly(product, tmp_path):
  hb, cert = product
  path = saved_network.save(cert, tmp_path / 'g.npz', g=hb.net)
  loaded = saved_network.load(path)
  assert loaded.kind == 'network_certificate' and loaded.format_version == 2
  assert certify.load is saved_network.load      # the certifier's public face
  assert loaded.certificate == cert                  # every compared field, numbers exact
  assert loaded.certificate.total == cert.total and loaded.certificate.epsilon == cert.epsilon
  assert np.array_equal(loaded.certificate.worst_centres, cert.worst_centres)
  assert isinstance(loaded.certificate.assumptions, tuple)
  want = network_dict.check(hb.net, d=1, n=2)
  assert loaded.params_hash == network_dict.params_hash(want) == cert.params_hash
  for (a_name, a), (b_name, b) in zip(loaded.net.arrays(), want.arrays(), strict=True):
    assert a_name == b_name and np.array_equal(a, b)
  assert loaded.line() == cert.line() and '\n' not in loaded.line()
  assert loaded.arithmetic == 'float32' and loaded.epsilon == cert.epsilon
  x = np.random.default_rng(0).random((20, 2, 1))
  assert np.array_equal(loaded.apply(x), network_apply.apply(want, x, np.float32))


def test_recheck_of_a_network_certificate_reproduces_its_total(product, tmp_path):
  hb, cert = product
  loaded = saved_network.load(saved_network.save(cert, tmp_path / 'g.npz', g=hb.net))
  again = saved_network.recheck(loaded)
  assert again['same_total'] and again['confirmed'] and again['total'] == cert.total
  assert again['stop'] == f'max_rounds={cert.rounds}, as saved'   # deterministic: the same rounds
  assert again['certificate'].rounds == cert.rounds and again['certificate'].boxes == cert.boxes
  assert float(again['total']) >= hb.l2_error        # the closed form: a sound certificate


def test_save_refuses_a_certificate_without_its_network_or_with_another(product, tmp_path):
  hb, cert = product
  other = hb.net.as_dict()
  other['blocks'][0]['b_2'] = other['blocks'][0]['b_2'] + 2.0 ** -30
  for kwargs, match in (({}, r'pass it as save\(certificate, path, g=g\)'),
                        ({'g': other}, 'this certificate is for g'),
                        ({'g': hb.net, 'max_minutes': -1}, 'max_minutes=-1')):
    with pytest.raises(ValueError, match=match) as e:
      saved_network.save(cert, tmp_path / 'g.npz', **kwargs)
    assert '\n' not in str(e.value)
  with pytest.raises(ValueError, match='none of these') as e:
    saved_network.save(hb, tmp_path / 'g.npz')
  assert '\n' not in str(e.value) and not list(tmp_path.iterdir())


def test_a_callable_certificate_rechecks_with_f_again_and_another_f_is_refused(tmp_path):
  hb = hand_built.hand_built_product_network(8, n=2)
  cert = network_certificate.certify_network(_my_f, hb.net, d=1, n=2, p=2,
                                             arithmetic='float64', epsilon=0.05,
                                             lipschitz=2.0, max_minutes=2)
  assert cert.reached
  loaded = saved_network.load(saved_network.save(cert, tmp_path / 'g.npz', g=hb.net))
  with pytest.raises(ValueError, match='pass it again as recheck') as e:
    saved_network.recheck(loaded)
  assert '\n' not in str(e.value)
  again = saved_network.recheck(loaded, _my_f, lipschitz=2.0)
  assert again['same_total'] and again['total'] == cert.total

  def twice(x):           # another f under the same name: its certificate is larger
    return 2 * _my_f(x)
  twice.__name__ = _my_f.__name__
  with pytest.raises(ValueError, match='the saved certificate is not reproduced') as e:
    saved_network.recheck(loaded, twice, lipschitz=4.0, max_minutes=1)
  assert '\n' not in str(e.value)


@pytest.fixture(scope='module')
def trained():
  """The smallest ladder rung trained briefly; epsilon 0.1 is reached on its first
  certificate (~25 s on the loaded 2-core machine: the JAX training compiles)."""
  return trainer.train_and_certify('token_times_mean', 0.1, d=1, n=2, max_width=8,
                                   shapes=((1, 1),), steps=300, pool=4096, batch=256,
                                   refine_rounds=0, max_minutes=2, certify_minutes=0.5)


def test_a_trained_certificate_saves_loads_and_rechecks(trained, tmp_path):
  assert trained.reached
  path = saved_network.save(trained, tmp_path / 'g.npz')
  loaded = saved_network.load(path)
  assert loaded.kind == 'trained_certificate'
  assert loaded.certificate == trained.certificate
  assert loaded.params_hash == network_dict.params_hash(trained.net)
  assert loaded.line() == trained.line()
  assert loaded.training['seed'] == trained.seed
  assert loaded.training['trials'] == [json.loads(json.dumps(t.row())) for t in trained.trials]
  again = saved_network.recheck(loaded)
  assert again['same_total'] and again['total'] == trained.certificate.total


def test_trained_certificates_repr_is_one_line(trained):
  text = repr(trained)
  assert '\n' not in text and text.startswith('TrainedCertificate(')
  assert trained.certificate.params_hash[:19] in text and 'reached=True' in text
  assert f'params={trained.net.count_params()}' in text
  shown = float(text.split('total <= ')[1].split(',')[0])
  assert shown >= trained.certificate.total               # rounded up
  empty = trainer.TrainedCertificate(None, None, None, None, False, 0.01, 'float64', 2.0, 0,
                                     trained.trials, 3.0)
  assert '\n' not in repr(empty) and 'no certificate' in repr(empty)
  with pytest.raises(ValueError, match='no certified network') as e:
    saved_network.save(empty, 'never.npz')
  assert '\n' not in str(e.value) and not os.path.exists('never.npz')


@pytest.mark.parametrize('path', COMMITTED, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_committed_version_1_file_still_loads(path):
  assert COMMITTED
  loaded = saved_network.load(path)
  assert loaded.format_version == 1 and loaded.kind == 'approximation'
  onnx_file = os.path.join(os.path.dirname(path), 'g.onnx')
  if os.path.isfile(onnx_file):
    assert loaded.params_hash == network_dict.params_hash(flat_onnx.read(onnx_file))
  report = os.path.join(os.path.dirname(path), 'approximate.json')
  if os.path.isfile(report):
    assert loaded.params_hash in open(report, encoding='utf-8').read()
  assert math.isfinite(float(loaded.certificate.total))


def test_the_layout_keeps_every_leaf_and_names_arrays_by_place():
  """What v2 dicts hold beside arrays (a scale, an eps, a mask, an activation) comes back
  exactly, and each array under its place in the dict."""
  rng = np.random.default_rng(1)
  tree = {'embed': rng.random((3, 1)), 'blocks': [
      {'W_Q': rng.random((1, 1, 3)), 'scale': 0.1, 'mask': 'causal', 'activation': 'gelu',
       'norm': 'pre', 'ln_attn': {'gamma': rng.random(3), 'beta': rng.random(3), 'eps': 1e-5}}],
          'final_ln': {'gamma': rng.random(3), 'beta': np.zeros(3), 'eps': 1e-6}}
  arrays = {}
  layout = json.loads(json.dumps(saved_network._layout(tree, '', arrays)))  # pylint: disable=protected-access
  assert sorted(arrays) == ['blocks.0.W_Q', 'blocks.0.ln_attn.beta', 'blocks.0.ln_attn.gamma',
                            'embed', 'final_ln.beta', 'final_ln.gamma']
  used = set()
  back = saved_network._unlayout(layout, arrays, used, 'x')  # pylint: disable=protected-access
  assert used == set(arrays)
  blk = back['blocks'][0]
  assert blk['scale'] == 0.1 and blk['mask'] == 'causal' and blk['activation'] == 'gelu'
  assert blk['norm'] == 'pre' and blk['ln_attn']['eps'] == 1e-5
  assert back['final_ln']['eps'] == 1e-6
  assert np.array_equal(blk['ln_attn']['gamma'], tree['blocks'][0]['ln_attn']['gamma'])
  assert np.array_equal(back['embed'], tree['embed'])


def test_an_array_outside_the_layout_or_a_missing_one_is_refused(product, tmp_path):
  hb, cert = product
  path = saved_network.save(cert, tmp_path / 'g.npz', g=hb.net)
  saved_file_helpers.rewrite(path, lambda files: files.__setitem__(
      'params/extra.npy', saved_file_helpers.npy(np.zeros(2))))
  with pytest.raises(ValueError, match='arrays its layout does not name') as e:
    saved_network.load(path)
  assert '\n' not in str(e.value)

  path = saved_network.save(cert, tmp_path / 'h.npz', g=hb.net)

  def drop(files):            # the array gone, the manifest's own hash redone
    del files['params/blocks.0.W_1.npy']
    saved_file_helpers.set_manifest(files, saved_file_helpers.manifest(files), rehash=True)
  saved_file_helpers.rewrite(path, drop)
  with pytest.raises(ValueError, match='names params/blocks.0.W_1, which the archive lacks'):
    saved_network.load(path)


def test_recheck_stops_at_the_saved_rounds_where_the_certifier_takes_max_rounds(
    product, tmp_path, monkeypatch):
  """Where certify_network takes max_rounds= (not yet in this tree), the recheck passes the
  saved round count: a stand-in with that keyword records what it is given and certifies
  as the real one does."""
  hb, cert = product
  loaded = saved_network.load(saved_network.save(cert, tmp_path / 'g.npz', g=hb.net))
  real, seen = network_certificate.certify_network, {}

  def with_max_rounds(f, g, *, max_rounds, **kwargs):
    seen.update(kwargs, max_rounds=max_rounds)
    return real(f, g, **kwargs)
  monkeypatch.setattr(network_certificate, 'certify_network', with_max_rounds)
  again = saved_network.recheck(loaded)
  assert seen['max_rounds'] == cert.rounds and again['stop'].startswith('max_rounds=')
  assert seen['epsilon'] == cert.epsilon and seen['arithmetic'] == 'float32'
  assert seen['p'] == 2 and (seen['d'], seen['n']) == (1, 2)
  assert again['same_total']


@pytest.mark.parametrize('name', ['stock_pre_gelu_dynamo18',
                                  'stock_post_gelu_causal_legacy16'])
def test_a_torch_export_certificate_with_stock_ops_saves_loads_and_rechecks(name, tmp_path):
  """A certificate of a torch.onnx.export file (LayerNorm pre and post, GELU as the op and
  decomposed, a causal mask; both exporters): saved with the file as its g, loaded (the
  network runs as onnxruntime runs the file, within float32 rounding) and re-checked to the
  same total."""
  import onnxruntime
  path = os.path.join(ROOT, 'tests', 'fixtures', 'imports', f'{name}.onnx')
  cert = certify.certify_network('token_times_mean', path, d=1, n=3, p=2,
                                 arithmetic='float32', max_rounds=2, progress=False)
  loaded = certify.load(certify.save(cert, tmp_path / 'g.npz', g=path))
  assert loaded.kind == 'network_certificate' and loaded.params_hash == cert.params_hash
  assert loaded.certificate.total == cert.total and loaded.line() == cert.line()
  x = np.random.default_rng(0).random((16, 3, 1)).astype(np.float32)
  session = onnxruntime.InferenceSession(path, providers=['CPUExecutionProvider'])
  inp = session.get_inputs()[0].name
  want = np.concatenate([session.run(None, {inp: x[i:i + 1]})[0] for i in range(len(x))])
  assert np.abs(loaded.apply(x) - want).max() < 1e-5
  again = certify.recheck(loaded)
  assert again['same_total'] and again['confirmed']
