"""Markdown and figure writers of the binaries: ``approximate`` (the main job),
``fang_regression`` (Fang et al. Section 5 sweeps), ``mixing`` and ``mixing_plateau``
(Yun et al. Appendix H sweeps, experiments/mixing_sweep.py)."""
