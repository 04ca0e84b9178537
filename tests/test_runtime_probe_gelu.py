"""certify.runtime_probe measures erf and tanh, GELU's two library functions (issue 69).

``rounding.ERF_ULPS`` and ``TANH_ULPS`` (4 each) are what the certifier's GELU deviation
assume: |f^ - f| <= 2 F u |f| + tau. The probe measures, against mpmath on the runtimes at
hand, max(|f^ - f| - tau, 0) / (2 u |f|); a planted NumPy runtime whose erf is multiplied by
(1 + 16u) (8 of those units) is refused; and what the probe reports is re-measured here at
its worst arguments, independently: mpmath at 200 bits and the quotient in Fractions.
"""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import mpmath
import numpy as np
import pytest

from transformer_ua import rounding
from transformer_ua.certify.runtime_probe import check_runtime
from transformer_ua.certify.runtimes import NumpyRuntime

SAMPLES = 20000


class ErfOff(NumpyRuntime):
  """erf times (1 + 16u): 8 units of 2u|erf|, everything else as NumpyRuntime."""

  name = 'erf off by 16u'

  def erf(self, x):
    u = float(rounding.FORMATS[x.dtype.name].u)
    return super().erf(x) * x.dtype.type(1 + 16 * u)


class TanhOnly(NumpyRuntime):
  """No erf method at all (a runtime need not have one)."""

  name = 'no erf'
  erf = None


def _ulps(value: float, exact, dtype: str) -> float:
  """max(|value - exact| - tau, 0) / (2 u |exact|) in Fractions, |exact| = man 2^e."""
  man, e = exact.man_exp                      # |exact| = man 2^e (mpmath keeps the sign apart)
  ref = (-1 if exact < 0 else 1) * Fraction(int(man)) * Fraction(2) ** int(e)
  fmt = rounding.FORMATS[dtype]
  excess = max(abs(Fraction(value) - ref) - fmt.tiny, Fraction(0))
  return float(excess / (2 * fmt.u * abs(ref)))


def _remeasure(runtime, function: str, x: float, dtype: str) -> float:
  y = float(np.asarray(getattr(runtime, function)(np.array([x], dtype)))[0])
  with mpmath.workprec(200):
    return _ulps(y, getattr(mpmath, function)(mpmath.mpf(x)), dtype)


@pytest.mark.parametrize('arithmetic', ['float32', 'float64'])
def test_numpy_erf_and_tanh_are_within_the_assumption(arithmetic):
  report = check_runtime('numpy', arithmetic=arithmetic, samples=SAMPLES)
  assert report.gelu_samples == 4000 and report.gelu_unmeasured == ''
  assert report.erf_ulps <= rounding.ERF_ULPS and report.tanh_ulps <= rounding.TANH_ULPS
  assert report.gelu_underflow <= 1 and report.ok_for(arithmetic), report.line()
  line = report.line()
  assert f'(assumed {rounding.ERF_ULPS})' in line and 'on 4,000 args each' in line
  assert 'erf and tanh within the assumed ulp' in line
  for function in ('erf', 'tanh'):           # the worst argument, re-measured independently
    x = getattr(report, f'{function}_worst_x')
    assert _remeasure(NumpyRuntime(), function, x, arithmetic) == pytest.approx(
        getattr(report, f'{function}_ulps'), rel=1e-9)


def test_jax_erf_and_tanh_are_measured_and_judged():
  """JAX float32: both within 4 ulp. JAX float64: erf within; tanh is measured (XLA's
  binary64 tanh was 6.9 ulp off near its saturation, z ~ -20, on jax 0.10.2 CPU) and refused
  exactly when above TANH_ULPS."""
  with jax.enable_x64(False):
    report = check_runtime('jax', arithmetic='float32', samples=SAMPLES)
  assert report.erf_ulps <= rounding.ERF_ULPS and report.tanh_ulps <= rounding.TANH_ULPS
  assert report.ok_for('float32'), report.line()
  with jax.enable_x64(True):
    report = check_runtime('jax', arithmetic='float64', samples=SAMPLES)
  assert report.erf_ulps <= rounding.ERF_ULPS and report.dtypes_seen == ('float64',)
  tanh_faults = [f for f in report.faults('float64') if f.startswith('tanh off by')]
  assert bool(tanh_faults) == (report.tanh_ulps > rounding.TANH_ULPS)
  assert report.ok_for('float64', functions=('erf',))


@pytest.mark.parametrize('arithmetic', ['float32', 'float64'])
def test_an_erf_off_by_16u_is_refused(arithmetic):
  report = check_runtime(ErfOff(), arithmetic=arithmetic, samples=SAMPLES)
  assert rounding.ERF_ULPS < report.erf_ulps <= 8 + 1      # libm erf is within 1 ulp
  faults = report.faults(arithmetic)
  assert len(faults) == 1 and faults[0].startswith('erf off by') and \
      f'(assumed <= {rounding.ERF_ULPS})' in faults[0]
  assert not report.ok_for(arithmetic) and 'erf off by' in report.line()
  assert report.ok_for(arithmetic, functions=('tanh',))     # a tanh-form network
  x = report.erf_worst_x
  assert _remeasure(ErfOff(), 'erf', x, arithmetic) == pytest.approx(report.erf_ulps, rel=1e-9)


def test_onnxruntime_float64_erf_is_not_measured_and_its_tanh_is():
  report = check_runtime('onnxruntime', arithmetic='float64', samples=SAMPLES)
  assert report.erf_ulps is None and report.tanh_ulps is not None
  assert report.gelu_unmeasured.startswith('erf not measured (onnxruntime')
  assert 'no float64 Erf kernel' in report.line()
  assert report.ok_for('float64', functions=('erf',))       # not measured: not refused
  tanh_faults = [f for f in report.faults('float64') if f.startswith('tanh off by')]
  assert bool(tanh_faults) == (report.tanh_ulps > rounding.TANH_ULPS)


def test_onnxruntime_float32_erf_is_measured():
  report = check_runtime('onnxruntime', arithmetic='float32', samples=SAMPLES)
  assert report.erf_ulps <= rounding.ERF_ULPS and report.tanh_ulps is not None
  assert report.ok_for('float32', functions=('erf',)), report.line()


def test_a_runtime_without_erf_is_reported_not_measured():
  report = check_runtime(TanhOnly(), arithmetic='float32', samples=SAMPLES)
  assert report.erf_ulps is None and report.tanh_ulps <= rounding.TANH_ULPS
  assert 'erf not measured (the runtime has no erf method)' in report.line()
  assert report.ok_for('float32')


def test_functions_must_name_erf_or_tanh():
  report = check_runtime('numpy', arithmetic='float32', samples=SAMPLES)
  with pytest.raises(ValueError, match="^functions='erf'; allowed") as err:
    report.faults('float32', functions='erf')
  assert '\n' not in str(err.value)
