r"""Config of experiments/certify_approximation.py: Theorems 2 and 3 as a certificate.

    python experiments/certify_approximation.py --output_dir=runs/certify_approximation
    python experiments/certify_approximation.py \
        --config=experiments/configs/certify_approximation.py:tiny      # seconds (tests)
    python experiments/certify_approximation.py \
        --config=experiments/configs/certify_approximation.py:clamp     # the clamp part only
    (:lemma6 runs the Lemma 6 sweep alone, on a finer ladder of margins)

Every run certifies d_p(f, g) <= total for a standard Transformer g over the whole unit
cube (``yun.bounds.certificate``), and checks each certificate of the table and the ladder term
by term against an independent stratified Monte Carlo (``verify.certificate_mc``: g by the
mpmath oracle, cube interiors and ramp windows sampled separately, weighted by their
exact measures); a term whose whole 95% interval lies above its bound stops the run.

Parts (each can be switched off with an empty tuple):
  table      ``certificate.approximate`` per (target, epsilon): the smallest N whose
             certificate is <= epsilon, with its Monte Carlo estimate
  ladder     ``certify_lp`` at a ladder of resolutions N (the figure against N)
  lemma6     d_p(g_bar, g) certified as the ramp epsilon and lambda move, with and
             without the output clamp
  clamp      ``approximate`` with the clamp against the paper's unclamped network at the
             same target epsilon
"""

import ml_collections


def get_config(variant: str = 'default') -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.d = 1                     # token dimension
  c.n = 3                     # tokens
  c.p = 2.0                   # d_p exponent
  c.seed = 0                  # Monte Carlo points (numpy seed)
  c.workers = 2               # processes for certification and Monte Carlo (2 cores)
  # -- table: (target, positional, ties, epsilons). Theorem 2 targets with
  # ties='complete' (no bad set); Theorem 3 (positional=True) ignores ties.
  c.table = (('token_times_mean', False, 'complete', (0.5, 0.2, 0.1, 0.05)),  # 0.05: N >= 27
             ('attention_map', False, 'complete', (0.5, 0.2, 0.1)),
             ('prefix_mean', True, 'paper', (0.5, 0.2, 0.1, 0.05)))
  c.mc_points = 5000          # Monte Carlo points per stratum (interiors, windows) per row:
                              # 10^4 per row; >= certificate_mc.MIN_POINTS = 1000
  # A row whose resolution needs more layers than this is reported as out of reach (N
  # and depth from ``approximate``'s refusal), not run: certify and Monte Carlo time
  # grow like (cubes x layers) and (points x layers).
  c.max_layers = 2000
  # -- ladder: certify_lp at each N with the plan's lam, ramp, bits (tolerance, margin).
  c.ladder = (('paper', 'token_times_mean', False, 'paper', (2, 3, 4, 6, 8, 12)),
              ('complete', 'token_times_mean', False, 'complete', (2, 3, 4, 6, 8, 12)),
              ('theorem3', 'prefix_mean', True, 'paper', (2, 3, 4, 6)))
  c.ladder_tolerance = 1e-9
  c.ladder_margin_log2 = -20  # margin 2^-20 delta per side: windows of measure ~6e-6
  c.ladder_mc_points = 1000   # per stratum per point of the figure (the table: 5000)
  # -- Lemma 6: token_times_mean at these N and ties; the ramp follows the margin
  # (plan epsilon ~ margin delta); lam moves by 2^k around the plan's at a fixed margin.
  c.lemma6_target = 'token_times_mean'
  c.lemma6_resolutions = (4, 8)
  c.lemma6_ties = ('paper', 'complete')
  c.lemma6_margins_log2 = (-4, -8, -16, -32, -64)
  c.lemma6_lam_margin_log2 = -16
  c.lemma6_lam_shifts_log2 = (-12, -6, 0, 4)
  c.lemma6_tolerance = 1e-9
  # -- clamp: approximate(clamp=True) against clamp=False at the same epsilon; the
  # unclamped margin shrinks by 2^-margin_step until certified, or below 2^-max_log2 or
  # below certificate.MIN_MARGIN = 2^-28 (the smallest margin arb certifies).
  c.clamp_target = 'token_times_mean'   # '' skips the clamp part
  c.clamp_epsilon = 0.5
  c.clamp_margin_step_log2 = 8
  c.clamp_margin_max_log2 = 160
  c.clamp_run_unclamped_search = True   # also approximate(clamp=False) (4 resolutions)
  if variant == 'tiny':       # seconds: the tests run this
    c.table = (('token_times_mean', False, 'complete', (0.7,)),)
    c.mc_points = 1000        # the smallest the Monte Carlo accepts, per stratum
    c.max_layers = 60
    c.ladder = (('paper', 'token_times_mean', False, 'paper', (2, 3)),
                ('theorem3', 'prefix_mean', True, 'paper', (2,)))
    c.ladder_mc_points = 1000
    c.lemma6_resolutions = (2,)
    c.lemma6_ties = ('paper',)
    c.lemma6_margins_log2 = (-4, -8)
    c.lemma6_lam_shifts_log2 = (-4, 0)
    c.clamp_epsilon = 0.7
    c.clamp_margin_step_log2 = 16
    c.clamp_margin_max_log2 = 64
    c.clamp_run_unclamped_search = False
    c.workers = 1
  elif variant == 'lemma6':   # the Lemma 6 sweep alone, on a finer ladder of margins
    c.table, c.ladder = (), ()
    c.lemma6_margins_log2 = (-4, -8, -12, -16, -20, -24, -28, -32, -48)
    c.clamp_target = ''
  elif variant == 'clamp':    # the clamp comparison alone
    c.table, c.ladder, c.lemma6_resolutions = (), (), ()
    c.clamp_margin_step_log2 = 16
    c.clamp_margin_max_log2 = 128
  elif variant != 'default':
    raise ValueError(f"unknown config variant {variant!r}; allowed: 'default', 'tiny', "
                     "'lemma6', 'clamp'.")
  return c
