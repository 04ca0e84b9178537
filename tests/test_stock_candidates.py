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

from transformer_ua import layers
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
