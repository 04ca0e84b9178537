r"""Default config of experiments/approximate.py (the README's main job).

    python experiments/approximate.py                      # these defaults (time: the record)
    python experiments/approximate.py --config.target=prefix_mean --config.positional=True
    python experiments/approximate.py --config=experiments/configs/approximate.py:ladder

Theorem 2 on a permutation-equivariant target, d = 1, n = 3: first the certificate (a
standard Transformer g with a proved d_p(f, g) <= certify_epsilon, and the certified
d_p(f, g) of the paper's network, of its clamped version and of ties='complete' at the
main resolution), then the float64 realization with its sampled error decomposition, a
ladder of resolutions for the delta^(d/p) rate, and sweeps over lambda and epsilon. The ``ladder`` variant runs every built-in target
over a longer ladder (results/yun/approximation/ladder/approximate.md) and the precision map.
"""

import ml_collections


def get_config(variant: str = 'default') -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  # Target: a built-in name (transformer_ua.targets.functions.BUILTIN_TARGETS).
  c.target = 'token_times_mean'
  c.positional = False        # False: Theorem 2 (equivariant f); True: Theorem 3 (with E)
  c.d = 1                     # embedding dimension
  c.n = 3                     # tokens
  c.resolution = 4            # N = 1/delta of the main configuration (4, 8, 16, ...)
  c.p = 2.0                   # d_p exponent (>= 1)
  # The certificate: the headline is yun.approximate(target, certify_epsilon,
  # arithmetic=certify_arithmetic), the construction with the fewest parameters whose
  # certificate d_p(f, g) <= certify_epsilon holds for g as it runs (yun.search; the
  # record says which); then certify_lp at the main resolution for the paper's
  # network, the network with the output clamp and (Theorem 2) ties='complete'.
  c.certify_epsilon = 0.05    # d_p(f, g) to certify (> 0)
  # The g the headline certifies: 'float64' (the network as JAX / onnxruntime run it in
  # double precision; its ONNX file is written beside the report), 'float32' or 'exact'.
  c.certify_arithmetic = 'float64'
  c.certify_margin = 2.0 ** -20  # cube interiors shrunk by this x delta per side
  c.certify_tolerance = 1e-9  # planned max |g - g_bar| on the interiors
  c.samples = 10000           # Monte Carlo samples for every d_p
  c.seed = 0
  # The float network: the paper's g_bar at the main resolution realized in float64
  # (sampled, not certified). Defaults: float64 at its best at N = 4 -- lam past what the
  # softmax needs, ramps narrow enough for small windows yet wide enough that rounding
  # (amplified by their 1/epsilon slopes) stays within the interior tolerance (the
  # epsilon sweep shows both sides), and the output clamp; the run prints the same g
  # without the clamp (as the paper builds it) next to it as the lesson.
  c.lam = 1e4                 # softmax scale
  c.epsilon = 1e-3            # ReLU ramp width (min_epsilon <= epsilon < delta/4)
  c.clamp = True              # realize(clamp=True): g clamped to the range of g_bar
  c.dtype = 'float64'         # 'float64' or 'float32'
  # Resolution ladder (error vs delta, log-log, slope against d/p).
  c.ladder = (2, 4, 8, 16)
  # Theorem 2 targets: also run the ladder with ties='complete' (yun.stages.contextual_ties: no
  # bad set, d_p(f_bar, g_bar) = 0), side by side with the paper's construction.
  c.compare_ties = True
  # Sweeps at the main configuration (d_p(g_bar, g) and max error on cube interiors);
  # the ramps the resolution allows are swept (min_epsilon <= epsilon < delta: narrower
  # ones collapse in the dtype, wider ones overlap), the others skipped with a note.
  c.lam_sweep = (1e0, 1e2, 1e3, 1e4, 1e6)
  c.epsilon_sweep = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-8)
  c.sweep_samples = 4000
  # Extra targets for the ladder table and the precision map (empty: main target only).
  c.all_targets = False
  c.precision_map = False
  # Precision map: (d, n, N) x dtype, lambda ladder at each ``map_epsilons``.
  c.map_configs = ((1, 2, 2), (1, 2, 4), (1, 3, 4), (1, 3, 8), (2, 2, 2), (2, 2, 3),
                   (1, 2, 16), (1, 3, 16))
  c.map_lams = (1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e8, 1e12)
  c.map_epsilons = (1e-2, 1e-3)
  c.map_samples = 1024
  if variant == 'ladder':
    c.ladder = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24)
    c.all_targets = True
    c.precision_map = True
  elif variant != 'default':
    raise ValueError(f"unknown config variant {variant!r}; allowed: 'default', 'ladder'.")
  return c
