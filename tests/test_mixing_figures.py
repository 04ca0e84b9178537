"""transformer_ua.reports.mixing_figures: the Appendix H sweep report's figures."""

import numpy as np
import pytest

from transformer_ua.reports import mixing_figures


def test_curve_band_keeps_the_steps_only_some_seeds_reached():
  steps, mean, std = mixing_figures._curve_band({0: [(100, 5.0), (200, 7.0), (300, 9.0)],
                                               1: [(100, 6.0), (200, 9.0)]})
  assert steps.tolist() == [100, 200, 300]
  assert mean.tolist() == [5.5, 8.0, 9.0]
  assert std == pytest.approx([np.sqrt(0.5), np.sqrt(2.0), 0.0])
