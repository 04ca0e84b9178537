r"""A ``(flax.linen.Module, variables)`` pair as a v2 network dict, read from its jaxpr.

A module tree does not show the wiring, so the reader traces what runs:

    jaxpr = jax.make_jaxpr(lambda x: module.apply(variables, x))(X),  X [1, n, d]

and walks it with the importers' interpreter (``anchor_graph`` (constants, index arrays for the plumbing,
anchors for arithmetic), then matches it with ``graph_match.Match`` as ``onnx_import`` does.
The primitives map as

    constants     every equation whose inputs are all constant (the params are the jaxpr's
                  consts) is evaluated by binding its primitive
    plumbing      reshape, transpose, broadcast_in_dim, squeeze, expand_dims, slice,
                  concatenate, copy, stop_gradient, convert_element_type (same dtype)
    dot_general   with a constant (Dense, DenseGeneral): x's trailing contracting axes
                  against the kernel's leading ones = MatMul x [.., K] W [K, N], reshaped;
                  between two tensors (attention): batch axes first, = MatMul of the two
                  transposed operands (P V with the weights first), reshaped to its order
    add sub mul div integer_pow square neg sqrt rsqrt erf erfc tanh exp max reduce_sum
    reduce_max
                  anchors of the same names as the ONNX ops (Add, ..., Pow, Mul, ...,
                  ReduceSum, ReduceMax)
    select_n      with a constant predicate: Where (a mask on the scores)
    softmax       exp(s - max(s)) / sum(exp(s - max(s))) over the last axis (jax.nn.softmax
                  as traced: reduce_max, max(-inf, .), stop_gradient, sub, exp, reduce_sum,
                  div) becomes one Softmax anchor of s

and the decompositions read as the dict's ops: flax's LayerNorm (fast variance:
(x - mean) * rsqrt(max(0, E[x^2] - mean^2) + eps) * scale + bias), nn.gelu's tanh form
(flax's default, approximate=True) and exact form 0.5 x erfc(-x / sqrt 2), relu as
max(x, 0); MultiHeadDotProductAttention divides q by sqrt(m) before the dot product, read as
scale = 1/sqrt(m) after it (a note in the text: equal in real arithmetic). A primitive
outside this list (logistic, conv, a while loop, random bits: dropout not deterministic) is
refused in one line naming it and its equation.
"""

from __future__ import annotations

import numpy as np

from transformer_ua.networks.anchor_graph import CLASS, AnchorGraph, Refusal
from transformer_ua.networks.graph_match import Match

#: jaxpr primitives that only move entries.
PLUMBING = ('reshape', 'transpose', 'broadcast_in_dim', 'squeeze', 'expand_dims', 'slice',
            'concatenate', 'copy', 'copy_p', 'stop_gradient', 'convert_element_type')
#: jaxpr primitives that make an anchor, and the ONNX-named kind they become.
ARITHMETIC = {'add': 'Add', 'sub': 'Sub', 'mul': 'Mul', 'div': 'Div', 'integer_pow': 'Pow',
              'square': 'Mul', 'sqrt': 'Sqrt', 'rsqrt': 'Rsqrt', 'erf': 'Erf', 'tanh': 'Tanh',
              'exp': 'Exp', 'max': 'Max', 'reduce_sum': 'ReduceSum', 'reduce_max': 'ReduceMax',
              'neg': 'Mul', 'erfc': 'Erfc'}
_CALLS = ('pjit', 'jit', 'closed_call', 'core_call', 'custom_jvp_call', 'custom_vjp_call',
          'custom_vjp_call_jaxpr', 'remat', 'checkpoint')


class _JaxprGraph(AnchorGraph):
  """The interpreter over a jaxpr (module docstring)."""

  def __init__(self, x_shape, dtype):
    super().__init__()
    self.dtype = dtype
    n, d = x_shape[-2], x_shape[-1]
    self.x = self.new('input', 'input', x_shape, [], {}, np.repeat(np.arange(n), d),
                       np.tile(np.arange(d), n))

  def walk(self, jaxpr, consts, args):
    env = {}

    def read(v):
      if hasattr(v, 'val'):                         # a Literal
        return ('c', np.asarray(v.val))
      return env[v]

    for v, c in zip(jaxpr.constvars, consts):
      env[v] = ('c', np.asarray(c))
    for v, a in zip(jaxpr.invars, args):
      env[v] = a
    for i, eqn in enumerate(jaxpr.eqns):
      ins = [read(v) for v in eqn.invars]
      outs = self.eqn(eqn, ins, f'{eqn.primitive.name}#{i}')
      for v, o in zip(eqn.outvars, outs):
        env[v] = o
    return [read(v) for v in jaxpr.outvars]

  def eqn(self, eqn, ins, name):
    prim = eqn.primitive.name
    params = dict(eqn.params)
    if prim in _CALLS:
      sub = params.get('jaxpr', params.get('call_jaxpr', params.get('fun_jaxpr')))
      if sub is None:
        raise Refusal(f'equation {name!r} ({prim}) has no inner jaxpr to read.')
      inner = sub.jaxpr if hasattr(sub, 'jaxpr') else sub
      consts = getattr(sub, 'consts', [])
      return self.walk(inner, consts, ins)
    if all(k == 'c' for k, _ in ins):
      vals = eqn.primitive.bind(*[v for _, v in ins], **params)
      vals = vals if eqn.primitive.multiple_results else [vals]
      return [('c', np.asarray(v)) for v in vals]
    if prim in PLUMBING:
      if prim == 'convert_element_type':
        src = eqn.invars[0].aval.dtype
        if np.dtype(params['new_dtype']) != np.dtype(src):
          raise Refusal(f'equation {name!r} (convert_element_type) changes {src} to '
                         f'{params["new_dtype"]}; a network computes in one dtype.')
        return [ins[0]]
      if prim == 'stop_gradient' or prim in ('copy', 'copy_p'):
        return [ins[0]]
      if any(k == 'c' for k, _ in ins):
        raise Refusal(f'equation {name!r} ({prim}) mixes constants into the plumbing.')
      out = eqn.primitive.bind(*[np.asarray(v, np.int32) for _, v in ins], **params)
      return [('t', np.asarray(out, np.int64))]
    if prim == 'dot_general':
      return [self.dot_general(eqn, ins, name)]
    if prim == 'select_n' and len(ins) == 3 and ins[0][0] == 'c':   # a mask: cases[pred]
      shape = tuple(eqn.outvars[0].aval.shape)
      args = [('c', np.asarray(ins[0][1], bool))] + [
          (k, np.broadcast_to(v, shape) if k == 't' else v) for k, v in (ins[2], ins[1])]
      return [('t', self._anchor('Where', name, shape, args, {}))]
    if prim not in ARITHMETIC:
      raise Refusal(f'equation {name!r} ({prim}) is not an operation of '
                     f'{CLASS}.')
    kind = ARITHMETIC[prim]
    shape = tuple(eqn.outvars[0].aval.shape)
    attrs = {}
    args = list(ins)
    if prim == 'square':
      args = [ins[0], ins[0]]
    elif prim == 'neg':                                  # -x = x * -1, exact
      args = [ins[0], ('c', np.asarray(-1.0))]
    elif prim == 'integer_pow':
      args = [ins[0], ('c', np.asarray(float(params['y'])))]
    elif prim in ('reduce_sum', 'reduce_max'):
      attrs = {'axes': list(params['axes']), 'keepdims': 0}
    if kind not in ('ReduceSum', 'ReduceMax'):      # elementwise: a broadcast is plumbing
      args = [(k, np.broadcast_to(v, shape) if k == 't' else v) for k, v in args]
    if kind == 'Div' and self._is_softmax(args):
      s_idx = self._softmax_input(args)
      return [('t', self._anchor('Softmax', name, shape, [('t', s_idx)], {'axis': -1}))]
    if kind == 'Max' and self._relu(args):
      t = next(v for k, v in args if k == 't')
      return [('t', self._anchor('Relu', name, shape, [('t', t)], {}))]
    return [('t', self._anchor(kind, name, shape, args, attrs))]

  def _anchor(self, kind, name, shape, args, attrs):
    tok, col = self.layout(kind, name, args, attrs, shape)
    return self.new(kind, name, shape, args, attrs, tok, col)

  def _relu(self, args):
    """max(x, 0) with 0 a constant, x of the output's shape: ReLU (jax.nn.relu)."""
    consts = [v for k, v in args if k == 'c']
    tens = [v for k, v in args if k == 't']
    if len(consts) != 1 or len(tens) != 1 or np.asarray(consts[0]).size != 1:
      return False
    if float(np.asarray(consts[0]).reshape(-1)[0]) != 0.0:
      return False
    return self.owner(tens[0]).kind not in ('Sub',)     # max(0, E[x^2] - mean^2) is LN's

  def _is_softmax(self, args):
    try:
      self._softmax_input(args)
    except (Refusal, KeyError, IndexError, ValueError):
      return False
    return True

  def _softmax_input(self, args):
    """e / sum(e), e = exp(s - max(s)) over the last axis: s's index array."""
    (k0, num), (k1, den) = args
    if k0 != 't' or k1 != 't':
      raise Refusal('not a softmax')
    e = self.owner(num)
    if e.kind != 'Exp' or np.any(num != self._whole(e)):
      raise Refusal('not a softmax')
    total = self.owner(den)
    if total.kind != 'ReduceSum' or self.owner(total.tracked(0)) is not e or \
        total.attrs['axes'] != [len(e.shape) - 1]:
      raise Refusal('not a softmax')
    sub = self.owner(e.tracked(0))
    if sub.kind != 'Sub':
      raise Refusal('not a softmax')
    s_idx = sub.tracked(0)
    mx = self.owner(sub.tracked(1))
    if mx.kind == 'Max':
      mx = self.owner(next(v for k, v in mx.args if k == 't'))
    if mx.kind != 'ReduceMax' or mx.attrs['axes'] != [len(e.shape) - 1] or \
        np.any(mx.tracked(0) != s_idx):
      raise Refusal('not a softmax')
    return s_idx

  def _whole(self, a):
    return (a.offset + np.arange(a.size)).reshape(a.shape)

  def dot_general(self, eqn, ins, name):
    (lc, rc), (lb, rb) = eqn.params['dimension_numbers']
    (kl, lhs), (kr, rhs) = ins
    lc, rc, lb, rb = (list(map(int, t)) for t in (lc, rc, lb, rb))
    out_shape = tuple(eqn.outvars[0].aval.shape)
    if kl == 't' and kr == 'c':
      if lb or rb or lc != list(range(lhs.ndim - len(lc), lhs.ndim)) or rc != list(
          range(len(rc))):
        raise Refusal(f'equation {name!r} (dot_general) is not a token-wise linear map.')
      k = int(np.prod([lhs.shape[i] for i in lc]))
      x = lhs.reshape(lhs.shape[:lhs.ndim - len(lc)] + (k,))
      w = np.asarray(rhs, np.float64 if rhs.dtype == np.float64 else rhs.dtype).reshape(k, -1)
      idx = self._anchor('MatMul', name, x.shape[:-1] + (w.shape[1],), [('t', x), ('c', w)], {})
      return ('t', idx.reshape(out_shape))
    if kl == 't' and kr == 't':
      lf = [i for i in range(lhs.ndim) if i not in lc + lb]
      rf = [i for i in range(rhs.ndim) if i not in rc + rb]
      if len(lf) != 1 or len(rf) != 1 or len(lc) != 1:
        raise Refusal(f'equation {name!r} (dot_general) is not an attention product.')
      a = np.transpose(lhs, lb + lf + lc)
      b = np.transpose(rhs, rb + rc + rf)
      swap = self.owner(rhs).kind == 'Softmax' and self.owner(lhs).kind != 'Softmax'
      if swap:                                   # V^T P^T: read as (P V)^T
        a, b = np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2)
      shape = a.shape[:-1] + (b.shape[-1],)
      idx = self._anchor('MatMul', name, shape, [('t', a), ('t', b)], {})
      return ('t', np.swapaxes(idx, -1, -2) if swap else idx)
    raise Refusal(f'equation {name!r} (dot_general) has its constant on the left.')


def read(module, variables, *, d: int, n: int, wide: bool = False):
  """(v2 dict, text, source, dtype): the network of ``module.apply(variables, x)``, one line
  saying what was read, the source x -> apply(x) for ``source_check.compare`` and its dtype
  (float64 when ``wide`` and jax runs with x64 enabled, else float32)."""
  import jax  # noqa: PLC0415 -- jax on demand
  import jax.numpy as jnp  # noqa: PLC0415
  dtype = 'float64' if wide and jax.config.jax_enable_x64 else 'float32'
  if any(np.asarray(leaf).dtype == np.float16 for leaf in jax.tree_util.tree_leaves(variables)):
    raise ValueError('flax_import: the variables hold float16 weights; float16 weights are '
                     'refused (use float32).')
  variables = jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), variables)

  def apply(x):
    return module.apply(variables, x)
  x0 = jnp.zeros((1, n, d), dtype)
  try:
    closed = jax.make_jaxpr(apply)(x0)
  except Exception as e:  # noqa: BLE001 -- one line for a module that does not trace
    raise ValueError(f'flax_import: module.apply(variables, x) does not trace on x [1, {n}, '
                     f'{d}] ({type(e).__name__}: {str(e).splitlines()[0][:120]}).') from None
  g = _JaxprGraph((1, n, d), dtype)
  try:
    outs = g.walk(closed.jaxpr, closed.consts, [('t', g.x)])
    if len(outs) != 1 or outs[0][0] != 't':
      raise Refusal('apply returns no single output that depends on x.')
    m = Match(g)
    net = m.parse(outs[0][1])
  except Refusal as e:
    raise ValueError(f'flax_import: {e}') from None
  except Exception as e:  # noqa: BLE001 -- a jaxpr this reader cannot follow: one line
    raise ValueError(f'flax_import: the jaxpr could not be matched to {CLASS} '
                     f'({type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ""})'
                     '.') from None
  text = (f'flax module {type(module).__name__} traced by jax.make_jaxpr ({len(closed.jaxpr.eqns)} '
          f'equations, {dtype}): {len(net["blocks"])} block(s)')
  if m.notes:
    text += '; ' + '; '.join(m.notes)
  jit_apply = jax.jit(apply)

  def source(x):
    return np.asarray(jit_apply(jnp.asarray(x, dtype)))
  return net, text, source, dtype
