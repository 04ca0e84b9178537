"""The network dict, version 2: the checks, the hash (version-1 hashes unchanged), the round
trips, and ``apply`` against an independent float64 evaluation (torch where it is installed,
else math on scalars)."""

from __future__ import annotations

import glob
import json
import math
import os

import numpy as np
import pytest

from transformer_ua.networks import network_apply, network_dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ln_dict(rng, width, eps=1e-5):
  return {'gamma': rng.uniform(0.5, 1.5, width), 'beta': rng.normal(0, 0.2, width), 'eps': eps}


def v2_dict(seed=0, *, norm='post', activation='gelu', causal=True, d=1, n=3, width=4, h=2,
            m=2, r=6):
  """A random dict with every version-2 option."""
  rng = np.random.default_rng(seed)
  g = lambda *s: rng.normal(0, 0.6, s)  # noqa: E731
  blk = {'W_Q': g(h, m, width), 'b_Q': g(h, m), 'W_K': g(h, m, width), 'b_K': g(h, m),
         'W_V': g(h, m, width), 'b_V': g(h, m), 'W_O': g(h, width, m), 'b_O': g(width),
         'scale': 1 / math.sqrt(m), 'W_1': g(r, width), 'b_1': g(r), 'W_2': g(width, r),
         'b_2': g(width), 'activation': activation}
  if causal:
    blk['mask'] = 'causal'
  if norm is not None:
    blk.update(ln_attn=ln_dict(rng, width), ln_ff=ln_dict(rng, width), norm=norm)
  return {'embed': g(width, d), 'embed_bias': g(width), 'positional': g(n, width),
          'blocks': [blk, dict(blk)], 'final_ln': ln_dict(rng, width, 1e-6),
          'readout': g(d, width), 'readout_bias': g(d)}


# -- version-1 identity ---------------------------------------------------------------------


def test_committed_flat_onnx_files_read_with_their_hashes():
  """Every committed flat network.onnx / g.onnx still reads, under its stored hash."""
  from transformer_ua.networks import flat_onnx
  import onnx
  paths = sorted(glob.glob(os.path.join(ROOT, 'results', '**', '*.onnx'), recursive=True))
  checked = 0
  for p in paths:
    props = {x.key: x.value for x in onnx.load(p).metadata_props}
    if props.get('layout', 'flat') != 'flat' or 'params_hash' not in props:
      continue
    assert network_dict.params_hash(flat_onnx.read(p)) == props['params_hash'], p
    checked += 1
  assert checked >= 5


def test_committed_trained_networks_keep_their_hashes():
  """Every committed trainer network.npz rebuilds (``from_flat``) to the hash in its
  record.json with the row's settings (none for the ladder rows, written by the version-1
  code; scale, activation, norm and LayerNorm eps for the stock rows)."""
  checked, stock = 0, 0
  for p in sorted(glob.glob(os.path.join(ROOT, 'results', '**', 'network.npz'),
                            recursive=True)):
    rec = os.path.join(os.path.dirname(p), 'record.json')
    if not os.path.exists(rec):
      continue
    row = json.load(open(rec, encoding='utf-8'))['row']
    flat = network_dict.from_flat(dict(np.load(p)), row.get('settings'))
    net = network_dict.check(flat, d=row['d'], n=row['n'])
    assert network_dict.params_hash(net) == row['params_hash'], p
    checked += 1
    stock += row.get('family', 'ladder') != 'ladder'
  assert checked >= 10 and stock >= 3


def test_version_2_options_enter_the_hash_only_when_present():
  base = v2_dict(1, norm=None, activation='relu', causal=False)
  blk = base['blocks'][0]
  v1 = {k: base[k] for k in ('embed', 'positional', 'readout')}
  v1['blocks'] = [{k: blk[k] for k in ('W_Q', 'b_Q', 'W_K', 'W_V', 'W_O', 'W_1', 'b_1',
                                       'W_2', 'b_2')}]
  h1 = network_dict.params_hash(network_dict.check(v1))
  # defaults written out explicitly do not change the hash
  explicit = dict(v1, blocks=[dict(v1['blocks'][0], scale=1.0, activation='relu')])
  assert network_dict.params_hash(network_dict.check(explicit)) == h1
  hashes = {h1}
  for key, value in (('scale', 0.5), ('mask', 'causal'), ('activation', 'gelu'),
                     ('activation', 'gelu_tanh'), ('b_K', blk['b_K']), ('b_V', blk['b_V']),
                     ('b_O', blk['b_O'])):
    changed = dict(v1, blocks=[dict(v1['blocks'][0], **{key: value})])
    hashes.add(network_dict.params_hash(network_dict.check(changed)))
  for key in ('embed_bias', 'readout_bias', 'final_ln'):
    hashes.add(network_dict.params_hash(network_dict.check(dict(v1, **{key: base[key]}))))
  for norm in ('post', 'pre'):
    rng = np.random.default_rng(0)
    changed = dict(v1, blocks=[dict(v1['blocks'][0], ln_ff=ln_dict(rng, 4), norm=norm)])
    hashes.add(network_dict.params_hash(network_dict.check(changed)))
  assert len(hashes) == 13


@pytest.mark.parametrize('norm', ['post', 'pre', None])
def test_round_trips(norm):
  net = network_dict.check(v2_dict(2, norm=norm))
  again = network_dict.check(net.as_dict())
  assert network_dict.params_hash(again) == network_dict.params_hash(net)
  flat = network_dict.from_flat(dict(net.arrays()), net.settings())
  assert network_dict.params_hash(network_dict.check(flat)) == network_dict.params_hash(net)
  assert not net.permutation_equivariant          # positional and causal
  nopos = dict(v2_dict(2, norm=norm, causal=False))
  del nopos['positional']
  assert network_dict.check(nopos).permutation_equivariant
  assert not network_dict.check(dict(nopos, blocks=v2_dict(2)['blocks'])).permutation_equivariant


def test_cast_rounds_scale_and_eps():
  net = network_apply.cast(network_dict.check(v2_dict(3)), np.float32)
  a = net.blocks[0].attention
  assert a.scale == float(np.float32(1 / math.sqrt(2)))
  assert net.final_ln.eps == float(np.float32(1e-6))
  assert all(np.array_equal(x, x.astype(np.float32)) for _, x in net.arrays())


# -- bad input, one line each --------------------------------------------------------------


def _refused(g, match, **kw):
  with pytest.raises(ValueError, match=match) as e:
    network_dict.check(g, **kw)
  assert '\n' not in str(e.value)


def test_bad_input_one_line_each():
  g = v2_dict(4)
  blk = g['blocks'][1]
  _refused(dict(g, blocks=[g['blocks'][0], dict(blk, activation='tanh')]),
           r"blocks\[1\]\.activation is 'tanh'; allowed: 'relu', 'gelu', 'gelu_tanh'")
  _refused(dict(g, blocks=[dict(blk, dropout=0.1)]), r"blocks\[0\] holds dropout \('dropout'\)")
  _refused(dict(g, blocks=[dict(blk, mask='padding')]), r"blocks\[0\]\.mask is 'padding'")
  no_norm = {k: v for k, v in blk.items() if k != 'norm'}
  _refused(dict(g, blocks=[no_norm]), r"blocks\[0\] has ln_attn and ln_ff but no 'norm'")
  plain = {k: v for k, v in blk.items() if k not in ('ln_attn', 'ln_ff')}
  _refused(dict(g, blocks=[plain]), r"blocks\[0\] has 'norm' but no LayerNorm")
  _refused(dict(g, blocks=[dict(blk, ln_ff={'gamma': blk['ln_ff']['gamma'],
                                            'beta': blk['ln_ff']['beta']})]),
           r"blocks\[0\]\.ln_ff has a partial LayerNorm \(missing \['eps'\]\)")
  _refused(dict(g, blocks=[dict(blk, ln_ff=dict(blk['ln_ff'], eps=0.0))]),
           r'blocks\[0\]\.ln_ff\.eps is 0\.0; a finite positive number')
  _refused(dict(g, final_ln=dict(g['final_ln'], axis=0)), r"final_ln holds 'axis'")
  _refused(dict(g, blocks=[{k: v for k, v in blk.items() if k != 'W_K'}]),
           r'partial attention set')
  _refused(dict(g, rotary=1), r"the network dict holds rotary embeddings")
  _refused(dict(g, blocks=[dict(blk, W_1=blk['W_1'].astype(np.float16))]),
           r'blocks\[0\]\.W_1 is float16')
  import ml_dtypes
  bf = dict(g, blocks=[dict(blk, W_V=blk['W_V'].astype(ml_dtypes.bfloat16))])
  _refused(bf, r"blocks\[0\]\.W_V is bfloat16; .* only with arithmetic='bfloat16'",
           arithmetic='float32')
  net = network_dict.check(bf, arithmetic='bfloat16')
  assert np.array_equal(net.blocks[0].attention.w_v,
                        blk['W_V'].astype(ml_dtypes.bfloat16).astype(np.float64))


# -- apply against an independent evaluation ---------------------------------------------


def _scalar_reference(g: dict, x: np.ndarray) -> np.ndarray:
  """The module docstring's equations on one point in Python floats (math.erf, math.tanh,
  loops): shares nothing with ``apply``."""
  n, d = x.shape

  def mv(w, v, b=None):
    return [sum(w[i][j] * v[j] for j in range(len(v))) + (0.0 if b is None else b[i])
            for i in range(len(w))]

  def ln(z, p):
    mu = sum(z) / len(z)
    var = sum((t - mu) ** 2 for t in z) / len(z)
    return [p['gamma'][i] * (z[i] - mu) / math.sqrt(var + p['eps']) + p['beta'][i]
            for i in range(len(z))]

  def act(t, kind):
    if kind == 'relu':
      return max(t, 0.0)
    if kind == 'gelu':
      return 0.5 * t * (1 + math.erf(t / math.sqrt(2)))
    return 0.5 * t * (1 + math.tanh(math.sqrt(2 / math.pi) * (t + 0.044715 * t ** 3)))

  z = [[a + b + c for a, b, c in zip(mv(g['embed'], list(x[j]), g['embed_bias']),
                                     g['positional'][j], [0.0] * len(g['embed']))]
       for j in range(n)]
  for blk in g['blocks']:
    def attn(zz):
      out = [list(blk['b_O']) for _ in range(n)]
      for i in range(len(blk['W_Q'])):
        q = [mv(blk['W_Q'][i], zz[j], blk['b_Q'][i]) for j in range(n)]
        k = [mv(blk['W_K'][i], zz[j], blk['b_K'][i]) for j in range(n)]
        v = [mv(blk['W_V'][i], zz[j], blk['b_V'][i]) for j in range(n)]
        for j in range(n):
          keys = range(j + 1) if blk.get('mask') == 'causal' else range(n)
          s = [blk.get('scale', 1.0) * sum(a * b for a, b in zip(q[j], k[kk])) for kk in keys]
          top = max(s)
          e = [math.exp(t - top) for t in s]
          w = [t / sum(e) for t in e]
          mixed = [sum(w[t] * v[kk][c] for t, kk in enumerate(keys)) for c in range(len(v[0]))]
          o = mv(blk['W_O'][i], mixed)
          out[j] = [a + b for a, b in zip(out[j], o)]
      return out

    def ffn(zz):
      return [mv(blk['W_2'], [act(t, blk.get('activation', 'relu'))
                              for t in mv(blk['W_1'], zz[j], blk['b_1'])], blk['b_2'])
              for j in range(n)]

    for fn, key in ((attn, 'ln_attn'), (ffn, 'ln_ff')):
      if blk.get('norm') == 'pre':
        u = [ln(zz, blk[key]) for zz in z]
        z = [[a + b for a, b in zip(zz, o)] for zz, o in zip(z, fn(u))]
      else:
        y = [[a + b for a, b in zip(zz, o)] for zz, o in zip(z, fn(z))]
        z = [ln(t, blk[key]) if key in blk else t for t in y]
  z = [ln(t, g['final_ln']) for t in z]
  return np.array([mv(g['readout'], t, g['readout_bias']) for t in z])


@pytest.mark.parametrize('norm,activation,causal', [
    ('post', 'gelu', True), ('pre', 'gelu_tanh', True), ('post', 'relu', False),
    ('pre', 'relu', False), (None, 'gelu', True)])
def test_apply_matches_scalar_reference(norm, activation, causal):
  g = v2_dict(5, norm=norm, activation=activation, causal=causal)
  net = network_dict.check(g)
  x = np.random.default_rng(1).random((4, 3, 1))
  want = np.stack([_scalar_reference(g, xi) for xi in x])
  got = network_apply.apply(net, x)
  assert np.max(np.abs(got - want)) < 1e-12
  got32 = network_apply.apply(network_apply.cast(net, np.float32), x, np.float32)
  assert got32.dtype == np.float32 and np.max(np.abs(got32 - want)) < 1e-4
