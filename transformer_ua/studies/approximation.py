r"""The main job's study: compile a target into Transformers and measure every error term.

``run(c, outdir)`` (``c``: a config of experiments/configs/approximate.py, checked first by
``validate``; experiments/approximate.py is its binary). For the configured target (Yun et
al. 2020, Theorem 2, or Theorem 3 with ``positional``), three networks, each named once at
the top of the console and then by its tag:

    [certified]  the headline (``approximation_certificates.run_headline``):
                 ``yun.approximate`` finds the network with the fewest parameters whose
                 certificate d_p(f, g) <= ``certify_epsilon`` over the whole unit cube holds
                 in ``certify_arithmetic`` (float64 by default: g as runtimes execute it),
                 written beside the report as g.onnx (flat layout) with its onnxruntime
                 (and, where installed, PyTorch) check, and saved with its certificate as
                 g.npz;
    [paper]      the paper's g_bar at the main resolution N (``yun.build_approximator``,
                 its depth next to the paper's formulas) and its Lemma 6 realization with
                 exact weights, certified as built, with the output clamp and (Theorem 2)
                 with ties='complete', each bound explained in its line
                 (``approximation_certificates.run_paper_certified``);
    [float64]    [paper] realized in ``dtype`` at (lam, epsilon), with the output clamp by
                 default: the Monte Carlo decomposition d_p(f, f_bar), d_p(f_bar, g_bar),
                 d_p(g_bar, g), d_p(f, g) with confidence intervals and sample counts
                 (sampled, not certified; one PRECISION FAILURE line instead of the rows
                 with g when g does not represent g_bar on the cube interiors), and the
                 same g without the clamp next to it as the lesson.

Then a ladder of resolutions (error vs delta, log-log, the fitted slope of
d_p(f_bar, g_bar) against the theory's d/p and of d_p(f, f_bar) against 1; with
``compare_ties`` also ties='complete'), sweeps of lambda and epsilon over the ramp widths
the resolution allows (each row with its verdict and why), the contextual-mapping values
u^T g_c(L) of the whole grid, and (``precision_map``) for each (d, n, N) x dtype the
smallest lambda on a ladder with which g reproduces g_bar on cube interiors.

Every size is checked before anything is built or written (``validate``): a size no
network can have is refused with a ``ConfigError`` of one line naming the size and the
limit.

Writes ``approximate.json``, approximate.md and PNG figures (``reports.approximate``)
into ``outdir``.
"""

from __future__ import annotations

import math
import os
import time
import warnings

import numpy as np

from transformer_ua import construction, outputs, provenance
from transformer_ua import rounding
from transformer_ua.reports import approximate as report
from transformer_ua.studies import approximation_certificates
from transformer_ua.targets import distances
from transformer_ua.targets import functions as targets_lib
from transformer_ua.yun import approximator
from transformer_ua.yun.bounds import decomposition
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.realization import plan as yun_plan
from transformer_ua.yun.stages import contextual_positional
from transformer_ua.yun.variants import registry
from transformer_ua.yun.variants.paper import Paper


#: The files the main job writes into --output_dir.
OUTPUT_FILES = ('approximate.json', 'approximate.md', 'error_vs_delta.png',
                'error_vs_lambda_epsilon.png', 'contextual_mapping_values.png',
                approximation_certificates.ONNX_NAME, approximation_certificates.SAVED_NAME)


class ConfigError(ValueError):
  """A bad configuration value (reported as one line)."""


#: The float network is checked against g_bar on cube interiors kept this fraction of
#: delta off every cell edge (``decomposition.realization_error``'s margin).
INTERIOR_MARGIN = 0.25


def _largest(fits, start: int, stop: int) -> int | None:
  """The largest k in [start, stop) with fits(k), walking up from start (None: none)."""
  best = None
  for k in range(start, stop):
    if not fits(k):
      break
    best = k
  return best


def _float_limit(c) -> str:
  """Why no float ramp works at (d, n, N): the sizes that do."""
  delta = 1 / c.resolution

  def ok(d, n, N):
    try:
      return approximator.min_epsilon(Paper(Grid(d, n, N))) < INTERIOR_MARGIN / N
    except ValueError:
      return False
  n_max = _largest(lambda n: ok(c.d, n, c.resolution), 2, 64)
  N_max = _largest(lambda N: ok(c.d, c.n, N), 2, 4096)
  sizes = []
  if n_max:
    sizes.append(f'n <= {n_max} at d={c.d}, resolution={c.resolution}')
  if N_max:
    sizes.append(f'resolution <= {N_max} at d={c.d}, n={c.n}')
  return (f'a {c.dtype} network of d={c.d}, n={c.n}, resolution={c.resolution} cannot '
          f'exist: its largest contextual id t_r needs ramps epsilon >= '
          f'{approximator.min_epsilon(Paper(Grid(c.d, c.n, c.resolution))):.3g} '
          '(4 float64 ulps of t_r), '
          f'wider than the {INTERIOR_MARGIN:g} delta = {INTERIOR_MARGIN * delta:.3g} the cube '
          'interiors leave; allowed: ' + (' or '.join(sizes) if sizes else 'a smaller size')
          + ' (the certificate alone needs no floats: yun.approximate).')


def validate(c) -> None:
  """Every check before anything is built or written (ConfigError: one line)."""
  if c.target not in targets_lib.BUILTIN_TARGETS:
    raise ConfigError(f'config.target={c.target!r}; allowed: '
                      f'{sorted(targets_lib.BUILTIN_TARGETS)}.')
  try:
    distances.check_p(c.p)
  except ValueError as e:
    raise ConfigError(f'config.p: {e}') from None
  for name in ('lam', 'epsilon', 'certify_epsilon', 'certify_tolerance'):
    v = c[name]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
      raise ConfigError(f'config.{name}={v!r}; it must be a positive finite number.')
  try:
    yun_plan.check_margin(c.certify_margin)
  except ValueError as e:
    raise ConfigError(f'config.certify_margin: {e}') from None
  try:
    rounding.check_arithmetic(c.certify_arithmetic)
  except ValueError as e:
    raise ConfigError(f'config.certify_arithmetic: {e}') from None
  if c.dtype not in yun_plan.FLOAT_BITS:
    raise ConfigError(f'config.dtype={c.dtype!r}; allowed: {tuple(yun_plan.FLOAT_BITS)} '
                      "(the certified 'exact' path runs on its own when the float one fails).")
  if not isinstance(c.get('clamp', False), bool):
    raise ConfigError(f'config.clamp={c.clamp!r}; it must be True or False.')
  for name in ('samples', 'sweep_samples', 'map_samples'):
    if isinstance(c[name], bool) or not isinstance(c[name], int) or c[name] < 2:
      raise ConfigError(f'config.{name}={c[name]!r}; it must be an integer >= 2.')
  if not c.ladder or any(isinstance(v, bool) or not isinstance(v, int) or v < 2
                         for v in c.ladder):
    raise ConfigError(f'config.ladder={c.ladder!r}; it must list integer resolutions >= 2.')
  if not c.positional and not targets_lib.BUILTIN_TARGETS[c.target].permutation_equivariant:
    raise ConfigError(f'config.target={c.target!r} is not permutation equivariant, so '
                      'Theorem 2 (config.positional=False) does not apply; set '
                      '--config.positional=True (Theorem 3).')
  if not isinstance(c.get('compare_ties', False), bool):
    raise ConfigError(f'config.compare_ties={c.compare_ties!r}; it must be True or False.')
  positional = _positional_for(c.target, c.positional)
  # The sizes: every network the run builds (d, n, resolution, each ladder resolution).
  variants = {}
  for N in (c.resolution, *c.ladder):
    try:
      variant = variants[N] = registry.choose(c.d, c.n, N, positional=positional)
      if _fits(c.d, c.n, N, positional):
        approximator.check_size(variant)
    except ValueError as e:
      which = 'config' if N == c.resolution else f'config.ladder (N={N})'
      raise ConfigError(f'{which}: {e}') from None
  if not _fits(c.d, c.n, c.resolution, positional):
    raise ConfigError(f'config.resolution={c.resolution}: the positional grid N^(dn) = '
                      f'{c.resolution ** (c.d * c.n)} exceeds '
                      f'{contextual_positional.POSITIONAL_MAX_GRID} points (Theorem 3 needs all of '
                      'them); choose a smaller resolution or n.')
  # The float network (ties='paper'; the certificate realizes in exact arithmetic): its
  # ramps must span 4 float64 ulps of t_r and stay off the cube interiors.
  try:
    low = approximator.min_epsilon(variants[c.resolution])
  except ValueError as e:
    raise ConfigError(f'config.n={c.n}, config.resolution={c.resolution}: {e}') from None
  high = INTERIOR_MARGIN / c.resolution
  if low >= high:
    raise ConfigError(f'config.n={c.n}, config.resolution={c.resolution}: '
                      + _float_limit(c))
  for name in ('epsilon',):
    if c[name] < low:
      raise ConfigError(
          f'config.{name}={c[name]:g} is below what float64 resolves at resolution='
          f'{c.resolution} (4 ulps of its largest breakpoint t_r): '
          f'allowed: --config.{name} >= {low:.3g} and < {high:.3g} (the certificate is '
          'exact whatever the float ramps).')
    if c[name] >= high:
      raise ConfigError(
          f'config.{name}={c[name]:g} at resolution={c.resolution}: the ramps would reach '
          f'the cube interiors ({INTERIOR_MARGIN:g} delta = {high:.3g} off each cell edge); '
          f'allowed: --config.{name} >= {low:.3g} and < {high:.3g}.')


def _positional_for(name: str, default: bool) -> bool:
  """Theorem 3 for targets that are not permutation equivariant."""
  return default or not targets_lib.BUILTIN_TARGETS[name].permutation_equivariant


def _fits(d, n, N, positional) -> bool:
  """Theorem 3 needs the whole grid (``contextual_positional.POSITIONAL_MAX_GRID``)."""
  return not positional or N ** (d * n) <= contextual_positional.POSITIONAL_MAX_GRID


# Without a bad set g_bar equals f_bar on every cube; what the float64 evaluation still
# shows is the rounding of f's values (|f| <= 1 here): ~1e-17, far below this floor.
FLOAT_ROUNDING_FLOOR = 1e-12


def _fit_slope(deltas, errors):
  """Least-squares slope of log(error) vs log(delta) over the positive errors."""
  pts = [(math.log(a), math.log(b)) for a, b in zip(deltas, errors) if b > 0]
  if len(pts) < 2:
    return None
  x, y = np.array(pts).T
  return float(np.polyfit(x, y, 1)[0])


def run_ladder(name, c, positional, log, ties='paper'):
  rows = []
  for N in c.ladder:
    if not _fits(c.d, c.n, N, positional):
      log(f'  N={N}: skipped (the positional grid N^(dn) exceeds '
          f'{contextual_positional.POSITIONAL_MAX_GRID} points)')
      continue
    t0 = time.time()
    net = registry.build_approximator(name, d=c.d, n=c.n, resolution=N,
                                          positional=positional, ties=ties)
    build_s = time.time() - t0
    dec = decomposition.error_decomposition(net, p=c.p, samples=c.samples, seed=c.seed).as_dict()
    est = dec['estimates']
    row = {'resolution': N, 'delta': 1 / N, 'layers': net.depth(),
           'build_seconds': round(build_s, 2),
           'f|f_bar': est['f|f_bar'], 'f_bar|g_bar': est['f_bar|g_bar'],
           'f|g_bar': est['f|g_bar'], 'exact': dec.get('exact')}
    rows.append(row)
    exact = dec.get('exact') or {}
    log(f'  N={N:>3} layers={row["layers"]:>7} d_p(f,f_bar)={est["f|f_bar"]["value"]:.4g} '
        f'd_p(f_bar,g_bar)={est["f_bar|g_bar"]["value"]:.4g} '
        f'[exact {exact.get("dp_f_bar_g_bar", float("nan")):.4g}] '
        f'd_p(f,g_bar)={est["f|g_bar"]["value"]:.4g} ({build_s:.1f} s build)')
  deltas = [r['delta'] for r in rows]
  tail = len(rows) // 2  # the finer half of the ladder: closer to the asymptotic rate
  slopes, tail_slopes = {}, {}
  no_bad_set = positional or ties == 'complete'
  for key in ('f|f_bar', 'f_bar|g_bar', 'f|g_bar'):
    vals = [r[key]['value'] for r in rows]
    if key == 'f_bar|g_bar' and all(r['exact'] for r in rows):
      vals = [r['exact']['dp_f_bar_g_bar'] for r in rows]  # exact: no Monte Carlo noise
    if key == 'f_bar|g_bar' and no_bad_set and max(vals, default=0) <= FLOAT_ROUNDING_FLOOR:
      slopes[key] = tail_slopes[key] = None  # 0 up to float64 rounding: no rate to fit
      continue
    slopes[key] = _fit_slope(deltas, vals)
    tail_slopes[key] = _fit_slope(deltas[tail:], vals[tail:])
  return {'target': name, 'positional': positional, 'ties': ties, 'rows': rows,
          'slopes': slopes,
          'tail_slopes': tail_slopes, 'tail_resolutions': [r['resolution'] for r in rows[tail:]],
          'theory_slope_f_bar_g_bar': None if no_bad_set else c.d / c.p,
          'theory_slope_f_f_bar': 1.0}


def networks_intro(c, positional, log) -> None:
  """The three networks of the run, each named once; later lines refer to the tags."""
  thm = 'Theorem 3' if positional else 'Theorem 2'
  log('This run builds three networks; every line below names the one it is about:')
  log(f'  [certified] the network the headline certifies: yun.approximate picks the '
      f'construction with the fewest parameters whose proof of d_p(f, g) <= '
      f'{c.certify_epsilon:g} holds for g run in {c.certify_arithmetic} (bounds exact or in '
      'arb ball arithmetic, rounded up)')
  log(f"  [paper]     the paper's network at the main resolution N={c.resolution}: g_bar "
      f'({thm}) and its Lemma 6 realization g with exact weights, certified as built '
      'and with variants')
  log(f'  [{c.dtype}]   [paper] realized in {c.dtype} (lam={c.lam:g}, epsilon={c.epsilon:g}'
      f'{", output clamp" if c.clamp else ""}): sampled by Monte Carlo, not certified')
  log('Bounds are written "<=", samples "=" with their sample count.')


def _interior_tolerance(net) -> float:
  return yun_plan.REPRODUCE_RTOL * max(
      1.0, float(np.max(np.abs(net.values))) if net.values.size else 1.0)


def sweep_verdict(row, *, resolution: int, plan_lam: float, bits_needed: int,
                  dtype: str) -> str:
  """What a sweep row shows, with its cause: 'reproduces g_bar' (on the cube interiors,
  within the tolerance), or why not."""
  if row['reproduces']:
    windows = (row['window_share'] or 0) > decomposition.WINDOW_DOMINANCE
    return 'reproduces g_bar' + ('; d_p from the ramp windows' if windows else '')
  reasons = []
  if row['epsilon'] >= INTERIOR_MARGIN / resolution:
    reasons.append(f'ramps reach the cube interiors (epsilon >= {INTERIOR_MARGIN:g} delta)')
  if row['lam'] < plan_lam:
    reasons.append(f"lambda below the plan's {plan_lam:g} (softmax may be too soft)")
  if bits_needed > yun_plan.FLOAT_BITS[dtype]:
    reasons.append(f'the plan needs {bits_needed} bits here, {dtype} has '
                   f'{yun_plan.FLOAT_BITS[dtype]} (rounding, amplified by the 1/epsilon '
                   'ramps)')
  return 'off: ' + ('; '.join(reasons) if reasons else 'above the interior tolerance')


def run_sweeps(net, c, log):
  """d_p(g_bar, g) and max |g - g_bar| on cube interiors over lambda and epsilon, at the
  ramp widths the resolution allows ([min_epsilon, delta))."""
  out = {'lam': [], 'epsilon': [], 'skipped_epsilons': [], 'skipped_why': []}
  low = approximator.min_epsilon(net.variant)
  high = 1 / net.resolution  # Lemma 6's windows of neighbouring breakpoints would overlap
  tol = _interior_tolerance(net)
  planned = yun_plan.plan_realization(net, tolerance=tol, margin=INTERIOR_MARGIN)
  for key, values in (('lam', c.lam_sweep), ('epsilon', c.epsilon_sweep)):
    for v in values:
      lam, eps = (v, c.epsilon) if key == 'lam' else (c.lam, v)
      if not low <= eps < high:
        if eps not in out['skipped_epsilons']:
          out['skipped_epsilons'].append(eps)
          out['skipped_why'].append(
              f'{eps:g} < {low:.3g} (4 {c.dtype} ulps of t_r: the ramps would collapse)'
              if eps < low else
              f'{eps:g} >= delta = {high:g} (neighbouring ramp windows would overlap)')
        continue
      g = net.realize(lam=lam, epsilon=eps, dtype=c.dtype, clamp=c.clamp)
      rep = decomposition.realization_error(net, g, samples=c.map_samples, seed=c.seed)
      dec = decomposition.error_decomposition(net, g, p=c.p, samples=c.sweep_samples,
                                             seed=c.seed).as_dict()
      row = {'lam': lam, 'epsilon': eps, 'dp_g_bar_g': dec['estimates']['g_bar|g'],
             'max_interior_error': rep['max_abs_error'], 'reproduces': rep['reproduces'],
             'window_share': (dec.get('g_windows') or {}).get('share'),
             'off_samples': (dec.get('g_windows') or {}).get('off_samples')}
      row['verdict'] = sweep_verdict(row, resolution=net.resolution,
                                     plan_lam=float(planned.lam),
                                     bits_needed=planned.bits_for(eps, lam), dtype=c.dtype)
      out[key].append(row)
    fixed = f'epsilon={c.epsilon:g}' if key == 'lam' else f'lambda={c.lam:g}'
    name = 'lambda' if key == 'lam' else 'epsilon'
    log(f'  {name} sweep of [{c.dtype}] at {fixed}: d_p(g_bar, g) sampled on '
        f'{c.sweep_samples} uniform points (95% CI), max |g - g_bar| on {c.map_samples} '
        f'cube-interior points (tolerance {tol:g})')
    for r in out[key]:
      e = r['dp_g_bar_g']
      log(f'    {name}={r[key]:<7.0e} d_p(g_bar, g) = {e["value"]:<9.3g} '
          f'({r["off_samples"]} of {c.sweep_samples} samples off g_bar)  interiors '
          f'{r["max_interior_error"]:<9.3g} {r["verdict"]}')
  for why in out['skipped_why']:
    log(f'  epsilon={why}: skipped at N={net.resolution}')
  out['plan'] = {'lam': float(planned.lam), 'tolerance': tol}
  return out


def run_float(net, c, positional, log) -> dict:
  """The [float64] network: its sampled decomposition, its cube-interior check, and the
  lesson (the same ramps without the output clamp, as the paper builds g)."""
  g = net.realize(lam=c.lam, epsilon=c.epsilon, dtype=c.dtype, clamp=c.clamp)
  bc = g.block_counts()
  log(f'[{c.dtype}] lam={c.lam:g}, epsilon={c.epsilon:g}{", output clamp" if c.clamp else ""}: '
      f'{bc["blocks"]} blocks of T^(2,1,4) ({bc["attention_on"]} with attention on, '
      f'{bc["feedforward_on"]} with feed-forward on), {g.num_params()} weights')
  dec = decomposition.error_decomposition(net, g, p=c.p, samples=c.samples, seed=c.seed).as_dict()
  rep = decomposition.realization_error(net, g, samples=c.map_samples, seed=c.seed)
  dec['precision_failure'] = not dec.get('g_represents_g_bar', True)
  values_max = float(np.max(np.abs(net.values))) if net.values.size else 0.0
  t_r = float(net.g_bar.contextual.t_r)
  log(f'  error decomposition, p={c.p:g}, sampled on {c.samples} uniform points (95% CI), '
      'not certified:')
  ex = dec.get('exact')
  for key, e in dec['estimates'].items():
    a, b = key.split('|')
    if 'g' in (a, b) and dec['precision_failure']:
      continue  # not a measurement of Lemma 6: see the PRECISION FAILURE line below
    why = ''
    if key == 'f_bar|g_bar' and ex and not positional:
      why = (f'  exact over the whole grid: {ex["dp_f_bar_g_bar"]:.5f}; the bad set (inputs '
             f'with repeated columns, measure {ex["bad_set_measure"]:.4f}) where g_bar is 0')
    elif key == 'f_bar|g_bar' and ex:
      why = f'  exact over the whole grid: {ex["dp_f_bar_g_bar"]:.5g}'
    elif key == 'g_bar|g':
      why = (f'  {c.dtype} at its best: g reproduces g_bar on the cube interiors and the '
             f'{"clamped " if c.clamp else ""}ramp windows (width {c.epsilon:g}) carry the '
             'rest; narrower ramps shrink the windows, but their 1/epsilon slopes amplify '
             'the rounding until the interiors are off (the epsilon sweep below)'
             if rep['reproduces'] else '  see the cube-interior line')
    elif key == 'f|g_bar' and ex and not positional:
      why = '  mostly d_p(f_bar, g_bar): the bad set'
    log(f'    d_p({a:>5}, {b:<5}) = {e["value"]:.5f}  [{e["ci_low"]:.5f}, {e["ci_high"]:.5f}]'
        + why)
  if dec['precision_failure']:
    log(f'  PRECISION FAILURE, not a measurement (t_r = {t_r:.3g}, lam={c.lam:g}, '
        f'epsilon={c.epsilon:g}, sampled d_p(g_bar, g) = '
        f'{dec["estimates"]["g_bar|g"]["value"]:.3g} for values |A| <= {values_max:.3g}): '
        f'{dec.get("g_note")} The [paper] certified rows above hold instead.')
  log(f'  cube interiors ({rep["samples"]} points, {rep["margin"]:g} delta off each edge): '
      f'max |g - g_bar| = {rep["max_abs_error"]:.3g} '
      + (f'<= {rep["tolerance"]:g}: g reproduces g_bar there' if rep['reproduces'] else
         f'> {rep["tolerance"]:g}: g does not reproduce g_bar there'))
  lesson = None
  if c.clamp:
    bare = net.realize(lam=c.lam, epsilon=c.epsilon, dtype=c.dtype, clamp=False)
    bd = decomposition.error_decomposition(net, bare, p=c.p, samples=c.samples,
                                          seed=c.seed).as_dict()
    e, w = bd['estimates']['g_bar|g'], bd.get('g_windows') or {}
    lesson = {'dp_g_bar_g': e, 'windows': w}
    edge = w.get('max_edge_distance')
    log(f'  the lesson, the same {c.dtype} g without the output clamp (as the paper builds '
        f'it): d_p(g_bar, g) = {e["value"]:.4g} [{e["ci_low"]:.4g}, {e["ci_high"]:.4g}] '
        f'({c.samples} samples); on a second draw of {w.get("samples")} samples, '
        f'{w.get("off_samples")} miss g_bar, each within {edge or 0:.2g} of a cell edge (the '
        f'ramp windows), where g reaches {w.get("max_off", float("nan")):.3g}: the size of '
        f'the contextual ids (t_r = {t_r:.3g}), where |g_bar| <= {values_max:.3g}')
  return {'g': g, 'decomposition': dec, 'realization': rep, 'lesson': lesson}


def run_precision_map(c, log):
  rows = []
  for (d, n, N) in c.map_configs:
    net = registry.build_approximator('token_times_mean', d=d, n=n, resolution=N)
    for dtype in yun_plan.FLOAT_BITS:
      best = None
      tried = []
      for eps in c.map_epsilons:
        for lam in c.map_lams:
          rep = decomposition.realization_error(
              net, net.realize(lam=lam, epsilon=eps, dtype=dtype), samples=c.map_samples,
              seed=c.seed)
          tried.append({'lam': lam, 'epsilon': eps, 'max_interior_error':
                        rep['max_abs_error'], 'reproduces': rep['reproduces']})
          if rep['reproduces'] and (best is None or lam < best['lam']):
            best = {'lam': lam, 'epsilon': eps}
      max_id = float(net.g_bar.contextual.t_r)
      rows.append({'d': d, 'n': n, 'resolution': N, 'dtype': dtype,
                   'works': best is not None, 'smallest_lam': best and best['lam'],
                   'epsilon': best and best['epsilon'],
                   'best_error': min(t['max_interior_error'] for t in tried),
                   't_r': max_id, 'layers': net.depth(),
                   'tried': tried})
      log(f'  d={d} n={n} N={N:>2} {dtype}: '
          + (f'works from lam={best["lam"]:.0e} (eps={best["epsilon"]:.0e})' if best else
             f'fails on the whole ladder (best max error {rows[-1]["best_error"]:.3g}; '
             f't_r = {max_id:.3g})'))
  return rows


def run_ladders(c, log) -> list:
  """``run_ladder`` for the configured target (every built-in one with ``all_targets``),
  each under the theorem that applies to it (and with ``compare_ties`` also
  ties='complete'), with its fitted slopes in the log."""
  targets = ([c.target] + [t for t in sorted(targets_lib.BUILTIN_TARGETS) if t != c.target]
             if c.all_targets else [c.target])
  ladders = []
  for name in targets:
    pos = _positional_for(name, c.positional)
    why = (': not permutation equivariant, so Theorem 2 does not apply'
           if pos and not c.positional else '')
    log(f' {name} ({"Theorem 3" if pos else "Theorem 2"}{why})')
    for ties in ('paper', 'complete') if c.get('compare_ties') and not pos else ('paper',):
      if ties == 'complete':
        log(f' {name} (Theorem 2, ties=complete: no bad set)')
      ladders.append(run_ladder(name, c, pos, log, ties))
      sl = ladders[-1]['slopes']
      ts = ladders[-1]['tail_slopes']
      fmt = lambda v: 'n/a' if v is None else f'{v:.3f}'  # noqa: E731
      log(f'  fitted log-log slopes (all / finer half): d_p(f,f_bar) {fmt(sl["f|f_bar"])} / '
          f'{fmt(ts["f|f_bar"])} (theory 1 for Lipschitz f); d_p(f_bar,g_bar) '
          f'{fmt(sl["f_bar|g_bar"])} / {fmt(ts["f_bar|g_bar"])} '
          + ('(0 exactly: no bad set)' if pos or ties == 'complete' else
             f'(theory d/p = {c.d / c.p:g})')
          + f'; d_p(f,g_bar) {fmt(sl["f|g_bar"])} / {fmt(ts["f|g_bar"])}')
  return ladders


def run(c, outdir, log=print, workers=None, command: str | None = None) -> dict:
  """The main job (module doc) into ``outdir``; ``command`` is recorded as its provenance
  (default: this process's). Float realizations are labelled in the log and the report
  (PRECISION FAILURE, window notes), so their FloatRealizationWarnings are not repeated
  on stderr."""
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', yun_plan.FloatRealizationWarning)
    return _run(c, outdir, log, workers, command)


def _run(c, outdir, log, workers, command) -> dict:
  validate(c)   # everything is checked before the directory is made
  os.makedirs(outdir, exist_ok=True)
  t_start = time.time()
  prov = provenance.record(command)
  positional = _positional_for(c.target, c.positional)
  networks_intro(c, positional, log)
  log('')
  net = registry.build_approximator(c.target, d=c.d, n=c.n, resolution=c.resolution,
                                        positional=positional)
  log(f'[paper] {net.describe()}')
  dep = {'built': {**construction.stage_counts(net.layer_counts()), 'total': net.depth()},
         'formula': {**net.paper_layer_counts(),
                     'total': sum(net.paper_layer_counts().values())},
         'by_kind': construction.kind_counts(net.layer_counts())}
  log(f'  {"layers of g_bar":<16}{"built":>8}{"paper formula":>16}')
  for key in ('quantization', 'contextual', 'value', 'total'):
    log(f'  {key:<16}{dep["built"][key]:>8}{dep["formula"][key]:>16}')
  log('')
  certified = approximation_certificates.run_certificates(c, positional, log, outdir, workers)
  log('')
  fl = run_float(net, c, positional, log)
  g, dec, rep = fl['g'], fl['decomposition'], fl['realization']
  log(f'\nresolution ladder of g_bar (no realization): d_p sampled on {c.samples} uniform '
      'points per N; [exact] over the whole grid')
  ladders = run_ladders(c, log)
  log(f'\nlambda / epsilon sweeps of [{c.dtype}] (verdicts on the cube interiors; "off" '
      'says why)')
  sweeps = run_sweeps(net, c, log)
  pmap = None
  if c.precision_map:
    log('\nprecision map (token_times_mean)')
    pmap = run_precision_map(c, log)
  result = {'config': c.to_dict(), 'provenance': prov, 'positional': positional,
            'depth': dep, 'realized_depth': g.block_counts(), 'decomposition': dec,
            'realization': rep, 'lesson': fl['lesson'], 'certified': certified,
            'ladders': ladders, 'sweeps': sweeps,
            'precision_map': pmap}
  result['figures'] = report.make_figures(result, net, outdir)
  result['seconds'] = round(time.time() - t_start, 1)
  path = os.path.join(outdir, 'approximate.json')
  outputs.atomic_json(path, result, indent=1,
                      default=lambda o: o.tolist() if hasattr(o, 'tolist') else str(o))
  report.write_report(result, os.path.join(outdir, 'approximate.md'))
  approximation_certificates.publish_pending(outdir)
  log(f'\nwrote {path}, approximate.md and {len(result["figures"])} figures in '
      f'{result["seconds"]} s')
  return result
