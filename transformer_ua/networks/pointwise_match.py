r"""The token-wise nonlinear pieces of the importers' match: LayerNorm and the activations,
fused or decomposed, recognised on an anchor graph (``graph_match.Match`` inherits them).

    LayerNorm   the op (axis -1 only); ONNX's decomposition c = x - ReduceMean(x),
                c / Sqrt(ReduceMean(c^2) + eps) * gamma + beta; Flax's (x - mean) *
                rsqrt(var + eps) * gamma + beta with var one-pass (E[x^2] - mean^2, clamped
                at 0) or two-pass
    activation  Relu; Gelu (approximate none | tanh); 0.5 x (1 + erf(x / sqrt 2)) and
                0.5 x erfc(-x / sqrt 2) as 'gelu'; 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
                x^3))) as 'gelu_tanh', constants the dtype's roundings, in any association

Each decomposed form read adds a note to the text (the runtime's float order differs from
the dict's; the enclosure's rounding model must cover it: ops' LayerNorm covers two-pass,
one-pass and Welford).
"""

from __future__ import annotations

import math

import numpy as np

from transformer_ua.networks.anchor_graph import CLASS, Anchor, Refusal


class PointwiseMatch:
  """LayerNorm and activation patterns; needs ``self.g``, ``self.notes``, ``anchor``,
  ``stream`` and ``row_const`` (graph_match.Match)."""

  def layer_norm(self, a: Anchor):
    """LayerNorm over the token's row: (input anchor, {'gamma','beta','eps'}) or None."""
    if a.kind == 'LayerNormalization':
      axis = a.attrs.get('axis', -1)
      rank = len(a.shape)
      if axis not in (-1, rank - 1):
        raise Refusal(f'node {a.name!r} (LayerNormalization) normalizes over axes from '
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
    if cur.kind == 'Mul' and beta is not None and gamma is None or \
        cur.kind == 'Mul' and all(k == 't' for k, _ in cur.args):
      flax = self._rsqrt_layer_norm(cur, beta)
      if flax is not None:
        return flax
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
      raise Refusal(f'node {mean.name!r} (ReduceMean) is not the mean over the token\'s row '
                     '(a LayerNorm over another axis).')
    width = x.shape[-1]
    gamma = np.ones(width) if gamma is None else gamma
    beta = np.zeros(width) if beta is None else beta
    self.notes.append(f'LayerNorm {cur.name!r} decomposed (ReduceMean Sub Pow ReduceMean Add '
                      'Sqrt Div Mul Add) read as the dict\'s LayerNorm')
    return x, {'gamma': gamma, 'beta': beta, 'eps': eps}

  def _rsqrt_layer_norm(self, prod, beta):
    """Flax's LayerNorm: (x - mean) * (rsqrt(var + eps) [* gamma]) [+ beta], mean = sum(x)/D,
    var = max(0, sum(x x)/D - mean^2) (fast variance) or sum((x - mean)^2)/D."""
    if any(k != 't' for k, _ in prod.args):
      return None
    for ci, ri in ((0, 1), (1, 0)):
      c, r = self.anchor(prod.tracked(ci)), self.anchor(prod.tracked(ri))
      if c.kind != 'Sub' or any(k != 't' for k, _ in c.args):
        continue
      gamma = None
      if r.kind == 'Mul' and any(k == 'c' for k, _ in r.args):
        gamma = self.row_const(next(v for k, v in r.args if k == 'c'), prod, 'gamma')
        r = self.anchor(next(v for k, v in r.args if k == 't'))
      if r.kind != 'Rsqrt':
        continue
      ve = self.anchor(r.tracked(0))
      if ve.kind != 'Add' or not any(k == 'c' for k, _ in ve.args):
        continue
      eps = float(np.asarray(next(v for k, v in ve.args if k == 'c')).reshape(-1)[0])
      var = self.anchor(next(v for k, v in ve.args if k == 't'))
      x = self.stream(c.tracked(0), f'node {c.name!r} (Sub of a LayerNorm)')
      mean = self.anchor(c.tracked(1))
      width = x.shape[-1]
      if not self._mean_of(mean, x, width):
        continue
      clamp = var.kind == 'Max'
      if clamp:
        zero = next((v for k, v in var.args if k == 'c'), None)
        if zero is None or float(np.asarray(zero).reshape(-1)[0]) != 0.0:
          continue
        var = self.anchor(next(v for k, v in var.args if k == 't'))
      if var.kind == 'Sub':                                      # E[x^2] - E[x]^2
        m2, msq = self.anchor(var.tracked(0)), self.anchor(var.tracked(1))
        if not (msq.kind == 'Mul' and all(self.anchor(v) is mean for _, v in msq.args)):
          continue
        if not (m2.kind == 'Div' and self._sum_of_squares(m2, x, width)):
          continue
        form = 'one-pass (E[x^2] - E[x]^2' + (', clamped at 0)' if clamp else ')')
      elif var.kind == 'Div' and self._sum_of_squares(var, c, width):
        form = 'two-pass'
      else:
        continue
      self.notes.append(f'LayerNorm at {prod.name!r} ({form}, rsqrt) read as the dict\'s '
                        'LayerNorm')
      return x, {'gamma': np.ones(width) if gamma is None else gamma,
                 'beta': np.zeros(width) if beta is None else beta, 'eps': eps}
    return None

  def _mean_of(self, mean, x, width):
    """mean = ReduceSum(x over the row) / width."""
    if mean.kind != 'Div' or mean.args[1][0] != 'c' or float(np.asarray(mean.const(1)).reshape(
        -1)[0]) != width:
      return False
    s = self.anchor(mean.tracked(0))
    return s.kind == 'ReduceSum' and self.stream(s.tracked(0), f'node {s.name!r}') is x

  def _sum_of_squares(self, div, x, width):
    if div.args[1][0] != 'c' or float(np.asarray(div.const(1)).reshape(-1)[0]) != width:
      return False
    s = self.anchor(div.tracked(0))
    if s.kind != 'ReduceSum':
      return False
    sq = self.anchor(s.tracked(0))
    return sq.kind == 'Mul' and all(k == 't' and self.anchor(v) is x for k, v in sq.args)

  def _last_axis_mean(self, a):
    axes = a.attrs.get('axes')
    if axes is None and len(a.args) > 1 and a.args[1][1] is not None:
      axes = np.asarray(a.const(1)).tolist()
    rank = len(self.g.decode(a.tracked(0))[0].shape) if False else len(a.args[0][1].shape)
    axes = [ax % rank for ax in np.atleast_1d(axes).tolist()] if axes is not None else None
    if axes != [rank - 1]:
      raise Refusal(f'node {a.name!r} (ReduceMean) averages over axes {axes} of a rank-'
                     f'{rank} tensor; a LayerNorm over the token\'s last axis alone is needed.')
    return a.attrs.get('keepdims', 1) == 1

  def activation(self, h: Anchor):
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
          if e1.kind == 'Erfc':                       # jax.nn.gelu: 0.5 x erfc(-x / sqrt 2)
            f = self._factors(self.anchor(e1.tracked(0)))
            cs, ts = [c for c in f if isinstance(c, float)], [c for c in f if not
                                                              isinstance(c, float)]
            dtype = np.float32 if self.g.dtype == 'float32' else np.float64
            # 1/sqrt 2 in the format: rounded once (jax's float64 constant, sqrt(0.5)) or
            # from the float64 quotient 1 / sqrt(2) (one ulp below in float64)
            if len(ts) == 1 and ts[0] is x and float(np.prod(cs)) in (
                -float(dtype(math.sqrt(0.5))), -float(dtype(1 / math.sqrt(2)))):
              self.notes.append(f'GELU at {h.name!r} as 0.5 x erfc(-x/sqrt2) read as the '
                                "dict's gelu (erf form; the runtime evaluates erfc, which "
                                'the erf ulp assumption must cover)')
              return x, 'gelu'
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
    raise Refusal(f'node {h.name!r} ({h.kind}) is not an activation of {CLASS} (ReLU, GELU '
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
    if a.kind == 'Div' and a.args[1][0] == 'c' and depth < 4:
      c = np.asarray(a.const(1)).reshape(-1)
      if c.size == 1 and c[0] > 0 and math.frexp(float(c[0]))[0] == 0.5:   # a power of two:
        return self._factors(self.anchor(a.tracked(0)), depth + 1) + [1 / float(c[0])]
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
