r"""A standard Transformer g over a batch of boxes: its value, its Jacobian, and fl(g) - g.

``enclose(net, x, model)`` runs g (``network_dict.Net``: the block equations are in that
module's docstring) on ``intervals.Interval`` input x [B, n, d] and returns

    g(x) in [lo, hi] and dg/dX in [tlo, thi]   (outward-rounded intervals, intervals.py)
    D >= |fl(g)(X) - g(X)| for every X in the box       (when a rounding model is given)

Every operation is one function op(params, z, d_z, fm) -> (z', d_z') (``_attention`` and
``_feedforward`` also take the residual they add); ``assumptions(net, model)`` lists what
the ops of ``net`` assume of the runtime, for the certificate's line.

The float deviation D follows the rounding model of ``rounding.py`` layer by layer. With z
the exact value, z^ the computed one, D_z >= |z^ - z| and M_z >= |z| (from the interval),
A = M_z + D_z >= |z^|, u the storage format's unit roundoff, tau its smallest normal:

  input        X^ = fl(X):                 D = u M_X + tau
  dot product  y = W z + b (m terms; the bias, or the residual, may be added anywhere):
               D_y = |W| D_z + kappa_m (|W| (M_z + D_z) + |b|) + (m + 1) tau (A + B + 2)
               (kappa_m, A, B: rounding.py (*); the bias counts as one more term). Every
               bias of the class (b_Q, b_K, b_V, b_1, embed_bias, readout_bias) enters so.
  scores       s_jk = q_j . k_k (m terms):  sum_m D_q M_k + (M_q + D_q) D_k
                                            + kappa_m sum_m (M_q + D_q)(M_k + D_k) + ...
  scale        s' = fl(c s^), c the stored float (one rounding, after the dot product):
               D_s' = |c| D_s + u |c| (M_s + D_s) + tau
               or c on q before the dot product (q' = fl(c q^): D_q' by the same formula,
               M_q' = |c| M_q, then the scores' D), or t = fl(sqrt |c|) on q and on k (as
               torch's exporters split it: t = sqrt|c| (1 + delta), |delta| <= u, so
               D_q' = t D_q + (2u + u^2) t (M_q + D_q) + tau, likewise k): D is the largest
               of the three (the split form is for c > 0, as exporters write it).
  causal mask  keys k > j: weight exactly 0 in g and in fl(g) (exp(-inf) = 0, or a large
               negative whose exp is 0); their scores enter no bound below
  softmax      w = softmax(s), computed as e_k = exp(fl(s^_k - max)), w_k = e_k / sum_l e_l
               (or e_k * (1 / sum)): with delta = max_k D_s, per entry
               t_k = max_l (s_hi,l + D_s,l) - (s_lo,k - D_s,k) >= max_l s^_l - s^_k, and
               w'_k = min(1, w_hi,k e^{2 delta}) >= softmax(s^)_k,
                 |softmax(s^) - softmax(s)|_k <= w_k (e^{2 delta} - 1)
                 r1_k = e^{u t_k} (1 + 2 u EXP_ULPS) - 1   (one exp: argument and result)
                 r2_k = (1 + r1_k)(1 + gamma_n) - 1       (its share of the sum of n exps)
                 R = min(sum_l w'_l r2_l, max_l r2_l)     (the sum's relative error)
                 rho_k = (1 + r1_k)(1 + u)^2 / (1 - R) - 1 (the normalization)
               D_w = w_hi (e^{2 delta} - 1) + rho_k w'_k + 4 n tau, capped at
               (1 + u)^2 / (1 - gamma_n) + tau (no computed weight exceeds it: e_k is one of
               the summed exps). Every constant is written without cancellation (rho_k =
               (r1_k + c_u + r1_k c_u + R) / (1 - R), c_u = 2u + u^2 from Fractions) and
               e^x - 1 is bounded by exact inequalities (``_expm1_up``), so each rounds up.
  mix          o_j = sum_k w_jk v_k (n terms), like the scores
  residual     z' = r + sum_i W_O^i o^i + b_O: one dot product of h m terms with r (and b_O)
               as bias terms (any grouping of heads, bias and residual: at most h m + 2
               roundings per term); z' = r + W_2 act(W_1 z + b_1) + b_2 likewise. r = z
               (no norm, post-LN) or the block's input beside LN(z) (pre-LN). For ReLU with
               r = z also, and the smaller is kept (``_dev_ff_jacobian``), through the
               layer's interval Jacobian: |I + W_2 [Theta] W_1| (D_z + v (M_z + D_z))
               + |W_2| L_1 + L_2 (Theta the ReLUs' difference quotients in [0, 1]; L_1, L_2
               the sums' own roundings).
  ReLU         exact and 1-Lipschitz: D passes unchanged.
  GELU         D' = L D + R, L = 1.129 >= sup |g'| (both forms), and R the rounding at the
               computed input w (|w| <= A), from the assumptions of rounding.py:
               erf form, 0.5 x (1 + erf(t)) or 0.5 x erfc(-t), t = fl(x fl(1/sqrt 2)) or
               fl(x / fl(sqrt 2)), |t - x/sqrt 2| <= (2u + u^2) |x| / sqrt 2:
                 R = (1 + u)^2 (2 ERF_ULPS u A + 0.6 u) + (2u + u^2) A + 2 (A + 4) tau
               (0.5 |x| |erf'| |t - x/sqrt 2| <= 0.5 (2/sqrt pi)(1/sqrt 2)(2.0001 u) x^2
               e^{-x^2 (1 - 3u)^2 / 2} <= 0.5872 u (1 + 5u) <= 0.6 u; 0.5 |x| 2 u ERF_ULPS |erf|
               <= ERF_ULPS u A, and the erfc form's 2 u ERF_ULPS |g| <= 2 ERF_ULPS u A; the
               sum 1 + erf and the product: |g| ((1 + u)^2 - 1) <= (2u + u^2) A);
               tanh form, y = fl(k (x + c x^3)) with k, c rounded to the format and x^3 as
               two products: 7 roundings of a sum of same-sign terms, |y^ - y| <= gamma_7 |y|;
               |tanh(y^) - tanh(y)| <= sech^2(xi) gamma_7 |y| <= 0.45 gamma_7 (sup_v v sech^2 v
               = 0.4478 at v = 0.7717, over 1 - gamma_7):
                 R = (1 + u)^2 (TANH_ULPS u A + 0.23 gamma_7 A) + (2u + u^2) A + 2 (A + 4) tau
  LayerNorm    y = gamma c / s + beta over the token's D entries (intervals.layer_norm), at
               the computed input w, |w - z| <= D_z: D_y = P + R with
               P = |gamma| ||D_z||_2 / s_w            (the propagation: the Jacobian is
                   (diag(gamma) / s)(I - 1 1^T / D - r r^T / D), r = c / s, and the bracket
                   is a symmetric matrix with eigenvalues 0, 1 - |r|^2 / D and 1: row i has
                   2-norm <= 1; s_w = sqrt(var_lo(w box) + eps), the box widened by D_z),
               and R the rounding of fl(LN)(w) - LN(w), A_m = max_i A_i, C_i >= |c_i(w)|:
                 D_mu  = gamma_{2D+8} A_m + (2D + 8) tau          (sum then / D or * fl(1/D);
                         Welford's m_k = m_{k-1} + (w_k - m_{k-1}) / k: errors
                         <= sum_k (u A + 4.01 u A / k) <= (D + 4.01 (1 + ln D)) u A)
                 E_c   = (1 + u) D_mu + u (1 + u)(A_i + A_m + D_mu) + u C_i + 2 tau
                         (c_i = w_i - mu computed, or w_i rstd - mu rstd as torch's CPU
                         kernel does: both give (w_i - mu^)(1 + e) + w_i e' - mu^ e'')
                 E_var = (1 + 16 (D + 4) u)(4 A_m D_mu + 2 D_mu^2 + 4 gamma_{D+6} A_m^2)
                         + (8D + 16) tau (A_m + 1)
                         (to first order in u, the factor in front covering the second-order
                         terms: two-pass, c^ = fl(w - mu^), |c| <= 2 A_m: E_c' (4 A_m + E_c')
                         + gamma_{D+2} (2 A_m + E_c')^2, E_c' = D_mu + u (2 A_m + D_mu):
                         4 A_m D_mu + D_mu^2 + (4D + 16) u A_m^2; one-pass E[w^2] - mu^2:
                         gamma_{D+1} A_m^2 + D_mu (2 A_m + D_mu) + 3u A_m^2, by magnitudes (it
                         cancels); Welford, M2 = sum_k (w_k - m_{k-1})(w_k - m_k) with the
                         computed m's: 4 A_m D_mu + D_mu^2 + (3 + (D - 1) + 1) 4u A_m^2)
                 rho_v = E_var / (var_lo(w box) + eps)        (var^ + eps in
                         (var + eps)(1 +- rho_v); a clamp of var^ at 0 only shrinks the error)
                 rho_s = max(sqrt(1 + rho_v)(1 + u)^2 - 1, 1 - sqrt(1 - rho_v)(1 - u)^2)
                         (s^ = fl(sqrt(fl(var^ + eps))): |s^ / s - 1| <= rho_s; inf if rho_v >= 1)
                 R_i   = min(sqrt(D - 1), C_i / s_w) >= |c_i / s|
                 T_i   = |gamma_i| ((E_c / s_w + R_i rho_s) / (1 - rho_s) (1 + u)^3
                         + R_i ((1 + u)^3 - 1))   (c^ / s^ by a division, or a reciprocal
                         and a product, then the gain: three roundings in any order)
                 R     = (1 + u) T_i + u (|gamma_i| R_i + |beta_i|) + 4 tau   (+ beta, or FMA)
               gamma_k is the storage format's k u / (1 - k u).
  weights      for the TF32 / bfloat16 models the certifier runs g with its weights reduced
               to the operand format exactly (box_bound.reduced_networks), so a
               weight times an activation has one reduced operand (kappa with (1 + v), not
               (1 + v)^2); scores and the mix keep two (``kappa_pair``).
  overflow     every value's M + D and every sum's S + D must stay below the format's
               largest finite number (``_Model.check_range``, rounding.py 'Overflow'):
               else one ValueError line names the layer and the operation.

Mean-value intersection (networks with a LayerNorm, given tangents): the box's midpoint c
runs through the same ops (no tangents, no D), and after every layer (and LN's input and
output) the box's value interval is intersected with
               z(c) + [-S, S],  S_i = sum_q max(|tlo_iq|, |thi_iq|) rho_q,  rho_q >= |X_q - c_q|
(the mean value theorem on the segment c -> X inside the box: z_i(X) - z_i(c) =
dz_i/dX(xi) (X - c), the tangents enclosing dz/dX, Clarke's gradient at ReLU kinks
included). Natural interval arithmetic loses the correlation of a token's entries, so its
var_lo -> 0 and 1/s -> 1/sqrt(eps); the intersection keeps var_lo near the true variance,
and every use of s_w, M_z and the LN Jacobian's factor gamma / s above gets it.

Every D is computed in float64 and widened by 2^-40 (relative) and one ulp per step, so it
stays an upper bound of the exact expression (the constants 0.6, 0.23, 8 carry the margins
of the derivations above).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from transformer_ua import rounding
from transformer_ua.certify import intervals as iv
from transformer_ua.networks import network_dict

_WIDEN = 1 + 2.0 ** -40


def _up(x):
  return iv.up(np.asarray(x, np.float64) * _WIDEN)


def _f(value: Fraction) -> float:
  """A float >= the rational ``value``."""
  x = float(value)
  return x if Fraction(x) >= value else float(np.nextafter(x, np.inf))


class _Model:
  """The float constants of a ``rounding.MatmulModel``, rounded up."""

  def __init__(self, model: rounding.MatmulModel):
    self.model = model
    self.u = _f(model.u)
    self.tiny = _f(model.tiny)
    self._kappa = {}
    self.limit = float(model.range_limit)        # exact: (2 - 2^(1-p)) 2^emax
    self.layer = 'the input'                     # where check_range reports (enclose sets it)
    self.per_box = None      # [B] bool when boxes are marked instead of refused (enclose)
    self.first = None        # the refusal line of the first marked box

  def check_range(self, m_plus_d, where: str) -> None:
    """ValueError (one line) unless every entry of ``m_plus_d`` (M + D of a value, or S + D
    of a dot product's partial sums) is below ``model.range_limit``: the rounding model
    assumes no overflow (rounding.py, 'Overflow')."""
    if self.per_box is not None and np.ndim(m_plus_d) >= 1 and \
        np.shape(m_plus_d)[0] == len(self.per_box):
      a = np.asarray(m_plus_d).reshape(len(self.per_box), -1)
      bad = ~np.all(a < self.limit, axis=1)      # NaN and inf included
      if bad.any():
        if self.first is None:
          self.first = self._line(float(np.max(a[bad])), where)
        self.per_box |= bad
      return
    worst = float(np.max(m_plus_d)) if np.size(m_plus_d) else 0.0
    if not worst < self.limit:                   # NaN and inf included
      raise ValueError(self._line(worst, where))

  def _line(self, worst: float, where: str) -> str:
    fmt = self.model.storage.name
    if self.model.range_limit < self.model.storage.max_finite:
      fmt = f'{self.model.name} operand ({self.model.operand_bits} significant bits)'
    return (f'g can overflow in {self.model.name}: at {self.layer}, {where}, a '
            f'magnitude may reach {worst:.4g}, not below {self.limit:.6g}, the '
            f'largest finite {fmt} (the rounding model assumes no overflow: '
            'fl(g) may be inf there); no certificate.')

  def kappa(self, m: int) -> float:
    """kappa_m of a weight times an activation (one reduced operand when the model's
    weights are exact numbers of the operand format, else two)."""
    if m not in self._kappa:
      self._kappa[m] = _f(self.model.kappa(m, 1 if self.model.weights_exact else 2))
    return self._kappa[m]

  def kappa_pair(self, m: int) -> float:
    """kappa_m of an activation times an activation (scores, mix): both reduced."""
    if ('pair', m) not in self._kappa:
      self._kappa[('pair', m)] = _f(self.model.kappa(m, 2))
    return self._kappa[('pair', m)]

  def gamma(self, m: int) -> float:
    return _f(self.model.storage.gamma(m))

  def dot(self, w_abs, d_x, m_x, b_abs, terms: int, what: str = 'a dot product'):
    """D of y = W x + b, W [r, D] given as |W|, x's D and M [..., D], |b| [r] or 0; ``what``
    names it in an overflow refusal."""
    a = (m_x + d_x).max(axis=-1, keepdims=True)
    s = (m_x + d_x) @ w_abs.T + b_abs
    out = _up(d_x @ w_abs.T + self.kappa(terms) * s
              + (terms + 1) * self.tiny * (a + w_abs.max() + 2))
    self.check_range(_up(s + out), what)
    return out


def assumptions(net: network_dict.Net, model: rounding.MatmulModel | None) -> list:
  """What the ops of ``net`` assume of the runtime beyond the matmul and exp models (none
  in exact arithmetic), and of the certifier's own float64 GELU (``intervals.
  check_gelu_evaluation`` runs before the first GELU enclosure): printed in the line."""
  blocks = net.blocks
  acts = {b.ff.activation for b in blocks if b.ff is not None}
  own = []
  if acts & {'gelu', 'gelu_tanh'}:
    own.append(f'certifier: GELU bounds from math.erfc and NumPy exp in float64 widened by '
               f'2^{int(math.log2(iv.GELU_SLACK))} (checked against mpmath)')
  if model is None:
    return own
  out = []
  if any(b.attention is not None and b.attention.causal for b in blocks):
    out.append('causal mask: masked keys get weight exactly 0 (an additive -inf, or a '
               'negative whose exp is 0)')
  if any(b.attention is not None and b.attention.scale != 1.0 for b in blocks):
    out.append('the attention scale c one multiplication of the scores after the dot '
               'product, or of q before it, or fl(sqrt c) on q and on k')
  if net.final_ln is not None or any(b.norm is not None for b in blocks):
    out.append(rounding.SQRT_DIV_ASSUMPTION)
  if 'gelu' in acts:
    out.append(rounding.ERF_ASSUMPTION)
  if 'gelu_tanh' in acts:
    out.append(rounding.TANH_ASSUMPTION)
  return out + own


def _dev_pairwise(model: _Model, dq, mq, dk, mk):
  """D of c_jk = sum_m a_jm b_km (a, b computed with D's, magnitudes M) [..., j, k]."""
  m = dq.shape[-1]
  aq, ak = mq + dq, mk + dk
  prop = np.einsum('...jm,...km->...jk', dq, mk) + np.einsum('...jm,...km->...jk', aq, dk)
  s = np.einsum('...jm,...km->...jk', aq, ak)
  big = np.maximum(aq.max(axis=-1)[..., :, None], ak.max(axis=-1)[..., None, :])
  out = _up(prop + model.kappa_pair(m) * s + (m + 1) * model.tiny * (2 * big + 2))
  model.check_range(_up(s + out), 'the scores q_j . k_k')
  return out


def _dev_mix(model: _Model, dw, mw, dv, mv):
  """D of o_jm = sum_k w_jk v_km [..., j, m]."""
  n = dw.shape[-1]
  aw, av = mw + dw, mv + dv
  prop = dw @ mv + aw @ dv
  s = aw @ av
  big = np.maximum(aw.max(axis=-1)[..., :, None], av.max(axis=-2)[..., None, :])
  out = _up(prop + model.kappa_pair(n) * s + (n + 1) * model.tiny * (2 * big + 2))
  model.check_range(_up(s + out), 'the mix sum_k w_jk v_k')
  return out


def _dev_softmax(model: _Model, ds, s_lo, s_hi, w_hi):
  """D of the computed softmax over the last axis (module docstring)."""
  with np.errstate(over='ignore'):       # a huge argument gives inf: the cap below holds
    return _dev_softmax_raw(model, ds, s_lo, s_hi, w_hi)


def _expm1_up(x):
  """An upper bound of e^x - 1 for x >= 0 from exact inequalities (no library expm1):
  x + x^2 / (2 (1 - x/3)) for x < 1/2 (the series' tail sum_k>=2 x^k/k! <= x^2/2 sum (x/3)^j),
  exp (checked against mpmath, iv.EXP_SLACK) minus 1 on [1/2, 50], inf above."""
  x = np.asarray(x, np.float64)
  small = np.minimum(x, 0.5)
  series = _up(small + _up(small * small) / iv.down(2 * iv.down(1 - small / 3)))
  big = np.clip(x, 0.5, 50.0)
  via_exp = _up(_up(np.exp(big) * (1 + iv.EXP_SLACK)) - 1)
  return np.where(x < 0.5, series, np.where(x <= 50, via_exp, np.inf))


def softmax_constants(model: _Model, n: int):
  """(c_u, gamma_n, cap) as floats >= the rationals 2u + u^2 = (1 + u)^2 - 1, gamma_n and
  (1 + u)^2 / (1 - gamma_n) + tau (no computed softmax entry exceeds cap: e_k is one of the
  summed exps)."""
  key = ('softmax', n)
  if key not in model._kappa:
    u, g = model.model.u, model.model.storage.gamma(n)
    model._kappa[key] = (_f(2 * u + u * u), _f(g), _f((1 + u) ** 2 / (1 - g) + model.model.tiny))
  return model._kappa[key]


def _dev_softmax_raw(model: _Model, ds, s_lo, s_hi, w_hi):
  # per entry: t_k >= max_l s^_l - s^_k, the argument of exp before its rounding (u t_k)
  n = ds.shape[-1]
  u = model.u
  c_u, gam, cap = softmax_constants(model, n)
  delta = ds.max(axis=-1, keepdims=True)
  t = iv.up(iv.up(s_hi + ds).max(axis=-1, keepdims=True) - iv.down(s_lo - ds))  # signed: no _up
  ut = _up(u * np.maximum(t, 0.0))
  r1 = _up(_expm1_up(ut) + 2 * u * rounding.EXP_ULPS * _up(1 + _expm1_up(ut)))
  r2 = _up(r1 + gam + _up(r1 * gam))                  # (1 + r1)(1 + gamma_n) - 1
  grow = _up(1 + _expm1_up(_up(2 * delta)))
  shift = _expm1_up(_up(2 * delta))
  w_up = np.minimum(1.0, _up(w_hi * grow))            # >= the softmax of the computed scores
  mixed = (w_up * r2).sum(axis=-1, keepdims=True)
  big_r = np.minimum(_up(mixed + iv.sum_error(mixed, n)), r2.max(axis=-1, keepdims=True))
  denom = iv.down(np.where(big_r < 1, 1 - big_r, 1.0))
  rho = np.where(big_r < 1, _up(_up(r1 + c_u + _up(r1 * c_u) + big_r) / denom), np.inf)
  out = _up(w_hi * shift + rho * w_up + 4 * n * model.tiny)
  return np.where(np.isnan(out), np.inf, np.minimum(out, cap))




def _dev_scale(fm: _Model, c: float, d_s, m_s):
  """D of fl(c s^) (module docstring)."""
  c = abs(c)
  return _up(c * d_s + fm.u * c * (m_s + d_s) + fm.tiny)


def _dev_scaled_scores(fm: _Model, c: float, d_s, m_s, d_q, m_q, d_k, m_k):
  """D of the scaled scores wherever the runtime puts the scale (module docstring): the
  largest of c after the dot product, c on q before it, and fl(sqrt c) on q and on k."""
  after = _dev_scale(fm, c, d_s, m_s)
  a = abs(c)
  d_q1 = _dev_scale(fm, c, d_q, m_q)
  before = _dev_pairwise(fm, d_q1, _up(a * m_q), d_k, m_k)
  r = _up(math.sqrt(a) * _WIDEN)
  rel = _up(2 * fm.u + fm.u * fm.u)
  d_q2 = _up(r * d_q + rel * r * (m_q + d_q) + fm.tiny)
  d_k2 = _up(r * d_k + rel * r * (m_k + d_k) + fm.tiny)
  split = _dev_pairwise(fm, d_q2, _up(r * m_q), d_k2, _up(r * m_k))
  return np.maximum(after, np.maximum(before, split))


def _dev_gelu(fm: _Model, form: str, d_x, m_x):
  """D of the computed GELU at the computed input (module docstring)."""
  u, tau = fm.u, fm.tiny
  a = _up(m_x + d_x)
  if form == 'gelu':
    rel = _up(2 * rounding.ERF_ULPS * u)
  else:
    rel = _up(rounding.TANH_ULPS * u + 0.23 * fm.gamma(7))
  lead = _up((1 + u) ** 2 * _WIDEN)
  extra = 0.6 * u if form == 'gelu' else 0.0
  r = _up(lead * (rel * a + extra) + (2 * u + u * u) * a + 2 * (a + 4) * tau)
  return _up(iv.GELU_LIPSCHITZ * d_x + r)


def _dev_layer_norm(fm: _Model, ln: network_dict.LayerNorm, z: iv.Interval, d_z):
  """D of the computed LayerNorm (module docstring), z [..., D]."""
  u, tau = fm.u, fm.tiny
  width = z.lo.shape[-1]
  gamma, beta, eps = np.abs(ln.gamma), np.abs(ln.beta), ln.eps
  a = _up(z.mag() + d_z)
  a_m = a.max(axis=-1, keepdims=True)
  wbox = iv.Interval(iv.down(z.lo - d_z), iv.up(z.hi + d_z))
  c_w = iv.centred(wbox)
  v_lo, _ = iv.variance_bounds(c_w.lo, c_w.hi, wbox.lo, wbox.hi)
  v_lo = v_lo[..., None]
  s_w = iv.down(np.sqrt(iv.down(v_lo + eps)))
  big_c = c_w.mag()
  prop = _up(gamma * _up(np.sqrt(_up((d_z * d_z).sum(axis=-1, keepdims=True)) * _WIDEN))
             / s_w)
  d_mu = _up(fm.gamma(2 * width + 8) * a_m + (2 * width + 8) * tau)
  e_c = _up((1 + u) * d_mu + u * (1 + u) * (a + a_m + d_mu) + u * big_c + 2 * tau)
  e_var = _up(_up(1 + 16 * (width + 4) * u)
              * (4 * a_m * d_mu + 2 * d_mu * d_mu + 4 * fm.gamma(width + 6) * a_m * a_m)
              + (8 * width + 16) * tau * (a_m + 1))
  rho_v = _up(e_var / iv.down(v_lo + eps))
  ok = rho_v < 1
  safe = np.where(ok, rho_v, 0.0)
  hi_side = _up(np.sqrt(_up(1 + safe)) * _up((1 + u) ** 2) * _WIDEN - 1)
  lo_side = _up(1 - iv.down(np.sqrt(iv.down(1 - safe)) * iv.down((1 - u) ** 2) / _WIDEN))
  rho_s = np.where(ok, np.maximum(hi_side, lo_side), np.inf)
  ok = ok & (rho_s < 1)
  rho_s = np.where(ok, rho_s, 0.0)
  bound = iv.up(math.sqrt(width - 1)) if width > 1 else 0.0
  r_i = np.minimum(bound, _up(big_c / s_w))
  u3 = _up((1 + u) ** 3 * _WIDEN)
  t_i = _up(gamma * (_up((e_c / s_w + r_i * rho_s) / iv.down(1 - rho_s)) * u3
                     + r_i * _up(u3 - 1)))
  r = _up((1 + u) * t_i + u * (gamma * r_i + beta) + 4 * tau)
  return np.where(ok, _up(prop + r), np.inf)


def enclose(net: network_dict.Net, x: iv.Interval, model: rounding.MatmulModel | None, *,
            marks: list | None = None, mean_value: bool = True):
  """(g(x) as an Interval [B, n, d] with x's tangents, D [B, n, d] or None).

  A value whose M + D may reach the format's largest finite number (``_Model.check_range``)
  is refused in one line; given a list ``marks``, its box gets D = inf instead (no bound
  there: the certifier splits it) and the first such box's refusal line is appended to
  ``marks``.

  Given tangents and a network with a LayerNorm, every layer's value is also intersected
  with its mean-value form z(X) in z(c) + [dz/dX] (X - c), c a point of the box
  (``_MeanValue``): the centre runs through the same ops beside the box (no tangents, no D).
  The variance's lower bound, and with it 1/s in LN's value, Jacobian and D, is what this
  tightens. Networks without a LayerNorm keep the plain enclosure, op for op what
  box_kernel.py computes (its tests compare the two); mean_value=False skips it."""
  fm = None if model is None else _Model(model)
  if fm is not None and marks is not None:
    fm.per_box = np.zeros(x.lo.shape[0], bool)
  has_ln = net.final_ln is not None or any(b.norm is not None for b in net.blocks)
  mv = _MeanValue(x) if x.has_tangent and has_ln and mean_value else None
  z, d_z = _embed(net, x, fm)
  zc = _embed(net, mv.centre, None)[0] if mv else None
  for i, blk in enumerate(net.blocks):
    for part, ln, op, name in ((blk.attention, blk.ln_attn, _attention, 'attention'),
                               (blk.ff, blk.ln_ff, _feedforward, 'feed-forward')):
      if part is None:
        continue
      if fm is not None:
        fm.layer = f'block {i} {name}'
      if blk.norm == 'pre' and ln is not None:
        u_z, d_u = _layer_norm(ln, z, d_z, fm)
        u_c = _layer_norm(ln, zc, None, None)[0] if mv else None
        u_z = mv.tighten(u_z, u_c) if mv else u_z
        z, d_z = op(part, u_z, d_u, fm, residual=(z, d_z))
        zc = op(part, u_c, None, None, residual=(zc, None))[0] if mv else None
      else:
        z, d_z = op(part, z, d_z, fm, residual=(z, d_z))
        zc = op(part, zc, None, None, residual=(zc, None))[0] if mv else None
        if ln is not None:
          z = mv.tighten(z, zc) if mv else z
          z, d_z = _layer_norm(ln, z, d_z, fm)
          zc = _layer_norm(ln, zc, None, None)[0] if mv else None
      z = mv.tighten(z, zc) if mv else z
    if fm is not None:
      fm.check_range(_up(z.mag() + d_z), 'its output z')
  if net.final_ln is not None:
    if fm is not None:
      fm.layer = 'the final LayerNorm'
    z, d_z = _layer_norm(net.final_ln, z, d_z, fm)
    if mv:
      z = mv.tighten(z, _layer_norm(net.final_ln, zc, None, None)[0])
  if net.readout is not None:
    r, rb = net.readout, net.readout_bias
    if fm is not None:
      fm.layer = 'the readout'
      d_z = fm.dot(np.abs(r), d_z, z.mag(), 0.0 if rb is None else np.abs(rb), net.D,
                   'Z readout^T + readout_bias')
    z = iv.linear(z, r, rb)
  else:
    z = z.take(np.arange(net.d), axis=-1)
    if d_z is not None:
      d_z = d_z[..., :net.d]
  if fm is not None and fm.per_box is not None and fm.per_box.any():
    d_z = np.where(fm.per_box[:, None, None], np.inf, d_z)
    marks.append(fm.first)
  return z, d_z


class _MeanValue:
  """The mean-value form of a layer's value over the box [lo, hi] of x [B, n, d]: with c
  the box's midpoint (in the box: float midpoints are) and rho_q >= |X_q - c_q|,
      z_i(X) - z_i(c) = sum_q dz_i/dX_q (xi) (X_q - c_q)  in  [-S_i, S_i],
      S_i = sum_q max(|tlo_iq|, |thi_iq|) rho_q
  (the mean value theorem on the segment from c to X, inside the box; the tangents enclose
  dz/dX over the whole box, Clarke's generalized gradient at ReLU kinks included, as the
  certifier's own mean-value form uses them). ``tighten`` intersects z's interval with
  [z(c)_lo - S, z(c)_hi + S]; the tangents stay."""

  def __init__(self, x: iv.Interval):
    c = (x.lo + x.hi) / 2
    c = np.minimum(np.maximum(c, x.lo), x.hi)
    self.centre = iv.point(c)
    rho = np.maximum(iv.up(c - x.lo), iv.up(x.hi - c))
    self.rho = rho.reshape(rho.shape[0], -1) if rho.ndim >= 2 else rho

  def tighten(self, z: iv.Interval, zc: iv.Interval) -> iv.Interval:
    rho = self.rho.reshape(self.rho.shape[:1] + (1,) * (z.lo.ndim - 1) + self.rho.shape[1:])
    spread = _up((z.tmag() * rho).sum(axis=-1))
    lo = np.maximum(z.lo, iv.down(zc.lo - spread))
    hi = np.minimum(z.hi, iv.up(zc.hi + spread))
    bad = ~(lo <= hi)          # cannot happen for enclosures; NaN-safe: keep the natural one
    lo, hi = np.where(bad, z.lo, lo), np.where(bad, z.hi, hi)
    return iv.Interval(lo, hi, z.tlo, z.thi)


def _embed(net: network_dict.Net, x: iv.Interval, fm: _Model | None):
  """(Z_0, its D): the input's rounding, the embedding (+ bias) or zero padding, and the
  positional encoding."""
  z = x
  d_z = None
  if fm is not None:
    d_z = _up(fm.u * x.mag() + fm.tiny)
    fm.check_range(_up(x.mag() + d_z), 'X')
  if net.embed is not None:
    e, eb = net.embed, net.embed_bias
    if fm is not None:
      fm.layer = 'the embedding'
      d_z = fm.dot(np.abs(e), d_z, x.mag(), 0.0 if eb is None else np.abs(eb), net.d,
                   'X embed^T + embed_bias')
    z = iv.linear(z, e, eb)
  elif net.D > net.d:
    pad = [(0, 0)] * (z.lo.ndim - 1) + [(0, net.D - net.d)]
    tpad = pad + [(0, 0)]
    z = iv.Interval(np.pad(z.lo, pad), np.pad(z.hi, pad),
                    None if not z.has_tangent else np.pad(z.tlo, tpad),
                    None if not z.has_tangent else np.pad(z.thi, tpad))
    if d_z is not None:
      d_z = np.pad(d_z, pad)
  if net.positional is not None:
    z = iv.add(z, iv.point(net.positional))
    if fm is not None:
      d_z = _up(d_z + fm.u * (z.mag() + d_z) + fm.tiny)
      fm.layer = 'the positional encoding'
      fm.check_range(_up(z.mag() + d_z), 'Z_0 + E')
  return z, d_z


def _layer_norm(ln: network_dict.LayerNorm, z: iv.Interval, d_z, fm: _Model | None):
  y, _, _ = iv.layer_norm(z, ln.gamma, ln.beta, ln.eps)
  return y, None if fm is None else _dev_layer_norm(fm, ln, z, d_z)


def _masked(a, keep):
  return None if a is None else np.where(keep, a, 0.0)


def _attention(params: network_dict.Attention, z: iv.Interval, d_z, fm: _Model | None, *,
               residual):
  """residual + Attn(z) (module docstring); ``residual`` = (its Interval, its D)."""
  p = params
  h, m, width = p.w_q.shape
  n = z.lo.shape[-2]
  keep = ~np.triu(np.ones((n, n), bool), 1) if p.causal else np.ones((n, n), bool)
  heads = []
  d_heads = []

  def bias(b, i):
    return None if b is None else b[i]

  def babs(b, i):
    return 0.0 if b is None else np.abs(b[i])

  for i in range(h):
    q = iv.linear(z, p.w_q[i], p.b_q[i])                     # [B, n, m]
    k = iv.linear(z, p.w_k[i], bias(p.b_k, i))
    v = iv.linear(z, p.w_v[i], bias(p.b_v, i))
    s = iv.pairwise(q, k)                                    # [B, n_q, n_k]
    if p.scale != 1.0:
      s_scaled = iv.scale(s, p.scale)
    else:
      s_scaled = s
    if p.causal:                     # masked scores: structure, never an interval
      t = None if not s_scaled.has_tangent else keep[..., None]
      s_scaled = iv.Interval(np.where(keep, s_scaled.lo, 0.0), np.where(keep, s_scaled.hi, 0.0),
                             None if t is None else np.where(t, s_scaled.tlo, 0.0),
                             None if t is None else np.where(t, s_scaled.thi, 0.0))
    w = iv.softmax(s_scaled, causal=p.causal)
    o = iv.mix(w, v)                                         # [B, n, m]
    heads.append(o)
    if fm is not None:
      d_q = fm.dot(np.abs(p.w_q[i]), d_z, z.mag(), np.abs(p.b_q[i]), width,
                   f'head {i} W_Q z + b_Q')
      d_k = fm.dot(np.abs(p.w_k[i]), d_z, z.mag(), babs(p.b_k, i), width, f'head {i} W_K z + b_K')
      d_v = fm.dot(np.abs(p.w_v[i]), d_z, z.mag(), babs(p.b_v, i), width, f'head {i} W_V z + b_V')
      d_s = _dev_pairwise(fm, d_q, q.mag(), d_k, k.mag())
      if p.scale != 1.0:
        d_s = _dev_scaled_scores(fm, p.scale, d_s, s.mag(), d_q, q.mag(), d_k, k.mag())
      # masked entries keep their (zeroed) scores: the per-entry max-subtraction bound only
      # grows with more entries, and their weights are exactly 0
      d_w = _dev_softmax(fm, _masked(d_s, keep), s_scaled.lo, s_scaled.hi, w.hi)
      d_heads.append(_dev_mix(fm, d_w, w.hi, d_v, v.mag()))
  res, d_res = residual
  out = res
  for i, o in enumerate(heads):
    out = iv.add(out, iv.linear(o, p.w_o[i]))
  if p.b_o is not None:
    out = iv.add(out, iv.point(p.b_o))
  d_out = None
  if fm is not None:
    prop = sum(d_heads[i] @ np.abs(p.w_o[i]).T for i in range(h))
    s = sum((heads[i].mag() + d_heads[i]) @ np.abs(p.w_o[i]).T for i in range(h))
    b_o = 0.0 if p.b_o is None else np.abs(p.b_o)
    terms = h * m + 1 + (p.b_o is not None)
    a = max(float((heads[i].mag() + d_heads[i]).max()) for i in range(h))
    r_abs = res.mag() + d_res
    d_out = _up(d_res + prop + fm.kappa(terms) * (s + r_abs + b_o)
                + (terms + 1) * fm.tiny * (a + float(np.abs(p.w_o).max()) + r_abs + b_o + 2))
    fm.check_range(_up(s + r_abs + b_o + d_out), 'the residual z + sum_i W_O^i o^i + b_O')
  return out, d_out


#: The feed-forward's Jacobian form is used while r D^2 stays at most this (cost B n r D^2).
FF_JACOBIAN_SIZE = 2 ** 16


def _dev_ff_jacobian(fm: _Model, params, pre: iv.Interval, z: iv.Interval, d_z, act, d_act):
  """D of z' = z + W_2 ReLU(W_1 z + b_1) + b_2 through the layer's Jacobian (lowprec).
  With delta = z^ - z (|delta| <= D_z), rho = fl_op(z^) - z^ the operand reduction of z
  (|rho| <= v |z^|: one function of the value, so the same in every row of W_1; the
  residual z^ itself is added unreduced) and eps the first sum's accumulation rounding
  (|eps| <= L_1 = gamma_{m+1}(u_acc) S_1 + ...: the weights being exact numbers of the
  operand format, the products of operands are exact or rounded inside gamma),
      z'^ - z' = (I + W_2 Theta W_1) delta + W_2 Theta W_1 rho + W_2 Theta eps + (rounding
                 of the second sum),
  Theta = diag(theta_r), theta_r in [0, 1] (a ReLU's difference quotient), 1 where the
  pre-activation's range widened by |W_1| (|delta| + |rho|) + L_1 is > 0, 0 where it is
  <= 0:
      D' = |I + W_2 [Theta] W_1| D_z + |W_2 [Theta] W_1| v (M_z + D_z) + |W_2| L_1 + L_2,
  (L_2 the second sum's rounding, act's reduction included, as in ``_feedforward``); this
  keeps the cancellation of W_2 W_1 that |W_2| |W_1| D_z loses. inf (unused: the caller
  takes the minimum) when r D^2 > FF_JACOBIAN_SIZE or the weights are not exact."""
  w_1, b_1, w_2, b_2 = params.w_1, params.b_1, params.w_2, params.b_2
  r, width = w_1.shape
  model = fm.model
  if r * width * width > FF_JACOBIAN_SIZE or not (model.weights_exact or
                                                  model.operand_rel == 0):
    return np.inf
  v = _f(model.operand_rel)
  acc = _f(model.kappa(width, 0))
  mz = _up(z.mag() + d_z)
  rho = _up(v * mz + fm.tiny)
  delta = _up(d_z + rho)
  s1 = _up(mz * (1 + v) + fm.tiny) @ np.abs(w_1).T + np.abs(b_1)
  local1 = _up(acc * s1 + (width + 1) * fm.tiny * (mz.max(axis=-1, keepdims=True)
                                                   + np.abs(w_1).max() + 2))
  spread = _up(delta @ np.abs(w_1).T + local1)
  p_lo = (iv.down(pre.lo - spread) > 0).astype(np.float64)          # theta_r = 1 surely
  p_hi = (iv.up(pre.hi + spread) > 0).astype(np.float64)            # theta_r may be > 0
  c = (w_2.T[:, :, None] * w_1[:, None, :]).reshape(r, -1)         # [r, D*D]: W_2[i,r] W_1[r,j]
  cp, cn = np.maximum(c, 0), np.minimum(c, 0)
  eye = np.eye(width).reshape(-1)
  a_lo = p_lo @ cp + p_hi @ cn                                      # W_2 [Theta] W_1
  a_hi = p_hi @ cp + p_lo @ cn
  slack = 2.0 ** -40 * (1 + p_hi @ np.abs(c))                      # the float sums' error
  j_mag = _up(np.maximum(np.abs(eye + a_lo), np.abs(eye + a_hi)) + slack)
  a_mag = _up(np.maximum(np.abs(a_lo), np.abs(a_hi)) + slack)
  shape = j_mag.shape[:-1] + (width, width)
  prop = _up(np.einsum('...ij,...j->...i', j_mag.reshape(shape), d_z)
             + np.einsum('...ij,...j->...i', a_mag.reshape(shape), rho))
  terms = r + 1
  s2 = (act.mag() + d_act) @ np.abs(w_2).T + np.abs(b_2) + z.mag() + d_z
  a2 = (act.mag() + d_act).max(axis=-1, keepdims=True)
  local2 = _up(fm.kappa(terms) * s2 + (terms + 2) * fm.tiny * (a2 + float(np.abs(w_2).max())
                                                               + z.mag() + d_z + 2))
  return _up(prop + local1 @ np.abs(w_2).T + local2)


def _feedforward(params: network_dict.FeedForward, z: iv.Interval, d_z, fm: _Model | None,
                 *, residual):
  """residual + FF(z) (module docstring)."""
  p = params
  r, width = p.w_1.shape
  pre = iv.linear(z, p.w_1, p.b_1)
  act = iv.relu(pre) if p.activation == 'relu' else iv.gelu(pre, p.activation)
  res, d_res = residual
  out = iv.add(res, iv.linear(act, p.w_2, p.b_2))
  d_out = None
  if fm is not None:
    d_pre = fm.dot(np.abs(p.w_1), d_z, z.mag(), np.abs(p.b_1), width, 'W_1 z + b_1')
    d_act = d_pre if p.activation == 'relu' else _dev_gelu(fm, p.activation, d_pre, pre.mag())
    terms = r + 1
    r_abs = res.mag() + d_res
    s = (act.mag() + d_act) @ np.abs(p.w_2).T + np.abs(p.b_2) + r_abs
    a = (act.mag() + d_act).max(axis=-1, keepdims=True)
    d_out = _up(d_res + d_act @ np.abs(p.w_2).T + fm.kappa(terms) * s
                + (terms + 2) * fm.tiny * (a + float(np.abs(p.w_2).max()) + r_abs + 2))
    if p.activation == 'relu' and res is z:        # the Jacobian form: z' = z + FF(z) only
      d_out = np.minimum(d_out, _dev_ff_jacobian(fm, p, pre, z, d_z, act, d_act))
    fm.check_range(_up(s + d_out), 'the residual z + W_2 act(W_1 z + b_1) + b_2')
  return out, d_out
