r"""The match shared by the importers: an anchor graph (``anchor_graph``) read back from its
output into the v2 network dict (the patterns are in ``onnx_import``'s docstring).
"""

from __future__ import annotations


from fractions import Fraction

import numpy as np

from transformer_ua.networks.anchor_graph import CLASS, Anchor, AnchorGraph, Refusal
from transformer_ua.networks.pointwise_match import PointwiseMatch

#: A finite mask value at or below this is read as -inf (module docstring).
MASK_FLOOR = -1e30


class Match(PointwiseMatch):
  """Walks back from the output and writes the v2 dict."""

  def __init__(self, g: AnchorGraph):
    self.g = g
    self.notes: list[str] = []

  def anchor(self, idx):
    return self.g.owner(idx)

  def stream(self, idx, where):
    """A full-width token-major tensor [1, n, D]: its anchor (rows in token order)."""
    a, tok, col = self.g.rows(idx, where)
    if np.any(tok != np.arange(len(tok))) or a.shape[-1] != len(col) or \
        np.any(col != np.arange(len(col))):
      raise Refusal(f'{where} reorders the tokens or columns of {a.name!r} ({a.kind}).')
    return a

  # -- linear maps ---------------------------------------------------------------------------------
  def linear(self, a: Anchor):
    """a = X W (+ b) token-wise: (input anchor, W_eff [width_in, N], bias [N] or None), where
    W_eff rows are the input anchor's columns (unread columns zero)."""
    bias = None
    if a.kind == 'Add':
      (k0, v0), (k1, v1) = a.args
      t, c = (v0, v1) if k0 == 't' else (v1, v0)
      if k0 == k1:
        raise Refusal(f'node {a.name!r} (Add) is not a bias.')
      bias = self.row_const(c, a, 'bias')
      a = self.anchor(t)
    if a.kind == 'Gemm':
      if a.attrs.get('alpha', 1.0) != 1.0 or a.attrs.get('beta', 1.0) != 1.0:
        raise Refusal(f'node {a.name!r} (Gemm) has alpha or beta != 1.')
      w = a.const(1)
      w = w.T if a.attrs.get('transB', 0) else w
      if len(a.args) > 2 and a.args[2][1] is not None:
        if bias is not None:
          raise Refusal(f'node {a.name!r} (Gemm) is followed by a second bias.')
        bias = self.row_const(a.const(2), a, 'bias')
      x = a.tracked(0)
    elif a.kind == 'MatMul':
      if a.args[0][0] != 't' or a.args[1][0] != 'c':
        raise Refusal(f'node {a.name!r} (MatMul) is not a token-wise linear map.')
      x, w = a.tracked(0), a.const(1)
      if w.ndim != 2:
        raise Refusal(f'node {a.name!r} (MatMul) has a weight of rank {w.ndim}.')
    else:
      raise Refusal(f'node {a.name!r} ({a.kind}) where a linear map (MatMul or Gemm) was '
                     'expected.')
    src, _, cols = self.g.rows(x, f'node {a.name!r} ({a.kind})')
    if len(set(cols.tolist())) != len(cols):
      raise Refusal(f'node {a.name!r} ({a.kind}) reads a column twice.')
    width = int(src.col.max()) + 1 if src.kind == 'MatMul' else src.shape[-1]
    w_eff = np.zeros((width, w.shape[1]))
    w_eff[cols] = w
    return src, w_eff, bias, a

  def row_const(self, c, a, what):
    """A constant added to (or multiplied into) a's entries as a vector over a's columns
    (the same in every token), else refused."""
    full = np.broadcast_to(np.asarray(c, np.float64), a.shape).ravel()
    width = int(a.col.max()) + 1
    out = np.full(width, np.nan)
    out[a.col] = full
    if np.any(out[a.col] != full) or np.any(np.isnan(out)):
      raise Refusal(f'node {a.name!r} ({a.kind}) adds a {what} that differs between tokens.')
    return out

  # -- sublayers -----------------------------------------------------------------------------------
  def sublayer(self, y: Anchor):
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
        raise Refusal(f'node {lin.name!r} reads one column from two attention outputs.')
      pv = self.g.anchors[int(ids[0])]
      local = column - pv.offset
      pos = np.array(np.unravel_index(local, pv.shape)).T        # [rows, rank]
      batch = {tuple(p[:-2]) for p in pos}
      a_idx = {int(p[-1]) for p in pos}
      if len(batch) != 1 or len(a_idx) != 1 or np.any(pos[:, -2] != np.arange(len(pos))):
        raise Refusal(f'node {lin.name!r} ({lin.kind}) does not read the heads token by token.')
      heads.setdefault((int(ids[0]), batch.pop()), {})[a_idx.pop()] = k
    out = {key: [] for key in ('W_Q', 'b_Q', 'W_K', 'b_K', 'W_V', 'b_V', 'W_O')}
    scales, masks, reads = set(), set(), set()
    for (pv_id, b), cols in sorted(heads.items()):
      pv = self.g.anchors[pv_id]
      m = pv.shape[-1]
      if sorted(cols) != list(range(m)):
        raise Refusal(f'node {lin.name!r} reads part of a head of {pv.name!r}.')
      out['W_O'].append(np.stack([w[cols[a]] for a in range(m)], axis=1))     # [D, m]
      prob = self.anchor(self._batch(pv.tracked(0), b))
      if prob.kind != 'Softmax':
        raise Refusal(f'node {pv.name!r} (MatMul) does not multiply softmax weights into '
                       'values.')
      rank = len(prob.shape)
      if prob.attrs.get('axis', -1) % rank != rank - 1:
        raise Refusal(f'node {prob.name!r} (Softmax) is not over the keys (last axis).')
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
      raise Refusal(f'the heads read by {lin.name!r} differ in input, scale or mask.')
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
    if (q_c != 1.0) != (k_c != 1.0) and s_c == 1.0:     # one side scaled (flax: q / sqrt m)
      c, div, side = (q_c, q_div, 'q') if q_c != 1.0 else (k_c, k_div, 'k')
      total = float(1.0 / c) if div else c
      self.notes.append(f'attention {where!r}: {side} {"divided" if div else "multiplied"} by '
                        f'{c!r} before the dot product, read as scale = {total!r} after it '
                        '(equal in real arithmetic' + ('' if not div or _exact_reciprocal(c)
                                                       else ', 1/c rounded to float64: '
                                                       'relative 2^-53') +
                        f'; the enclosure\'s D covers c on {side} before the dot product)')
      return total
    if q_div or k_div:
      raise Refusal(f'the attention read by {where!r} divides q and k by constants.')
    if q_c == 1.0 and k_c == 1.0:
      if s_div:
        self.notes.append(f'attention {where!r}: scores divided by {s_c!r}, read as scale = '
                          f'{1.0 / s_c!r} after the dot product (' + (
                              'exact' if _exact_reciprocal(s_c) else
                              '1/c rounded to float64: relative 2^-53 per score') + ')')
        return float(1.0 / s_c)
      return float(s_c)
    if s_c != 1.0:
      raise Refusal(f'the attention read by {where!r} scales q, k and the scores.')
    if q_c != k_c:
      raise Refusal(f'the attention read by {where!r} scales q by {q_c!r} and k by {k_c!r}; '
                     'only equal factors (sqrt of the scale, as torch writes) are read.')
    total = q_c * k_c
    if Fraction(total) != Fraction(q_c) * Fraction(k_c):
      self.notes.append(f'attention {where!r}: c^2 rounded to float64 (relative 2^-53)')
    self.notes.append(f'attention {where!r}: scale split across Q and K ({q_c!r} each, as the '
                      f'runtime multiplies) read as scale = c^2 = {total!r} after the dot '
                      'product (equal in real arithmetic; the enclosure\'s D covers fl(sqrt c) '
                      'on q and on k)')
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
          raise Refusal(f'node {a.name!r} (Where) masks by a condition computed from the '
                         'input.')
        if t1[0] == 't' and t2[0] == 'c':
          fill, keep, t = np.asarray(t2[1], np.float64), np.asarray(cond[1], bool), t1[1]
        elif t1[0] == 'c' and t2[0] == 't':
          fill, keep, t = np.asarray(t1[1], np.float64), ~np.asarray(cond[1], bool), t2[1]
        else:
          raise Refusal(f'node {a.name!r} (Where) is not a mask.')
        add = np.where(np.broadcast_to(keep, a.shape), 0.0, np.broadcast_to(fill, a.shape))
        self._causal(add, a)
        mask = True
        a = self.anchor(t)
      elif a.kind in ('Mul', 'Div') and a.args[1][0] == 'c' or \
          a.kind == 'Mul' and a.args[0][0] == 'c':
        c = np.asarray(a.const(1) if a.args[1][0] == 'c' else a.const(0))
        if c.size != 1:
          raise Refusal(f'node {a.name!r} ({a.kind}) scales the scores by a non-scalar.')
        if mul != 1.0:
          raise Refusal(f'node {a.name!r} scales the scores twice.')
        mul, div = float(c.reshape(-1)[0]), a.kind == 'Div'
        a = self.anchor(next(v for k, v in a.args if k == 't'))
      else:
        break
    if not (a.kind == 'MatMul' and a.args[0][0] == 't' and a.args[1][0] == 't'):
      raise Refusal(f'node {a.name!r} ({a.kind}) feeds Softmax {prob.name!r}; attention '
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
        np.any(low > MASK_FLOOR) or len(set(low.tolist())) != 1:
      raise Refusal(f'node {a.name!r} ({a.kind}) adds a mask that is not causal (0 on and '
                     f'below the diagonal, one value <= {MASK_FLOOR:g} or -inf above it).')
    if np.isfinite(low[0]):
      self.notes.append(f'mask {a.name!r}: {low[0]:.8g} above the diagonal read as -inf '
                        '(masked weights exp(L + s - max) are 0 in float for |s| < 1e29 and '
                        '< exp(-1e29) in real arithmetic)')

  def head_side(self, idx, *, keys_last, where, scaled=False):
    """q/k/v of one head as (W [m, D], b [m], read anchor[, (factor, div)]): ``idx`` is
    [n, m] (or [m, n] with ``keys_last``) of entries of a projection, maybe scaled."""
    idx = idx.reshape(idx.shape[-2:]) if idx.ndim > 2 else idx
    if idx.ndim != 2:
      raise Refusal(f'node {where!r} multiplies heads of rank {idx.ndim}.')
    idx = idx.T if keys_last else idx
    a = self.anchor(idx)
    factor, div = 1.0, False
    if a.kind == 'Mul' and any(k == 'c' for k, _ in a.args) or \
        a.kind == 'Div' and a.args[1][0] == 'c':
      c = np.asarray(next(v for k, v in a.args if k == 'c'))
      if c.size != 1 or not scaled:
        raise Refusal(f'node {a.name!r} ({a.kind}) scales a head by a non-scalar.')
      factor, div = float(c.reshape(-1)[0]), a.kind == 'Div'
      t = next(v for k, v in a.args if k == 't')
      local = idx.ravel() - a.offset
      idx = t.ravel()[local].reshape(idx.shape)
      a = self.anchor(idx)
    tok, col = a.tok[idx.ravel() - a.offset].reshape(idx.shape), \
        a.col[idx.ravel() - a.offset].reshape(idx.shape)
    if np.any(tok != np.arange(idx.shape[0])[:, None]) or np.any(col != col[:1]):
      raise Refusal(f'a head of {where!r} does not read its projection token by token.')
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
    except Refusal:
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
        raise Refusal(f'node {a.name!r} ({a.kind}) is a LayerNorm that closes no residual '
                       f'sublayer; outside {CLASS}.')
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
      except Refusal as e:
        errors.append(str(e))
        continue
      if u is x:
        return kind, keys, x, None
      ln = self.layer_norm(u)
      if ln is not None and ln[0] is x:
        return kind, keys, x, ln[1]
      errors.append(f'the sublayer added at {r.name!r} reads neither the stream nor its '
                    'LayerNorm.')
    raise Refusal(errors[-1] if len(errors) == 1 else min(errors, key=len) if errors[0] ==
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
          raise Refusal('a block mixes post-LN and pre-LN sublayers.')
        cur['norm'] = norm
        cur['ln_attn' if kind == 'attn' else 'ln_ff'] = ln
      elif 'norm' in cur:
        raise Refusal('a block has a LayerNorm on one sublayer only.')
    for blk in out:
      if 'norm' in blk and ('W_Q' in blk) + ('W_1' in blk) != ('ln_attn' in blk) + (
          'ln_ff' in blk):
        raise Refusal('a block has a LayerNorm on one sublayer only.')
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
    except Refusal:
      src = None
    if src is None or src.kind != 'input':
      raise Refusal(f'node {a.name!r} ({a.kind}) sits between the input and the first block '
                     f'and is not a Linear embedding; outside {CLASS}.')
    net['embed'] = w.T
    if b is not None:
      net['embed_bias'] = b
    if pos is not None:
      net['positional'] = pos


def _exact_reciprocal(c: float) -> bool:
  """Whether 1/c is a float64 exactly (c a power of two)."""
  return Fraction(1.0 / c) * Fraction(c) == 1
