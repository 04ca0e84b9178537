r"""Any standard Transformer as a plain dict of NumPy arrays: the format, its checks, its hash.

The format keeps the matrix orientation of ``layers`` (Yun et al. eqs. (1)-(2), the
paper's ``W in R^{out x in}``); D is the residual width, d the token width, n the tokens:

    {'embed':      [D, d]      (optional)   Z_0 = X embed^T       (else X zero-padded to D)
     'positional': [n, D]      (optional)   Z_0 <- Z_0 + E
     'blocks': [ {'W_Q': [h, m, D], 'b_Q': [h, m] (optional), 'W_K': [h, m, D],
                  'W_V': [h, m, D], 'W_O': [h, D, m],
                  'W_1': [r, D], 'b_1': [r], 'W_2': [D, r], 'b_2': [D]}, ... ],
     'readout':    [d, D]      (optional)   Y = Z_L readout^T     (else the first d of Z_L)}

Each block is Attn then FF, token-major (z_j the j-th token's row of Z):

    q_j^i = W_Q^i z_j + b_Q^i,  k_j^i = W_K^i z_j,  v_j^i = W_V^i z_j
    a_jk^i = softmax_k(q_j^i . k_k^i)                (over keys k, no scale: fold any
                                                      1/sqrt(m) into W_Q and b_Q)
    z_j <- z_j + sum_i W_O^i sum_k a_jk^i v_k^i                                 (Attn)
    z_j <- z_j + W_2 ReLU(W_1 z_j + b_1) + b_2                                  (FF)

A block may leave out all four attention keys (and b_Q), or all four FF keys; a partial set
is refused. There are no other biases and no other operations: a LayerNorm, GELU or any
other key is refused in one line that names it.

``check`` turns a dict into a ``Net`` (float64 arrays, b_Q filled with zeros) or refuses it
in one line; ``from_network`` reads the project's ``modules.Network`` with its params;
``params_hash`` is the identity certificates and saved files carry; ``apply`` evaluates in
NumPy (float64 or float32, a reference, not a certified evaluation).
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

#: The attention keys of a block (b_Q optional), and the feed-forward keys.
ATTENTION_KEYS = ('W_Q', 'W_K', 'W_V', 'W_O')
FF_KEYS = ('W_1', 'b_1', 'W_2', 'b_2')
TOP_KEYS = ('embed', 'positional', 'blocks', 'readout')
#: Names that identify operations outside the class, for the one-line refusal.
_KNOWN_UNSUPPORTED = {
    'ln': 'LayerNorm', 'layernorm': 'LayerNorm', 'layer_norm': 'LayerNorm', 'norm': 'LayerNorm',
    'gamma': 'LayerNorm', 'beta': 'LayerNorm', 'scale': 'LayerNorm', 'gelu': 'GELU',
    'b_k': 'a key bias', 'b_v': 'a value bias', 'b_o': 'an output bias', 'phi': 'a Phi activation',
}


@dataclasses.dataclass(frozen=True)
class Block:
  """One block: ``attention`` = (W_Q, b_Q, W_K, W_V, W_O) or None, ``ff`` = (W_1, b_1, W_2,
  b_2) or None (float64 arrays)."""

  attention: tuple | None
  ff: tuple | None

  @property
  def heads(self) -> int:
    return 0 if self.attention is None else self.attention[0].shape[0]

  @property
  def head_size(self) -> int:
    return 0 if self.attention is None else self.attention[0].shape[1]

  @property
  def width(self) -> int:
    return 0 if self.ff is None else self.ff[0].shape[0]


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

  def as_dict(self) -> dict:
    """The plain-dict format (module docstring); b_Q always present."""
    out = {'blocks': []}
    for name in ('embed', 'positional', 'readout'):
      if getattr(self, name) is not None:
        out[name] = getattr(self, name)
    for b in self.blocks:
      blk = {}
      if b.attention is not None:
        blk.update(zip(('W_Q', 'b_Q', 'W_K', 'W_V', 'W_O'), b.attention))
      if b.ff is not None:
        blk.update(zip(FF_KEYS, b.ff))
      out['blocks'].append(blk)
    return out

  def arrays(self):
    """(name, array) pairs in one fixed order: the parameters, every one."""
    for name in ('embed', 'positional'):
      if getattr(self, name) is not None:
        yield name, getattr(self, name)
    for i, b in enumerate(self.blocks):
      if b.attention is not None:
        yield from ((f'blocks.{i}.{k}', a)
                    for k, a in zip(('W_Q', 'b_Q', 'W_K', 'W_V', 'W_O'), b.attention))
      if b.ff is not None:
        yield from ((f'blocks.{i}.{k}', a) for k, a in zip(FF_KEYS, b.ff))
    if self.readout is not None:
      yield 'readout', self.readout

  def architecture(self) -> str:
    """A one-line description: widths, and per block heads x head size and FF width."""
    blocks = ', '.join(f'[attn {b.heads}x{b.head_size}, ff {b.width}]' for b in self.blocks)
    return (f'd={self.d}, D={self.D}, n={self.n}, embed={self.embed is not None}, '
            f'positional={self.positional is not None}, readout={self.readout is not None}, '
            f'blocks: {blocks}')

  def count_params(self) -> int:
    return int(sum(a.size for _, a in self.arrays()))

  def count_nonzero(self) -> int:
    return int(sum(np.count_nonzero(a) for _, a in self.arrays()))

  @property
  def permutation_equivariant(self) -> bool:
    """Without positional encodings every block and the token-wise maps commute with
    permutations of the tokens (in real arithmetic)."""
    return self.positional is None


def _array(value, where: str) -> np.ndarray:
  try:
    arr = np.asarray(value)
  except Exception:  # noqa: BLE001 -- any unreadable value gets the one line
    raise ValueError(f'{where} is not an array.') from None
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


def _unsupported(key: str, where: str):
  op = _KNOWN_UNSUPPORTED.get(key.lower())
  if op is None:
    for name, label in _KNOWN_UNSUPPORTED.items():
      if name in key.lower() and len(name) > 2:
        op = label
        break
  what = f'{op} ({key!r})' if op else repr(key)
  raise ValueError(f'{where} holds {what}, which is not an operation of the standard '
                   'Transformer class (softmax attention, ReLU feed-forward, residuals); '
                   f'allowed keys: {", ".join(ATTENTION_KEYS + ("b_Q",) + FF_KEYS)}.')


def check(net, *, d: int | None = None, n: int | None = None) -> Net:
  """The dict ``net`` (module docstring) as a ``Net``, or ValueError in one line.

  Args:
    net: the dict, or a ``Net`` (checked again against d and n).
    d, n: the token width and token count the caller needs (None: not checked; n is then
      taken from ``positional`` if present).
  """
  if isinstance(net, Net):
    net = net.as_dict()
  if not isinstance(net, dict):
    raise ValueError(f'a network dict is needed, got {type(net).__name__}.')
  for key in net:
    if key not in TOP_KEYS:
      _unsupported(str(key), 'the network dict')
  blocks = net.get('blocks')
  if not isinstance(blocks, (list, tuple)) or not blocks:
    raise ValueError("the network dict needs 'blocks', a non-empty list of block dicts.")
  embed = None if net.get('embed') is None else _array(net['embed'], 'embed')
  positional = None if net.get('positional') is None else _array(net['positional'],
                                                                 'positional')
  readout = None if net.get('readout') is None else _array(net['readout'], 'readout')
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
  out_blocks = []
  for i, blk in enumerate(blocks):
    where = f'blocks[{i}]'
    if not isinstance(blk, dict):
      raise ValueError(f'{where} is not a dict.')
    for key in blk:
      if key not in ATTENTION_KEYS + FF_KEYS + ('b_Q',):
        _unsupported(str(key), where)
    att_present = [k for k in ATTENTION_KEYS if k in blk]
    if att_present and len(att_present) < len(ATTENTION_KEYS) or (
        'b_Q' in blk and not att_present):
      missing = [k for k in ATTENTION_KEYS if k not in blk]
      raise ValueError(f'{where} has a partial attention set (missing {missing}); give all '
                       f'of {list(ATTENTION_KEYS)} or none.')
    ff_present = [k for k in FF_KEYS if k in blk]
    if ff_present and len(ff_present) < len(FF_KEYS):
      missing = [k for k in FF_KEYS if k not in blk]
      raise ValueError(f'{where} has a partial feed-forward set (missing {missing}); give '
                       f'all of {list(FF_KEYS)} or none.')
    if not att_present and not ff_present:
      raise ValueError(f'{where} has neither attention nor feed-forward keys.')
    attention = ff = None
    if att_present:
      w_q = _array(blk['W_Q'], f'{where}.W_Q')
      if w_q.ndim != 3:
        raise ValueError(f'{where}.W_Q has shape {list(w_q.shape)}; expected [h, m, {width}].')
      h, m = w_q.shape[:2]
      _shape(w_q, (h, m, width), f'{where}.W_Q')
      b_q = (np.zeros((h, m)) if blk.get('b_Q') is None
             else _shape(_array(blk['b_Q'], f'{where}.b_Q'), (h, m), f'{where}.b_Q'))
      w_k = _shape(_array(blk['W_K'], f'{where}.W_K'), (h, m, width), f'{where}.W_K')
      w_v = _shape(_array(blk['W_V'], f'{where}.W_V'), (h, m, width), f'{where}.W_V')
      w_o = _shape(_array(blk['W_O'], f'{where}.W_O'), (h, width, m), f'{where}.W_O')
      attention = (w_q, b_q, w_k, w_v, w_o)
    if ff_present:
      w_1 = _array(blk['W_1'], f'{where}.W_1')
      if w_1.ndim != 2:
        raise ValueError(f'{where}.W_1 has shape {list(w_1.shape)}; expected [r, {width}].')
      r = w_1.shape[0]
      _shape(w_1, (r, width), f'{where}.W_1')
      b_1 = _shape(_array(blk['b_1'], f'{where}.b_1'), (r,), f'{where}.b_1')
      w_2 = _shape(_array(blk['W_2'], f'{where}.W_2'), (width, r), f'{where}.W_2')
      b_2 = _shape(_array(blk['b_2'], f'{where}.b_2'), (width,), f'{where}.b_2')
      ff = (w_1, b_1, w_2, b_2)
    out_blocks.append(Block(attention, ff))
  return Net(d=int(d_in), D=int(width), n=None if tokens is None else int(tokens),
             embed=embed, positional=positional, blocks=tuple(out_blocks), readout=readout)


def from_network(network, params, *, d: int | None = None) -> Net:
  """The project's ``modules.Network`` with its params as a ``Net`` (softmax attention and
  ReLU feed-forward only; a segment's softmax scale lam is folded into W_Q and b_Q).

  ``d``: the token width, needed when the network pads its input (``embed_width``)."""
  blocks = []
  for i, seg in enumerate(network.segments):
    p = params[f'segment_{i}']
    if seg.has_attention and seg.normalizer != 'softmax':
      raise ValueError(f'segment {i} uses {seg.normalizer} attention; only softmax attention '
                       'can be certified as a standard Transformer.')
    if seg.has_feedforward and seg.activation != 'relu':
      raise ValueError(f'segment {i} uses the {seg.activation} activation; only ReLU '
                       'feed-forward layers can be certified.')
    for layer in range(seg.depth):
      blk = {}
      if seg.has_attention:
        a = {k: np.asarray(v[layer], np.float64) for k, v in p['attention'].items()}
        blk.update(W_Q=a['W_Q'] * seg.lam, b_Q=a['b_Q'] * seg.lam, W_K=a['W_K'],
                   W_V=a['W_V'], W_O=a['W_O'])
      if seg.has_feedforward:
        blk.update({k: np.asarray(v[layer], np.float64) for k, v in p['feedforward'].items()})
      blocks.append(blk)
  out = {'blocks': blocks}
  if network.positional:
    out['positional'] = np.asarray(params['E'], np.float64)
  width = np.shape(blocks[0].get('W_Q', blocks[0].get('W_1')))[-1]
  if network.embed_width is None:
    d = width
  elif d is None:
    raise ValueError('this Network pads its input to embed_width; pass d= (the token width).')
  return check(out, d=d)


def params_hash(net: Net) -> str:
  """sha256 over the architecture line and every parameter (name, shape, float64 bytes,
  little-endian, in ``Net.arrays`` order): the identity of g."""
  h = hashlib.sha256(net.architecture().encode())
  for name, arr in net.arrays():
    h.update(f'{name}:{list(arr.shape)}'.encode())
    h.update(np.ascontiguousarray(arr, dtype='<f8').tobytes())
  return 'sha256:' + h.hexdigest()


def cast(net: Net, dtype) -> Net:
  """The same network with every parameter rounded to ``dtype`` (round to nearest) and
  held as float64 again: the real network that a ``dtype`` runtime stores."""
  def c(a):
    return None if a is None else np.asarray(a, dtype).astype(np.float64)
  blocks = tuple(Block(None if b.attention is None else tuple(c(a) for a in b.attention),
                       None if b.ff is None else tuple(c(a) for a in b.ff))
                 for b in net.blocks)
  return dataclasses.replace(net, embed=c(net.embed), positional=c(net.positional),
                             blocks=blocks, readout=c(net.readout))


def apply(net: Net, x, dtype=np.float64) -> np.ndarray:
  """g(X) in NumPy, every operation in ``dtype``: x [batch, n, d] -> [batch, n, d]."""
  x = np.asarray(x, dtype)
  z = (x @ net.embed.T.astype(dtype) if net.embed is not None
       else np.pad(x, [(0, 0), (0, 0), (0, net.D - net.d)]))
  if net.positional is not None:
    z = z + net.positional.astype(dtype)
  for b in net.blocks:
    if b.attention is not None:
      w_q, b_q, w_k, w_v, w_o = (a.astype(dtype) for a in b.attention)
      q = np.einsum('bnD,hmD->bhnm', z, w_q) + b_q[None, :, None, :]
      k = np.einsum('bnD,hmD->bhnm', z, w_k)
      v = np.einsum('bnD,hmD->bhnm', z, w_v)
      s = np.einsum('bhjm,bhkm->bhjk', q, k)
      s = s - s.max(axis=-1, keepdims=True)
      e = np.exp(s)
      a = e / e.sum(axis=-1, keepdims=True)
      z = z + np.einsum('bhjm,hDm->bjD', np.einsum('bhjk,bhkm->bhjm', a, v), w_o)
    if b.ff is not None:
      w_1, b_1, w_2, b_2 = (a.astype(dtype) for a in b.ff)
      z = z + np.maximum(z @ w_1.T + b_1, 0) @ w_2.T + b_2
  return z @ net.readout.T.astype(dtype) if net.readout is not None else z[..., :net.d]


def from_realized(g) -> Net:
  """The project's realized network g (any approximator's ``realize``: ``segments``,
  ``params``, ``positional``, ``n``, ``d`` and, for a residual stream wider than the tokens,
  ``model_width``) as a ``Net``: the float64 numbers of its params (exact rationals rounded
  to nearest), each segment's softmax scale folded into W_Q and b_Q (``from_network``).
  Duck-typed: this module imports nothing of ``yun``."""
  for name in ('segments', 'params', 'positional', 'n', 'd'):
    if not hasattr(g, name):
      raise ValueError(f'from_realized needs a realized network (segments, params, '
                       f'positional, n, d); {type(g).__name__} has no {name!r}.')
  width = getattr(g, 'model_width', None)

  class _Shape:  # what from_network reads of a modules.Network
    segments = tuple(g.segments)
    positional = bool(g.positional)
    embed_width = width if width is not None and width > g.d else None

  params = {k: (v if k != 'E' else np.asarray(v, np.float64)) for k, v in g.params.items()}
  return check(from_network(_Shape, params, d=g.d).as_dict(), d=g.d, n=g.n)
