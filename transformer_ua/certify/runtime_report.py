r"""The runtime probe's report: what ``runtime_probe.check_runtime`` measured, and its verdict.

A ``RuntimeReport`` holds, in the storage format of an arithmetic (p significand bits,
u = 2^-p, tau the smallest normal), the largest errors the probe found (runtime_probe's
docstring, (a)-(d)):

    exp_ulps        max |exp^(t) - exp(t)| / ulp(exp t)   over t in [-T, 0], exp(t) >= tau
    exp_underflow   max |exp^(t) - exp(t)| / tau          where exp(t) < tau
    softmax_*       max |w_j - 1/n| / ulp(1/n) (equal scores); the fraction of the model's
                    bound used (random rows)
    matmul_ratios   max |y^ - y| / (kappa_m S + (m+1) tau (A+B+2))  per model m
    erf_ulps, tanh_ulps   max max(|f^ - f| - tau, 0) / (2 u |f|)

``faults(arithmetic)`` lists each premise of ``arithmetic``'s model that the runtime breaks
(exp_ulps <= rounding.EXP_ULPS, exp_underflow <= 1, softmax within SOFTMAX_ULPS and its
bound, operand bits >= the model's, matmul and accumulator ratios <= 1, a hardware model
matched on every entry, erf and tanh within ERF_ULPS, TANH_ULPS); ``ok_for`` turns them into
a ``Verdict`` and ``line()`` into the one line a certificate prints, measured maxima rounded
up to 3 digits.
"""

from __future__ import annotations

import dataclasses
import math

from transformer_ua import rounding

#: exp is probed on [-T, 0]: below -T its result rounds to 0 in the format.
EXP_RANGE = {'float64': 745.0, 'float32': 104.0}
#: The GELU inputs x whose erf and tanh arguments are probed: |x| <= GELU_X.
GELU_X = 10.0


@dataclasses.dataclass(frozen=True)
class Verdict:
  """Whether a certificate's arithmetic may be trusted on the probed runtime, and why;
  ``bool(verdict)`` is ``verdict.ok``, and ``ok, reason = verdict`` unpacks it."""

  ok: bool
  reason: str

  def __bool__(self) -> bool:
    return self.ok

  def __iter__(self):
    return iter((self.ok, self.reason))


def _up(x: float) -> str:
  """x rounded up to 3 significant digits (measured maxima print upward)."""
  if not math.isfinite(x):
    return str(x)
  if x <= 0:
    return '0'
  scale = 10.0 ** (math.floor(math.log10(x)) - 2)
  return f'{math.ceil(x / scale - 1e-9) * scale:.3g}'


@dataclasses.dataclass(frozen=True)
class RuntimeReport:
  """What ``check_runtime`` measured (runtime_probe's docstring, (a)-(c)), in ``dtype``.

  exp_ulps: largest error in ulp where exp(t) >= tau, at ``exp_worst_t``;
  exp_underflow: largest error in units of tau where exp(t) < tau; exp_flushes: a
  subnormal result came back 0; softmax_equal_ulps: largest |w - 1/n| / ulp(1/n);
  softmax_rows: the largest fraction of the random-row bound used; operand_bits: the
  explicit significand bits matmul operands keep; matmul_ratios: model name -> largest
  error / bound (*) on random operands; dtypes_seen: the dtypes results came back in;
  erf_ulps, tanh_ulps: largest error in ulp where |f(z)| >= tau (runtime_probe's (d)), at
  ``erf_worst_x``, ``tanh_worst_x``, None where not measured (``gelu_unmeasured`` says
  why); gelu_underflow: largest error of both in units of tau where |f(z)| < tau;
  gelu_samples: the arguments of each. The defaults are a report from before (d)."""

  runtime: str
  arithmetic: str
  dtype: str
  samples: int
  reference: str
  dtypes_seen: tuple
  exp_ulps: float
  exp_worst_t: float
  exp_underflow: float
  exp_flushes: bool
  softmax_equal_ulps: float
  softmax_rows: float
  operand_bits: int
  matmul_ratios: dict
  note: str = ''
  accumulator_ratios: dict = dataclasses.field(default_factory=dict)
  operand_rounding: str = 'none'
  hardware_match: dict = dataclasses.field(default_factory=dict)
  erf_ulps: float | None = None
  erf_worst_x: float = math.nan
  tanh_ulps: float | None = None
  tanh_worst_x: float = math.nan
  gelu_underflow: float = 0.0
  gelu_samples: int = 0
  gelu_unmeasured: str = 'erf and tanh not measured'

  def matmul_mode(self) -> str:
    """'IEEE binary64' | 'IEEE binary32' | 'TF32-like' | 'bfloat16-like' | 'operands to b bits'."""
    full = rounding.FORMATS[self.dtype].precision - 1
    if self.operand_bits >= full:
      return f'IEEE {rounding.FORMATS[self.dtype].name}'
    names = {10: 'TF32-like', 7: 'bfloat16-like'}
    return names.get(self.operand_bits, f'operands to {self.operand_bits} explicit bits')

  def faults(self, arithmetic: str, functions=('erf', 'tanh')) -> list:
    """Each way the runtime breaks the assumptions of ``arithmetic``, one phrase each; erf
    and tanh count where named in ``functions`` (a network without that GELU form does not
    assume them), and count only where measured."""
    if arithmetic not in rounding.MATMUL_MODELS:
      raise ValueError(f'arithmetic={arithmetic!r}; allowed: '
                       f'{", ".join(map(repr, rounding.MATMUL_MODELS))}.')
    if isinstance(functions, str) or not set(functions) <= {'erf', 'tanh'}:
      raise ValueError(f'functions={functions!r}; allowed: a tuple of \'erf\' and '
                       "'tanh' (the GELU forms' functions the network uses), or ().")
    model = rounding.MATMUL_MODELS[arithmetic]
    if model.dtype != self.dtype:
      return [f'measured in {self.dtype}, not {model.dtype}: run '
              f'check_runtime(arithmetic={arithmetic!r})']
    out = []
    other = [d for d in self.dtypes_seen if d != self.dtype]
    if other:
      out.append(f'{self.dtype} arrays came back as {", ".join(other)}'
                 + (' (JAX x64 off?)' if self.dtype == 'float64' else ''))
    if not self.exp_ulps <= rounding.EXP_ULPS:
      out.append(f'exp off by {_up(self.exp_ulps)} ulp at t = {self.exp_worst_t!r} (assumed '
                 f'<= {rounding.EXP_ULPS})')
    if not self.exp_underflow <= 1:
      out.append(f'exp below tau off by {_up(self.exp_underflow)} tau (assumed <= tau)')
    for name, ulps, x, assumed in (('erf', self.erf_ulps, self.erf_worst_x, rounding.ERF_ULPS),
                                   ('tanh', self.tanh_ulps, self.tanh_worst_x,
                                    rounding.TANH_ULPS)):
      if name in functions and ulps is not None and not ulps <= assumed:
        out.append(f'{name} off by {_up(ulps)} ulp at x = {x!r} (assumed <= {assumed})')
    if functions and not self.gelu_underflow <= 1:
      out.append(f'erf or tanh below tau off by {_up(self.gelu_underflow)} tau (assumed <= '
                 'tau)')
    if not self.softmax_equal_ulps <= rounding.SOFTMAX_ULPS:
      out.append(f'softmax of n equal scores off by {_up(self.softmax_equal_ulps)} ulp of 1/n '
                 f'(assumed <= {rounding.SOFTMAX_ULPS})')
    if not self.softmax_rows <= 1:
      out.append(f'softmax of random rows at {_up(self.softmax_rows)} times the bound of '
                 'its model')
    needed = model.operand_bits - 1
    if self.operand_bits < needed:
      out.append(f'matmul operands keep {self.operand_bits} explicit bits '
                 f'({self.matmul_mode()}), {arithmetic} needs {needed}')
    ratio = self.matmul_ratios[arithmetic]
    if not ratio <= 1:
      out.append(f'matmul error at {_up(ratio)} times the {arithmetic} bound on random '
                 'operands')
    worst = self.accumulator_ratios.get(arithmetic, 0.0)
    if not worst <= 1:
      out.append(f'accumulator sums at {_up(worst)} times the {arithmetic} bound of their '
                 '(exact) operands: the accumulator truncates, is shorter than the format, '
                 'or aligns with too few bits')
    if model.block:
      match = self.hardware_match.get(arithmetic, 0.0)
      if match < 1:
        out.append(f'matmuls differ from the {model.hardware} model on '
                   f'{_up(100 * (1 - match))}% of the probe entries (its bound covers that '
                   'accumulator only)')
    return out

  def ok_for(self, arithmetic: str, functions=('erf', 'tanh')) -> Verdict:
    """Verdict(ok, reason): ok iff no ``faults(arithmetic, functions)``."""
    faults = self.faults(arithmetic, functions)
    if faults:
      return Verdict(False, f'not ok for {arithmetic}: ' + '; '.join(faults))
    checked = [f for f in functions if getattr(self, f'{f}_ulps') is not None]
    return Verdict(True, f'ok for {arithmetic}: exp, softmax and matmuls within its model'
                   + (f', {" and ".join(checked)} within the assumed ulp' if checked else ''))

  def line(self) -> str:
    """One line: what was measured and the verdict for ``arithmetic``."""
    flush = ', flushes subnormals to 0' if self.exp_flushes else ''
    ratio = self.matmul_ratios[self.arithmetic]
    return (f'runtime probe [{self.runtime}; {self.dtype}]: exp <= {_up(self.exp_ulps)} ulp '
            f'(assumed {rounding.EXP_ULPS}) on {self.samples:,} args in '
            f'[-{EXP_RANGE[self.dtype]:g}, 0], below tau <= {_up(self.exp_underflow)} tau'
            f'{flush}; {self._gelu_text()}; softmax of n equal scores within '
            f'{_up(self.softmax_equal_ulps)} ulp of 1/n, random rows at {_up(self.softmax_rows)} of the bound; matmul '
            f'{self.matmul_mode()} ({self.operand_bits} operand bits kept, error at '
            f'{_up(ratio)} of the {self.arithmetic} bound, accumulator sums at '
            f'{_up(self.accumulator_ratios.get(self.arithmetic, 0.0))}; operand rounding '
            f'{self.operand_rounding}; hardware models matched: '
            f'{", ".join(f"{k} {_up(100 * v)}%" for k, v in self.hardware_match.items()) or "none"}'
            f'); reference {self.reference}; '
            f'{self.ok_for(self.arithmetic).reason}' + (f'; {self.note}' if self.note else ''))


  def _gelu_text(self) -> str:
    parts = [f'{name} <= {_up(ulps)} ulp (assumed {assumed})'
             for name, ulps, assumed in (('erf', self.erf_ulps, rounding.ERF_ULPS),
                                         ('tanh', self.tanh_ulps, rounding.TANH_ULPS))
             if ulps is not None]
    text = ''
    if parts:
      text = (f'{", ".join(parts)} on {self.gelu_samples:,} args each (GELU |x| <= '
              f'{GELU_X:g}, small, saturating), below tau <= {_up(self.gelu_underflow)} tau')
    if self.gelu_unmeasured:
      text += (', ' if text else '') + self.gelu_unmeasured
    return text
