"""transformer_ua.reports.fang_baselines_tables: the Section 5 baselines record's numbers."""

import math

import pytest

from transformer_ua.reports import fang_baselines_tables as report


def test_report_statistics():
  s = report.stats([1.0, 2.0, 3.0])
  assert (s['mean'], s['std'], s['min'], s['max'], s['n']) == (2.0, 1.0, 1.0, 3.0, 3)
  assert report.stats([]) is None
  r = report.ratio([10.0, 20.0], [1.0, 2.0])
  assert (r['ratio'], r['low'], r['high']) == pytest.approx((10.0, 5.0, 20.0))
  assert report.fmt(math.inf) == 'diverged'
