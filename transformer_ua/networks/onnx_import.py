r"""A Transformer written by ``torch.onnx.export`` (either exporter, opsets 13-20) as a v2 dict.

The reader canonicalizes before it matches. It runs the graph once in its own interpreter,
where each tensor is either a constant or a *tracked* tensor: an int64 array of the same
shape whose entries name entries of an earlier *anchor* (the output of an arithmetic node).

    constants      Constant, initializers, and any node whose inputs are all constant are
                   evaluated (onnx.reference, one node at a time; Shape of a tracked tensor
                   is its shape): the Shape/Gather/Concat chains, the 1/sqrt(m) scale, the
                   legacy exporter's mask (Trilu, Equal, Where on constants) fold here.
    plumbing       Reshape, Transpose, Gather, Split, Squeeze, Unsqueeze, Concat, Slice,
                   Flatten, Expand, Identity, Dropout (inference) move entries without
                   arithmetic: they are run on the index arrays, so a head is a table of
                   which entry of which projection it reads, exactly.
    anchors        MatMul, Gemm, Add, Sub, Mul, Div, Pow, Sqrt, ReduceMean, Erf, Tanh, Relu,
                   Gelu, Softmax, LayerNormalization, Where: one anchor each, holding its
                   operands (index arrays or constants).

Every anchor entry knows its token j (the row it belongs to) and its column, so a linear map
is token-wise when each row of its input reads one token and all rows read the same columns.
The match then walks back from the output:

    Y = Z_L Wr + br                           (readout: MatMul [+ Add] or Gemm)
    Z <- LN(Z + S(Z))                         (post-LN: LayerNormalization, axis -1)
    Z <- Z + S(LN(Z))                         (pre-LN; an LN after the last one is final_ln)
    Z <- Z + S(Z)                             (no LayerNorm)
    S = FF:   act(Z W1 + b1) W2 + b2          act: Relu; Gelu (approximate none | tanh);
                                              0.5 x (1 + Erf(x / sqrt 2)) in any association
    S = Attn: concat_i(P_i V_i) Wo + bo       P_i = Softmax_keys(s_i), s_i = c * (q_i k_i^T)
                                              [+ causal mask]; q_i, k_i, v_i columns of one
                                              packed or three projections (+ biases)
    Z_0 = X We + be [+ E]                     (embed, positional)

LayerNorm is the op or its decomposition c = x - ReduceMean(x), y = c / Sqrt(ReduceMean(
c^2) + eps) * gamma + beta (Pow 2 or c*c), both over the last axis of a token's row only.

The patterns the exporters of torch 2.13 write (nn.TransformerEncoderLayer(8, 2, 32, 0.0,
batch_first=True) between Linear(1, 8) and Linear(8, 1)); both keep LayerNormalization as one
op at opsets 17-20 (the legacy exporter decomposes it at 14-16; the dynamo exporter never
writes below opset 18 and converts down to 17 only when asked for 17):

    dynamo:  MatMul Add | Transpose MatMul Add Reshape Unsqueeze Transpose Squeeze Gather x3
             (packed QKV split by three Gathers) Reshape Transpose x3 ... Mul Mul (q and k,
             each by sqrt(1/sqrt(m))) MatMul [Add mask] Softmax MatMul Transpose Reshape
             Gemm Reshape Transpose (out-projection) Add LayerNormalization MatMul Add
             Relu | Gelu (opset 20) | Div Erf Add Mul Mul (opset 17) MatMul Add Add
             LayerNormalization MatMul Add
    legacy:  Identity x3, the same skeleton with Constant/Shape/Slice/Concat/Mod shape
             chains, the scale as Shape Slice Cast Sqrt Div Cast Sqrt (folded), the causal
             mask as Expand Trilu Equal Where (folded), LayerNormalization or ReduceMean Sub
             Pow ReduceMean Add Sqrt Div Mul Add. nn.MultiheadAttention alone: the same
             attention skeleton. The legacy exporter exports the layer in eval mode in torch
             2.13 (the fast path is not taken while tracing); train mode with dropout 0 gives
             the same graph.

Fold nothing the runtime does not fold. Weights are read as the file stores them (float32
values are exact in float64); biases, LayerNorm gains and the scale stay where they are
computed. Where the dict v2 cannot hold what the graph computes exactly, the reader extends
it to the real-arithmetic equivalent and says so in the returned text (``notes``):

    split scale  q*c . k*c (c = sqrt of the scale, as both exporters write it) is read as
                 scale = c*c after the dot product (exact in float64 for a float32 c): equal
                 in real arithmetic; in float the runtime rounds q*c and k*c (two roundings
                 of relative u per factor), which the dict's one rounding of the product by
                 scale does not model: a documented deviation of at most (1+u)^2 - 1 of
                 each score beyond the certified one.
    Div scale    s / c is read as scale = 1/c rounded to float64 (relative 2^-53).

Anything outside the class is refused in one ValueError line naming the op and its node
(Sigmoid, Conv, Dropout in train mode, the opset-23 Attention op, a Tanh outside GELU, a
LayerNorm over the sequence axis, a mask that is not causal -inf, float16 weights, an
external data file that is missing, input shapes that n and d do not fix).
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

#: Ops that only move entries: run on the index arrays.
PLUMBING = ('Reshape', 'Transpose', 'Gather', 'Split', 'Squeeze', 'Unsqueeze', 'Concat',
            'Slice', 'Flatten', 'Expand', 'Identity')
#: Ops that make an anchor.
ARITHMETIC = ('MatMul', 'Gemm', 'Add', 'Sub', 'Mul', 'Div', 'Pow', 'Sqrt', 'ReduceMean',
              'Erf', 'Tanh', 'Relu', 'Gelu', 'Softmax', 'LayerNormalization', 'Where')
_REFUSED = {
    'Attention': 'the opset-23 Attention op (export at opset <= 20)',
    'Sigmoid': 'a sigmoid', 'Conv': 'a convolution', 'Dropout': 'Dropout in train mode',
    'LSTM': 'a recurrent layer', 'GRU': 'a recurrent layer', 'RNN': 'a recurrent layer',
}
_CLASS = ('the class: Linear embed/readout, softmax attention with biases, scale and causal '
          'mask, ReLU/GELU feed-forward, LayerNorm over the token, residuals')


#: A finite mask value at or below this is read as -inf (module docstring).
_MASK_FLOOR = -1e30


class _Refusal(Exception):
  """A pattern did not fit; carries the one line."""


def _refuse(msg: str):
  raise ValueError(f'onnx_import: {msg}')


@dataclasses.dataclass
class _Anchor:
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
      raise _Refusal(f'node {self.name!r} ({self.kind}) has a constant where a tensor of the '
                     'network was expected.')
    return val

  def const(self, i: int) -> np.ndarray:
    kind, val = self.args[i]
    if kind != 'c':
      raise _Refusal(f'node {self.name!r} ({self.kind}) multiplies two tensors of the network '
                     'where a constant was expected.')
    return val


class _Graph:
  """The interpreter: constants, tracked index arrays and anchors."""

  def __init__(self, model: onnx.ModelProto, x_shape: tuple):
    self.model = model
    self.opset = next((o.version for o in model.opset_import if o.domain in ('', 'ai.onnx')),
                      None)
    self.anchors: list[_Anchor] = []
    self.starts: list[int] = []
    self.size = 0
    self.const: dict[str, np.ndarray] = {}
    self.tracked: dict[str, np.ndarray] = {}
    for init in model.graph.initializer:
      self.const[init.name] = numpy_helper.to_array(init)
    x_name = _input_name(model)
    inp = next(i for i in model.graph.input if i.name == x_name)
    self.dtype = onnx.helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type).name
    n = x_shape[-2]
    tok = np.repeat(np.arange(n), x_shape[-1])
    if len(x_shape) == 3:
      tok = np.tile(tok, x_shape[0])
    self.tracked[x_name] = self._new('input', 'input', x_shape, [], {}, tok,
                                     np.tile(np.arange(x_shape[-1]), int(np.prod(x_shape[:-1]))))

  # -- anchors ---------------------------------------------------------------------------------
  def _new(self, kind, name, shape, args, attrs, tok, col) -> np.ndarray:
    shape = tuple(int(s) for s in shape)
    a = _Anchor(kind, name, shape, self.size, args, attrs, np.asarray(tok, np.int64),
                np.asarray(col, np.int64))
    self.anchors.append(a)
    self.starts.append(self.size)
    self.size += a.size
    return (a.offset + np.arange(a.size, dtype=np.int64)).reshape(shape)

  def owner(self, idx: np.ndarray) -> _Anchor:
    ids = np.searchsorted(self.starts, np.asarray(idx).ravel(), side='right') - 1
    if ids.size == 0 or np.any(ids != ids[0]):
      raise _Refusal('a tensor mixes entries of two operations where one was expected.')
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
      raise _Refusal(f'{where} mixes tokens within a row (an operation across the sequence '
                     'axis is not a token-wise map).')
    if np.any(c2 != c2[:1]):
      raise _Refusal(f'{where} reads different columns in different tokens.')
    return a, t2[:, 0], c2[0]

  # -- the nodes -------------------------------------------------------------------------------
  def run(self, shapes: dict):
    for node in self.model.graph.node:
      self.node(node, shapes)

  def _eval(self, node, values):
    feeds = {nm: v for nm, v in zip(node.input, values) if nm}
    try:
      out = ReferenceEvaluator(node, opsets={'': self.opset}).run(None, feeds)
    except Exception as e:  # noqa: BLE001 -- the one line names the node
      raise _Refusal(f'node {node.name!r} ({node.op_type}) could not be evaluated on its '
                     f'constants ({type(e).__name__}).') from None
    return out

  def node(self, node, shapes):
    op, name = node.op_type, node.name or node.output[0]
    ins = list(node.input)
    if node.domain not in ('', 'ai.onnx'):
      raise _Refusal(f'node {name!r} is {node.domain}::{op}, outside the ONNX domain; '
                     f'allowed: {_CLASS}.')
    if op in _REFUSED and op != 'Dropout':
      raise _Refusal(f'node {name!r} ({op}) is {_REFUSED[op]}, outside {_CLASS}.')
    is_t = [i in self.tracked for i in ins if i]
    if op == 'Constant' or (not any(is_t) and op not in ('Shape', 'Size')):
      for out, v in zip(node.output, self._eval(node, [self.const.get(i) for i in ins])):
        self.const[out] = np.asarray(v)
      return
    if op in ('Shape', 'Size'):
      shp = self.tracked[ins[0]].shape if ins[0] in self.tracked else self.const[ins[0]].shape
      if op == 'Size':
        self.const[node.output[0]] = np.array(int(np.prod(shp)), np.int64)
        return
      attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
      start, end = attrs.get('start', 0), attrs.get('end', None)
      self.const[node.output[0]] = np.array(shp[start:end], np.int64)
      return
    if op == 'Dropout':
      train = self.const.get(ins[2]) if len(ins) > 2 and ins[2] else None
      if train is not None and bool(np.asarray(train)):
        raise _Refusal(f'node {name!r} (Dropout) runs in train mode, outside {_CLASS}.')
      if len(node.output) > 1 and node.output[1]:
        raise _Refusal(f'node {name!r} (Dropout) exports its mask, outside {_CLASS}.')
      self.tracked[node.output[0]] = self.tracked[ins[0]]
      return
    if op == 'Cast':
      to = onnx.helper.get_attribute_value(node.attribute[0])
      src = shapes.get(ins[0], (None, None))[1]
      if src is not None and src == to:
        self.tracked[node.output[0]] = self.tracked[ins[0]]
        return
      raise _Refusal(f'node {name!r} (Cast) changes the dtype of a tensor of the network; a '
                     'network computes in one dtype.')
    if op in PLUMBING:
      if op == 'Concat':
        if not all(is_t):
          raise _Refusal(f'node {name!r} (Concat) joins a tensor of the network with '
                         'constants, outside {_CLASS}.')
        values = [self.tracked[i] for i in ins]
      else:
        if any(i in self.tracked for i in ins[1:] if i):
          raise _Refusal(f'node {name!r} ({op}) takes its shape or indices from the network\'s '
                         'values (a dynamic shape).')
        values = [self.tracked[ins[0]]] + [self.const.get(i) for i in ins[1:]]
      for out, v in zip(node.output, self._eval(node, values)):
        self.tracked[out] = np.asarray(v, np.int64)
      return
    if op not in ARITHMETIC:
      raise _Refusal(f'node {name!r} ({op}) is not an operation of {_CLASS}.')
    args = [('t', self.tracked[i]) if i in self.tracked else ('c', self.const.get(i))
            for i in ins]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    shape = shapes[node.output[0]][0]
    tok, col = self._layout(op, name, args, attrs, shape)
    self.tracked[node.output[0]] = self._new(op, name, shape, args, attrs, tok, col)
    for extra in node.output[1:]:
      if extra:
        raise _Refusal(f'node {name!r} ({op}) has a second output in use, outside {_CLASS}.')

  def _layout(self, op, name, args, attrs, shape):
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
        raise _Refusal(f'node {name!r} (Gemm) transposes its input (transA=1).')
      try:
        _, tok, _ = self.rows(x, f'node {name!r} ({op})')
      except _Refusal:
        return none
      return np.repeat(tok, shape[-1]), np.tile(np.arange(shape[-1]), len(tok))
    first = t_args[0]
    if op in ('LayerNormalization', 'ReduceMean', 'Softmax'):
      rank = len(first.shape)
      axes = attrs.get('axes', attrs.get('axis', -1))
      if op == 'ReduceMean' and 'axes' not in attrs and len(args) > 1:
        axes = np.asarray(args[1][1]).tolist()
      axes = sorted(a % rank for a in np.atleast_1d(axes).tolist())
      if op == 'LayerNormalization':
        axes = list(range(axes[0], rank))
      if op != 'Softmax' and self.owner(first).kind != 'Softmax':
        a, tok, _ = self.decode(first)
        moved = np.moveaxis(tok, axes, list(range(rank - len(axes), rank)))
        moved = moved.reshape(-1, int(np.prod([first.shape[i] for i in axes])))
        if np.any(moved < 0) or np.any(moved != moved[:, :1]):
          raise _Refusal(f'node {name!r} ({op}) reduces across tokens (axes {axes} of '
                         f'{list(first.shape)}): a LayerNorm over the sequence axis is outside '
                         f'{_CLASS}.')
    if tuple(first.shape) != tuple(shape):
      if op == 'ReduceMean':
        a, tok, _ = self.decode(first)
        keep = [i for i in range(len(first.shape)) if i not in axes]
        sel = tuple(slice(None) if i in keep else slice(0, 1) for i in range(len(first.shape)))
        t = tok[sel].reshape(shape)
        return t.ravel(), np.zeros(t.size, np.int64)
      raise _Refusal(f'node {name!r} ({op}) broadcasts a tensor of the network, outside '
                     f'{_CLASS}.')
    a, tok, col = self.decode(first) if len(set(self.owners(first))) == 1 else (None,) * 3
    if a is None:
      return none
    return tok.ravel(), col.ravel()


def _input_name(model) -> str:
  inits = {i.name for i in model.graph.initializer}
  names = [i.name for i in model.graph.input if i.name not in inits]
  if len(names) != 1:
    _refuse(f'the graph has {len(names)} inputs ({names}); a network with one input X '
            '[1, n, d] is needed.')
  return names[0]


def load(path: str) -> onnx.ModelProto:
  """The model with its external data, or ValueError in one line (missing file, float16)."""
  path = os.fspath(path)
  try:
    model = onnx.load(path, load_external_data=False)
  except Exception as e:  # noqa: BLE001 -- one line for any unreadable file
    _refuse(f'{path!r} is not a readable ONNX file ({type(e).__name__}).')
  base = os.path.dirname(os.path.abspath(path))
  for t in onnx.external_data_helper._get_all_tensors(model):  # noqa: SLF001 -- onnx's walker
    if onnx.external_data_helper.uses_external_data(t):
      loc = {e.key: e.value for e in t.external_data}.get('location', '')
      if not os.path.isfile(os.path.join(base, loc)):
        _refuse(f'tensor {t.name!r} of {path!r} is stored in the external data file {loc!r}, '
                f'which is missing next to it; copy it beside the .onnx file.')
  onnx.external_data_helper.load_external_data_for_model(model, base)
  for t in model.graph.initializer:
    if t.data_type == onnx.TensorProto.FLOAT16:
      _refuse(f'initializer {t.name!r} is float16; float16 weights are refused (they would '
              'be read as another network); export in float32.')
  for node in model.graph.node:
    if node.op_type == 'Constant' and node.attribute and node.attribute[0].type == \
        onnx.AttributeProto.TENSOR and node.attribute[0].t.data_type == onnx.TensorProto.FLOAT16:
      _refuse(f'Constant node {node.name!r} is float16; float16 weights are refused.')
  return model


def _fixed_input_shape(model, d, n) -> tuple:
  inp = next(i for i in model.graph.input if i.name == _input_name(model))
  dims = inp.type.tensor_type.shape.dim
  if len(dims) not in (2, 3):
    _refuse(f'input {inp.name!r} has rank {len(dims)}; X [1, n, d] (or [n, d]) is needed.')
  want = ([1] if len(dims) == 3 else []) + [n, d]
  out = []
  for i, (dim, w) in enumerate(zip(dims, want)):
    if dim.HasField('dim_value'):
      if w is not None and dim.dim_value != w:
        _refuse(f'input {inp.name!r} has shape {[x.dim_value or x.dim_param for x in dims]}; '
                f'the target needs {[x if x is not None else "?" for x in want]}.')
      out.append(dim.dim_value)
    elif w is None:
      _refuse(f'input {inp.name!r} has the dynamic dimension {dim.dim_param or "?"!r} at axis '
              f'{i}; pass n= and d= to fix it.')
    else:
      out.append(w)
  return tuple(out)


def _shapes(model, x_shape) -> dict:
  """name -> (shape, onnx elem type) of every value, from one run of onnx.reference on a
  point (the shapes of a graph fixed by its input)."""
  x_name = _input_name(model)
  inp = next(i for i in model.graph.input if i.name == x_name)
  elem = inp.type.tensor_type.elem_type
  dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
  model2 = onnx.ModelProto()
  model2.CopyFrom(model)
  del model2.graph.output[:]
  vals = {}
  ref_model = onnx.shape_inference.infer_shapes(model2)
  names = [o for node in model.graph.node for o in node.output if o]
  for name in names:
    model2.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
  try:
    outs = ReferenceEvaluator(model2).run(None, {x_name: np.full(x_shape, 0.5, dtype)})
  except Exception as e:  # noqa: BLE001
    _refuse(f'the graph does not run on an input of shape {list(x_shape)} '
            f'({type(e).__name__}: {str(e)[:80]}).')
  del ref_model
  for name, v in zip(names, outs):
    v = np.asarray(v)
    elem_v = onnx.helper.np_dtype_to_tensor_dtype(v.dtype) if v.dtype != object else None
    vals[name] = (v.shape, elem_v)
  vals[x_name] = (tuple(x_shape), elem)
  return vals


# -- the match -------------------------------------------------------------------------------------
class _Match:
  """Walks back from the output and writes the v2 dict."""

  def __init__(self, g: _Graph):
    self.g = g
    self.notes: list[str] = []

  def anchor(self, idx):
    return self.g.owner(idx)

  def stream(self, idx, where):
    """A full-width token-major tensor [1, n, D]: its anchor (rows in token order)."""
    a, tok, col = self.g.rows(idx, where)
    if np.any(tok != np.arange(len(tok))) or a.shape[-1] != len(col) or \
        np.any(col != np.arange(len(col))):
      raise _Refusal(f'{where} reorders the tokens or columns of {a.name!r} ({a.kind}).')
    return a

  # -- linear maps ---------------------------------------------------------------------------------
  def linear(self, a: _Anchor):
    """a = X W (+ b) token-wise: (input anchor, W_eff [width_in, N], bias [N] or None), where
    W_eff rows are the input anchor's columns (unread columns zero)."""
    bias = None
    if a.kind == 'Add':
      (k0, v0), (k1, v1) = a.args
      t, c = (v0, v1) if k0 == 't' else (v1, v0)
      if k0 == k1:
        raise _Refusal(f'node {a.name!r} (Add) is not a bias.')
      bias = self.row_const(c, a, 'bias')
      a = self.anchor(t)
    if a.kind == 'Gemm':
      if a.attrs.get('alpha', 1.0) != 1.0 or a.attrs.get('beta', 1.0) != 1.0:
        raise _Refusal(f'node {a.name!r} (Gemm) has alpha or beta != 1.')
      w = a.const(1)
      w = w.T if a.attrs.get('transB', 0) else w
      if len(a.args) > 2 and a.args[2][1] is not None:
        if bias is not None:
          raise _Refusal(f'node {a.name!r} (Gemm) is followed by a second bias.')
        bias = self.row_const(a.const(2), a, 'bias')
      x = a.tracked(0)
    elif a.kind == 'MatMul':
      if a.args[0][0] != 't' or a.args[1][0] != 'c':
        raise _Refusal(f'node {a.name!r} (MatMul) is not a token-wise linear map.')
      x, w = a.tracked(0), a.const(1)
      if w.ndim != 2:
        raise _Refusal(f'node {a.name!r} (MatMul) has a weight of rank {w.ndim}.')
    else:
      raise _Refusal(f'node {a.name!r} ({a.kind}) where a linear map (MatMul or Gemm) was '
                     'expected.')
    src, _, cols = self.g.rows(x, f'node {a.name!r} ({a.kind})')
    if len(set(cols.tolist())) != len(cols):
      raise _Refusal(f'node {a.name!r} ({a.kind}) reads a column twice.')
    width = int(src.col.max()) + 1 if src.kind == 'MatMul' else src.shape[-1]
    w_eff = np.zeros((width, w.shape[1]))
    w_eff[cols] = w
    return src, w_eff, bias, a

  def row_const(self, c, a, what):
    """A constant added to rows: a vector [N] (same in every token), else refused."""
    c = np.asarray(c, np.float64)
    width = a.shape[-1]
    full = np.broadcast_to(c, a.shape).reshape(-1, width)
    if np.any(full != full[:1]):
      raise _Refusal(f'node {a.name!r} adds a {what} that differs between tokens.')
    return full[0].copy()

  # -- normalization and activations --------------------------------------------------------------
  def layer_norm(self, a: _Anchor):
    """LayerNorm over the token's row: (input anchor, {'gamma','beta','eps'}) or None."""
    if a.kind == 'LayerNormalization':
      axis = a.attrs.get('axis', -1)
      rank = len(a.shape)
      if axis not in (-1, rank - 1):
        raise _Refusal(f'node {a.name!r} (LayerNormalization) normalizes over axes from '
                       f'{axis} of {list(a.shape)}, not over the token\'s last axis alone.')
      x = self.stream(a.tracked(0), f'node {a.name!r} (LayerNormalization over the sequence '
                      'axis?)')
      width = a.shape[-1]
      gamma = np.broadcast_to(np.asarray(a.const(1), np.float64), (width,)).copy()
      beta = (np.zeros(width) if len(a.args) < 3 or a.args[2][1] is None
              else np.broadcast_to(np.asarray(a.const(2), np.float64), (width,)).copy())
      return x, {'gamma': gamma, 'beta': beta, 'eps': float(np.float32(a.attrs.get(
          'epsilon', 1e-5)))}
    # decomposed: ((x - mean) / sqrt(mean((x - mean)^2) + eps)) * gamma + beta
    beta = gamma = None
    cur = a
    if cur.kind == 'Add' and any(k == 'c' for k, _ in cur.args):
      t = next(v for k, v in cur.args if k == 't')
      beta, cur = self.row_const(next(v for k, v in cur.args if k == 'c'), cur, 'beta'), \
          self.anchor(t)
    if cur.kind == 'Mul' and any(k == 'c' for k, _ in cur.args):
      t = next(v for k, v in cur.args if k == 't')
      gamma, cur = self.row_const(next(v for k, v in cur.args if k == 'c'), cur, 'gamma'), \
          self.anchor(t)
    if cur.kind != 'Div' or cur.args[1][0] != 't':
      return None
    den = self.anchor(cur.tracked(1))
    c = self.anchor(cur.tracked(0))
    if den.kind != 'Sqrt':
      return None
    var_eps = self.anchor(den.tracked(0))
    if var_eps.kind != 'Add' or not any(k == 'c' for k, _ in var_eps.args):
      return None
    eps = float(np.asarray(next(v for k, v in var_eps.args if k == 'c')).reshape(-1)[0])
    var = self.anchor(next(v for k, v in var_eps.args if k == 't'))
    sq = self.anchor(var.tracked(0)) if var.kind == 'ReduceMean' else None
    if sq is None or not self._last_axis_mean(var):
      return None
    if sq.kind == 'Pow':
      if float(np.asarray(sq.const(1))) != 2.0 or self.anchor(sq.tracked(0)) is not c:
        return None
    elif sq.kind == 'Mul':
      if not (self.anchor(sq.tracked(0)) is c and self.anchor(sq.tracked(1)) is c):
        return None
    else:
      return None
    if c.kind != 'Sub' or c.args[1][0] != 't':
      return None
    x = self.stream(c.tracked(0), f'node {c.name!r} (Sub of a LayerNorm)')
    mean = self.anchor(c.tracked(1))
    if mean.kind != 'ReduceMean' or not self._last_axis_mean(mean) or \
        self.stream(mean.tracked(0), f'node {mean.name!r}') is not x:
      raise _Refusal(f'node {mean.name!r} (ReduceMean) is not the mean over the token\'s row '
                     '(a LayerNorm over another axis).')
    width = x.shape[-1]
    gamma = np.ones(width) if gamma is None else gamma
    beta = np.zeros(width) if beta is None else beta
    self.notes.append(f'LayerNorm {cur.name!r} decomposed (ReduceMean Sub Pow ReduceMean Add '
                      'Sqrt Div Mul Add) read as the dict\'s LayerNorm')
    return x, {'gamma': gamma, 'beta': beta, 'eps': eps}

  def _last_axis_mean(self, a):
    axes = a.attrs.get('axes')
    if axes is None and len(a.args) > 1 and a.args[1][1] is not None:
      axes = np.asarray(a.const(1)).tolist()
    rank = len(self.g.decode(a.tracked(0))[0].shape) if False else len(a.args[0][1].shape)
    axes = [ax % rank for ax in np.atleast_1d(axes).tolist()] if axes is not None else None
    if axes != [rank - 1]:
      raise _Refusal(f'node {a.name!r} (ReduceMean) averages over axes {axes} of a rank-'
                     f'{rank} tensor; a LayerNorm over the token\'s last axis alone is needed.')
    return a.attrs.get('keepdims', 1) == 1

  def activation(self, h: _Anchor):
    """h = act(u): (u's anchor, 'relu' | 'gelu' | 'gelu_tanh')."""
    if h.kind == 'Relu':
      return self.anchor(h.tracked(0)), 'relu'
    if h.kind == 'Gelu':
      approx = h.attrs.get('approximate', 'none')
      approx = approx.decode() if isinstance(approx, bytes) else approx
      return self.anchor(h.tracked(0)), 'gelu' if approx == 'none' else 'gelu_tanh'
    if h.kind == 'Mul':
      factors = self._factors(h)
      consts = [f for f in factors if isinstance(f, float)]
      tens = [f for f in factors if not isinstance(f, float)]
      if consts == [0.5] and len(tens) == 2:
        for x, e1 in (tens, tens[::-1]):
          if e1.kind == 'Add' and any(k == 'c' for k, _ in e1.args):
            one = float(np.asarray(next(v for k, v in e1.args if k == 'c')).reshape(-1)[0])
            inner = self.anchor(next(v for k, v in e1.args if k == 't'))
            if one == 1.0 and inner.kind == 'Erf':
              arg = self.anchor(inner.tracked(0))
              if self._scaled(arg, x, math.sqrt(2.0)):
                self.notes.append(f'GELU decomposed at {h.name!r} (x/sqrt2, Erf, +1, *x, '
                                  '*0.5) read as the dict\'s gelu (erf form)')
                return x, 'gelu'
            if one == 1.0 and inner.kind == 'Tanh' and self._tanh_arg(
                self.anchor(inner.tracked(0)), x):
              self.notes.append(f'GELU decomposed at {h.name!r} (x + 0.044715 x^3, '
                                '*sqrt(2/pi), Tanh, +1, *x, *0.5) read as the dict\'s '
                                'gelu_tanh')
              return x, 'gelu_tanh'
    raise _Refusal(f'node {h.name!r} ({h.kind}) is not an activation of {_CLASS} (ReLU, GELU '
                   'as the op or 0.5 x (1 + erf(x / sqrt 2))).')

  def _tanh_arg(self, arg, x):
    """arg = sqrt(2/pi) * (x + 0.044715 * x^3), constants the file dtype's roundings."""
    f = self._factors(arg)
    consts = [c for c in f if isinstance(c, float)]
    tens = [c for c in f if not isinstance(c, float)]
    if len(consts) != 1 or len(tens) != 1 or tens[0].kind != 'Add':
      return False
    dtype = np.float32 if self.g.dtype == 'float32' else np.float64
    if consts[0] != float(dtype(math.sqrt(2 / math.pi))):
      return False
    s = tens[0]
    if any(k != 't' for k, _ in s.args):
      return False
    parts = [self.anchor(v) for _, v in s.args]
    for lin, cube in (parts, parts[::-1]):
      if lin is not x:
        continue
      cf = self._factors(cube)
      cc = [c for c in cf if isinstance(c, float)]
      ct = [c for c in cf if not isinstance(c, float)]
      if cc != [float(dtype(0.044715))]:
        continue
      if len(ct) == 3 and all(t is x for t in ct):
        return True
      if len(ct) == 1 and ct[0].kind == 'Pow' and self.anchor(ct[0].tracked(0)) is x and \
          float(np.asarray(ct[0].const(1)).reshape(-1)[0]) == 3.0:
        return True
    return False

  def _scaled(self, arg, x, c):
    """arg = x / c (Div) or x * fl(1/c) (Mul) with the constant the file dtype's rounding."""
    if arg.kind not in ('Div', 'Mul') or arg.args[1][0] != 'c' or self.anchor(arg.tracked(0)) \
        is not x:
      return False
    k = np.asarray(arg.const(1))
    want = c if arg.kind == 'Div' else 1 / c
    return k.size == 1 and float(k.reshape(-1)[0]) == float(np.asarray(want, k.dtype))

  def _factors(self, a, depth=0):
    if a.kind == 'Mul' and depth < 4:
      out = []
      for k, v in a.args:
        if k == 'c' or v is None:
          arr = np.asarray(v)
          if arr.size != 1:
            return [a]
          out.append(float(arr.reshape(-1)[0]))
        else:
          out.extend(self._factors(self.anchor(v), depth + 1))
      return out
    return [a]

  # -- sublayers -----------------------------------------------------------------------------------
  def sublayer(self, y: _Anchor):
    """y = S(u): ('ff' | 'attn', keys, u's anchor)."""
    src, w_eff, bias, lin = self.linear(y)
    if src.kind == 'MatMul' and src.args[0][0] == 't' and src.args[1][0] == 't' or \
        self._reads_pv(lin):
      return self.attention(lin, w_eff, bias)
    u, act = self.activation(src)
    u_src, w1, b1, _ = self.linear(u)
    width = w1.shape[1]
    return 'ff', {'W_1': w1.T, 'b_1': np.zeros(width) if b1 is None else b1,
                  'W_2': w_eff.T, 'b_2': np.zeros(w_eff.shape[1]) if bias is None else bias,
                  'activation': act}, u_src

  def _reads_pv(self, lin):
    x = lin.tracked(0)
    owners = {int(i) for i in self.g.owners(x)}
    return all(self.g.anchors[i].kind == 'MatMul' and self.g.anchors[i].args[0][0] == 't'
               and self.g.anchors[i].args[1][0] == 't' for i in owners)

  def attention(self, lin, w_eff_unused, bias):
    x = lin.tracked(0)
    w = lin.const(1)
    if lin.kind == 'Gemm' and lin.attrs.get('transB', 0):
      w = w.T
    rows = x.reshape(-1, x.shape[-1])
    heads = {}      # (pv anchor index, batch position) -> {a: k}
    for k in range(x.shape[-1]):
      column = rows[:, k]
      ids = self.g.owners(column)
      if np.any(ids != ids[0]):
        raise _Refusal(f'node {lin.name!r} reads one column from two attention outputs.')
      pv = self.g.anchors[int(ids[0])]
      local = column - pv.offset
      pos = np.array(np.unravel_index(local, pv.shape)).T        # [rows, rank]
      batch = {tuple(p[:-2]) for p in pos}
      a_idx = {int(p[-1]) for p in pos}
      if len(batch) != 1 or len(a_idx) != 1 or np.any(pos[:, -2] != np.arange(len(pos))):
        raise _Refusal(f'node {lin.name!r} ({lin.kind}) does not read the heads token by token.')
      heads.setdefault((int(ids[0]), batch.pop()), {})[a_idx.pop()] = k
    out = {key: [] for key in ('W_Q', 'b_Q', 'W_K', 'b_K', 'W_V', 'b_V', 'W_O')}
    scales, masks, reads = set(), set(), set()
    for (pv_id, b), cols in sorted(heads.items()):
      pv = self.g.anchors[pv_id]
      m = pv.shape[-1]
      if sorted(cols) != list(range(m)):
        raise _Refusal(f'node {lin.name!r} reads part of a head of {pv.name!r}.')
      out['W_O'].append(np.stack([w[cols[a]] for a in range(m)], axis=1))     # [D, m]
      prob = self.anchor(self._batch(pv.tracked(0), b))
      if prob.kind != 'Softmax':
        raise _Refusal(f'node {pv.name!r} (MatMul) does not multiply softmax weights into '
                       'values.')
      rank = len(prob.shape)
      if prob.attrs.get('axis', -1) % rank != rank - 1:
        raise _Refusal(f'node {prob.name!r} (Softmax) is not over the keys (last axis).')
      v_w, v_b, v_u = self.head_side(self._batch(pv.tracked(1), b), keys_last=False,
                                     where=pv.name)
      scale, mask, q_side, k_side = self.scores(self._batch(prob.tracked(0), b), prob, b)
      q_w, q_b, q_u, q_s = q_side
      k_w, k_b, k_u, k_s = k_side
      scales.add((scale, q_s, k_s))
      masks.add(mask)
      reads.update({q_u.offset, k_u.offset, v_u.offset})
      for key, val in (('W_Q', q_w), ('b_Q', q_b), ('W_K', k_w), ('b_K', k_b), ('W_V', v_w),
                       ('b_V', v_b)):
        out[key].append(val)
      u = q_u
    if len(reads) != 1 or len(scales) != 1 or len(masks) != 1:
      raise _Refusal(f'the heads read by {lin.name!r} differ in input, scale or mask.')
    blk = {k: np.stack(v) for k, v in out.items()}
    blk['b_O'] = np.zeros(blk['W_O'].shape[1]) if bias is None else bias
    (scale, q_s, k_s), mask = scales.pop(), masks.pop()
    total = self._scale(scale, q_s, k_s, lin.name)
    if total != 1.0:
      blk['scale'] = total
    if mask:
      blk['mask'] = 'causal'
    return 'attn', blk, u

  def _scale(self, s_mul, q_s, k_s, where):
    """The dict's one scale from the runtime's multiplications (module docstring)."""
    (q_c, q_div), (k_c, k_div), (s_c, s_div) = q_s, k_s, s_mul
    if q_div or k_div:
      raise _Refusal(f'the attention read by {where!r} divides q or k by a constant.')
    if q_c == 1.0 and k_c == 1.0:
      if s_div:
        self.notes.append(f'attention {where!r}: scores divided by {s_c!r}, read as scale = '
                          '1/c rounded to float64 (relative 2^-53)')
        return float(1.0 / s_c)
      return float(s_c)
    if s_c != 1.0:
      raise _Refusal(f'the attention read by {where!r} scales q, k and the scores.')
    if q_c != k_c:
      raise _Refusal(f'the attention read by {where!r} scales q by {q_c!r} and k by {k_c!r}; '
                     'only equal factors (sqrt of the scale, as torch writes) are read.')
    total = q_c * k_c
    self.notes.append(f'attention {where!r}: scale split across Q and K ({q_c!r} each, as the '
                      f'runtime multiplies) read as scale = c^2 = {total!r} after the dot '
                      'product (equal in real arithmetic; the runtime\'s two extra roundings, '
                      '(1+u)^2-1 of each score, are not in the float bound)')
    return total

  def _batch(self, idx, b):
    return idx[b] if b else idx

  def scores(self, s_idx, prob, b):
    """s = c * (q k^T) [+ mask] up to Softmax: (scale, causal?, q side, k side)."""
    a = self.anchor(s_idx)
    mul, div, mask = 1.0, False, False
    while True:
      if a.kind in ('Add', 'Where') and a.kind == 'Add' and any(k == 'c' for k, _ in a.args):
        c = np.asarray(next(v for k, v in a.args if k == 'c'), np.float64)
        self._causal(c, a)
        mask = True
        a = self.anchor(next(v for k, v in a.args if k == 't'))
      elif a.kind == 'Where':
        cond, t1, t2 = a.args
        if cond[0] != 'c':
          raise _Refusal(f'node {a.name!r} (Where) masks by a condition computed from the '
                         'input.')
        if t1[0] == 't' and t2[0] == 'c':
          fill, keep, t = np.asarray(t2[1], np.float64), np.asarray(cond[1], bool), t1[1]
        elif t1[0] == 'c' and t2[0] == 't':
          fill, keep, t = np.asarray(t1[1], np.float64), ~np.asarray(cond[1], bool), t2[1]
        else:
          raise _Refusal(f'node {a.name!r} (Where) is not a mask.')
        add = np.where(np.broadcast_to(keep, a.shape), 0.0, np.broadcast_to(fill, a.shape))
        self._causal(add, a)
        mask = True
        a = self.anchor(t)
      elif a.kind in ('Mul', 'Div') and a.args[1][0] == 'c' or \
          a.kind == 'Mul' and a.args[0][0] == 'c':
        c = np.asarray(a.const(1) if a.args[1][0] == 'c' else a.const(0))
        if c.size != 1:
          raise _Refusal(f'node {a.name!r} ({a.kind}) scales the scores by a non-scalar.')
        if mul != 1.0:
          raise _Refusal(f'node {a.name!r} scales the scores twice.')
        mul, div = float(c.reshape(-1)[0]), a.kind == 'Div'
        a = self.anchor(next(v for k, v in a.args if k == 't'))
      else:
        break
    if not (a.kind == 'MatMul' and a.args[0][0] == 't' and a.args[1][0] == 't'):
      raise _Refusal(f'node {a.name!r} ({a.kind}) feeds Softmax {prob.name!r}; attention '
                     'scores q k^T (MatMul) are expected.')
    q = self.head_side(self._batch(a.tracked(0), b), keys_last=False, where=a.name,
                       scaled=True)
    k = self.head_side(self._batch(a.tracked(1), b), keys_last=True, where=a.name,
                       scaled=True)
    return (mul, div), mask, q, k

  def _causal(self, c, a):
    n = a.shape[-1]
    full = np.broadcast_to(c, a.shape).reshape(-1, a.shape[-2], n)
    upper = np.triu(np.ones((a.shape[-2], n), bool), 1)[None]
    low = full[np.broadcast_to(upper, full.shape)]
    if np.any(full[~np.broadcast_to(upper, full.shape)] != 0) or not upper.any() or \
        np.any(low > _MASK_FLOOR) or len(set(low.tolist())) != 1:
      raise _Refusal(f'node {a.name!r} ({a.kind}) adds a mask that is not causal (0 on and '
                     f'below the diagonal, one value <= {_MASK_FLOOR:g} or -inf above it).')
    if np.isfinite(low[0]):
      self.notes.append(f'mask {a.name!r}: {low[0]:.8g} above the diagonal read as -inf '
                        '(masked weights exp(L + s - max) are 0 in float for |s| < 1e29 and '
                        '< exp(-1e29) in real arithmetic)')

  def head_side(self, idx, *, keys_last, where, scaled=False):
    """q/k/v of one head as (W [m, D], b [m], read anchor[, (factor, div)]): ``idx`` is
    [n, m] (or [m, n] with ``keys_last``) of entries of a projection, maybe scaled."""
    idx = idx.reshape(idx.shape[-2:]) if idx.ndim > 2 else idx
    if idx.ndim != 2:
      raise _Refusal(f'node {where!r} multiplies heads of rank {idx.ndim}.')
    idx = idx.T if keys_last else idx
    a = self.anchor(idx)
    factor, div = 1.0, False
    if a.kind in ('Mul', 'Div') and any(k == 'c' for k, _ in a.args):
      c = np.asarray(next(v for k, v in a.args if k == 'c'))
      if c.size != 1 or not scaled:
        raise _Refusal(f'node {a.name!r} ({a.kind}) scales a head by a non-scalar.')
      factor, div = float(c.reshape(-1)[0]), a.kind == 'Div'
      t = next(v for k, v in a.args if k == 't')
      local = idx.ravel() - a.offset
      idx = t.ravel()[local].reshape(idx.shape)
      a = self.anchor(idx)
    tok, col = a.tok[idx.ravel() - a.offset].reshape(idx.shape), \
        a.col[idx.ravel() - a.offset].reshape(idx.shape)
    if np.any(tok != np.arange(idx.shape[0])[:, None]) or np.any(col != col[:1]):
      raise _Refusal(f'a head of {where!r} does not read its projection token by token.')
    src, w_eff, bias, _ = self.linear(a)
    cols = col[0]
    w = w_eff[:, cols].T
    b = np.zeros(len(cols)) if bias is None else bias[cols]
    return (w, b, src, (factor, div)) if scaled else (w, b, src)

  # -- the stream ----------------------------------------------------------------------------------
  def parse(self, out_idx):
    """The v2 dict of the network whose output is ``out_idx``."""
    net = {}
    a = self.stream(out_idx, 'the output')
    try:
      src, w, b, _ = self.linear(a)
      net['readout'] = w.T
      if b is not None:
        net['readout_bias'] = b
      a = src
    except _Refusal:
      pass
    subs = []
    final_ln = None
    while True:
      ln = self.layer_norm(a) if a.kind in ('LayerNormalization', 'Add', 'Mul', 'Div') else None
      if ln is not None:
        x, ln_keys = ln
        if x.kind == 'Add' and len([1 for k, _ in x.args if k == 't']) == 2:
          res = self.residual(x)
          if res[3] is None:       # post-LN sublayer
            subs.append((res[0], res[1], 'post', ln_keys))
            a = res[2]
            continue
          if final_ln is None and not subs:
            final_ln = ln_keys
            a = x
            continue
        elif not subs and final_ln is None and self.layer_norm(x) is not None:
          final_ln = ln_keys
          a = x
          continue
        raise _Refusal(f'node {a.name!r} ({a.kind}) is a LayerNorm that closes no residual '
                       f'sublayer; outside {_CLASS}.')
      if a.kind == 'Add' and len([1 for k, _ in a.args if k == 't']) == 2:
        kind, keys, x, pre_ln = self.residual(a)
        subs.append((kind, keys, 'pre' if pre_ln is not None else None, pre_ln))
        a = x
        continue
      break
    self.embed(a, net)
    subs.reverse()
    net['blocks'] = self.blocks(subs)
    if final_ln is not None:
      net['final_ln'] = final_ln
    return net

  def residual(self, r):
    """r = x + S(x) or x + S(LN(x)): (kind, keys, x anchor, LN keys of pre-LN or None)."""
    errors = []
    for xi, yi in ((0, 1), (1, 0)):
      try:
        x = self.stream(r.tracked(xi), f'node {r.name!r} (Add)')
        y = self.stream(r.tracked(yi), f'node {r.name!r} (Add)')
        kind, keys, u = self.sublayer(y)
      except _Refusal as e:
        errors.append(str(e))
        continue
      if u is x:
        return kind, keys, x, None
      ln = self.layer_norm(u)
      if ln is not None and ln[0] is x:
        return kind, keys, x, ln[1]
      errors.append(f'the sublayer added at {r.name!r} reads neither the stream nor its '
                    'LayerNorm.')
    raise _Refusal(errors[-1] if len(errors) == 1 else min(errors, key=len) if errors[0] ==
                   errors[-1] else errors[0])

  def blocks(self, subs):
    out, cur = [], None
    for kind, keys, norm, ln in subs:
      if kind == 'attn' or cur is None or 'W_1' in cur:
        cur = {}
        out.append(cur)
      cur.update(keys)
      if norm is not None:
        if cur.get('norm', norm) != norm:
          raise _Refusal('a block mixes post-LN and pre-LN sublayers.')
        cur['norm'] = norm
        cur['ln_attn' if kind == 'attn' else 'ln_ff'] = ln
      elif 'norm' in cur:
        raise _Refusal('a block has a LayerNorm on one sublayer only.')
    for blk in out:
      if 'norm' in blk and ('W_Q' in blk) + ('W_1' in blk) != ('ln_attn' in blk) + (
          'ln_ff' in blk):
        raise _Refusal('a block has a LayerNorm on one sublayer only.')
    return out

  def embed(self, a, net):
    if a.kind == 'input':
      return
    pos = None
    if a.kind == 'Add' and any(k == 'c' for k, _ in a.args):
      c = np.asarray(next(v for k, v in a.args if k == 'c'), np.float64)
      full = np.broadcast_to(c, a.shape).reshape(-1, a.shape[-1])
      if np.any(full != full[:1]):
        pos = full[np.argsort(a.tok.reshape(-1, a.shape[-1])[:, 0])]
        a = self.anchor(next(v for k, v in a.args if k == 't'))
    try:
      src, w, b, _ = self.linear(a)
    except _Refusal:
      src = None
    if src is None or src.kind != 'input':
      raise _Refusal(f'node {a.name!r} ({a.kind}) sits between the input and the first block '
                     f'and is not a Linear embedding; outside {_CLASS}.')
    net['embed'] = w.T
    if b is not None:
      net['embed_bias'] = b
    if pos is not None:
      net['positional'] = pos


def read(path, *, d: int | None = None, n: int | None = None):
  """(v2 dict, text): the network of the ONNX file at ``path`` (module docstring), and one
  line saying what was read (exporter, opset, dtype, notes). ValueError in one line else."""
  path = os.fspath(path)
  model = load(path)
  for node in model.graph.node:
    if node.op_type in _REFUSED and node.op_type != 'Dropout' or node.domain not in (
        '', 'ai.onnx'):
      _refuse(f'node {node.name or node.output[0]!r} ({node.op_type}) is '
              f'{_REFUSED.get(node.op_type, "outside the ONNX domain")}, outside {_CLASS}.')
  x_shape = _fixed_input_shape(model, d, n)
  if len(model.graph.output) != 1:
    _refuse(f'the graph has {len(model.graph.output)} outputs; one output Y is needed.')
  try:
    shapes = _shapes(model, x_shape)
    g = _Graph(model, x_shape)
    g.run(shapes)
    out = model.graph.output[0].name
    if out not in g.tracked:
      raise _Refusal(f'the output {out!r} does not depend on the input.')
    m = _Match(g)
    net = m.parse(g.tracked[out])
  except _Refusal as e:
    _refuse(str(e))
  except Exception as e:  # noqa: BLE001 -- a graph this reader cannot follow: one line
    _refuse(f'the graph could not be matched to {_CLASS} ({type(e).__name__}: '
            f'{str(e).splitlines()[0][:100] if str(e) else ""}).')
  dtype = {onnx.helper.tensor_dtype_to_np_dtype(t.data_type).name
           for t in model.graph.initializer} & {'float32', 'float64', 'bfloat16'}
  producer = f'{model.producer_name} {model.producer_version}'.strip()
  exporter = ('dynamo' if any(nd.op_type == 'Gemm' for nd in model.graph.node) and not any(
      nd.op_type == 'Identity' for nd in model.graph.node) else 'legacy') \
      if 'torch' in producer.lower() else 'unknown'
  text = (f'ONNX file {os.path.basename(path)} ({producer or "unknown producer"}, opset '
          f'{g.opset}, {"/".join(sorted(dtype)) or "no"} weights, {len(model.graph.node)} nodes'
          f'): {len(net["blocks"])} block(s)')
  if m.notes:
    text += '; ' + '; '.join(m.notes)
  del exporter
  return net, text
