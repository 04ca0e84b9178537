r"""Fang et al. 2022, Section 5, target f1(x) = x1^2 + x2^2 (d = 2, q = 2).

Command (3 seeds x 4 runs: ATTENTION with the paper's n = 10 tokens and the theory's
n_q = 3, NN_width (10 hidden units), NN_depth (3 hidden layers of 4)):

    python experiments/fang_regression.py --config=experiments/configs/fang_f1.py \
        --workdir=/tmp/fang_runs

Results: results/fang/fang_regression.md (every run's command and revision).
"""

from transformer_ua.fang import regression_config


def get_config():
  return regression_config.base_config()
