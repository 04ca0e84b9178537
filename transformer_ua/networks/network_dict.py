r"""Any standard Transformer as a plain dict of NumPy arrays: the format, its checks, its hash.

The format (version 2; a version-1 dict means what it meant and keeps its hash) keeps the
matrix orientation of ``layers`` (Yun et al. eqs. (1)-(2), the paper's ``W in R^{out x in}``);
D is the residual width, d the token width, n the tokens. Every key but 'blocks' is optional:

    {'embed': [D, d], 'embed_bias': [D]        Z_0 = X embed^T + embed_bias
                                               (no embed: X zero-padded to D)
     'positional': [n, D]                      Z_0 <- Z_0 + E
     'blocks': [ {attention: 'W_Q' [h, m, D], 'b_Q' [h, m], 'W_K' [h, m, D], 'b_K' [h, m],
                             'W_V' [h, m, D], 'b_V' [h, m], 'W_O' [h, D, m], 'b_O' [D],
                             'scale': float, 'mask': 'causal',
                  feed-forward: 'W_1' [r, D], 'b_1' [r], 'W_2' [D, r], 'b_2' [D],
                             'activation': 'relu' | 'gelu' | 'gelu_tanh',
                  'ln_attn', 'ln_ff': {'gamma': [D], 'beta': [D], 'eps': float},
                  'norm': 'post' | 'pre'}, ... ],
     'final_ln': {'gamma': [D], 'beta': [D], 'eps': float}
     'readout': [d, D], 'readout_bias': [d]}   Y = Z_L readout^T + readout_bias
                                               (no readout: the first d of Z_L)

Each block is Attn then FF, token-major (z_j the j-th token's row of Z):

    q_j^i = W_Q^i z_j + b_Q^i,  k_j^i = W_K^i z_j + b_K^i,  v_j^i = W_V^i z_j + b_V^i
    s_jk^i = scale * (q_j^i . k_k^i)       (the scale its own multiplication after the dot
                                            product, as runtimes compute it; default 1: none)
    a_jk^i = softmax_{k in K_j}(s_jk^i)    K_j = all keys, or k <= j with mask 'causal'
                                           (a_jk = 0 exactly for k > j)
    Attn(z)_j = sum_i W_O^i sum_k a_jk^i v_k^i + b_O
    FF(z)_j   = W_2 act(W_1 z_j + b_1) + b_2,   act = ReLU, GELU(x) = x Phi(x) ('gelu', erf
                form) or 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) ('gelu_tanh')
    LN(z)_j   = gamma (z_j - mu_j) / sqrt(var_j + eps) + beta,  mu_j, var_j the mean and the
                biased variance of z_j's D entries
    no norm:    z <- z + Attn(z);            z <- z + FF(z)
    'post':     z <- LN_attn(z + Attn(z));   z <- LN_ff(z + FF(z))      (torch's default)
    'pre':      z <- z + Attn(LN_attn(z));   z <- z + FF(LN_ff(z))      (norm_first=True)
    (an absent ln_attn or ln_ff is the identity). The forward pass: embed (+ bias),
    positional, the blocks, final_ln, readout (+ bias).

A block may leave out all its attention keys or all its FF keys; a partial set is refused,
and so is anything else (an unknown key, activation or mask, a LayerNorm without 'norm', a
'norm' without a LayerNorm, float16 arrays; bfloat16 arrays unless arithmetic='bfloat16'),
in one line naming the key and where it sits.

``check`` turns a dict into a ``Net`` (float64 arrays; b_Q filled with zeros, other absent
biases None) or refuses it in one line (``project_import`` reads the project's own networks
into one); ``params_hash`` is the identity certificates and saved
files carry (a default, absent value enters it nowhere, so version-1 hashes are unchanged);
``from_flat`` rebuilds a dict from ``Net.arrays`` and ``Net.settings``; ``network_apply.apply``
evaluates a Net in NumPy (a reference, not a certified evaluation).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math

import numpy as np

#: The attention keys a block must give together (b_Q, b_K, b_V, b_O, scale, mask optional).
ATTENTION_KEYS = ('W_Q', 'W_K', 'W_V', 'W_O')
ATTENTION_OPTIONAL = ('b_Q', 'b_K', 'b_V', 'b_O', 'scale', 'mask')
FF_KEYS = ('W_1', 'b_1', 'W_2', 'b_2')
FF_OPTIONAL = ('activation',)
NORM_KEYS = ('ln_attn', 'ln_ff', 'norm')
BLOCK_KEYS = ATTENTION_KEYS + ATTENTION_OPTIONAL + FF_KEYS + FF_OPTIONAL + NORM_KEYS
TOP_KEYS = ('embed', 'embed_bias', 'positional', 'blocks', 'final_ln', 'readout',
            'readout_bias')
LN_KEYS = ('gamma', 'beta', 'eps')
ACTIVATIONS = ('relu', 'gelu', 'gelu_tanh')
MASKS = ('causal',)
NORMS = ('post', 'pre')
#: Names that identify operations outside the class, for the one-line refusal.
_KNOWN_UNSUPPORTED = {
    'tanh': 'a tanh activation', 'sigmoid': 'a sigmoid activation', 'dropout': 'dropout',
    'rmsnorm': 'RMSNorm', 'rms_norm': 'RMSNorm', 'batchnorm': 'BatchNorm', 'conv': 'a convolution',
    'phi': 'a Phi activation', 'rotary': 'rotary embeddings', 'alibi': 'ALiBi',
    'layernorm': "a LayerNorm (give it as ln_attn / ln_ff / final_ln {gamma, beta, eps})",
    'layer_norm': "a LayerNorm (give it as ln_attn / ln_ff / final_ln {gamma, beta, eps})",
    'gelu': "a GELU (give it as activation='gelu' or 'gelu_tanh')",
}


@dataclasses.dataclass(frozen=True)
class Attention:
  """Softmax attention (module docstring): float64 arrays; b_q zeros when absent, b_k, b_v,
  b_o None when absent; ``scale`` multiplies the scores after the dot product (1: none);
  ``causal``: keys k > j get weight 0."""

  w_q: np.ndarray
  b_q: np.ndarray
  w_k: np.ndarray
  b_k: np.ndarray | None
  w_v: np.ndarray
  b_v: np.ndarray | None
  w_o: np.ndarray
  b_o: np.ndarray | None
  scale: float = 1.0
  causal: bool = False

  #: (dict key, field) of the arrays, in the hash's order.
  ARRAYS = (('W_Q', 'w_q'), ('b_Q', 'b_q'), ('W_K', 'w_k'), ('b_K', 'b_k'), ('W_V', 'w_v'),
            ('b_V', 'b_v'), ('W_O', 'w_o'), ('b_O', 'b_o'))

  @property
  def heads(self) -> int:
    return self.w_q.shape[0]

  @property
  def head_size(self) -> int:
    return self.w_q.shape[1]


@dataclasses.dataclass(frozen=True)
class FeedForward:
  """z -> W_2 act(W_1 z + b_1) + b_2, act one of ``ACTIVATIONS``."""

  w_1: np.ndarray
  b_1: np.ndarray
  w_2: np.ndarray
  b_2: np.ndarray
  activation: str = 'relu'

  ARRAYS = (('W_1', 'w_1'), ('b_1', 'b_1'), ('W_2', 'w_2'), ('b_2', 'b_2'))

  @property
  def width(self) -> int:
    return self.w_1.shape[0]


@dataclasses.dataclass(frozen=True)
class LayerNorm:
  """gamma (z - mu) / sqrt(var + eps) + beta over a token's D entries (biased var)."""

  gamma: np.ndarray
  beta: np.ndarray
  eps: float


@dataclasses.dataclass(frozen=True)
class Block:
  """One block (module docstring): ``attention`` and ``ff`` or None, the LayerNorms or None,
  ``norm`` 'post' | 'pre' (None iff both LayerNorms are None)."""

  attention: Attention | None
  ff: FeedForward | None
  ln_attn: LayerNorm | None = None
  ln_ff: LayerNorm | None = None
  norm: str | None = None

  @property
  def heads(self) -> int:
    return 0 if self.attention is None else self.attention.heads

  @property
  def head_size(self) -> int:
    return 0 if self.attention is None else self.attention.head_size

  @property
  def width(self) -> int:
    return 0 if self.ff is None else self.ff.width

  def describe(self) -> str:
    """'[attn hxm, ff r]' (the version-1 text) and, only where present, the new options."""
    att = f'attn {self.heads}x{self.head_size}'
    if self.attention is not None:
      if self.attention.scale != 1.0:
        att += f' scale={self.attention.scale!r}'
      if self.attention.causal:
        att += ' causal'
    ff = f'ff {self.width}'
    if self.ff is not None and self.ff.activation != 'relu':
      ff += f' {self.ff.activation}'
    extra = ''
    if self.norm is not None:
      eps = ','.join(f'{name}={ln.eps!r}' for name, ln in (('ln_attn', self.ln_attn),
                                                           ('ln_ff', self.ln_ff))
                     if ln is not None)
      extra = f', {self.norm}-LN {eps}'
    return f'[{att}, {ff}{extra}]'


@dataclasses.dataclass(frozen=True)
class Net:
  """A checked network: token width d, residual width D, tokens n (None when any n runs)."""

  d: int
  D: int
  n: int | None
  embed: np.ndarray | None
  positional: np.ndarray | None
  blocks: tuple
  readout: np.ndarray | None
  embed_bias: np.ndarray | None = None
  final_ln: LayerNorm | None = None
  readout_bias: np.ndarray | None = None

  def as_dict(self) -> dict:
    """The plain-dict format (module docstring); b_Q always present, defaults left out."""
    out = {'blocks': []}
    for name in ('embed', 'embed_bias', 'positional', 'readout', 'readout_bias'):
      if getattr(self, name) is not None:
        out[name] = getattr(self, name)
    if self.final_ln is not None:
      out['final_ln'] = _ln_dict(self.final_ln)
    for b in self.blocks:
      blk = {}
      if b.attention is not None:
        a = b.attention
        blk.update((k, getattr(a, f)) for k, f in Attention.ARRAYS
                   if getattr(a, f) is not None)
        if a.scale != 1.0:
          blk['scale'] = a.scale
        if a.causal:
          blk['mask'] = 'causal'
      if b.ff is not None:
        blk.update((k, getattr(b.ff, f)) for k, f in FeedForward.ARRAYS)
        if b.ff.activation != 'relu':
          blk['activation'] = b.ff.activation
      for name in ('ln_attn', 'ln_ff'):
        if getattr(b, name) is not None:
          blk[name] = _ln_dict(getattr(b, name))
      if b.norm is not None:
        blk['norm'] = b.norm
      out['blocks'].append(blk)
    return out

  def arrays(self):
    """(name, array) pairs in one fixed order: the parameters, every one (a version-1 net:
    the version-1 names and order)."""
    for name in ('embed', 'embed_bias', 'positional'):
      if getattr(self, name) is not None:
        yield name, getattr(self, name)
    for i, b in enumerate(self.blocks):
      if b.attention is not None:
        yield from ((f'blocks.{i}.{k}', getattr(b.attention, f)) for k, f in Attention.ARRAYS
                    if getattr(b.attention, f) is not None)
      if b.ff is not None:
        yield from ((f'blocks.{i}.{k}', getattr(b.ff, f)) for k, f in FeedForward.ARRAYS)
      for name in ('ln_attn', 'ln_ff'):
        ln = getattr(b, name)
        if ln is not None:
          yield f'blocks.{i}.{name}.gamma', ln.gamma
          yield f'blocks.{i}.{name}.beta', ln.beta
    if self.final_ln is not None:
      yield 'final_ln.gamma', self.final_ln.gamma
      yield 'final_ln.beta', self.final_ln.beta
    for name in ('readout', 'readout_bias'):
      if getattr(self, name) is not None:
        yield name, getattr(self, name)

  def settings(self) -> dict:
    """The non-array, non-default values under their ``arrays``-style names
    ('blocks.0.scale', 'blocks.0.mask', 'blocks.0.activation', 'blocks.0.norm',
    'blocks.0.ln_attn.eps', 'final_ln.eps'): with ``arrays``, all of the net."""
    out = {}
    for i, b in enumerate(self.blocks):
      if b.attention is not None and b.attention.scale != 1.0:
        out[f'blocks.{i}.scale'] = b.attention.scale
      if b.attention is not None and b.attention.causal:
        out[f'blocks.{i}.mask'] = 'causal'
      if b.ff is not None and b.ff.activation != 'relu':
        out[f'blocks.{i}.activation'] = b.ff.activation
      if b.norm is not None:
        out[f'blocks.{i}.norm'] = b.norm
      for name in ('ln_attn', 'ln_ff'):
        if getattr(b, name) is not None:
          out[f'blocks.{i}.{name}.eps'] = getattr(b, name).eps
    if self.final_ln is not None:
      out['final_ln.eps'] = self.final_ln.eps
    return out

  def architecture(self) -> str:
    """A one-line description: widths, and per block heads x head size and FF width (and,
    only where present, the version-2 options: it enters ``params_hash``)."""
    blocks = ', '.join(b.describe() for b in self.blocks)
    line = (f'd={self.d}, D={self.D}, n={self.n}, embed={self.embed is not None}, '
            f'positional={self.positional is not None}, readout={self.readout is not None}, '
            f'blocks: {blocks}')
    extra = [name for name in ('embed_bias', 'readout_bias') if getattr(self, name) is not None]
    if self.final_ln is not None:
      extra.append(f'final_ln eps={self.final_ln.eps!r}')
    return line + (f', {", ".join(extra)}' if extra else '')

  def count_params(self) -> int:
    return int(sum(a.size for _, a in self.arrays()))

  def count_nonzero(self) -> int:
    return int(sum(np.count_nonzero(a) for _, a in self.arrays()))

  @property
  def causal(self) -> bool:
    return any(b.attention is not None and b.attention.causal for b in self.blocks)

  @property
  def permutation_equivariant(self) -> bool:
    """Without positional encodings and causal masks every block and the token-wise maps
    commute with permutations of the tokens (in real arithmetic)."""
    return self.positional is None and not self.causal


def _ln_dict(ln: LayerNorm) -> dict:
  return {'gamma': ln.gamma, 'beta': ln.beta, 'eps': ln.eps}


def _array(value, where: str, arithmetic: str | None = None) -> np.ndarray:
  dtype = getattr(value, 'dtype', None)
  name = str(dtype) if dtype is not None else ''
  if name in ('float16', 'torch.float16', 'half'):
    raise ValueError(f'{where} is float16; float16 weights are refused (no float16 arithmetic '
                     'is certified: convert the network to float32 and certify that).')
  if name in ('bfloat16', 'torch.bfloat16') and arithmetic != 'bfloat16':
    raise ValueError(f'{where} is bfloat16; bfloat16 weights are accepted only with '
                     f"arithmetic='bfloat16' (got {arithmetic!r}).")
  try:
    arr = np.asarray(value)
  except Exception:  # noqa: BLE001 -- any unreadable value gets the one line
    raise ValueError(f'{where} is not an array.') from None
  if arr.dtype.name == 'bfloat16':
    arr = arr.astype(np.float32)
  if arr.dtype.kind not in 'fiu' or arr.dtype == bool:
    raise ValueError(f'{where} has dtype {arr.dtype}; a real numeric array is needed.')
  arr = arr.astype(np.float64)
  if not np.all(np.isfinite(arr)):
    raise ValueError(f'{where} has non-finite entries (NaN or inf); every weight must be '
                     'finite.')
  return arr


def _shape(arr: np.ndarray, shape: tuple, where: str) -> np.ndarray:
  if arr.shape != tuple(shape):
    raise ValueError(f'{where} has shape {list(arr.shape)}; expected {list(shape)}.')
  return arr


def _unsupported(key: str, where: str, allowed):
  op = _KNOWN_UNSUPPORTED.get(key.lower())
  if op is None:
    for name, label in _KNOWN_UNSUPPORTED.items():
      if name in key.lower() and len(name) > 2:
        op = label
        break
  what = f'{op} ({key!r})' if op else repr(key)
  raise ValueError(f'{where} holds {what}, which is not a key of the network dict (the '
                   'standard Transformer class: softmax attention, ReLU/GELU feed-forward, '
                   f'LayerNorm, residuals); allowed keys there: {", ".join(allowed)}.')


def _float(value, where: str, *, positive: bool = False) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
    if not (isinstance(value, np.ndarray) and value.shape == ()):
      raise ValueError(f'{where} is {value!r}; a finite number is needed.')
  x = float(value)
  if not math.isfinite(x) or (positive and x <= 0):
    raise ValueError(f'{where} is {x!r}; a finite{" positive" if positive else ""} number is '
                     'needed.')
  return x


def _layer_norm(value, width: int, where: str, arithmetic) -> LayerNorm:
  if not isinstance(value, dict):
    raise ValueError(f"{where} is not a dict {{'gamma': [D], 'beta': [D], 'eps': float}}.")
  for key in value:
    if key not in LN_KEYS:
      _unsupported(str(key), where, LN_KEYS)
  missing = [k for k in LN_KEYS if k not in value]
  if missing:
    raise ValueError(f'{where} has a partial LayerNorm (missing {missing}); give all of '
                     f'{list(LN_KEYS)}.')
  gamma = _shape(_array(value['gamma'], f'{where}.gamma', arithmetic), (width,),
                 f'{where}.gamma')
  beta = _shape(_array(value['beta'], f'{where}.beta', arithmetic), (width,), f'{where}.beta')
  return LayerNorm(gamma, beta, _float(value['eps'], f'{where}.eps', positive=True))


def _choice(value, allowed, where: str) -> str:
  if not isinstance(value, str) or value not in allowed:
    raise ValueError(f'{where} is {value!r}; allowed: {", ".join(map(repr, allowed))}.')
  return value


def _vector(blk: dict, key: str, shape: tuple, where: str, arithmetic):
  if blk.get(key) is None:
    return None
  return _shape(_array(blk[key], f'{where}.{key}', arithmetic), shape, f'{where}.{key}')


def _block(blk, width: int, where: str, arithmetic) -> Block:
  if not isinstance(blk, dict):
    raise ValueError(f'{where} is not a dict.')
  for key in blk:
    if key not in BLOCK_KEYS:
      _unsupported(str(key), where, BLOCK_KEYS)
  att_present = [k for k in ATTENTION_KEYS if k in blk]
  att_options = [k for k in ATTENTION_OPTIONAL if k in blk]
  if att_present and len(att_present) < len(ATTENTION_KEYS) or (att_options and
                                                                not att_present):
    missing = [k for k in ATTENTION_KEYS if k not in blk]
    raise ValueError(f'{where} has a partial attention set (missing {missing}); give all '
                     f'of {list(ATTENTION_KEYS)} or none (and then none of '
                     f'{list(ATTENTION_OPTIONAL)}).')
  ff_present = [k for k in FF_KEYS if k in blk]
  if ff_present and len(ff_present) < len(FF_KEYS) or ('activation' in blk and not ff_present):
    missing = [k for k in FF_KEYS if k not in blk]
    raise ValueError(f'{where} has a partial feed-forward set (missing {missing}); give '
                     f'all of {list(FF_KEYS)} or none (and then no activation).')
  if not att_present and not ff_present:
    raise ValueError(f'{where} has neither attention nor feed-forward keys.')
  attention = ff = None
  if att_present:
    w_q = _array(blk['W_Q'], f'{where}.W_Q', arithmetic)
    if w_q.ndim != 3:
      raise ValueError(f'{where}.W_Q has shape {list(w_q.shape)}; expected [h, m, {width}].')
    h, m = w_q.shape[:2]
    _shape(w_q, (h, m, width), f'{where}.W_Q')
    b_q = _vector(blk, 'b_Q', (h, m), where, arithmetic)
    w_k = _shape(_array(blk['W_K'], f'{where}.W_K', arithmetic), (h, m, width), f'{where}.W_K')
    w_v = _shape(_array(blk['W_V'], f'{where}.W_V', arithmetic), (h, m, width), f'{where}.W_V')
    w_o = _shape(_array(blk['W_O'], f'{where}.W_O', arithmetic), (h, width, m), f'{where}.W_O')
    scale = 1.0 if blk.get('scale') is None else _float(blk['scale'], f'{where}.scale')
    mask = None if blk.get('mask') is None else _choice(blk['mask'], MASKS, f'{where}.mask')
    attention = Attention(w_q, np.zeros((h, m)) if b_q is None else b_q, w_k,
                          _vector(blk, 'b_K', (h, m), where, arithmetic), w_v,
                          _vector(blk, 'b_V', (h, m), where, arithmetic), w_o,
                          _vector(blk, 'b_O', (width,), where, arithmetic), scale,
                          mask == 'causal')
  if ff_present:
    w_1 = _array(blk['W_1'], f'{where}.W_1', arithmetic)
    if w_1.ndim != 2:
      raise ValueError(f'{where}.W_1 has shape {list(w_1.shape)}; expected [r, {width}].')
    r = w_1.shape[0]
    _shape(w_1, (r, width), f'{where}.W_1')
    b_1 = _shape(_array(blk['b_1'], f'{where}.b_1', arithmetic), (r,), f'{where}.b_1')
    w_2 = _shape(_array(blk['W_2'], f'{where}.W_2', arithmetic), (width, r), f'{where}.W_2')
    b_2 = _shape(_array(blk['b_2'], f'{where}.b_2', arithmetic), (width,), f'{where}.b_2')
    act = ('relu' if blk.get('activation') is None
           else _choice(blk['activation'], ACTIVATIONS, f'{where}.activation'))
    ff = FeedForward(w_1, b_1, w_2, b_2, act)
  lns = {}
  for name, part, label in (('ln_attn', attention, 'attention'), ('ln_ff', ff, 'feed-forward')):
    if blk.get(name) is not None:
      if part is None:
        raise ValueError(f'{where} has {name} but no {label} keys; a LayerNorm sits with its '
                         'sub-layer.')
      lns[name] = _layer_norm(blk[name], width, f'{where}.{name}', arithmetic)
  norm = None
  if lns and blk.get('norm') is None:
    raise ValueError(f"{where} has {' and '.join(lns)} but no 'norm'; say where the "
                     "LayerNorm sits: 'post' (torch's default) or 'pre' (norm_first=True).")
  if blk.get('norm') is not None:
    if not lns:
      raise ValueError(f"{where} has 'norm' but no LayerNorm (ln_attn or ln_ff).")
    norm = _choice(blk['norm'], NORMS, f'{where}.norm')
  return Block(attention, ff, lns.get('ln_attn'), lns.get('ln_ff'), norm)


def check(net, *, d: int | None = None, n: int | None = None,
          arithmetic: str | None = None) -> Net:
  """The dict ``net`` (module docstring) as a ``Net``, or ValueError in one line.

  Args:
    net: the dict, or a ``Net`` (checked again against d and n).
    d, n: the token width and token count the caller needs (None: not checked; n is then
      taken from ``positional`` if present).
    arithmetic: the arithmetic g will be certified in; bfloat16 arrays need 'bfloat16'
      (float16 arrays are always refused).
  """
  if isinstance(net, Net):
    net = net.as_dict()
  if not isinstance(net, dict):
    raise ValueError(f'a network dict is needed, got {type(net).__name__}.')
  for key in net:
    if key not in TOP_KEYS:
      _unsupported(str(key), 'the network dict', TOP_KEYS)
  blocks = net.get('blocks')
  if not isinstance(blocks, (list, tuple)) or not blocks:
    raise ValueError("the network dict needs 'blocks', a non-empty list of block dicts.")

  def top(name):
    return None if net.get(name) is None else _array(net[name], name, arithmetic)

  embed, positional, readout = top('embed'), top('positional'), top('readout')
  first = blocks[0]
  if not isinstance(first, dict):
    raise ValueError('blocks[0] is not a dict.')
  if embed is not None:
    if embed.ndim != 2:
      raise ValueError(f'embed has shape {list(embed.shape)}; expected [D, d].')
    width, d_in = embed.shape
  else:
    probe = first.get('W_Q', first.get('W_1'))
    if probe is None:
      raise ValueError('blocks[0] has neither attention nor feed-forward keys.')
    width = np.shape(probe)[-1]
    d_in = readout.shape[0] if readout is not None and readout.ndim == 2 else d
    if d_in is None:
      raise ValueError('without embed or readout, pass d= (the token width).')
  if d is not None and d_in != d:
    raise ValueError(f'the network reads tokens of width {d_in}; the target has d={d}.')
  if embed is None and d_in > width:
    raise ValueError(f'the token width d={d_in} exceeds the residual width D={width}.')
  if embed is None and net.get('embed_bias') is not None:
    raise ValueError("the network dict has 'embed_bias' but no 'embed'.")
  if readout is None and net.get('readout_bias') is not None:
    raise ValueError("the network dict has 'readout_bias' but no 'readout'.")
  embed_bias = None if embed is None else _vector(net, 'embed_bias', (width,), 'the network '
                                                  'dict', arithmetic)
  tokens = n
  if positional is not None:
    if positional.ndim != 2 or positional.shape[1] != width:
      raise ValueError(f'positional has shape {list(positional.shape)}; expected '
                       f'[n, {width}].')
    if n is not None and positional.shape[0] != n:
      raise ValueError(f'the network has positional encodings for n={positional.shape[0]} '
                       f'tokens; the target has n={n}.')
    tokens = positional.shape[0]
  if readout is not None:
    _shape(readout, (d_in, width), 'readout')
  readout_bias = None if readout is None else _vector(net, 'readout_bias', (d_in,),
                                                      'the network dict', arithmetic)
  final_ln = (None if net.get('final_ln') is None
              else _layer_norm(net['final_ln'], width, 'final_ln', arithmetic))
  out_blocks = tuple(_block(blk, width, f'blocks[{i}]', arithmetic)
                     for i, blk in enumerate(blocks))
  return Net(d=int(d_in), D=int(width), n=None if tokens is None else int(tokens),
             embed=embed, positional=positional, blocks=out_blocks, readout=readout,
             embed_bias=embed_bias, final_ln=final_ln, readout_bias=readout_bias)


def from_flat(arrays: dict, settings: dict | None = None) -> dict:
  """The dict format from ``Net.arrays()`` names (and ``Net.settings()``): the inverse
  used by saved files. Names it does not know land as keys that ``check`` refuses."""
  out, blocks = {}, {}
  items = list(arrays.items()) + list((settings or {}).items())
  for name, a in items:
    parts = name.split('.')
    if parts[0] == 'blocks' and len(parts) >= 3 and parts[1].isdigit():
      blk = blocks.setdefault(int(parts[1]), {})
      if len(parts) == 4:
        blk.setdefault(parts[2], {})[parts[3]] = a
      else:
        blk['.'.join(parts[2:])] = a
    elif len(parts) == 2 and parts[0] == 'final_ln':
      out.setdefault('final_ln', {})[parts[1]] = a
    else:
      out[name] = a
  out['blocks'] = [blocks.get(i, {}) for i in range(max(blocks) + 1 if blocks else 0)]
  return out


def params_hash(net: Net) -> str:
  """sha256 over the architecture line and every parameter (name, shape, float64 bytes,
  little-endian, in ``Net.arrays`` order): the identity of g. The version-2 options enter
  through the architecture line and the arrays only where present."""
  h = hashlib.sha256(net.architecture().encode())
  for name, arr in net.arrays():
    h.update(f'{name}:{list(arr.shape)}'.encode())
    h.update(np.ascontiguousarray(arr, dtype='<f8').tobytes())
  return 'sha256:' + h.hexdigest()


