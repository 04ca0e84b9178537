r"""Fang et al. 2022, Section 5, target
f2(x) = x1^5 + 3 x2^4 + 2 x3^3 + 5 x3 x4 + 3 x5^2 + 2 x6 x7 x8 + 2 x9 (d = 10, q = 5).

Command (3 seeds x 4 runs: ATTENTION with the paper's n = 4368 tokens and the
theory's n_q = 2002, NN_width (4368 hidden units), NN_depth (6 hidden layers of 120)):

    python experiments/fang_regression.py --config=experiments/configs/fang_f2.py \
        --workdir=/tmp/fang_runs

Results: results/fang/fang_regression.md (every run's command and revision). What the
same parameters can reach on the same data (float64 least squares):
experiments/fang_optimum.py -> results/fang/fang_optimum_f2.json. Epoch cost:
benchmarks/fang_epoch_cost.py; the config needs no change on an accelerator.
"""

from transformer_ua.fang import regression_config


def get_config():
  c = regression_config.base_config()
  c.target = 'f2'
  c.sweep = ('attention:4368', 'attention:n_q', 'nn_width:4368', 'nn_depth')
  c.num_tokens = 4368
  c.depth_width = 120        # NN_depth hidden width (Table 3)
  c.epochs = 2000            # Section 5
  c.batch_size = 25000       # Section 5
  c.checkpoint_every = 50
  c.eval_every = 5           # test MSE every 5 epochs (train MSE every epoch)
  c.literal_check_points = 2  # the literal path costs ~n^3 per point: a few points
  # Speed only (losses equal up to float summation order; seed-0 runs of the table used
  # 'per_step' and grad_chunk 1000): one jit per epoch, gradient summed over chunks of
  # 250 rows (2-4x faster per epoch on the 2-core CPU, results/benchmarks/fang_epoch_cost.json).
  c.train_epoch = 'scan'
  c.grad_chunk = 250
  return c
