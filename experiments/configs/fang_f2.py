r"""Fang et al. 2022, Section 5, target
f2(x) = x1^5 + 3 x2^4 + 2 x3^3 + 5 x3 x4 + 3 x5^2 + 2 x6 x7 x8 + 2 x9 (d = 10, q = 5).

Command (3 seeds x 4 runs: ATTENTION with the paper's n = 4368 tokens and the
theory's n_q = 2002, NN_width (4368 hidden units), NN_depth (6 hidden layers of 120)):

    python experiments/fang_regression.py --config=experiments/configs/fang_f2.py \
        --workdir=/tmp/fang_runs

Result it gave: see results/fang_regression.md (section f2), filled in by the run.
"""

from experiments.configs import fang_f1


def get_config():
  c = fang_f1.get_config()
  c.target = 'f2'
  c.sweep = ('attention:4368', 'attention:n_q', 'nn_width:4368', 'nn_depth')
  c.num_tokens = 4368
  c.depth_width = 120        # NN_depth hidden width (Table 3)
  c.epochs = 2000            # Section 5
  c.batch_size = 25000       # Section 5
  c.checkpoint_every = 50
  c.eval_every = 5           # test MSE every 5 epochs (train MSE every epoch)
  c.literal_check_points = 2  # the literal path costs ~n^3 per point: a few points
  return c
