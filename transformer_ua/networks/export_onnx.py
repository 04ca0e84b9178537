r"""Lemma 6's realized standard Transformer g as an ONNX model, for any ONNX runtime.

A ``yun.approximator.Realized`` g is an ordinary stack of Transformer blocks of the class T^{h,m,r}
(Yun et al. eqs. (1)-(2); after Lemma 6: softmax attention with the query bias, ReLU
feed-forward). This module writes it with the plain ``onnx.helper`` graph API, independent
of the JAX code path (``layers``), so that a runtime nobody here wrote (onnxruntime,
PyTorch through onnx2torch, a verifier) can run and cross-check ``g.apply``. Two layouts:

  'flat'  every block written out with standard operators (MatMul, Add, Relu, Softmax,
          Transpose; Pad / Slice for a wider residual stream), per head in 2-d:
          ``flat_onnx`` of ``project_import.from_realized(g)`` (its docstring has the graph);
  'scan'  one ONNX ``Scan`` per segment, below: the file does not grow with depth, but
          onnx2torch and the verifiers cannot read Scan.

'auto' (the default) writes flat when g has at most ``AUTO_FLAT_BLOCKS`` = 64 blocks (the
integer-id, one-layer and wide networks, and the deep networks at small N) and scan above.

The scan graph, token-major like ``layers`` (X [B, n, d]; the paper's column j is row j):

    X <- X + E                                    (Theorem 3 only: positional E [n, d])
    for each segment, ONNX ``Scan`` over its L stacked layers:
      Q = X Wq + bq,  K = X Wk,  V = X Wv         [B, n, h m] -> [B, h, n, m]
      A = Softmax_keys(lam Q K^T)                 [B, h, n_query, n_key]
      X <- X + concat_i(A_i V_i) Wo               [B, n, h m] [h m, d] -> [B, n, d]
      X <- X + Relu(X W1 + b1) W2 + b2            [B, n, r] -> [B, n, d]

with the paper's params rearranged (not changed) for right-multiplication:

    Wq[:, i m + k] = W_Q^i[k, :]      (W_Q [h, m, d] -> [d, h m]; same for Wk, Wv)
    bq[i m + k]    = b_Q^i[k]         (b_Q [h, m] -> [h m])
    Wo[i m + k, :] = W_O^i[:, k]      (W_O [h, d, m] -> [h m, d])
    W1 = W_1^T [d, r],  W2 = W_2^T [r, d]

Each segment's params stay stacked [L, ...] and are the scan inputs of one ``Scan`` node,
so the file holds the weights once and the node count does not grow with depth. After
Lemma 6 the softmax scale lambda is folded into W_Q and b_Q (segment lam = 1); a segment
with lam != 1 gets an explicit ``Mul``.

Padding: a g whose residual stream is wider than d (``model_width``, the integer-id network)
pads X with zero coordinates first (``Pad``) and returns the first d (``Slice``).

Precision: ``dtype`` defaults to the format g's certificate covers (``number_format`` of an
integer-id g: its parameters are numbers of that format, and onnxruntime runs the certified
network; a float32 graph of a float64-built g is refused) and to 'float64' for the other
realizations, whose float runs reproduce g_bar only for small configurations and are not
certified. Import direction: this module is a client of ``yun`` (like the binaries).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from transformer_ua import outputs
from transformer_ua.networks import flat_onnx, network_dict, project_import
from transformer_ua.yun.approximator import Realized
from transformer_ua.yun.single_attention.integer_ids_realized import IntegerIdsRealized
from transformer_ua.yun.single_attention.one_layer_realized import OneLayerRealized
from transformer_ua.yun.single_attention.one_layer_wide import WideRealized

#: The realized networks (every approximator's ``realize``) the export reads: blocks of
#: any heads and width, ``segments``, ``params``, ``positional``, ``n``, ``lam``, ``epsilon``
#: (and ``model_width``, ``number_format`` for the integer-id network).
REALIZATIONS = (Realized, OneLayerRealized, WideRealized, IntegerIdsRealized)

#: dtypes the exported graph can compute in (input, weights and output).
EXPORT_DTYPES = ('float64', 'float32')
#: ONNX opset (Scan-9+, Softmax-13 over one axis) and the IR version of that opset, so
#: that runtimes older than the installed ``onnx`` package can load the file.
OPSET = flat_onnx.OPSET
IR_VERSION = flat_onnx.IR_VERSION
#: 'flat': every block written out with standard operators (``flat_onnx``; PyTorch's
#: onnx2torch and the verifiers read it); 'scan': one ONNX Scan per segment (the file does
#: not grow with depth); 'auto': flat up to ``AUTO_FLAT_BLOCKS`` blocks, else scan.
LAYOUTS = ('flat', 'scan', 'auto')
#: The deepest g 'auto' writes flat (about 30 nodes per block of 2 heads: <= ~2,000 nodes).
AUTO_FLAT_BLOCKS = 64

_TENSOR_TYPES = {'float64': TensorProto.DOUBLE, 'float32': TensorProto.FLOAT}


def _check_args(g, path, batch, dtype, layout, overwrite=False) -> str:
  """Refuses bad arguments in one line before anything is built. Returns the path."""
  if not isinstance(g, REALIZATIONS):
    hint = (' (a network dict or network_dict.Net: write it with flat_onnx.write)'
            if isinstance(g, (dict, network_dict.Net)) else '')
    raise ValueError(f'export_onnx needs a realized g (an approximator\'s realize(): '
                     f'{", ".join(r.__name__ for r in REALIZATIONS)}), got '
                     f'{type(g).__name__}{hint}.')
  if layout not in LAYOUTS:
    raise ValueError(f'layout={layout!r}; allowed: {LAYOUTS}.')
  if dtype not in EXPORT_DTYPES:
    raise ValueError(f'dtype={dtype!r}; allowed: {EXPORT_DTYPES}.')
  built = getattr(g, 'number_format', None)
  if built == 'float64' and dtype == 'float32':
    raise ValueError("dtype='float32': this g was built for float64 (its parameters are not "
                     "all float32 numbers, so a float32 graph is another, uncertified network); "
                     "build it with arithmetic='float32'.")
  if batch is not None and (isinstance(batch, bool) or not isinstance(batch, (int, np.integer))
                            or batch < 1):
    raise ValueError(f'batch must be None (any batch) or a positive integer, got {batch!r}.')
  path = flat_onnx.check_path(path, overwrite)
  for i, seg in enumerate(g.segments):
    if (seg.kind, seg.normalizer, seg.activation) != ('block', 'softmax', 'relu'):
      raise ValueError(f'segment {i} is a {seg.kind} with {seg.normalizer} / {seg.activation}; '
                       'export needs softmax attention + ReLU blocks (Lemma 6).')
  return path


def _block_weights(p: dict, dt) -> dict:
  """One segment's paper params [L, ...] -> the graph's right-multiplied weights [L, ...]."""
  att, ff = p['attention'], p['feedforward']
  L, h, m, d = np.shape(att['W_Q'])

  def proj(w):  # [L, h, m, d] -> [L, d, h m]
    return np.asarray(w, dt).reshape(L, h * m, d).transpose(0, 2, 1)

  return {
      'Wq': proj(att['W_Q']), 'bq': np.asarray(att['b_Q'], dt).reshape(L, h * m),
      'Wk': proj(att['W_K']), 'Wv': proj(att['W_V']),
      'Wo': np.asarray(att['W_O'], dt).transpose(0, 1, 3, 2).reshape(L, h * m, d),
      'W1': np.asarray(ff['W_1'], dt).transpose(0, 2, 1),
      'b1': np.asarray(ff['b_1'], dt),
      'W2': np.asarray(ff['W_2'], dt).transpose(0, 2, 1),
      'b2': np.asarray(ff['b_2'], dt),
  }


def _block_body(seg, weights: dict, elem_type: int) -> onnx.GraphProto:
  """The Scan body: one block X -> X' with the layer's weights as inputs."""
  h, m = seg.num_heads, seg.head_size
  nodes, consts = [], [numpy_helper.from_array(np.array([0, 0, h, m], np.int64), 'split_heads'),
                       numpy_helper.from_array(np.array([0, 0, h * m], np.int64), 'merge_heads')]

  def op(kind, inputs, out, **attrs):
    nodes.append(helper.make_node(kind, inputs, [out], **attrs))
    return out

  def heads(name, x):  # x [B, n, h m] -> [B, h, n, m]
    return op('Transpose', [op('Reshape', [x, 'split_heads'], f'{name}_bnhm')], f'{name}_heads',
              perm=[0, 2, 1, 3])

  q = heads('q', op('Add', [op('MatMul', ['x', 'Wq'], 'xwq'), 'bq'], 'q'))
  k = heads('k', op('MatMul', ['x', 'Wk'], 'k'))
  v = heads('v', op('MatMul', ['x', 'Wv'], 'v'))
  scores = op('MatMul', [q, op('Transpose', [k], 'k_t', perm=[0, 1, 3, 2])], 'scores')
  if seg.lam != 1.0:
    consts.append(numpy_helper.from_array(np.array(seg.lam, weights['Wq'].dtype), 'lam'))
    scores = op('Mul', [scores, 'lam'], 'scaled_scores')
  mixed = op('MatMul', [op('Softmax', [scores], 'weights', axis=-1), v], 'mixed')  # [B,h,n,m]
  merged = op('Reshape', [op('Transpose', [mixed], 'mixed_bnhm', perm=[0, 2, 1, 3]),
                          'merge_heads'], 'merged')
  x_att = op('Add', ['x', op('MatMul', [merged, 'Wo'], 'att_update')], 'x_att')
  hidden = op('Relu', [op('Add', [op('MatMul', [x_att, 'W1'], 'pre'), 'b1'], 'pre_b')], 'hidden')
  ff = op('Add', [op('MatMul', [hidden, 'W2'], 'ff_w2'), 'b2'], 'ff_update')
  op('Add', [x_att, ff], 'x_out')
  layer_inputs = [helper.make_tensor_value_info(name, elem_type, w.shape[1:])
                  for name, w in weights.items()]
  return helper.make_graph(
      nodes, 'block',
      [helper.make_tensor_value_info('x', elem_type, None)] + layer_inputs,
      [helper.make_tensor_value_info('x_out', elem_type, None)], initializer=consts)


def export_onnx(g, path, *, layout: str = 'auto', batch: int | None = None,
                dtype: str | None = None, overwrite: bool = False):
  """Writes the realized network g as an ONNX model; returns ``path``.

  Args:
    g: a realized network (``REALIZATIONS``: what every approximator's ``realize``
      returns, deep or wide).
    path: the .onnx file to write (its directory must exist and be writable).
    layout: 'scan' (one Scan per segment, module docstring), 'flat' (standard operators
      only, ``flat_onnx`` of ``project_import.from_realized(g)``) or 'auto' (flat when g has
      at most ``AUTO_FLAT_BLOCKS`` blocks, else scan).
    batch: fixed batch size, or None for a symbolic ``batch`` dimension.
    dtype: 'float64' or 'float32': input X, weights and output; None: the format g's
      certificate covers (``number_format``), else 'float64'. Other realizations' params
      are cast (float64 -> float32 rounds them).
    overwrite: replace an existing file at ``path`` (default: refuse it). The file is
      written atomically (whole or not at all).
  Model: input ``X`` [batch, n, d], output ``Y`` = g(X) [batch, n, d].
  Raises:
    ValueError: g is not a Realized, bad layout / dtype / batch, or path cannot be written.
    FileExistsError: ``path`` exists and ``overwrite`` is False (``outputs.OutputExists``).
  """
  if dtype is None:
    dtype = getattr(g, 'number_format', 'float64')
  path = _check_args(g, path, batch, dtype, layout, overwrite)
  blocks = sum(s.depth for s in g.segments)
  props = {'lam': repr(g.lam), 'epsilon': repr(g.epsilon), 'realized_dtype': g.dtype,
           'positional': str(g.positional), 'n': str(g.n), 'd': str(g.d), 'blocks': str(blocks)}
  if layout == 'flat' or (layout == 'auto' and blocks <= AUTO_FLAT_BLOCKS):
    return flat_onnx.write(project_import.from_realized(g), path, dtype=dtype, batch=batch,
                           overwrite=True, props=props,
                           doc='Yun et al. 2020 Lemma 6 realization g: softmax attention + '
                           'ReLU blocks (flat layout).')
  dt = np.dtype(dtype)
  elem_type = _TENSOR_TYPES[dtype]
  width = int(np.shape(g.params['segment_0']['feedforward']['b_2'])[-1])
  d = getattr(g, 'd', width)
  shape = ['batch' if batch is None else int(batch), g.n, d]
  nodes, inits = [], []
  x = 'X'
  if width > d:                      # pad X [B, n, d] with zero coordinates to [B, n, D]
    inits.append(numpy_helper.from_array(np.array([0, 0, 0, 0, 0, width - d], np.int64),
                                         'embed_pads'))
    nodes.append(helper.make_node('Pad', ['X', 'embed_pads'], ['X_padded'], mode='constant'))
    x = 'X_padded'
  if g.positional:
    inits.append(numpy_helper.from_array(np.asarray(g.params['E'], dt), 'E'))
    nodes.append(helper.make_node('Add', [x, 'E'], ['X_plus_E']))
    x = 'X_plus_E'
  for i, seg in enumerate(g.segments):
    weights = _block_weights(g.params[f'segment_{i}'], dt)
    names = []
    for name, w in weights.items():
      names.append(f'segment_{i}/{name}')
      inits.append(numpy_helper.from_array(w, names[-1]))
    last = i == len(g.segments) - 1
    out = ('Y' if width == d else 'Y_full') if last else f'segment_{i}_out'
    nodes.append(helper.make_node('Scan', [x] + names, [out], name=f'segment_{i}',
                                  num_scan_inputs=len(names),
                                  body=_block_body(seg, weights, elem_type)))
    x = out
  if width > d:                      # the first d coordinates
    for name, v in (('y_starts', [0]), ('y_ends', [d]), ('y_axes', [2])):
      inits.append(numpy_helper.from_array(np.array(v, np.int64), name))
    nodes.append(helper.make_node('Slice', ['Y_full', 'y_starts', 'y_ends', 'y_axes'], ['Y']))
  graph = helper.make_graph(
      nodes, 'realized_transformer',
      [helper.make_tensor_value_info('X', elem_type, shape)],
      [helper.make_tensor_value_info('Y', elem_type, shape)], initializer=inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', OPSET)],
                            producer_name='transformer_ua', ir_version=IR_VERSION,
                            doc_string=('Yun et al. 2020 Lemma 6 realization g: softmax '
                                        'attention + ReLU blocks.'))
  helper.set_model_props(model, {**props, 'layout': 'scan'})
  onnx.checker.check_model(model, full_check=True)
  with outputs.atomic_open(path, 'wb') as f:
    f.write(model.SerializeToString())
  return path
