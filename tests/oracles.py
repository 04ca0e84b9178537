"""Independent oracles shared by the certified-evaluation tests.

``mp_literal`` evaluates a realized network literally in mpmath (params converted from
the exact rationals, softmax with the max subtracted, ReLU as max(0, .)); it shares no
code with ``exact.ball``.
"""

from fractions import Fraction

import mpmath
import numpy as np


def mp_value(v):
  v = Fraction(v)
  return mpmath.mpf(v.numerator) / v.denominator


def mp_literal(g, x, prec):
  """The realized network, literally, in mpmath at ``prec`` bits: [n, d] -> [n, d]."""
  with mpmath.workprec(prec):
    params = g.exact_params()
    z = [[mpmath.mpf(float(v)) for v in row] for row in np.asarray(x, np.float64)]
    n, d = len(z), len(z[0])
    if g.positional:
      z = [[z[j][i] + mp_value(params['E'][j][i]) for i in range(d)] for j in range(n)]
    for s, seg in enumerate(g.segments):
      att, ff = params[f'segment_{s}']['attention'], params[f'segment_{s}']['feedforward']
      for layer in range(seg.depth):
        upd = [[mpmath.mpf(0)] * d for _ in range(n)]
        for h in range(att['W_Q'].shape[1]):
          wq, bq, wk = att['W_Q'][layer, h], att['b_Q'][layer, h], att['W_K'][layer, h]
          wv, wo = att['W_V'][layer, h], att['W_O'][layer, h]
          m = wq.shape[0]
          q = [[sum(mp_value(wq[a, i]) * z[j][i] for i in range(d)) + mp_value(bq[a]) for a in range(m)]
               for j in range(n)]
          k = [[sum(mp_value(wk[a, i]) * z[j][i] for i in range(d)) for a in range(m)]
               for j in range(n)]
          v = [[sum(mp_value(wv[a, i]) * z[j][i] for i in range(d)) for a in range(m)]
               for j in range(n)]
          for j in range(n):
            s_jk = [sum(q[j][a] * k[kk][a] for a in range(m)) for kk in range(n)]
            top = max(s_jk)
            e = [mpmath.exp(sv - top) for sv in s_jk]
            tot = sum(e)
            mixed = [sum(e[kk] / tot * v[kk][a] for kk in range(n)) for a in range(m)]
            for i in range(d):
              upd[j][i] += sum(mp_value(wo[i, a]) * mixed[a] for a in range(m))
        z = [[z[j][i] + upd[j][i] for i in range(d)] for j in range(n)]
        w1, b1, w2, b2 = (ff[key][layer] for key in ('W_1', 'b_1', 'W_2', 'b_2'))
        for j in range(n):
          pre = [sum(mp_value(w1[r, i]) * z[j][i] for i in range(d)) + mp_value(b1[r])
                 for r in range(w1.shape[0])]
          act = [max(mpmath.mpf(0), t) for t in pre]
          z[j] = [z[j][i] + sum(mp_value(w2[i, r]) * act[r] for r in range(len(act))) + mp_value(b2[i])
                  for i in range(d)]
    return z
