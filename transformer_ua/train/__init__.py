"""Training infrastructure shared by the experiments: checkpoints, metrics, provenance."""
