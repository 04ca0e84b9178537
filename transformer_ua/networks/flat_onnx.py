r"""Any standard Transformer (``network_dict.Net``) as a flat ONNX graph, and back.

The flat layout writes every block out with standard operators only (MatMul, Add, Mul,
Relu, Erf, Tanh, LayerNormalization (opset 17), Softmax, Transpose; Pad / Slice where the
residual stream is wider than the tokens), one head at a time in the 2-d form the
neural-network verifiers read (Marabou 2.0 parses the version-1 subset; no Scan, no Reshape,
no head-batched 4-d MatMul). PyTorch (onnx2torch), onnxruntime and the verifiers load it as
it is. Token-major, Z [B, n, D] (``form='single'``: Z [n, D]):

    Z_0 = X embed^T (+ embed_bias)      (MatMul, Add; without embed: Pad X with D - d zeros,
                                         in the 'single' form a MatMul by [I_d 0])
    Z_0 <- Z_0 + E                      (Add; positional only)
    per block, per head i (q, k, v [B, n, m]):
      q_i = Z Wq_i + bq_i,  k_i = Z Wk_i (+ bk_i),  v_i = Z Wv_i (+ bv_i)   Wq_i = W_Q^i^T
      s_i = q_i k_i^T (* scale) (+ mask)      (Mul by [scale]; Add of [n, n] 0 / -inf)
      u_i = Softmax_keys(s_i) v_i Wo_i                           Wo_i = W_O^i^T [m, D]
      Attn = (u_0 + u_1 + ... + u_{h-1}) (+ bo)
      FF = act(Z W1 + b1) W2 + b2, act = Relu, or GELU written out:
        erf form   Mul(Mul(x, 0.5), Add(Erf(Mul(x, 1/sqrt 2)), 1))
        tanh form  Mul(Mul(x, 0.5), Add(Tanh(Mul(Add(x, Mul(x x x, 0.044715)),
                                                 sqrt(2/pi))), 1))
      no norm / post: Z <- Z + Attn(Z) (then LayerNormalization ln_attn), the same for FF;
      pre:            Z <- Z + Attn(LayerNormalization(Z)), the same for FF
    Z <- LayerNormalization(Z)          (final_ln only)
    Y = Z readout^T (+ readout_bias)    (MatMul, Add; without readout: Slice the first d, in
                                         the 'single' form a MatMul by [I_d 0]^T)

The initializers are named after the dict format (``blocks.<i>.Wq.<head>``,
``blocks.<i>.ln_attn.gamma``, ...; the shared constants ``const.*``), in the file's dtype
(float64 or float32: a float32 file holds the network ``network_apply.cast`` gives). A
LayerNormalization holds eps as an ONNX float attribute, i.e. rounded to binary32: the file's
network has that eps (``_eps_float32``). The model's metadata carries ``layout`` = 'flat',
``dtype``, ``form`` and ``params_hash`` (``network_dict.params_hash`` of the network the
file holds). onnxruntime has no float64 Erf kernel: a float64 file with an erf-form GELU is
valid ONNX that onnx.reference runs but onnxruntime refuses.

``read`` is the inverse: it refuses an operator outside the class in one line that names it
(Gelu, Sigmoid, Scan, ...), collects the parameters by name (the activation from the Erf or
Tanh node, eps and the norm placement from the LayerNormalization nodes), writes the graph
again from them and requires the file's graph to be that graph node for node, and checks the
stored hash. So a file ``read`` accepts computes exactly the ``Net`` it returns.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from transformer_ua import outputs
from transformer_ua.networks import network_apply, network_dict

#: ONNX opset (Softmax-13 over one axis, Pad/Slice with tensor inputs) and the IR version
#: of that opset, so that runtimes older than the installed ``onnx`` package load the file.
OPSET = 17
IR_VERSION = 8
#: dtypes the flat graph computes in (input, weights and output).
DTYPES = ('float64', 'float32')
#: 'batched': X [batch, n, d]; 'single': X [n, d], one input (the form verifiers read).
FORMS = ('batched', 'single')
#: The operators the flat layout uses; ``read`` refuses any other.
OPERATORS = ('MatMul', 'Add', 'Mul', 'Relu', 'Erf', 'Tanh', 'LayerNormalization', 'Softmax',
             'Transpose', 'Pad', 'Slice', 'Identity')
#: Operators of other architectures, named in ``read``'s refusal.
_OTHER_OPERATORS = {
    'LayerNormalization': 'LayerNorm', 'ReduceMean': 'a normalization (LayerNorm)',
    'Gelu': 'GELU', 'Erf': 'GELU (erf)', 'Tanh': 'a tanh activation',
    'Sigmoid': 'a sigmoid activation', 'Scan': "a Scan loop (export_onnx's scan layout; "
    "write the network with layout='flat')",
}

_TENSOR_TYPES = {'float64': TensorProto.DOUBLE, 'float32': TensorProto.FLOAT}
_DTYPE_OF = {v: k for k, v in _TENSOR_TYPES.items()}


def check_path(path, overwrite: bool = False) -> str:
  """``path`` as a str if a new file can be written there, else ValueError in one line
  (``outputs.OutputExists`` for an existing file without ``overwrite``). Creates nothing."""
  if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
    raise ValueError(f'path must be a file path (str or os.PathLike), got {path!r}.')
  path = os.fspath(path)
  parent = os.path.dirname(os.path.abspath(path))
  if os.path.isdir(path):
    raise ValueError(f'path {path!r} is a directory; give a file name such as g.onnx.')
  if not os.path.isdir(parent):
    raise ValueError(f'directory {parent!r} of path {path!r} does not exist.')
  try:  # a real probe: os.access says yes to root even where nothing can be created
    with tempfile.NamedTemporaryFile(dir=parent):
      pass
  except OSError as e:
    raise ValueError(f'directory {parent!r} of path {path!r} is not writable: '
                     f'{e.strerror}.') from None
  if os.path.exists(path) and not os.access(path, os.W_OK):
    raise ValueError(f'path {path!r} exists and is not writable.')
  outputs.check_new(path, overwrite=overwrite, what=f'path {path!r}')
  return path


def _check_options(dtype: str, form: str, batch) -> None:
  if dtype not in DTYPES:
    raise ValueError(f'dtype={dtype!r}; allowed: {DTYPES}.')
  if form not in FORMS:
    raise ValueError(f'form={form!r}; allowed: {FORMS}.')
  if batch is not None and (isinstance(batch, bool) or not isinstance(batch, (int, np.integer))
                            or batch < 1):
    raise ValueError(f'batch must be None (any batch) or a positive integer, got {batch!r}.')
  if form == 'single' and batch is not None:
    raise ValueError("form='single' has no batch axis; leave batch=None.")


def to_model(net, *, dtype: str = 'float64', form: str = 'batched', batch: int | None = None,
             doc: str = '') -> onnx.ModelProto:
  """The flat ONNX model of ``net`` (a ``network_dict.Net`` or dict; module docstring).

  Args:
    net: the network; its token count n must be known (positional, or a Net checked with n).
    dtype: 'float64' or 'float32' (weights rounded to nearest, ``network_apply.cast``).
    form: 'batched' (X [batch, n, d]) or 'single' (X [n, d]).
    batch: fixed batch size, or None for a symbolic ``batch`` dimension ('batched' only).
    doc: the model's doc string.
  Model: input ``X``, output ``Y`` = g(X), same shape; passes ``onnx.checker`` (full check).
  """
  _check_options(dtype, form, batch)
  net = network_dict.check(net) if not isinstance(net, network_dict.Net) else net
  if net.n is None:
    raise ValueError('the network has no token count n (no positional encodings); check it '
                     'with network_dict.check(net, n=...) first.')
  dt = np.dtype(dtype)
  elem = _TENSOR_TYPES[dtype]
  lead = [] if form == 'single' else ['batch' if batch is None else int(batch)]
  nodes, inits = [], []
  t_last = [1, 0] if form == 'single' else [0, 2, 1]

  def const(name, value):
    inits.append(numpy_helper.from_array(np.ascontiguousarray(np.asarray(value, dt)), name))
    return name

  def index(name, value):
    inits.append(numpy_helper.from_array(np.asarray(value, np.int64), name))
    return name

  def op(kind, ins, out, **attrs):
    nodes.append(helper.make_node(kind, ins, [out], name=out, **attrs))
    return out

  z = 'X'
  if net.embed is not None:
    z = op('MatMul', [z, const('embed', net.embed.T)], 'Z_embed')
    if net.embed_bias is not None:
      z = op('Add', [z, const('embed_bias', net.embed_bias)], 'Z_embed_bias')
  elif net.D > net.d and form == 'single':   # Marabou 2.0 has no Pad: X [I_d 0]
    z = op('MatMul', [z, const('pad_matrix', np.eye(net.d, net.D))], 'Z_pad')
  elif net.D > net.d:
    pads = [0] * len(lead) + [0, 0] + [0] * len(lead) + [0, net.D - net.d]
    z = op('Pad', [z, index('pads', pads)], 'Z_pad', mode='constant')
  if net.positional is not None:
    z = op('Add', [z, const('E', net.positional)], 'Z_positional')
  shared = set()

  def shared_const(name, value):
    if name not in shared:
      shared.add(name)
      const(name, value)
    return name

  def layer_norm(x, ln, prefix, out):
    return op('LayerNormalization', [x, const(prefix + 'gamma', ln.gamma),
                                     const(prefix + 'beta', ln.beta)], out, axis=-1,
              epsilon=float(ln.eps))

  def activation(x, kind, p):
    if kind == 'relu':
      return op('Relu', [x], p + 'hidden')
    half = shared_const('const.half', 0.5)
    one = shared_const('const.one', 1.0)
    if kind == 'gelu':               # 0.5 x (1 + erf(x / sqrt 2))
      t = op('Mul', [x, shared_const('const.inv_sqrt2', 1 / np.sqrt(2))], p + 'erf_arg')
      inner = op('Erf', [t], p + 'erf')
    else:                            # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      cube = op('Mul', [op('Mul', [x, x], p + 'square'), x], p + 'cube')
      poly = op('Add', [x, op('Mul', [cube, shared_const('const.tanh_c', 0.044715)],
                              p + 'cube_c')], p + 'poly')
      t = op('Mul', [poly, shared_const('const.tanh_k', np.sqrt(2 / np.pi))], p + 'tanh_arg')
      inner = op('Tanh', [t], p + 'tanh')
    return op('Mul', [op('Mul', [x, half], p + 'half_x'),
                      op('Add', [inner, one], p + 'one_plus')], p + 'hidden')

  def attention(a, z, p):
    update = None
    for i in range(a.heads):
      h = f'.{i}'
      q = op('Add', [op('MatMul', [z, const(p + 'Wq' + h, a.w_q[i].T)], p + 'zwq' + h),
                     const(p + 'bq' + h, a.b_q[i])], p + 'q' + h)
      k = op('MatMul', [z, const(p + 'Wk' + h, a.w_k[i].T)], p + 'k' + h)
      if a.b_k is not None:
        k = op('Add', [k, const(p + 'bk' + h, a.b_k[i])], p + 'k_bias' + h)
      v = op('MatMul', [z, const(p + 'Wv' + h, a.w_v[i].T)], p + 'v' + h)
      if a.b_v is not None:
        v = op('Add', [v, const(p + 'bv' + h, a.b_v[i])], p + 'v_bias' + h)
      s = op('MatMul', [q, op('Transpose', [k], p + 'k_t' + h, perm=t_last)], p + 's' + h)
      if a.scale != 1.0:
        s = op('Mul', [s, shared_const(p + 'scale', a.scale)], p + 's_scaled' + h)
      if a.causal:                   # keys k > j: -inf, weight exactly 0
        s = op('Add', [s, shared_const(p + 'mask', np.where(
            np.triu(np.ones((net.n, net.n), bool), 1), -np.inf, 0.0))], p + 's_masked' + h)
      w = op('Softmax', [s], p + 'a' + h, axis=-1)
      u = op('MatMul', [op('MatMul', [w, v], p + 'mixed' + h), const(p + 'Wo' + h, a.w_o[i].T)],
             p + 'u' + h)
      update = u if update is None else op('Add', [update, u], p + 'heads_to' + h)
    if a.b_o is not None:
      update = op('Add', [update, const(p + 'bo', a.b_o)], p + 'attention_bias')
    return update

  def feedforward(f, z, p):
    pre = op('Add', [op('MatMul', [z, const(p + 'W1', f.w_1.T)], p + 'zw1'),
                     const(p + 'b1', f.b_1)], p + 'pre')
    hidden = activation(pre, f.activation, p)
    return op('Add', [op('MatMul', [hidden, const(p + 'W2', f.w_2.T)], p + 'hw2'),
                      const(p + 'b2', f.b_2)], p + 'ff')

  for b, blk in enumerate(net.blocks):
    p = f'blocks.{b}.'
    for part, ln, fn, name in ((blk.attention, blk.ln_attn, attention, 'attention'),
                               (blk.ff, blk.ln_ff, feedforward, 'feedforward')):
      if part is None:
        continue
      lname = 'ln_attn' if name == 'attention' else 'ln_ff'
      if blk.norm == 'pre' and ln is not None:
        u = layer_norm(z, ln, p + lname + '.', p + lname)
        z = op('Add', [z, fn(part, u, p)], p + 'z_' + name)
      else:
        z = op('Add', [z, fn(part, z, p)], p + 'z_' + name)
        if ln is not None:
          z = layer_norm(z, ln, p + lname + '.', p + lname)
  if net.final_ln is not None:
    z = layer_norm(z, net.final_ln, 'final_ln.', 'Z_final_ln')
  if net.readout is not None:
    if net.readout_bias is not None:
      z = op('MatMul', [z, const('readout', net.readout.T)], 'Z_readout')
      op('Add', [z, const('readout_bias', net.readout_bias)], 'Y')
    else:
      op('MatMul', [z, const('readout', net.readout.T)], 'Y')
  elif net.D > net.d and form == 'single':   # and no Slice: Z [I_d 0]^T
    op('MatMul', [z, const('slice_matrix', np.eye(net.d, net.D).T)], 'Y')
  elif net.D > net.d:
    op('Slice', [z, index('y_starts', [0]), index('y_ends', [net.d]), index('y_axes', [-1])],
       'Y')
  else:
    op('Identity', [z], 'Y')
  shape = lead + [net.n, net.d]
  graph = helper.make_graph(nodes, 'flat_transformer',
                            [helper.make_tensor_value_info('X', elem, shape)],
                            [helper.make_tensor_value_info('Y', elem, shape)], initializer=inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', OPSET)],
                            producer_name='transformer_ua', ir_version=IR_VERSION,
                            doc_string=doc or 'A standard Transformer: softmax attention, '
                            'ReLU feed-forward, residuals (transformer_ua.networks.flat_onnx).')
  stored = net if dtype == 'float64' else network_apply.cast(net, dt)
  stored = _eps_float32(stored)
  helper.set_model_props(model, {'layout': 'flat', 'dtype': dtype, 'form': form,
                                 'params_hash': network_dict.params_hash(stored)})
  onnx.checker.check_model(model, full_check=True)
  return model


def _eps_float32(net):
  """``net`` with each LayerNorm's eps rounded to float32: the file's LayerNormalization
  holds eps as an ONNX float attribute (binary32), so that is the network the file computes."""
  def ln(x):
    return None if x is None else dataclasses.replace(x, eps=float(np.float32(x.eps)))
  blocks = tuple(dataclasses.replace(b, ln_attn=ln(b.ln_attn), ln_ff=ln(b.ln_ff))
                 for b in net.blocks)
  return dataclasses.replace(net, blocks=blocks, final_ln=ln(net.final_ln))


def write(net, path, *, dtype: str = 'float64', form: str = 'batched',
          batch: int | None = None, overwrite: bool = False, doc: str = '',
          props: dict | None = None) -> str:
  """Writes ``to_model(net, ...)`` to ``path`` atomically (whole or not at all); returns
  the path. Every argument is checked before anything is written; ``props``: extra
  metadata (str -> str) kept with the file."""
  _check_options(dtype, form, batch)
  path = check_path(path, overwrite)
  model = to_model(net, dtype=dtype, form=form, batch=batch, doc=doc)
  if props:
    extra = {p.key: p.value for p in model.metadata_props}
    extra.update({str(k): str(v) for k, v in props.items()})
    helper.set_model_props(model, extra)
  with outputs.atomic_open(path, 'wb') as f:
    f.write(model.SerializeToString())
  return path


def _unsupported(node) -> ValueError:
  what = _OTHER_OPERATORS.get(node.op_type)
  label = f'{node.op_type} ({what})' if what else node.op_type
  return ValueError(f'node {node.name or node.output[0]!r} is a {label}, which is not an '
                    'operation of the standard Transformer class (softmax attention, ReLU '
                    f'feed-forward, residuals); the flat layout uses {", ".join(OPERATORS)}.')


def _load(path) -> onnx.ModelProto:
  if isinstance(path, onnx.ModelProto):
    return path
  if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
    raise ValueError(f'{path!r} is not an ONNX file.')
  try:
    return onnx.load(os.fspath(path))
  except Exception as e:  # noqa: BLE001 -- any unreadable file gets the one line
    raise ValueError(f'{os.fspath(path)!r} is not a readable ONNX model '
                     f'({type(e).__name__}).') from None


def _node_key(node) -> tuple:
  attrs = tuple(sorted((a.name, str(helper.get_attribute_value(a))) for a in node.attribute))
  return node.op_type, tuple(node.input), tuple(node.output), attrs


def read(path) -> network_dict.Net:
  """The ``network_dict.Net`` of a flat ONNX file (``write``), or ValueError in one line:
  an operator outside the class (named), a graph that is not the flat layout of its own
  parameters (the first differing node named), or a stored hash that does not match.

  ``path`` may also be an ``onnx.ModelProto``. The Net holds the file's numbers (a float32
  file: float32 numbers, held as float64)."""
  model = _load(path)
  g = model.graph
  for node in g.node:
    if node.op_type not in OPERATORS or node.domain not in ('', 'ai.onnx'):
      raise _unsupported(node)
  props = {p.key: p.value for p in model.metadata_props}
  if props.get('layout', 'flat') != 'flat':
    raise ValueError(f"the file's layout is {props['layout']!r}; read takes the flat layout.")
  if len(g.input) != 1 or len(g.output) != 1:
    raise ValueError(f'the graph has {len(g.input)} inputs and {len(g.output)} outputs; the '
                     'flat layout has one of each (X, Y).')
  elem = g.input[0].type.tensor_type.elem_type
  if elem not in _DTYPE_OF:
    raise ValueError(f'the input has ONNX element type {elem}; the flat layout is float64 or '
                     'float32.')
  dtype = _DTYPE_OF[elem]
  dims = g.input[0].type.tensor_type.shape.dim
  if len(dims) not in (2, 3):
    raise ValueError(f'the input X has {len(dims)} axes; the flat layout has [batch, n, d] or '
                     '[n, d].')
  form = 'single' if len(dims) == 2 else 'batched'
  batch = None if form == 'single' or dims[0].dim_param else int(dims[0].dim_value)
  n, d = int(dims[-2].dim_value), int(dims[-1].dim_value)
  arr = {t.name: numpy_helper.to_array(t) for t in g.initializer}
  as_dict, blocks = {}, {}
  if 'embed' in arr:
    as_dict['embed'] = arr['embed'].T
  if 'E' in arr:
    as_dict['positional'] = arr['E']
  if 'readout' in arr:
    as_dict['readout'] = arr['readout'].T
  for name in ('embed_bias', 'readout_bias'):
    if name in arr:
      as_dict[name] = arr[name]
  nodes = {x.name: x for x in g.node}

  def ln_of(params, name):
    node = nodes.get(name)
    if node is None or node.op_type != 'LayerNormalization':
      raise ValueError(f'the file has LayerNorm parameters but no LayerNormalization node '
                       f'{name!r}.')
    eps = [a.f for a in node.attribute if a.name == 'epsilon']
    try:
      return {'gamma': params['gamma'], 'beta': params['beta'],
              'eps': float(eps[0]) if eps else 1e-5}, node
    except KeyError as e:
      raise ValueError(f'LayerNorm {name!r} has no {e} parameter.') from None

  if 'final_ln.gamma' in arr:
    as_dict['final_ln'], _ = ln_of({'gamma': arr['final_ln.gamma'],
                                    'beta': arr.get('final_ln.beta')}, 'Z_final_ln')
  for name, a in arr.items():
    parts = name.split('.')
    if parts[0] != 'blocks':
      continue
    if len(parts) not in (3, 4) or not parts[1].isdigit():
      raise ValueError(f'initializer {name!r} is not a parameter of the flat layout.')
    blocks.setdefault(int(parts[1]), {})[tuple(parts[2:])] = a
  as_dict['blocks'] = []
  for b in range(len(blocks)):
    if b not in blocks:
      raise ValueError(f'the file has no parameters of block {b}.')
    w = blocks[b]
    blk = {}
    heads = sorted(int(k[1]) for k in w if k[0] == 'Wq' and k[1].isdigit())
    if heads:
      if heads != list(range(len(heads))):
        raise ValueError(f'block {b} has heads {heads}; expected 0..{len(heads) - 1}.')
      try:
        blk['W_Q'] = np.stack([w['Wq', str(i)].T for i in heads])
        blk['b_Q'] = np.stack([w['bq', str(i)] for i in heads])
        blk['W_K'] = np.stack([w['Wk', str(i)].T for i in heads])
        blk['W_V'] = np.stack([w['Wv', str(i)].T for i in heads])
        blk['W_O'] = np.stack([w['Wo', str(i)].T for i in heads])
        for key, name in (('bk', 'b_K'), ('bv', 'b_V')):
          if (key, '0') in w:
            blk[name] = np.stack([w[key, str(i)] for i in heads])
      except (KeyError, ValueError) as e:
        raise ValueError(f'block {b} has an incomplete or ragged set of head parameters '
                         f'({e}).') from None
      if ('bo',) in w:
        blk['b_O'] = w[('bo',)]
      if ('scale',) in w:
        blk['scale'] = float(np.asarray(w[('scale',)]).reshape(-1)[0])
      if ('mask',) in w:
        blk['mask'] = 'causal'
    if ('W1',) in w:
      try:
        blk.update(W_1=w[('W1',)].T, b_1=w[('b1',)], W_2=w[('W2',)].T, b_2=w[('b2',)])
      except KeyError as e:
        raise ValueError(f'block {b} has an incomplete feed-forward set (no {e}).') from None
      p = f'blocks.{b}.'
      if p + 'erf' in nodes:
        blk['activation'] = 'gelu'
      elif p + 'tanh' in nodes:
        blk['activation'] = 'gelu_tanh'
    for lname, after in (('ln_attn', 'z_attention'), ('ln_ff', 'z_feedforward')):
      if (lname, 'gamma') in w:
        blk[lname], node = ln_of({'gamma': w[(lname, 'gamma')], 'beta': w.get((lname, 'beta'))},
                                 f'blocks.{b}.{lname}')
        blk['norm'] = 'post' if node.input[0] == f'blocks.{b}.{after}' else 'pre'
    as_dict['blocks'].append(blk)
  if not as_dict['blocks']:
    first = g.node[0] if len(g.node) else None
    where = (f'; its first node is {first.op_type} {first.name or first.output[0]!r}' if first
             is not None else '')
    raise ValueError(f'the file holds no blocks (no initializers named blocks.<i>.*){where}: '
                     'it was not written by flat_onnx.write.')
  net = network_dict.check(as_dict, d=d, n=n)
  again = to_model(net, dtype=dtype, form=form, batch=batch)
  want = [_node_key(x) for x in again.graph.node]
  got = [_node_key(x) for x in g.node]
  for i, (a, b) in enumerate(zip(got, want)):
    if a != b:
      raise ValueError(f'node {i} ({a[0]} -> {a[2][0] if a[2] else "?"}) is not what the flat '
                       f'layout of these parameters has there ({b[0]} -> {b[2][0]}); read '
                       'takes files written by flat_onnx.write.')
  if len(got) != len(want):
    raise ValueError(f'the graph has {len(got)} nodes; the flat layout of these parameters '
                     f'has {len(want)}.')
  names = {t.name for t in again.graph.initializer}
  if set(arr) != names:
    extra = sorted(set(arr) ^ names)[0]
    raise ValueError(f'initializer {extra!r} is not a parameter of the flat layout here.')
  for t in again.graph.initializer:
    if not np.array_equal(numpy_helper.to_array(t), arr[t.name]):
      raise ValueError(f'initializer {t.name!r} does not hold the numbers of the network read '
                       '(a non-finite or reshaped entry).')
  stored = props.get('params_hash')
  if stored is not None and stored != network_dict.params_hash(net):
    raise ValueError(f"the file's params_hash {stored} is not the hash of its parameters "
                     f'({network_dict.params_hash(net)}): the file was changed after writing.')
  return net


def dtype_of(path) -> str:
  """'float64' or 'float32': the arithmetic a flat file computes in (its input type)."""
  elem = _load(path).graph.input[0].type.tensor_type.elem_type
  if elem not in _DTYPE_OF:
    raise ValueError(f'the input has ONNX element type {elem}; the flat layout is float64 or '
                     'float32.')
  return _DTYPE_OF[elem]
