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
             attention skeleton. In torch 2.13 the legacy exporter writes a lone
             TransformerEncoderLayer in eval mode, but fails on nn.TransformerEncoder in eval
             mode (its fast path, aten::_transformer_encoder_layer_fwd, has no ONNX
             export): torch_import turns the fast path off while exporting
             (torch.backends.mha.set_fastpath_enabled(False)); train mode with dropout 0
             gives the same graph.

Fold nothing the runtime does not fold. Weights are read as the file stores them (float32
values are exact in float64); biases, LayerNorm gains and the scale stay where they are
computed. Where the dict v2 cannot hold what the graph computes exactly, the reader extends
it to the real-arithmetic equivalent and says so in the returned text (``notes``):

    split scale  q*c . k*c (c = sqrt of the scale, as both exporters write it) is read as
                 scale = c*c after the dot product (exact in float64 for a float32 c): equal
                 in real arithmetic; in float the runtime rounds q*c and k*c, and the
                 enclosure's D of the scaled scores is the largest over the placements
                 runtimes use (after the dot product, on q, fl(sqrt c) on q and on k;
                 network_enclosure), so it covers this one (fl(sqrt(c*c)) = c exactly).
    Div scale    s / c is read as scale = 1/c rounded to float64: exact when c is a power
                 of two (m = 4, 16, ...), else a real-arithmetic deviation of relative
                 2^-53 per score, named in the text.

Anything outside the class is refused in one ValueError line naming the op and its node
(Sigmoid, Conv, Dropout in train mode, the opset-23 Attention op, a Tanh outside GELU, a
LayerNorm over the sequence axis, a mask that is not causal -inf, float16 weights, an
external data file that is missing, input shapes that n and d do not fix).
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from transformer_ua.networks.anchor_graph import CLASS, AnchorGraph, Refusal
from transformer_ua.networks.graph_match import Match

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


def _refuse(msg: str):
  raise ValueError(f'onnx_import: {msg}')


class _OnnxGraph(AnchorGraph):
  """The interpreter over ONNX nodes: constants, tracked index arrays and anchors."""

  def __init__(self, model: onnx.ModelProto, x_shape: tuple):
    self.model = model
    self.opset = next((o.version for o in model.opset_import if o.domain in ('', 'ai.onnx')),
                      None)
    super().__init__()
    for init in model.graph.initializer:
      self.const[init.name] = numpy_helper.to_array(init)
    x_name = _input_name(model)
    inp = next(i for i in model.graph.input if i.name == x_name)
    self.dtype = onnx.helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type).name
    n = x_shape[-2]
    tok = np.repeat(np.arange(n), x_shape[-1])
    if len(x_shape) == 3:
      tok = np.tile(tok, x_shape[0])
    self.tracked[x_name] = self.new('input', 'input', x_shape, [], {}, tok,
                                     np.tile(np.arange(x_shape[-1]), int(np.prod(x_shape[:-1]))))

  def run(self, shapes: dict):
    for node in self.model.graph.node:
      self.node(node, shapes)

  def _eval(self, node, values):
    feeds = {nm: v for nm, v in zip(node.input, values) if nm}
    try:
      out = ReferenceEvaluator(node, opsets={'': self.opset}).run(None, feeds)
    except Exception as e:  # noqa: BLE001 -- the one line names the node
      raise Refusal(f'node {node.name!r} ({node.op_type}) could not be evaluated on its '
                     f'constants ({type(e).__name__}).') from None
    return out

  def node(self, node, shapes):
    op, name = node.op_type, node.name or node.output[0]
    ins = list(node.input)
    if node.domain not in ('', 'ai.onnx'):
      raise Refusal(f'node {name!r} is {node.domain}::{op}, outside the ONNX domain; '
                     f'allowed: {CLASS}.')
    if op in _REFUSED and op != 'Dropout':
      raise Refusal(f'node {name!r} ({op}) is {_REFUSED[op]}, outside {CLASS}.')
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
        raise Refusal(f'node {name!r} (Dropout) runs in train mode, outside {CLASS}.')
      if len(node.output) > 1 and node.output[1]:
        raise Refusal(f'node {name!r} (Dropout) exports its mask, outside {CLASS}.')
      self.tracked[node.output[0]] = self.tracked[ins[0]]
      return
    if op == 'Cast':
      to = onnx.helper.get_attribute_value(node.attribute[0])
      src = shapes.get(ins[0], (None, None))[1]
      if src is not None and src == to:
        self.tracked[node.output[0]] = self.tracked[ins[0]]
        return
      raise Refusal(f'node {name!r} (Cast) changes the dtype of a tensor of the network; a '
                     'network computes in one dtype.')
    if op in PLUMBING:
      if op == 'Concat':
        if not all(is_t):
          raise Refusal(f'node {name!r} (Concat) joins a tensor of the network with '
                         f'constants, outside {CLASS}.')
        values = [self.tracked[i] for i in ins]
      else:
        if any(i in self.tracked for i in ins[1:] if i):
          raise Refusal(f'node {name!r} ({op}) takes its shape or indices from the network\'s '
                         'values (a dynamic shape).')
        values = [self.tracked[ins[0]]] + [self.const.get(i) for i in ins[1:]]
      for out, v in zip(node.output, self._eval(node, values)):
        self.tracked[out] = np.asarray(v, np.int64)
      return
    if op not in ARITHMETIC:
      raise Refusal(f'node {name!r} ({op}) is not an operation of {CLASS}.')
    args = [('t', self.tracked[i]) if i in self.tracked else ('c', self.const.get(i))
            for i in ins]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    shape = shapes[node.output[0]][0]
    tok, col = self.layout(op, name, args, attrs, shape)
    self.tracked[node.output[0]] = self.new(op, name, shape, args, attrs, tok, col)
    for extra in node.output[1:]:
      if extra:
        raise Refusal(f'node {name!r} ({op}) has a second output in use, outside {CLASS}.')


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
  names = [o for node in model.graph.node for o in node.output if o]
  for name in names:
    model2.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
  try:
    outs = ReferenceEvaluator(model2).run(None, {x_name: np.full(x_shape, 0.5, dtype)})
  except Exception as e:  # noqa: BLE001
    _refuse(f'the graph does not run on an input of shape {list(x_shape)} '
            f'({type(e).__name__}: {(str(e).splitlines() or [""])[0][:80]}).')
  for name, v in zip(names, outs):
    v = np.asarray(v)
    elem_v = onnx.helper.np_dtype_to_tensor_dtype(v.dtype) if v.dtype != object else None
    vals[name] = (v.shape, elem_v)
  vals[x_name] = (tuple(x_shape), elem)
  return vals


def read(path, *, d: int | None = None, n: int | None = None):
  """(v2 dict, text): the network of the ONNX file at ``path`` (module docstring), and one
  line saying what was read (exporter, opset, dtype, notes). ValueError in one line else."""
  path = os.fspath(path)
  model = load(path)
  for node in model.graph.node:
    if node.op_type in _REFUSED and node.op_type != 'Dropout' or node.domain not in (
        '', 'ai.onnx'):
      _refuse(f'node {node.name or node.output[0]!r} ({node.op_type}) is '
              f'{_REFUSED.get(node.op_type, "outside the ONNX domain")}, outside {CLASS}.')
  x_shape = _fixed_input_shape(model, d, n)
  if len(model.graph.output) != 1:
    _refuse(f'the graph has {len(model.graph.output)} outputs; one output Y is needed.')
  shapes = _shapes(model, x_shape)          # its own one-line refusal, not wrapped below
  try:
    g = _OnnxGraph(model, x_shape)
    g.run(shapes)
    out = model.graph.output[0].name
    if out not in g.tracked:
      raise Refusal(f'the output {out!r} does not depend on the input.')
    m = Match(g)
    net = m.parse(g.tracked[out])
  except Refusal as e:
    _refuse(str(e))
  except Exception as e:  # noqa: BLE001 -- a graph this reader cannot follow: one line
    _refuse(f'the graph could not be matched to {CLASS} ({type(e).__name__}: '
            f'{str(e).splitlines()[0][:100] if str(e) else ""}).')
  dtype = {onnx.helper.tensor_dtype_to_np_dtype(t.data_type).name
           for t in model.graph.initializer} & {'float32', 'float64', 'bfloat16'}
  producer = f'{model.producer_name} {model.producer_version}'.strip()
  text = (f'ONNX file {os.path.basename(path)} ({producer or "unknown producer"}, opset '
          f'{g.opset}, {"/".join(sorted(dtype)) or "no"} weights, {len(model.graph.node)} nodes'
          f'): {len(net["blocks"])} block(s)')
  if m.notes:
    text += '; ' + '; '.join(m.notes)
  return net, text
