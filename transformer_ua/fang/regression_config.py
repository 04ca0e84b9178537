"""The commented Section 5 training config shared by experiments/configs/fang_f*.py.

``base_config()`` is the f1 run of Fang et al. 2022, Section 5 (d = 2, q = 2); the f2
config overrides what differs.
"""

import ml_collections


def base_config():
  c = ml_collections.ConfigDict()
  c.target = 'f1'            # 'f1' | 'f2'
  # Runs of the sweep, 'model:num_tokens' ('n_q' = the theory's C(d-1+q, q)); for
  # nn_width num_tokens is the hidden width, nn_depth uses depth_width.
  c.sweep = ('attention:10', 'attention:n_q', 'nn_width:10', 'nn_depth')
  c.seeds = (0, 1, 2)        # model-init seeds (the paper reports one run; we run 3)
  c.data_seed = 0            # one data set for all runs, as in the paper
  # Filled per run by the binary from the sweep entry:
  c.model = 'attention'      # 'attention' | 'nn_width' | 'nn_depth'
  c.num_tokens = 10          # attention n / nn_width hidden units; 0 = n_q
  c.seed = 0
  c.depth_width = 4          # NN_depth hidden width (Table 2)
  # Optimization (Section 5): SGD, one-cycle lr 1e-4 -> 1e-3, batch 5000, 600 epochs.
  c.epochs = 600
  c.batch_size = 5000
  c.lr_init = 1e-4
  c.lr_peak = 1e-3
  c.pct_start = 0.3          # PyTorch OneCycleLR default (not stated in the paper)
  c.final_div_factor = 1e4   # PyTorch OneCycleLR default (not stated in the paper)
  c.momentum_max = 0.95      # PyTorch OneCycleLR cycles SGD momentum 0.95->0.85->0.95
  c.momentum_min = 0.85
  c.clip_norm = 1.0          # "gradient clipping" (max global norm not stated)
  c.dtype = 'float32'
  c.grad_chunk = 1000        # examples per scan chunk of the batch gradient (speed only)
  # Bookkeeping.
  c.eval_every = 1           # test MSE every epoch (Figure 3 curves)
  c.checkpoint_every = 100   # epochs between orbax checkpoints
  c.tensorboard = True
  c.literal_check_points = 1000  # test points checked literal == compact (float64)
  return c
