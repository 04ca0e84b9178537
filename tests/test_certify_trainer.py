"""Train to certify (certify.trainer) and the hand-built product network (certify.hand_built).

The trainer's search is tested with a STAND-IN certifier (a sampled d_2 on fixed points,
not a proof), passed through ``certifier=``: these tests check the search and the
training, the certificate itself is the certifier's tests' business."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua import layers
from transformer_ua.certify import hand_built, trainer
from transformer_ua.networks import flat_onnx, network_apply, network_dict, project_import
from transformer_ua.targets import functions as targets


class _StandIn:
  """What the trainer reads of a certificate: total, reached, worst_centres, line()."""

  def __init__(self, total, reached, worst):
    self.total, self.reached, self.worst_centres = total, reached, worst

  def line(self):
    return f'stand-in (sampled, not a proof) d_2 {self.total:.4g}'


def _stand_in(calls, never_reach=False, overhead=1.0):
  def certify(f, net, *, d, n, p, arithmetic, epsilon, max_minutes, lipschitz):
    x = np.random.default_rng(7).random((4000, n, d))
    e = np.sum((network_apply.apply(net, x) - f(x)) ** 2, axis=(1, 2))
    total = overhead * float(np.mean(e) ** 0.5)
    calls.append((net, total, arithmetic))
    return _StandIn(total, not never_reach and total <= epsilon, x[np.argsort(e)[-8:]])
  return certify


_FAST = dict(steps=150, batch=256, pool=2048, refine_points=256, refine_steps=50)


def test_ladder_order_and_parameter_counts():
  ladder = trainer.candidates(1, 16)
  assert ladder[0] == trainer.Candidate(1, 1, 1, 2, 8)      # start small: D=2, h=1, m=1
  counts = [c.num_params() for c in ladder]
  assert counts == sorted(counts)
  assert {c.width for c in ladder} == {8, 16}
  assert {(c.depth, c.heads) for c in ladder} == set(trainer.SHAPES)
  assert all(c.embed_width == 1 + c.heads and c.head_size == 1 for c in ladder)
  # within one shape, r doubles in order
  for shape in trainer.SHAPES:
    widths = [c.width for c in ladder if (c.depth, c.heads) == shape]
    assert widths == [8, 16]
  # the stated count is the real one: the initialized network's (shapes only) and the Net's
  for c in ladder:
    with jax.enable_x64(True):
      shapes = jax.eval_shape(c.network().init, jax.random.PRNGKey(0), jnp.zeros((1, 3, 1)))
    assert layers.count_params(shapes['params']) == c.num_params()
  c = ladder[-1]
  with jax.enable_x64(True):
    params = c.network().init(jax.random.PRNGKey(0), jnp.zeros((1, 3, 1)))['params']
  assert project_import.from_network(c.network(), params, d=1).count_params() == c.num_params()
  assert trainer.candidates(1, 32, shapes=((2, 1),)) == [
      trainer.Candidate(2, 1, 1, 2, r) for r in (8, 16, 32)]


def test_training_lowers_the_sampled_error():
  f = targets.get_target('token_times_mean', d=1, n=3)
  cand = trainer.candidates(1, 8)[0]
  network = cand.network()
  x = np.random.default_rng(0).random((2048, 3, 1))
  check = np.random.default_rng(1).random((4000, 3, 1))
  errors = []
  with jax.enable_x64(True):
    params = network.init(jax.random.PRNGKey(0), jnp.zeros((1, 3, 1)))['params']
    for steps in (0, 300):
      trained, done, _ = trainer.train(network, params, x, f(x), steps=steps, lr=1e-2,
                                       batch=256, seed=0, deadline=math.inf)
      assert done == steps
      net = project_import.from_network(network, trained, d=1)
      errors.append(trainer.sampled_dp(f, net, check, np.float64, 2.0))
  assert errors[1] < errors[0] / 2
  assert not jax.config.jax_enable_x64       # x64 only inside the context


def test_search_returns_the_first_certified_and_records_seeds():
  calls = []
  got = trainer.train_and_certify('token_times_mean', 0.2, d=1, n=3, seed=5, max_width=16,
                                  sample_fraction=1.0, certifier=_stand_in(calls), **_FAST)
  assert got.reached and got.certificate.total <= 0.2
  assert got.trials[-1].reached and got.trials[-1].seed == 5 + len(got.trials) - 1
  assert [t.seed for t in got.trials] == list(range(5, 5 + len(got.trials)))
  # the network returned is the one certified, in both forms
  assert network_dict.params_hash(got.net) == network_dict.params_hash(calls[-1][0])
  again = network_dict.check(project_import.from_network(got.network, got.params, d=1), d=1,
                             n=3)
  assert network_dict.params_hash(again) == network_dict.params_hash(got.net)
  assert not jax.config.jax_enable_x64


def test_refinement_rounds_and_float32_storage():
  calls = []
  # a certifier that never reaches epsilon (totals 1e-9 x the error, so the learned
  # margin stays open and every round is refined)
  got = trainer.train_and_certify('token_times_mean', 1.0, d=1, n=3, max_width=8,
                                  shapes=((1, 1),), arithmetic='float32', refine_rounds=2,
                                  certifier=_stand_in(calls, True, 1e-9), **_FAST)
  assert not got.reached
  assert [t.rounds for t in got.trials] == [2]         # r = 8 only, two rounds
  assert len(calls) == 3 and {a for _, _, a in calls} == {'float32'}
  # the best of all certificates is returned, with weights a float32 runtime holds
  assert got.certificate.total == min(t for _, t, _ in calls)
  for _, a in got.net.arrays():
    np.testing.assert_array_equal(a, a.astype(np.float32).astype(np.float64))
  assert 'NOT reached' in got.line()


def test_the_margin_is_learned_and_far_totals_are_not_refined():
  # a certifier whose totals are 1000 x the error: after the first miss the margin is
  # about 1/1000, so the second candidate is not certified; the first is not refined
  # (its total is far above refine_within epsilon)
  calls = []
  got = trainer.train_and_certify('token_times_mean', 1.0, d=1, n=3, max_width=16,
                                  shapes=((1, 1),), sample_fraction=1.0,
                                  certifier=_stand_in(calls, True, 1000.0), **_FAST)
  assert len(calls) == 1 and got.trials[0].rounds == 0
  note = got.trials[1].note
  assert note.startswith('not certified: sampled d_p')
  assert 0.0005 < float(note.split('> ')[1].split()[0]) < 0.002      # the learned margin


def test_candidates_above_the_sampled_margin_are_not_certified():
  calls = []
  got = trainer.train_and_certify('token_times_mean', 1e-4, d=1, n=3, max_width=8,
                                  shapes=((1, 1),), certifier=_stand_in(calls), **_FAST)
  assert not calls and got.certificate is None and not got.reached
  assert all('not certified: sampled d_p' in t.note for t in got.trials)
  assert 'no candidate was certified' in got.line()


@pytest.mark.parametrize('kwargs, message', [
    (dict(epsilon=0), 'epsilon=0; it must be a positive'),
    (dict(epsilon=-0.1), 'epsilon=-0.1; it must be a positive'),
    (dict(p=0.5), 'p=0.5; d_p needs 1 <= p < inf'),
    (dict(f='no_such_target'), "unknown target 'no_such_target'"),
    (dict(arithmetic='float16'), "arithmetic='float16'; allowed"),
    (dict(max_width=4), 'max_width=4; it must be an integer >= 8'),
    (dict(shapes=((1, 0),)), 'shapes=.*pairs of positive integers'),
])
def test_bad_input_is_one_line(kwargs, message):
  args = dict(f='token_times_mean', epsilon=0.1)
  args.update(kwargs)
  with pytest.raises(ValueError, match=message) as e:
    trainer.train_and_certify(args.pop('f'), args.pop('epsilon'), d=1, n=3,
                              certifier=_stand_in([]), **args)
  assert '\n' not in str(e.value)


# -- the hand-built network ------------------------------------------------------------


@pytest.mark.parametrize('units,n', [(4, 2), (20, 3)])
def test_hand_built_closed_forms_against_sampling(units, n):
  hb = hand_built.hand_built_product_network(units, n)
  h = 2 / units
  assert hb.sup_error == pytest.approx(h * h / 4, rel=0) or float(hb.sup_error) == h * h / 4
  assert hb.net.count_params() == 9 + 5 * units + 2
  f = targets.get_target('token_times_mean', d=1, n=n)
  x = np.random.default_rng(units).random((200000, n, 1))
  err = network_apply.apply(hb.net, x) - f(x)
  s = np.sum(err ** 2, axis=(1, 2))
  se = np.std(s) / math.sqrt(len(s))
  assert abs(np.mean(s) - float(hb.l2_error_squared)) <= 4 * se      # the exact d_2^2
  assert np.max(np.abs(err)) <= float(hb.sup_error) * (1 + 1e-9)
  # attained (module doc): all tokens at the midpoint of a piece
  t = np.full((1, n, 1), h / 2)
  assert abs(network_apply.apply(hb.net, t) - f(t)).max() == pytest.approx(h * h / 4,
                                                                          rel=1e-9)


def test_hand_built_by_hand_for_two_pieces():
  # units = 4: k = 2, h = 1/2, q(t) = t/2 + relu(t - 1/2); g - f = E(u) - E(w)
  hb = hand_built.hand_built_product_network(4, 2)
  x = np.array([[[0.3], [0.9]]])
  m = 0.6
  u, w = (0.3 + m) / 2, (0.3 - m + 1) / 2
  q = lambda t: t / 2 + max(t - 0.5, 0)                    # noqa: E731
  want = 0.3 + q(u) - q(w) - u + 0.25
  assert network_apply.apply(hb.net, x)[0, 0, 0] == pytest.approx(want, abs=1e-15)
  assert want == pytest.approx(0.3 * m + (q(u) - u * u) - (q(w) - w * w), abs=1e-15)


@pytest.mark.parametrize('units,n', [(6, 3), (0, 3), (8, 1), (8.0, 3)])
def test_hand_built_bad_input(units, n):
  with pytest.raises(ValueError, match='units=|n='):
    hand_built.hand_built_product_network(units, n)


# -- the binary ------------------------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, 'experiments', 'train_and_certify.py')
_TINY = ('--config.epsilon=0.3', '--config.steps=100', '--config.pool=2048',
         '--config.batch=256', '--config.max_width=8', '--config.max_minutes=3',
         '--config.certify_minutes=1')


def _binary(*args):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  return subprocess.run([sys.executable, BINARY, *args], capture_output=True, text=True,
                        env=env, cwd=ROOT, timeout=300, check=False)


def test_binary_refuses_an_existing_directory_and_bad_config_in_one_line(tmp_path):
  for args, fragment in (((f'--output_dir={tmp_path}',), 'exists; pass --overwrite'),
                         ((f'--output_dir={tmp_path}/new', '--config.epsilon=0'),
                          'epsilon=0'),
                         ((f'--output_dir={tmp_path}/new',
                           "--config.architectures=('ladder','stock_swish')"),
                          'architectures=')):
    proc = _binary(*args)
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert proc.returncode != 0 and 'Traceback' not in proc.stderr, proc.stderr
    assert lines[0].startswith('error: ') and fragment in lines[0], proc.stderr
  assert os.listdir(tmp_path) == []


def test_binary_help_lists_the_config_fields():
  proc = _binary('--help')
  for field in ('sample_fraction', 'refine_radius', 'certify_minutes', 'max_width',
                'architectures'):
    assert field in proc.stdout


def test_binary_writes_the_network_its_certificate_and_the_record(tmp_path):
  out = tmp_path / 'run'
  proc = _binary(f'--output_dir={out}', *_TINY)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert sorted(os.listdir(out)) == sorted(trainer.OUTPUT_FILES)
  record = json.loads((out / 'record.json').read_text())
  row = record['row']
  assert row['reached'] and row['certified_total'] <= 0.3
  assert row['sampled_dp_numpy'] <= row['certified_total']
  jax_run = row['independent_check']['jax']
  assert jax_run['d_p'] <= row['certified_total'] and not jax_run['contradicted']
  assert jax_run['points'] == 20000 and jax_run['worst_centres'] > 0
  assert row['bits_per_parameter'] == 53 and record['seed'] == 0
  assert record['trials'][0]['seed'] == 0
  assert {'command', 'git_revision', 'machine', 'load_average_1min_at_start'} <= set(
      record['provenance'])
  # the npz is the certified network: rebuilt as a dict, the same identity hash
  arrays = np.load(out / 'network.npz')
  blocks = {}
  for name in arrays.files:
    _, i, key = name.split('.')
    blocks.setdefault(int(i), {})[key] = arrays[name]
  net = network_dict.check({'blocks': [blocks[i] for i in sorted(blocks)]}, d=1, n=3)
  assert network_dict.params_hash(net) == row['params_hash']
  assert (out / 'certificate.txt').read_text().startswith('epsilon=0.3 reached')
  # the ONNX file is the same network, and onnxruntime ran it against the certificate
  assert network_dict.params_hash(network_dict.check(
      flat_onnx.read(str(out / 'network.onnx')), d=1, n=3)) == row['params_hash']
  ort_run = row['independent_check']['onnxruntime']
  assert ort_run['d_p'] <= row['certified_total'] and not ort_run['contradicted']
  # a second run into the same directory is refused, with --overwrite it may go on
  assert 'exists; pass --overwrite' in _binary(f'--output_dir={out}', *_TINY).stderr


def test_a_certificate_refused_for_its_budget_is_a_note_other_errors_propagate():
  def over_budget(f, net, **kwargs):
    raise ValueError('the first partition alone (9 boxes at 1 ms each) is estimated at '
                     '99.0 min, above max_minutes=1; raise the budget')

  def broken(f, net, **kwargs):
    raise ValueError('target has no known modulus')

  args = dict(d=1, n=3, max_width=8, shapes=((1, 1),), sample_fraction=1e9, **_FAST)
  got = trainer.train_and_certify('token_times_mean', 0.1, certifier=over_budget, **args)
  assert got.certificate is None and 'above max_minutes' in got.trials[0].note
  with pytest.raises(ValueError, match='no known modulus'):
    trainer.train_and_certify('token_times_mean', 0.1, certifier=broken, **args)


def test_init_spreads_the_kinks_over_the_cube_and_starts_attention_near_uniform():
  cand = trainer.Candidate(2, 2, 1, 3, 16)
  with jax.enable_x64(True):
    params = trainer.init_params(cand.network(), 3, 3, 1)
    plain = cand.network().init(jax.random.PRNGKey(3), jnp.zeros((1, 3, 1)))['params']
    params, plain = (jax.tree_util.tree_map(np.asarray, t) for t in (params, plain))
  seg, ref = params['segment_0'], plain['segment_0']
  np.testing.assert_array_equal(seg['attention']['W_Q'], 0.1 * ref['attention']['W_Q'])
  np.testing.assert_array_equal(seg['attention']['W_K'], 0.1 * ref['attention']['W_K'])
  w_1, b_1 = np.asarray(seg['feedforward']['W_1']), np.asarray(seg['feedforward']['b_1'])
  # each unit's kink {z: W_1 z + b_1 = 0} meets [0, 1]^D: b_1 lies between the smallest and
  # the largest of -W_1 z over the cube's corners
  lowest = -np.sum(np.maximum(w_1, 0), axis=-1)
  highest = -np.sum(np.minimum(w_1, 0), axis=-1)
  assert np.all(lowest <= b_1) and np.all(b_1 <= highest)
  assert np.std(b_1) > 0.05                      # not all through one point


def test_unset_steps_lr_batch_take_each_candidates_recipe_and_are_recorded():
  """steps/lr/batch unset: the ladder trains 6000 steps at 1e-2 with batch 2048, a stock
  block 40000 steps at 3e-3 with batch 256; a value given replaces the recipe's (here only
  the batch). The budget stops the training early; the recipe is recorded as given."""
  args = dict(d=1, n=3, max_width=8, pool=1024, refine_rounds=0, sample_fraction=1.0,
              max_minutes=0.01, certifier=_stand_in([]))
  ladder = trainer.train_and_certify('token_times_mean', 0.2, shapes=((1, 1),), **args)
  assert ladder.trials[0].row()['recipe'] == {'steps': 6000, 'lr': 0.01, 'batch': 2048}
  stock = trainer.train_and_certify('token_times_mean', 0.2, architectures=('stock_post_relu',),
                                    batch=64, **args)
  assert stock.trials[0].row()['recipe'] == {'steps': 40000, 'lr': 0.003, 'batch': 64}
  assert stock.trials[0].steps < 40000
