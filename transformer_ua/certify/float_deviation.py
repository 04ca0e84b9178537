r"""fl(g) - g, op by op: the float deviation D of a standard Transformer's operations.

Each function takes the exact value's magnitudes M (from the intervals of
``network_enclosure``) and the input's deviation D, and returns an upper bound of the
computed value's deviation; ``Model`` holds the rounding model's constants rounded up and
the overflow check. ``assumptions`` lists what the ops assume of the runtime.

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
               e^x - 1 is bounded by exact inequalities (``expm1_up``), so each rounds up.
  mix          o_j = sum_k w_jk v_k (n terms), like the scores
  residual     z' = r + sum_i W_O^i o^i + b_O: one dot product of h m terms with r (and b_O)
               as bias terms (any grouping of heads, bias and residual: at most h m + 2
               roundings per term); z' = r + W_2 act(W_1 z + b_1) + b_2 likewise. r = z
               (no norm, post-LN) or the block's input beside LN(z) (pre-LN). For ReLU with
               r = z also, and the smaller is kept (``ff_jacobian``), through the
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
                 (``layer_norm_moments``; S1, S2 the means of A_i, A_i^2 over the token,
                 M_mu >= |mu|, V >= var(w), c = gamma_{2D+8}, A' = A_m (1 + c) >= every
                 computed running mean, fl(x) = x (1 + delta) with |delta| <= u throughout)
                 D_mu  = max(D_sum, D_wel) + (2D + 8) tau, the mean's error:
                         D_sum = gamma_{D+1} S1 (a sum in any order, then / D or * fl(1/D));
                         D_wel = gamma_1 A' (D + 1) / 2 + gamma_3 (S1 + A') (Welford's
                         m_k = m_{k-1} + fl(w_k - m_{k-1}) / k with the step's error eps_k:
                         e_k = m^_k - mu_k = (1 - 1/k) e_{k-1} + eps_k, so e_D = sum_k eps_k
                         k / D, |eps_k| <= gamma_1 |m^_k| + gamma_3 |w_k - m^_{k-1}| / k;
                         |e_k| <= c A_m by induction)
                 E_c   = (1 + u) D_mu + u (1 + u)(A_i + A_m + D_mu) + u C_i + 2 tau
                         (c_i = w_i - mu computed, or w_i rstd - mu rstd as torch's CPU
                         kernel does: both give (w_i - mu^)(1 + e) + w_i e' - mu^ e'')
                 E_var = max(E_two, E_one, E_wel) + (8D + 16) tau (A_m + 1), the variance's:
                         E_two = gamma_{D+4} (V + D_mu^2) + D_mu^2   (two-pass: c^_i =
                           (c_i - e)(1 + a_i) and sum_i c_i = 0, so sum (c_i - e)^2 =
                           D var + D e^2: the mean's error enters at second order only);
                         E_one = (1 + u)(gamma_{D+2} S2 + (2 M_mu + D_sum) D_sum
                           + u (M_mu + D_sum)^2) + u V   (one-pass fl(fl(E[w^2]) - fl(mu^2)):
                           it cancels, so by magnitudes);
                         E_wel = B (gamma_1 A' (D + 1) + 2 gamma_3 (S1 + A'))
                           + gamma_1 A' (S1 + A_m) + 4 gamma_3 A'^2 (1 + ln D) / D + (c A_m)^2
                           + gamma_{D+4} (V + 2 c A_m (S1 + A_m) + (c A_m)^2),  B = M_mu + A_m
                           (Welford, M2 = sum_k fl(w_k - m^_{k-1}) fl(w_k - m^_k): with
                           d'_k = w_k - mu_{k-1}, sum_k d'_k (w_k - mu_k) = D var exactly and
                           the first-order error is -2 sum_j j eps_j (mu_D - mu_j)
                           - sum_k eps_k d'_k, since sum_{k>j} d'_k / k = mu_D - mu_j; the
                           second order sum_k e_{k-1} e_k; then the sum's and the division's
                           roundings on sum |d_k c_k| <= D V + 2 c A_m D (S1 + A_m) + ...)
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
               to the operand format exactly (box_bound.reduced_networks), and every
               reduced activation a^ (of every dot product, the scores and the mix) carries
               its own per-entry rho (``Model.rho``, rounding.py (***): the binade of its
               computed range, or the one value both ends reduce to), the sums their
               accumulation alone (``kappa_acc``), the residual and the bias unreduced:
                 D_y = |W| (D_z + rho_z) + kappa^acc (|W| (A_z + rho_z) + |b|) + ...
                 D_s = sum (D_q + rho_q)(A_k + rho_k) + M_q (D_k + rho_k)
                       + kappa^acc sum (A_q + rho_q)(A_k + rho_k) + ...
               A value that is already a number of the operand format is reduced within
               tau: v = 2^k z_j (``operand_rows``: one power-of-2 weight, no bias), and
               z'_i = 0 + W_O o with such a row and an exactly zero residual entry
               (``Model.operand_outputs``, read by the next op's ``rho_of``). The
               reductions enter one-signed (rounding.py (****), signed_reduction.py: a row
               of operands in one mode): |W| rho becomes max(L, H, S) of that sum in each
               dot product with signed weights (W_Q, W_K, W_V, W_1, W_O, readout, embedding)
               and for the ReLU outputs at W_2; the attention's output keeps signed sides
               z'^ - z' in [-lo, hi] (``mix_sides``: the mix's rows of w and columns of v),
               which the Jacobian form adds to its reductions' (``ff_terms``).
  overflow     every value's M + D and every sum's S + D must stay below the format's
               largest finite number (``Model.check_range``, rounding.py 'Overflow'):
               else one ValueError line names the layer and the operation.

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
from transformer_ua.certify import signed_reduction
from transformer_ua.networks import network_dict

WIDEN = 1 + 2.0 ** -40


def up(x):
  return iv.up(np.asarray(x, np.float64) * WIDEN)


def float_up(value: Fraction) -> float:
  """A float >= the rational ``value``."""
  x = float(value)
  return x if Fraction(x) >= value else float(np.nextafter(x, np.inf))


class Model:
  """The float constants of a ``rounding.MatmulModel``, rounded up."""

  def __init__(self, model: rounding.MatmulModel):
    self.model = model
    self.u = float_up(model.u)
    self.tiny = float_up(model.tiny)
    self._kappa = {}
    self.limit = float(model.range_limit)        # exact: (2 - 2^(1-p)) 2^emax
    self.layer = 'the input'                     # where check_range reports (enclose sets it)
    self.per_box = None      # [B] bool when boxes are marked instead of refused (enclose)
    self.first = None        # the refusal line of the first marked box
    # (mask, D): the entries of the value whose deviation is this very D object that are
    # numbers of the operand format (``operand_outputs``), for the next op's reduction
    self.operands = None
    self.signs = None        # (lo, hi, D): delta in [-lo, hi] for the value of that D object

  def signs_of(self, d):
    """(lo, hi) where the last op left the signed sides of this very D object, else None."""
    mark, self.signs = self.signs, None
    return mark[:2] if mark is not None and mark[2] is d else None

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
      self._kappa[m] = float_up(self.model.kappa(m, 1 if self.model.weights_exact else 2))
    return self._kappa[m]

  def kappa_pair(self, m: int) -> float:
    """kappa_m of an activation times an activation (scores, mix): both reduced."""
    if ('pair', m) not in self._kappa:
      self._kappa[('pair', m)] = float_up(self.model.kappa(m, 2))
    return self._kappa[('pair', m)]

  def gamma(self, m: int) -> float:
    return float_up(self.model.storage.gamma(m))

  @property
  def split(self) -> bool:
    """True where the weights are exact numbers of a reduced operand format: each
    activation's reduction is then bounded per entry (``rho``, rounding.py (***)) and the
    sums carry the accumulation alone (``kappa_acc``)."""
    return self.model.weights_exact and self.model.operand_rel > 0

  def kappa_acc(self, m: int) -> float:
    """The sum's own factor: kappa_m with no reduced operand where ``split``, else
    ``kappa`` (which then covers the reductions)."""
    return float_up(self.model.kappa(m, 0)) if self.split else self.kappa(m)

  def rho(self, lo, hi, d=0.0):
    """Per entry, >= |fl_op(y) - y| for every computed value y within ``d`` of [lo, hi]
    (rounding.py (***)); 0 unless ``split``."""
    if not self.split:
      return 0.0
    return self.model.operand_error(iv.down(np.asarray(lo) - d), iv.up(np.asarray(hi) + d))

  def signed(self, lo, hi, d, c_lo, c_hi, *, cap=None, nonneg=False):
    """``signed_reduction.parts`` (L, H, S) for operands within ``d`` of [lo, hi]."""
    return signed_reduction.parts(self.model, iv.down(np.asarray(lo) - d),
                                  iv.up(np.asarray(hi) + d), c_lo, c_hi, up, np, cap=cap,
                                  nonneg=nonneg)

  def signed_bound(self, lo, hi, d, w, **kw):
    """[..., rows] >= |sum_i W_ri r_i| for exact weights W (``signed``): max(L, H, S)."""
    return np.maximum(*signed_reduction.sides(self.signed(lo, hi, d, w, w, **kw), np))

  def operand_outputs(self, w, b, res_lo, res_hi, d_res, d_out) -> None:
    """Marks the entries of z' = r + W o + b (W [width, k] the heads' W_O side by side)
    that are numbers of the operand format (``operand_rows``, with r = 0 exactly there), for
    ``rho_of`` to read back with the same D object ``d_out``; only where ``split``."""
    if not self.split:
      return
    exact_zero = (res_lo == 0) & (res_hi == 0) & (d_res == 0)
    self.operands = (operand_rows(w, b) & exact_zero, d_out)

  def rho_of(self, z: iv.Interval, d_z):
    """``rho`` of a layer's input z, tau where ``operand_outputs`` marked z's entries (the
    mark is read only with the very D it was made for, then dropped)."""
    rho = self.rho(z.lo, z.hi, d_z)
    mark, self.operands = self.operands, None
    if mark is not None and mark[1] is d_z and self.split:
      rho = np.where(mark[0], self.tiny, rho)
    return rho

  def dot(self, w_abs, d_x, m_x, b_abs, terms: int, what: str = 'a dot product', *,
          x: iv.Interval | None = None, rho=None, w=None):
    """D of y = W x + b, W [r, D] given as |W|, x's D and M [..., D], |b| [r] or 0; ``what``
    names it in an overflow refusal. Where ``split``, x's reduction is bounded per entry
    from its interval ``x`` (or its magnitude) and the sum carries the accumulation alone
    (rounding.py (***)), or ``rho`` given; given also the signed weights ``w`` and ``x``,
    the reduction enters one-signed (``signed_reduction``, one mode per row of x)."""
    prop = None
    if self.split:           # |fl_op(x^) - x| <= D + rho, |fl_op(x^)| <= M + D + rho
      if rho is None:
        rho = self.rho(-m_x, m_x, d_x) if x is None else self.rho(x.lo, x.hi, d_x)
      if w is not None and x is not None:
        prop = up(d_x @ w_abs.T + self.signed_bound(x.lo, x.hi, d_x, w, cap=rho))
      d_x = up(d_x + rho)
    a = (m_x + d_x).max(axis=-1, keepdims=True)
    s = (m_x + d_x) @ w_abs.T + b_abs
    prop = d_x @ w_abs.T if prop is None else prop
    out = up(prop + self.kappa_acc(terms) * s
             + (terms + 1) * self.tiny * (a + w_abs.max() + 2))
    self.check_range(up(s + out), what)
    return out


def operand_rows(w, b) -> np.ndarray:
  """[rows] bool: row r of y = W x + b has one non-zero weight, +-2^k, and no bias (b None or
  b_r = 0). Where the weights are exact numbers of the operand format, such a y^ is then
  w_r fl_op(x^) exactly (a power of 2 times an operand, zeros added: every faithful or
  truncating sum returns it), itself a number of the operand format (or within tau below
  the normal range), so reducing it again errs by at most tau (rounding.py (***))."""
  w = np.asarray(w, np.float64)
  nonzero = w != 0
  one = nonzero.sum(axis=-1) == 1
  mant, _ = np.frexp(np.abs(w).max(axis=-1))
  out = one & (mant == 0.5)
  if b is not None:
    out &= np.asarray(b, np.float64) == 0
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


def pairwise(model: Model, dq, mq, dk, mk, rq=None, rk=None):
  """D of c_jk = sum_m a_jm b_km (a, b computed with D's, magnitudes M) [..., j, k]; rq, rk
  the operands' per-entry reductions where ``model.split`` (rounding.py (***); None: from
  the magnitudes)."""
  m = dq.shape[-1]
  if model.split:
    rq = model.rho(-mq, mq, dq) if rq is None else rq
    rk = model.rho(-mk, mk, dk) if rk is None else rk
    dq, dk = up(dq + rq), up(dk + rk)
  aq, ak = mq + dq, mk + dk
  prop = np.einsum('...jm,...km->...jk', dq, ak) + np.einsum('...jm,...km->...jk', mq, dk)
  s = np.einsum('...jm,...km->...jk', aq, ak)
  big = np.maximum(aq.max(axis=-1)[..., :, None], ak.max(axis=-1)[..., None, :])
  kappa = model.kappa_acc(m) if model.split else model.kappa_pair(m)
  out = up(prop + kappa * s + (m + 1) * model.tiny * (2 * big + 2))
  model.check_range(up(s + out), 'the scores q_j . k_k')
  return out


def mix(model: Model, dw, mw, dv, mv, rw=None, rv=None):
  """D of o_jm = sum_k w_jk v_km [..., j, m]; rw, rv as ``pairwise``'s rq, rk."""
  n = dw.shape[-1]
  if model.split:
    rw = model.rho(-mw, mw, dw) if rw is None else rw
    rv = model.rho(-mv, mv, dv) if rv is None else rv
    dw, dv = up(dw + rw), up(dv + rv)
  aw, av = mw + dw, mv + dv
  prop = dw @ av + mw @ dv
  s = aw @ av
  big = np.maximum(aw.max(axis=-1)[..., :, None], av.max(axis=-2)[..., None, :])
  kappa = model.kappa_acc(n) if model.split else model.kappa_pair(n)
  out = up(prop + kappa * s + (n + 1) * model.tiny * (2 * big + 2))
  model.check_range(up(s + out), 'the mix sum_k w_jk v_k')
  return out


def softmax(model: Model, ds, s_lo, s_hi, w_hi):
  """D of the computed softmax over the last axis (module docstring)."""
  with np.errstate(over='ignore'):       # a huge argument gives inf: the cap below holds
    return _softmax_raw(model, ds, s_lo, s_hi, w_hi)


def expm1_up(x):
  """An upper bound of e^x - 1 for x >= 0 from exact inequalities (no library expm1):
  x + x^2 / (2 (1 - x/3)) for x < 1/2 (the series' tail sum_k>=2 x^k/k! <= x^2/2 sum (x/3)^j),
  exp (checked against mpmath, iv.EXP_SLACK) minus 1 on [1/2, 50], inf above."""
  x = np.asarray(x, np.float64)
  small = np.minimum(x, 0.5)
  series = up(small + up(small * small) / iv.down(2 * iv.down(1 - small / 3)))
  big = np.clip(x, 0.5, 50.0)
  via_exp = up(up(np.exp(big) * (1 + iv.EXP_SLACK)) - 1)
  return np.where(x < 0.5, series, np.where(x <= 50, via_exp, np.inf))


def softmax_constants(model: Model, n: int):
  """(c_u, gamma_n, cap) as floats >= the rationals 2u + u^2 = (1 + u)^2 - 1, gamma_n and
  (1 + u)^2 / (1 - gamma_n) + tau (no computed softmax entry exceeds cap: e_k is one of the
  summed exps)."""
  key = ('softmax', n)
  if key not in model._kappa:
    u, g = model.model.u, model.model.storage.gamma(n)
    model._kappa[key] = (float_up(2 * u + u * u), float_up(g), float_up((1 + u) ** 2 / (1 - g) + model.model.tiny))
  return model._kappa[key]


def _softmax_raw(model: Model, ds, s_lo, s_hi, w_hi):
  # per entry: t_k >= max_l s^_l - s^_k, the argument of exp before its rounding (u t_k)
  n = ds.shape[-1]
  u = model.u
  c_u, gam, cap = softmax_constants(model, n)
  delta = ds.max(axis=-1, keepdims=True)
  t = iv.up(iv.up(s_hi + ds).max(axis=-1, keepdims=True) - iv.down(s_lo - ds))  # signed: no _up
  ut = up(u * np.maximum(t, 0.0))
  r1 = up(expm1_up(ut) + 2 * u * rounding.EXP_ULPS * up(1 + expm1_up(ut)))
  r2 = up(r1 + gam + up(r1 * gam))                  # (1 + r1)(1 + gamma_n) - 1
  grow = up(1 + expm1_up(up(2 * delta)))
  shift = expm1_up(up(2 * delta))
  w_up = np.minimum(1.0, up(w_hi * grow))            # >= the softmax of the computed scores
  mixed = (w_up * r2).sum(axis=-1, keepdims=True)
  big_r = np.minimum(up(mixed + iv.sum_error(mixed, n)), r2.max(axis=-1, keepdims=True))
  denom = iv.down(np.where(big_r < 1, 1 - big_r, 1.0))
  rho = np.where(big_r < 1, up(up(r1 + c_u + up(r1 * c_u) + big_r) / denom), np.inf)
  out = up(w_hi * shift + rho * w_up + 4 * n * model.tiny)
  return np.where(np.isnan(out), np.inf, np.minimum(out, cap))




def scale(fm: Model, c: float, d_s, m_s):
  """D of fl(c s^) (module docstring)."""
  c = abs(c)
  return up(c * d_s + fm.u * c * (m_s + d_s) + fm.tiny)


def scaled_scores(fm: Model, c: float, d_s, m_s, d_q, m_q, d_k, m_k):
  """D of the scaled scores wherever the runtime puts the scale (module docstring): the
  largest of c after the dot product, c on q before it, and fl(sqrt c) on q and on k."""
  after = scale(fm, c, d_s, m_s)
  a = abs(c)
  d_q1 = scale(fm, c, d_q, m_q)
  before = pairwise(fm, d_q1, up(a * m_q), d_k, m_k)
  r = up(math.sqrt(a) * WIDEN)
  rel = up(2 * fm.u + fm.u * fm.u)
  d_q2 = up(r * d_q + rel * r * (m_q + d_q) + fm.tiny)
  d_k2 = up(r * d_k + rel * r * (m_k + d_k) + fm.tiny)
  split = pairwise(fm, d_q2, up(r * m_q), d_k2, up(r * m_k))
  return np.maximum(after, np.maximum(before, split))


def gelu(fm: Model, form: str, d_x, m_x):
  """D of the computed GELU at the computed input (module docstring)."""
  u, tau = fm.u, fm.tiny
  a = up(m_x + d_x)
  if form == 'gelu':
    rel = up(2 * rounding.ERF_ULPS * u)
  else:
    rel = up(rounding.TANH_ULPS * u + 0.23 * fm.gamma(7))
  lead = up((1 + u) ** 2 * WIDEN)
  extra = 0.6 * u if form == 'gelu' else 0.0
  r = up(lead * (rel * a + extra) + (2 * u + u * u) * a + 2 * (a + 4) * tau)
  return up(iv.GELU_LIPSCHITZ * d_x + r)


def layer_norm_moments(fm: Model, a, wbox: iv.Interval, v_hi):
  """(D_mu, E_var) per token [..., 1]: |mu^ - mu| and |var^ - var| for the mean and the
  variance as a runtime computes them at the computed input w (|w_i| <= a_i, w in wbox,
  var(w) <= v_hi), the largest over the three algorithms of the module docstring."""
  u, tau = fm.u, fm.tiny
  width = a.shape[-1]
  a_m = a.max(axis=-1, keepdims=True)
  s1 = up(a.sum(axis=-1, keepdims=True) / width)
  s2 = up((a * a).sum(axis=-1, keepdims=True) / width)
  m_mu = up(np.maximum(np.abs(wbox.lo.sum(axis=-1, keepdims=True)),
                       np.abs(wbox.hi.sum(axis=-1, keepdims=True))) / width)
  m_mu = np.minimum(m_mu, s1)
  v = np.minimum(v_hi, s2)
  g1, g3 = fm.gamma(1), fm.gamma(3)
  c = fm.gamma(2 * width + 8)
  a_run = up(a_m * (1 + c))                            # >= every computed running mean
  under = (2 * width + 8) * tau
  d_sum = up(fm.gamma(width + 1) * s1 + under)
  d_wel = up(g1 * a_run * (width + 1) / 2 + g3 * (s1 + a_run) + under)
  d_mu = np.maximum(d_sum, d_wel)
  e_two = up(fm.gamma(width + 4) * (v + d_mu * d_mu) + d_mu * d_mu)
  e_one = up((1 + u) * (fm.gamma(width + 2) * s2 + (2 * m_mu + d_sum) * d_sum
                        + u * up(m_mu + d_sum) ** 2) + u * v)
  spread = up(m_mu + a_m)                              # >= |mu_D - mu_j|
  harmonic = up(1 + math.log(width)) if width > 1 else 1.0
  ca = up(c * a_m)
  e_wel = up(spread * (g1 * a_run * (width + 1) + 2 * g3 * (s1 + a_run))
             + g1 * a_run * (s1 + a_m) + g3 * 4 * a_run * a_run * harmonic / width + ca * ca
             + fm.gamma(width + 4) * (v + 2 * ca * (s1 + a_m) + ca * ca))
  e_var = up(np.maximum(e_two, np.maximum(e_one, e_wel)) + (8 * width + 16) * tau * (a_m + 1))
  return d_mu, e_var


def layer_norm(fm: Model, ln: network_dict.LayerNorm, z: iv.Interval, d_z):
  """D of the computed LayerNorm (module docstring), z [..., D]."""
  u, tau = fm.u, fm.tiny
  width = z.lo.shape[-1]
  gamma, beta, eps = np.abs(ln.gamma), np.abs(ln.beta), ln.eps
  a = up(z.mag() + d_z)
  wbox = iv.Interval(iv.down(z.lo - d_z), iv.up(z.hi + d_z))
  c_w = iv.centred(wbox)
  v_lo, v_hi = iv.variance_bounds(c_w.lo, c_w.hi, wbox.lo, wbox.hi)
  v_lo = v_lo[..., None]
  s_w = iv.down(np.sqrt(iv.down(v_lo + eps)))
  big_c = c_w.mag()
  prop = up(gamma * up(np.sqrt(up((d_z * d_z).sum(axis=-1, keepdims=True)) * WIDEN))
            / s_w)
  d_mu, e_var = layer_norm_moments(fm, a, wbox, v_hi[..., None])
  a_m = a.max(axis=-1, keepdims=True)
  e_c = up((1 + u) * d_mu + u * (1 + u) * (a + a_m + d_mu) + u * big_c + 2 * tau)
  rho_v = up(e_var / iv.down(v_lo + eps))
  ok = rho_v < 1
  safe = np.where(ok, rho_v, 0.0)
  hi_side = up(np.sqrt(up(1 + safe)) * up((1 + u) ** 2) * WIDEN - 1)
  lo_side = up(1 - iv.down(np.sqrt(iv.down(1 - safe)) * iv.down((1 - u) ** 2) / WIDEN))
  rho_s = np.where(ok, np.maximum(hi_side, lo_side), np.inf)
  ok = ok & (rho_s < 1)
  rho_s = np.where(ok, rho_s, 0.0)
  bound = iv.up(math.sqrt(width - 1)) if width > 1 else 0.0
  r_i = np.minimum(bound, up(big_c / s_w))
  u3 = up((1 + u) ** 3 * WIDEN)
  t_i = up(gamma * (up((e_c / s_w + r_i * rho_s) / iv.down(1 - rho_s)) * u3
                     + r_i * up(u3 - 1)))
  r = up((1 + u) * t_i + u * (gamma * r_i + beta) + 4 * tau)
  return np.where(ok, up(prop + r), np.inf)


#: The feed-forward's Jacobian form is used while r D^2 stays at most this (cost B n r D^2).
FF_JACOBIAN_SIZE = 2 ** 16


def ff_jacobian(fm: Model, params, pre: iv.Interval, z: iv.Interval, d_z, act, d_act,
                rho_z=None):
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
  keeps the cancellation of W_2 W_1 that |W_2| |W_1| D_z loses. Where ``split``, delta (its
  sides where the attention left them), rho and act's reduction at W_2 enter signed
  (``signed_reduction.ff_terms``). inf (unused: the caller takes the minimum) when
  r D^2 > FF_JACOBIAN_SIZE or the weights are not exact."""
  w_1, b_1, w_2, b_2 = params.w_1, params.b_1, params.w_2, params.b_2
  r, width = w_1.shape
  model = fm.model
  if r * width * width > FF_JACOBIAN_SIZE or not (model.weights_exact or
                                                  model.operand_rel == 0):
    return np.inf
  v = float_up(model.operand_rel)
  acc = float_up(model.kappa(width, 0))
  mz = up(z.mag() + d_z)
  if fm.split:
    rho = fm.rho(z.lo, z.hi, d_z) if rho_z is None else rho_z
  else:
    rho = up(v * mz + fm.tiny)
  delta = up(d_z + rho)
  s1 = up(mz + rho) @ np.abs(w_1).T + np.abs(b_1)
  local1 = up(acc * s1 + (width + 1) * fm.tiny * (mz.max(axis=-1, keepdims=True)
                                                   + np.abs(w_1).max() + 2))
  spread = up(delta @ np.abs(w_1).T + local1)
  p_lo = (iv.down(pre.lo - spread) > 0).astype(np.float64)          # theta_r = 1 surely
  p_hi = (iv.up(pre.hi + spread) > 0).astype(np.float64)            # theta_r may be > 0
  c = (w_2.T[:, :, None] * w_1[:, None, :]).reshape(r, -1)         # [r, D*D]: W_2[i,r] W_1[r,j]
  cp, cn = np.maximum(c, 0), np.minimum(c, 0)
  eye = np.eye(width).reshape(-1)
  a_lo = p_lo @ cp + p_hi @ cn                                      # W_2 [Theta] W_1
  a_hi = p_hi @ cp + p_lo @ cn
  slack = 2.0 ** -40 * (1 + p_hi @ np.abs(c))                      # the float sums' error
  j_mag = up(np.maximum(np.abs(eye + a_lo), np.abs(eye + a_hi)) + slack)
  a_mag = up(np.maximum(np.abs(a_lo), np.abs(a_hi)) + slack)
  shape = j_mag.shape[:-1] + (width, width)
  terms = r + 1
  r_act = fm.rho(act.lo, act.hi, d_act) if fm.split else 0.0      # act's own reduction
  sym = np.einsum('...ij,...j->...i', j_mag.reshape(shape), d_z)
  if fm.split:        # delta, r_z and r_act signed together (signed_reduction.ff_terms)
    prop = signed_reduction.ff_terms(
        model, eye, a_lo, a_hi, slack, (iv.down(z.lo - d_z), iv.up(z.hi + d_z)), rho,
        (iv.down(act.lo - d_act), iv.up(act.hi + d_act)), w_2, sym, fm.signs_of(d_z), up,
        iv.down, np)
  else:
    prop = up(sym + np.einsum('...ij,...j->...i', a_mag.reshape(shape), rho))
  own = up((act.mag() + d_act + r_act) @ np.abs(w_2).T)
  s2 = own + np.abs(b_2) + z.mag() + d_z
  a2 = (act.mag() + d_act + r_act).max(axis=-1, keepdims=True)
  local2 = up(fm.kappa_acc(terms) * s2 + (terms + 2) * fm.tiny * (
      a2 + float(np.abs(w_2).max()) + z.mag() + d_z + 2))
  return up(prop + local1 @ np.abs(w_2).T + local2)
