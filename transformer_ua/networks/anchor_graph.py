r"""The state of the importers' interpreter: anchors, the index arrays that point into them,
and the token layout of every entry (``onnx_import`` and ``flax_import`` run on it).

A tracked tensor is an int64 array whose entries are global indices into the anchors (the
outputs of arithmetic operations, laid end to end); the plumbing ops run on these arrays, so
after any Reshape / Transpose / Gather / Split / Concat each entry still names the entry of
the anchor it is. Every anchor entry carries

    tok   the token j whose row it belongs to (-1 where rows are not tokens: scores, weights)
    col   its column in that token's row (for P V: head b, feature a -> b m + a)

so that ``rows`` can say whether an operand is token-wise (each row one token, all rows the
same columns) and ``graph_match.Match`` can read per-head matrices off the index arrays.
"""

from __future__ import annotations

import dataclasses

import numpy as np

#: The class the importers read, for the one-line refusals.
CLASS = ('the class: Linear embed/readout, softmax attention with biases, scale and causal '
          'mask, ReLU/GELU feed-forward, LayerNorm over the token, residuals')


class Refusal(Exception):
  """A pattern did not fit; carries the one line."""


@dataclasses.dataclass
class Anchor:
  kind: str            # the op type (or 'input')
  name: str            # the node name
  shape: tuple
  offset: int
  args: list           # operands: ('t', idx array) or ('c', constant array)
  attrs: dict
  tok: np.ndarray      # per entry (flat): the token of its row, -1 where none
  col: np.ndarray      # per entry (flat): its column in the token's row

  @property
  def size(self) -> int:
    return int(np.prod(self.shape, dtype=np.int64))

  def tracked(self, i: int) -> np.ndarray:
    kind, val = self.args[i]
    if kind != 't':
      raise Refusal(f'node {self.name!r} ({self.kind}) has a constant where a tensor of the '
                     'network was expected.')
    return val

  def const(self, i: int) -> np.ndarray:
    kind, val = self.args[i]
    if kind != 'c':
      raise Refusal(f'node {self.name!r} ({self.kind}) multiplies two tensors of the network '
                     'where a constant was expected.')
    return val


class AnchorGraph:
  """Anchors and their layout; subclasses walk a graph (ONNX nodes, jaxpr equations)."""

  def __init__(self):
    self.anchors: list[Anchor] = []
    self.starts: list[int] = []
    self.size = 0
    self.const: dict = {}
    self.tracked: dict = {}

  def new(self, kind, name, shape, args, attrs, tok, col) -> np.ndarray:
    shape = tuple(int(s) for s in shape)
    a = Anchor(kind, name, shape, self.size, args, attrs, np.asarray(tok, np.int64),
                np.asarray(col, np.int64))
    self.anchors.append(a)
    self.starts.append(self.size)
    self.size += a.size
    return (a.offset + np.arange(a.size, dtype=np.int64)).reshape(shape)

  def owner(self, idx: np.ndarray) -> Anchor:
    ids = np.searchsorted(self.starts, np.asarray(idx).ravel(), side='right') - 1
    if ids.size == 0 or np.any(ids != ids[0]):
      raise Refusal('a tensor mixes entries of two operations where one was expected.')
    return self.anchors[int(ids[0])]

  def owners(self, idx: np.ndarray) -> np.ndarray:
    return np.searchsorted(self.starts, np.asarray(idx).ravel(), side='right') - 1

  def decode(self, idx: np.ndarray):
    """(anchor, token, column) arrays of the entries of ``idx`` (one anchor)."""
    a = self.owner(idx)
    local = np.asarray(idx).ravel() - a.offset
    return a, a.tok[local].reshape(idx.shape), a.col[local].reshape(idx.shape)

  def rows(self, idx: np.ndarray, where: str):
    """A token-wise operand [..., K]: (anchor, token of each row, the K columns)."""
    a, tok, col = self.decode(idx)
    t2 = tok.reshape(-1, idx.shape[-1])
    c2 = col.reshape(-1, idx.shape[-1])
    if np.any(t2 < 0) or np.any(t2 != t2[:, :1]):
      raise Refusal(f'{where} mixes tokens within a row (an operation across the sequence '
                     'axis is not a token-wise map).')
    if np.any(c2 != c2[:1]):
      raise Refusal(f'{where} reads different columns in different tokens.')
    return a, t2[:, 0], c2[0]

  def layout(self, op, name, args, attrs, shape):
    """Token and column of each output entry (-1 tokens where rows are not tokens)."""
    size = int(np.prod(shape, dtype=np.int64))
    none = (np.full(size, -1), np.zeros(size, np.int64))
    t_args = [v for k, v in args if k == 't']
    if op in ('MatMul', 'Gemm'):
      if len(t_args) == 2 and self.owner(t_args[0]).kind == 'Softmax':   # P V: token j, head
        n, m = shape[-2], shape[-1]                                      # columns b*m + a
        b = size // (n * m)
        return (np.tile(np.repeat(np.arange(n), m), b),
                (np.arange(b)[:, None, None] * m + np.arange(m)[None, None, :]
                 + 0 * np.arange(n)[None, :, None]).ravel())
      if len(t_args) != 1:
        return none
      x = args[0][1] if args[0][0] == 't' else None
      if x is None:
        return none
      if op == 'Gemm' and attrs.get('transA', 0):
        raise Refusal(f'node {name!r} (Gemm) transposes its input (transA=1).')
      try:
        _, tok, _ = self.rows(x, f'node {name!r} ({op})')
      except Refusal:
        return none
      return np.repeat(tok, shape[-1]), np.tile(np.arange(shape[-1]), len(tok))
    first = t_args[0]
    if op in ('LayerNormalization', 'ReduceMean', 'ReduceSum', 'ReduceMax', 'Softmax'):
      rank = len(first.shape)
      axes = attrs.get('axes', attrs.get('axis', -1))
      if op == 'ReduceMean' and 'axes' not in attrs and len(args) > 1:
        axes = np.asarray(args[1][1]).tolist()
      axes = sorted(a % rank for a in np.atleast_1d(axes).tolist())
      if op == 'LayerNormalization':
        axes = list(range(axes[0], rank))
      if op not in ('Softmax', 'ReduceMax') and self.owner(first).kind not in (
          'Softmax', 'Exp'):
        a, tok, _ = self.decode(first)
        moved = np.moveaxis(tok, axes, list(range(rank - len(axes), rank)))
        moved = moved.reshape(-1, int(np.prod([first.shape[i] for i in axes])))
        if np.any(moved < 0) or np.any(moved != moved[:, :1]):
          raise Refusal(f'node {name!r} ({op}) reduces across tokens (axes {axes} of '
                         f'{list(first.shape)}): a LayerNorm over the sequence axis is outside '
                         f'{CLASS}.')
    if tuple(first.shape) != tuple(shape):
      if op in ('ReduceMean', 'ReduceSum', 'ReduceMax'):
        a, tok, _ = self.decode(first)
        keep = [i for i in range(len(first.shape)) if i not in axes]
        sel = tuple(slice(None) if i in keep else slice(0, 1) for i in range(len(first.shape)))
        t = tok[sel].reshape(shape)
        return t.ravel(), np.zeros(t.size, np.int64)
      raise Refusal(f'node {name!r} ({op}) broadcasts a tensor of the network, outside '
                     f'{CLASS}.')
    a, tok, col = self.decode(first) if len(set(self.owners(first))) == 1 else (None,) * 3
    if a is None:
      return none
    return tok.ravel(), col.ravel()
