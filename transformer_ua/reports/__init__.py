"""Markdown and figure writers shared by the binaries: ``approximate`` (the main job)
and ``fang_regression`` (Fang et al. Section 5 sweeps)."""
