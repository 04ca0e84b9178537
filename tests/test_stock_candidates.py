"""The stock encoder-block candidates of train_and_certify (certify.stock_candidates) and
the Flax block of studies.flax_block: parameter counts by hand, the import equal to the
Flax apply, the trainer's search over them, and bad input in one line."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua import layers, rounding
from transformer_ua.certify import stock_candidates, trainer
from transformer_ua.networks import network_apply, network_dict, source_check
from transformer_ua.studies import flax_block

X = np.random.default_rng(5).random((64, 3, 1))


@pytest.mark.parametrize('width,d,hand', [
    # embed d*8+8, Q K V 3*(8*8+8), O 8*8+8, two LNs 2*16, FF 8r+r+8r+8, readout 8d+d
    (32, 1, 16 + 216 + 72 + 32 + (256 + 32 + 256 + 8) + 9),      # = 897, torch's count
    (8, 1, 16 + 216 + 72 + 32 + (64 + 8 + 64 + 8) + 9),          # = 489
    (16, 2, 24 + 216 + 72 + 32 + (128 + 16 + 128 + 8) + 18)])    # = 642
def test_parameter_counts_by_hand(width, d, hand):
  for norm in ('post', 'pre'):
    for act in ('relu', 'gelu'):
      c = stock_candidates.StockCandidate(norm, act, width, d)
      assert c.num_params() == hand
      with jax.enable_x64(True):
        params = c.init(0, 3, d)
      assert layers.count_params(params) == hand
      _, net, _ = c.stored(params, d, 3, np.float32)
      assert net.count_params() == hand


def test_stock_candidates_in_parameter_order_beside_the_ladder():
  assert trainer.candidates(1, 16) == trainer.candidates(1, 16, architectures=('ladder',))
  cands = trainer.candidates(1, 32, architectures=('ladder', 'stock_pre_gelu',
                                                   'stock_post_relu'))
  counts = [c.num_params() for c in cands]
  assert counts == sorted(counts)
  stock = [c for c in cands if isinstance(c, stock_candidates.StockCandidate)]
  assert [(c.norm, c.activation, c.width) for c in stock] == [
      ('pre', 'gelu', 8), ('post', 'relu', 8), ('pre', 'gelu', 16), ('post', 'relu', 16),
      ('pre', 'gelu', 32), ('post', 'relu', 32)]          # ties keep the names' order
  assert len(cands) - len(stock) == len(trainer.candidates(1, 32))
  only = trainer.candidates(1, 8, architectures=('stock_post_gelu',))
  assert only == [stock_candidates.StockCandidate('post', 'gelu', 8, 1)]


@pytest.mark.parametrize('bad', [('ladder', 'stock_post_swish'), (), ('ladder', 'ladder'),
                                 'transformer'])
def test_unknown_architecture_refused_in_one_line(bad):
  with pytest.raises(ValueError, match='architectures=') as err:
    trainer.train_and_certify('token_times_mean', 0.1, d=1, n=3, architectures=bad,
                              max_minutes=1)
  assert '\n' not in str(err.value) and 'stock_pre_gelu' in str(err.value)


@pytest.mark.parametrize('norm,act,form', [('post', 'relu', 'relu'), ('pre', 'gelu', 'gelu'),
                                           ('post', 'gelu_tanh', 'gelu_tanh')])
def test_block_import_equals_its_apply(norm, act, form):
  c = stock_candidates.StockCandidate(norm, act, 16, 1)
  module = c.network()
  variables = module.init(jax.random.PRNGKey(1), jnp.zeros((1, 3, 1)))
  net, text = source_check.read_network((module, variables), d=1, n=3, arithmetic='float32')
  assert 'checked against the Flax apply of StockBlock' in text
  b = net.blocks[0]
  assert b.norm == norm and b.ff.activation == form and b.heads == 2
  assert b.attention.b_k is not None and b.attention.b_o is not None
  want = np.asarray(module.apply(variables, jnp.asarray(X, jnp.float32)), np.float64)
  assert np.abs(network_apply.apply(net, X, np.float32) - want).max() < 2e-6


def test_the_studys_flax_block_import_equals_its_apply():
  module, variables = flax_block.build(seed=0)
  assert (module.norm, module.activation, module.width) == ('post', 'gelu_tanh', 32)
  net, _ = source_check.read_network((module, variables), d=1, n=3, arithmetic='float32')
  assert net.count_params() == 897 and net.blocks[0].ff.activation == 'gelu_tanh'
  want = np.asarray(module.apply(variables, jnp.asarray(X, jnp.float32)), np.float64)
  assert np.abs(network_apply.apply(net, X, np.float32) - want).max() < 2e-6


class _StandIn:
  def __init__(self, total, reached, worst):
    self.total, self.reached, self.worst_centres = total, reached, worst

  def line(self):
    return f'stand-in (sampled, not a proof) d_2 {self.total:.4g}'


def test_train_and_certify_returns_a_stock_candidate_through_the_flax_route():
  """The search trains a stock block and hands the certifier its (module, variables) pair;
  the stand-in reads it as certify_network does (source_check: flax_import, checked
  against the apply) and samples d_2 (not a proof: the search is under test here)."""
  seen = []

  def certify(f, g, *, d, n, p, arithmetic, epsilon, max_minutes, lipschitz):
    assert isinstance(g, tuple) and isinstance(g[0], stock_candidates.StockBlock)
    net, text = source_check.read_network(g, d=d, n=n, arithmetic=arithmetic)
    x = np.random.default_rng(7).random((2000, n, d))
    e = np.sum((network_apply.apply(net, x, np.float32) - f(x)) ** 2, axis=(1, 2))
    total = float(np.mean(e) ** 0.5)
    seen.append((net, text, total))
    return _StandIn(total, total <= epsilon, x[np.argsort(e)[-8:]])

  result = trainer.train_and_certify(
      'token_times_mean', 0.2, d=1, n=3, arithmetic='float32', max_minutes=2,
      architectures=('stock_post_relu',), max_width=8, steps=100, batch=256, pool=1024,
      refine_rounds=0, certifier=certify, sample_fraction=1.0)
  assert seen and 'Flax apply of StockBlock' in seen[0][1]
  assert result.reached and result.trials[0].candidate == stock_candidates.StockCandidate(
      'post', 'relu', 8, 1)
  assert result.net.count_params() == 489 and result.net.blocks[0].norm == 'post'
  # the returned Net is the one certified, its weights float32 numbers
  assert network_dict.params_hash(result.net) == network_dict.params_hash(seen[-1][0])
  assert all(np.array_equal(a, np.asarray(a, np.float32)) for _, a in result.net.arrays())


def test_flax_block_benchmark_bad_flag_is_one_line(tmp_path):
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run(
      [sys.executable, os.path.join(root, 'benchmarks', 'certify_flax_block.py'),
       f'--output_dir={tmp_path}/out', '--train_seconds=500'], capture_output=True, text=True,
      env=dict(os.environ, PYTHONPATH=root, JAX_PLATFORMS='cpu'), timeout=120, check=False)
  lines = [x for x in proc.stderr.splitlines() if x.strip()]
  assert proc.returncode != 0 and 'Traceback' not in proc.stderr, proc.stderr
  assert 'train_seconds' in lines[0] and len(lines) <= 2, proc.stderr
  assert not os.path.exists(tmp_path / 'out')


def test_float64_storage_reads_the_float64_network():
  """A float64 arithmetic keeps the trained float64 weights: read under x64, the Net equals
  the float64 Flax apply (the certificate's context is x64 for it, none for float32)."""
  c = stock_candidates.StockCandidate('pre', 'gelu', 8, 1)
  with jax.enable_x64(True):
    params = c.init(2, 3, 1)
  _, net, (module, variables) = c.stored(params, 1, 3, np.float64)
  with c.certify_context(np.float64):
    assert jax.config.jax_enable_x64
    want = np.asarray(module.apply(variables, jnp.asarray(X, jnp.float64)))
  assert want.dtype == np.float64
  assert np.abs(network_apply.apply(net, X) - want).max() < 1e-12
  with c.certify_context(np.float32):
    assert not jax.config.jax_enable_x64


@pytest.mark.parametrize('arithmetic', ['tf32', 'bfloat16'])
def test_operand_reduction_equals_the_rounding_models_emulation(arithmetic):
  """reduce_operand (frexp, round half to even) against rounding.py's bit-level emulation
  of the same reduction, on float32 numbers including ties, subnormal-free extremes and 0."""
  model = rounding.MATMUL_MODELS[arithmetic]
  rng = np.random.default_rng(11)
  x = np.concatenate([rng.normal(0, 1, 4000), rng.normal(0, 1e4, 1000), [0.0, 1.0, -2.5]])
  x = x.astype(np.float32)
  ties = (np.float32(1) + np.float32(2.0 ** -model.operand_bits) * np.arange(1, 9, 2))
  x = np.concatenate([x, ties.astype(np.float32), -ties.astype(np.float32)])
  with jax.enable_x64(True):
    got = np.asarray(stock_candidates.reduce_operand(jnp.asarray(x, jnp.float64),
                                                    model.operand_bits))
  assert np.array_equal(got, model.reduce_operand(x).astype(np.float64))


def test_operand_reduced_block_trains_straight_through():
  """The training block's forward is the plain block's with every matmul operand reduced
  (it differs from the plain forward, by about the operand rounding), its gradient is
  finite and equal in structure, and the parameters are the same tree."""
  cand = stock_candidates.StockCandidate('pre', 'gelu', 8, 1)
  x = np.random.default_rng(2).random((16, 3, 1))
  with jax.enable_x64(True):
    params = cand.init(0, 3, 1)
    plain = cand.network().apply({'params': params}, x)
    reduced = cand.training_network(8).apply({'params': params}, x)
    grads = jax.grad(lambda p: jnp.sum(cand.training_network(8).apply({'params': p}, x)))(
        params)
  gap = float(np.max(np.abs(np.asarray(plain) - np.asarray(reduced))))
  assert 1e-5 < gap < 0.5
  assert jax.tree_util.tree_structure(grads) == jax.tree_util.tree_structure(params)
  assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree_util.tree_leaves(grads))
  assert cand.training_network(None) == cand.network()


@pytest.mark.parametrize('arithmetic, bits', [('bfloat16', 8), ('tf32', 11), ('float32', None)])
def test_search_trains_stock_blocks_with_the_arithmetics_operands(monkeypatch, arithmetic, bits):
  """train_and_certify hands ``train`` the operand-reduced block for TF32 / bfloat16 and the
  plain one otherwise; what it certifies is the plain block (its stand-in sees it)."""
  trained, certified = [], []
  real_train = trainer.train

  def spy(network, *args, **kwargs):
    trained.append(network.operand_bits)
    return real_train(network, *args, **kwargs)

  def certify(f, g, *, d, n, p, arithmetic, epsilon, max_minutes, lipschitz):
    certified.append(g[0].operand_bits)
    return _StandIn(1.0, False, np.full((1, n, d), 0.5))

  monkeypatch.setattr(trainer, 'train', spy)
  trainer.train_and_certify('token_times_mean', 0.2, d=1, n=3, arithmetic=arithmetic,
                            max_minutes=1, architectures=('stock_post_relu',), max_width=8,
                            steps=20, batch=64, pool=256, refine_rounds=0, certifier=certify,
                            sample_fraction=100.0)
  assert trained == [bits] and certified == [None]
