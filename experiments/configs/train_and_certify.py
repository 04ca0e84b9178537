r"""Config of experiments/train_and_certify.py: train small standard Transformers on a
target and return the smallest whose certificate d_p(f, fl(g)) <= epsilon holds
(``certify.trainer.train_and_certify``; its module doc states the search rule).

    python experiments/train_and_certify.py --output_dir=runs/tc
    python experiments/train_and_certify.py --config.target=random_bumps \
        --config.epsilon=0.1 --output_dir=runs/tc_bumps
    python experiments/train_and_certify.py --config.target=my_targets:square_mean \
        --config.lipschitz=2 --config.epsilon=0.1 --output_dir=runs/tc_mine

Fields (``--config.<field>=value``):

  target           a built-in target name (transformer_ua.targets.functions.BUILTIN_TARGETS),
                   or module:function, a callable [batch, n, d] -> [batch, n, d] (the
                   module on sys.path or in the working directory; ``cli.function_flag``)
  lipschitz        a callable target's L: |f(X)_ij - f(Y)_ij| <= L max|X - Y| (required
                   for one, unless jacobian and hessian are given; for a built-in, at
                   least its proved constant, or unset)
  jacobian         a callable target's J_f as module:function, X [B, n, d] -> [B, n, d,
                   n, d] (entry [b, j, k, l, m] = d f(X)_jk / d X_lm), with
  hessian          its H: |f(X) - f(c) - J_f(c)(X - c)| <= H/2 max|X - c|^2 entrywise
                   (second order; certify_network's jacobian= and hessian=)
  d, n             token width and number of tokens
  p                the exponent of d_p (>= 1; inf for the sup norm)
  epsilon          the d_p(f, fl(g)) to certify (> 0)
  arithmetic       what g is certified in: 'float64', 'float32', 'tf32', 'bfloat16' or
                   'exact' (a float32 kind rounds the trained weights to float32 first)
  max_minutes      the budget for training and certifying every candidate
  seed             candidate i of the ladder trains from seed + i (pool and init)
  shapes           the (depth, heads) pairs of the ladder; m = 1, D = d + heads
  architectures    what is tried (certify.stock_candidates.ARCHITECTURES): 'ladder' and
                   the stock blocks 'stock_post_relu', 'stock_post_gelu', 'stock_pre_relu',
                   'stock_pre_gelu' (D = 8, h = 2, LayerNorm, biases), e.g.
                   --config.architectures="('ladder','stock_post_relu')"
  max_width        the cap of the FF width r (r = 8, 16, ..., max_width)
  steps, lr        Adam steps per candidate and the initial rate (cosine decay); unset,
                   each candidate's recipe: the ladder 6000 steps at 1e-2, batch 2048; a
                   stock block 40000 steps at 3e-3, batch 256 (Candidate.RECIPE,
                   StockCandidate.RECIPE)
  batch, pool      minibatch size (unset: the recipe's), and uniform points in the pool
  sample_fraction  a candidate is certified only if its sampled d_p <= margin x epsilon;
                   the margin starts here and drops to sampled / total after a
                   certificate that misses epsilon (the overhead seen, learned)
  refine_within    refine only candidates whose total is <= this x epsilon
  refine_rounds    rounds of training near the certificate's worst boxes, each with
  refine_points    points drawn uniformly in boxes of half-width refine_radius around
  refine_radius    the worst box centres, and refine_steps more steps at lr / 10
  refine_steps
  certify_minutes  the most one certificate may take
"""

import ml_collections
from ml_collections import config_dict

from transformer_ua.certify import trainer


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.target = 'token_times_mean'
  c.lipschitz = config_dict.placeholder(float)
  c.jacobian = config_dict.placeholder(str)
  c.hessian = config_dict.placeholder(float)
  c.d = 1
  c.n = 3
  c.p = 2.0
  c.epsilon = 0.01
  c.arithmetic = 'float64'
  c.max_minutes = 20.0
  c.seed = 0
  c.shapes = trainer.SHAPES
  c.architectures = ('ladder',)
  c.max_width = 64
  # the training of one candidate and the refinement (trainer.train_and_certify's defaults)
  c.steps = config_dict.placeholder(int)      # unset: each candidate's own RECIPE
  c.lr = config_dict.placeholder(float)
  c.batch = config_dict.placeholder(int)
  c.pool = 65536
  c.sample_fraction = 0.5
  c.refine_within = 2.0
  c.refine_rounds = 2
  c.refine_points = 8192
  c.refine_radius = 1 / 32
  c.refine_steps = 2000
  c.certify_minutes = 5.0
  return c
