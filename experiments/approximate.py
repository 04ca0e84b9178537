r"""The main job: compile a target into Transformers and measure every error term.

    python experiments/approximate.py [--config=experiments/configs/approximate.py[:ladder]]
        [--config.target=...] [--output_dir=runs/approximate]
        [--dask_scheduler=tcp://host:8786] [--state_dir=DIR]

For the configured target (Yun et al. 2020, Theorem 2, or Theorem 3 with
``positional``):

1. builds g_bar (``yun.build_approximator``) and prints its depth next to the paper's
   formulas;
2. the headline, certified (``yun.certificate``): a standard Transformer g with exact
   params and a proof of d_p(f, g) <= ``certify_epsilon`` over the whole unit cube
   (``yun.approximate``), and the certified d_p(f, g) at the main resolution of the
   paper's network, of the network with the output clamp, and of ties='complete';
3. realizes it in ``dtype`` (float64: sampled, not certified) with (lam, epsilon) and
   prints the Monte Carlo decomposition d_p(f, f_bar), d_p(f_bar, g_bar), d_p(g_bar, g),
   d_p(f, g) with confidence intervals (and the exact bad-set terms), labelled: when the
   float g does not represent g_bar on cube interiors (``g_represents_g_bar`` False),
   the rows with g are replaced by one PRECISION FAILURE line; when the ramp windows
   dominate the sampled d_p(g_bar, g), a note says so (``window_diagnosis``);
3. runs a ladder of resolutions: error vs delta on log-log axes, the fitted slope of
   d_p(f_bar, g_bar) against the theory's d/p (Theorem 2) and of d_p(f, f_bar)
   against 1 (a Lipschitz f); with ``compare_ties`` also the ties='complete' ladder;
4. sweeps lambda and epsilon at the main configuration;
5. draws the contextual-mapping values u^T g_c(L) of the whole grid;
6. (``precision_map``) for each (d, n, N) x dtype, the smallest lambda on a ladder with
   which g reproduces g_bar on cube interiors, or why none does.

Writes ``approximate.json`` and PNG figures to --output_dir. Bad flags end with a
one-line error naming what is allowed.
"""

from __future__ import annotations

import math
import os
import sys
import time
import warnings

from absl import app, flags
import numpy as np

from transformer_ua import cli, construction, executor, outputs, provenance
from transformer_ua.reports import approximate as report
from transformer_ua.yun import (approximator, certificate, contextual, distances,
                                targets as targets_lib)
from transformer_ua.yun import plan as yun_plan


def _define_flags():
  """Flags are defined only when run as a binary, so tests can import ``run``."""
  config = cli.define_config_file(
      'config', os.path.join(os.path.dirname(__file__), 'configs', 'approximate.py'),
      'ml_collections config file (append :ladder for the long variant).')
  output_dir = flags.DEFINE_string('output_dir', 'runs/approximate',
                                   'directory for approximate.json and the PNG figures.')
  cli.define_overwrite()
  executor.define_flags()
  return config, output_dir


#: The files the main job writes into --output_dir.
OUTPUT_FILES = ('approximate.json', 'approximate.md', 'error_vs_delta.png',
                'error_vs_lambda_epsilon.png', 'contextual_mapping_values.png')



class ConfigError(ValueError):
  """A bad configuration value (reported as one line)."""


def _validate(c) -> None:
  if c.target not in targets_lib.BUILTIN_TARGETS:
    raise ConfigError(f'config.target={c.target!r}; allowed: '
                      f'{sorted(targets_lib.BUILTIN_TARGETS)}.')
  try:
    distances.check_p(c.p)
  except ValueError as e:
    raise ConfigError(f'config.p: {e}') from None
  for name in ('lam', 'epsilon', 'interior_epsilon', 'certify_epsilon', 'certify_tolerance'):
    v = c[name]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
      raise ConfigError(f'config.{name}={v!r}; it must be a positive finite number.')
  try:
    yun_plan.check_margin(c.certify_margin)
  except ValueError as e:
    raise ConfigError(f'config.certify_margin: {e}') from None
  if c.dtype not in approximator.FLOAT_BITS:
    raise ConfigError(f'config.dtype={c.dtype!r}; allowed: {tuple(approximator.FLOAT_BITS)} '
                      "(the certified 'exact' path runs on its own when the float one fails).")
  for name in ('samples', 'sweep_samples', 'map_samples'):
    if not isinstance(c[name], int) or c[name] < 2:
      raise ConfigError(f'config.{name}={c[name]!r}; it must be an integer >= 2.')
  if not c.ladder or any(not isinstance(v, int) or v < 2 for v in c.ladder):
    raise ConfigError(f'config.ladder={c.ladder!r}; it must list integer resolutions >= 2.')
  if not c.positional and not targets_lib.BUILTIN_TARGETS[c.target].permutation_equivariant:
    raise ConfigError(f'config.target={c.target!r} is not permutation equivariant, so '
                      'Theorem 2 (config.positional=False) does not apply; set '
                      '--config.positional=True (Theorem 3).')
  if not isinstance(c.get('compare_ties', False), bool):
    raise ConfigError(f'config.compare_ties={c.compare_ties!r}; it must be True or False.')
  if _fits(c.d, c.n, c.resolution, c.positional):  # else build_approximator refuses it
    # The float network is ties='paper' (compare_ties only adds ladders of g_bar, and the
    # certificate realizes in exact arithmetic). The sweeps skip what the dtype cannot
    # resolve; the main ramps must be resolvable.
    low = approximator.min_epsilon(c.d, c.n, c.resolution, c.positional)
    for name in ('epsilon', 'interior_epsilon'):
      if c[name] < low:
        raise ConfigError(
            f'config.{name}={c[name]:g} is below what float64 resolves at resolution='
            f'{c.resolution} (4 ulps of its largest breakpoint t_r): '
            f'allowed: --config.{name} >= {low:.3g} (the certificate above it is exact '
            'whatever the float ramps).')


def _positional_for(name: str, default: bool) -> bool:
  """Theorem 3 for targets that are not permutation equivariant."""
  return default or not targets_lib.BUILTIN_TARGETS[name].permutation_equivariant


def _fits(d, n, N, positional) -> bool:
  """Theorem 3 needs the whole grid (``contextual.POSITIONAL_MAX_GRID``)."""
  return not positional or N ** (d * n) <= contextual.POSITIONAL_MAX_GRID


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
          f'{contextual.POSITIONAL_MAX_GRID} points)')
      continue
    t0 = time.time()
    net = approximator.build_approximator(name, d=c.d, n=c.n, resolution=N,
                                          positional=positional, ties=ties)
    build_s = time.time() - t0
    dec = approximator.error_decomposition(net, p=c.p, samples=c.samples, seed=c.seed).as_dict()
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


def _certify(net, c, clamp: bool, workers=None) -> tuple:
  """(g, Certificate) of net's exact realization at the planned lam, ramp and bits."""
  planned = yun_plan.plan_realization(net, tolerance=c.certify_tolerance,
                                      margin=c.certify_margin)
  g = net.realize(lam=planned.lam, epsilon=planned.epsilon, dtype='exact', clamp=clamp)
  return g, certificate.certify_lp(net, g, p=c.p, margin=c.certify_margin, workers=workers)


def _blocks(g) -> int:
  return sum(s.depth for s in g.segments)


def run_certificates(c, positional, log, workers=None) -> dict:
  """The headline (``yun.approximate`` at ``certify_epsilon``) and the certified d_p(f, g)
  at the main resolution: the paper's network, with the output clamp, ties='complete'."""
  t0 = time.time()
  found = certificate.approximate(c.target, c.certify_epsilon, d=c.d, n=c.n, p=c.p,
                                  positional=positional, workers=workers)
  cert, g = found.certificate, found.g
  head = {'epsilon': c.certify_epsilon, 'resolution': cert.resolution, 'blocks': _blocks(g),
          'weights': g.num_params(), 'certificate': cert.as_dict(),
          'attempts': list(found.attempts), 'seconds': round(time.time() - t0, 2)}
  t = cert.terms
  log(f'CERTIFIED: d_p(f, g) <= {cert.total:.4g} <= {c.certify_epsilon:g} (p={c.p:g}) over '
      f'[0,1]^(n x d) for a standard Transformer g: softmax attention, ReLU feed-forward, '
      f'{head["blocks"]} blocks of T^(2,1,4) with {head["weights"]} exact rational weights, '
      f'N={cert.resolution}, {"Theorem 3" if positional else "Theorem 2, ties=complete"}, '
      f'output clamp ({head["seconds"]:.1f} s)')
  log(f'  proof: d_p(f, f_bar) <= {t["f_fbar"]:.4g} (Lipschitz {cert.lipschitz:g}) + '
      f'd_p(f_bar, g_bar) <= {t["fbar_gbar"]:.3g} + d_p(g_bar, g) <= {t["gbar_g"]:.3g} '
      f'(interiors {100 * cert.interior_fraction:.6g}% of the volume, max |g - g_bar| <= '
      f'{cert.interior_sup:.3g}; windows {cert.window_measure:.3g}, sup <= '
      f'{cert.window_sup:.3g}; lam=2^{math.log2(cert.lam):.0f}, ramp '
      f'2^{math.log2(cert.epsilon):.0f}, {cert.bits} bits)')
  rows = []
  variants = [('paper', False), ('paper', True)] + ([] if positional else [('complete', True)])
  log(f'certified at the main resolution N={c.resolution} (margin {c.certify_margin:g} '
      'delta):')
  for ties, clamp in variants:
    t1 = time.time()
    net = approximator.build_approximator(c.target, d=c.d, n=c.n, resolution=c.resolution,
                                          positional=positional, ties=ties)
    g, cert = _certify(net, c, clamp, workers)
    label = (('ties=complete' if ties == 'complete' else "the paper's network")
             + (' + output clamp' if clamp else ''))
    rows.append({'ties': ties, 'clamp': clamp, 'label': label, 'blocks': _blocks(g),
                 'weights': g.num_params(), 'certificate': cert.as_dict(),
                 'seconds': round(time.time() - t1, 2)})
    log(f'  {label:<38} d_p(f, g) <= {cert.total:<10.4g} (d_p(g_bar, g) <= '
        f'{cert.terms["gbar_g"]:.3g}; window sup {cert.window_sup:.3g}; {_blocks(g)} blocks, '
        f'{cert.bits} bits, {rows[-1]["seconds"]:.1f} s)')
  return {'headline': head, 'main_resolution': rows}


def run_sweeps(net, c, log):
  out = {'lam': [], 'epsilon': [], 'skipped_epsilons': []}
  low = approximator.min_epsilon(net.d, net.n, net.resolution, net.positional)
  for key, values in (('lam', c.lam_sweep), ('epsilon', c.epsilon_sweep)):
    for v in values:
      lam, eps = (v, c.epsilon) if key == 'lam' else (c.lam, v)
      if eps < low:
        out['skipped_epsilons'].append(eps)
        continue
      g = net.realize(lam=lam, epsilon=eps, dtype=c.dtype)
      rep = approximator.realization_error(net, g, samples=c.map_samples, seed=c.seed)
      dec = approximator.error_decomposition(net, g, p=c.p, samples=c.sweep_samples,
                                             seed=c.seed).as_dict()
      out[key].append({'lam': lam, 'epsilon': eps,
                       'dp_g_bar_g': dec['estimates']['g_bar|g'],
                       'max_interior_error': rep['max_abs_error'],
                       'reproduces': rep['reproduces'],
                       'window_share': (dec.get('g_windows') or {}).get('share')})
    fixed = f'epsilon={c.epsilon:g}' if key == 'lam' else f'lam={c.lam:g}'
    log(f'  {key} sweep, {c.dtype} g (sampled; "off": g does not reproduce g_bar on cube '
        'interiors, rounding or ramps too wide; "windows": the ramp windows dominate), '
        'd_p(g_bar, g) at '
        f'{fixed}: ' + ', '.join(
            f'{key}={r[key]:.0e} -> {r["dp_g_bar_g"]["value"]:.3g}' + _sweep_tag(r)
            for r in out[key]))
  if out['skipped_epsilons']:
    log(f'  epsilon sweep: skipped {out["skipped_epsilons"]} (below {low:.3g}, 4 {c.dtype} '
        f'ulps of t_r at N={net.resolution}: the ramps would collapse)')
  return out


def _sweep_tag(row) -> str:
  if not row['reproduces']:
    return ' (off)'
  return ' (windows)' if (row['window_share'] or 0) > approximator.WINDOW_DOMINANCE else ''


def run_precision_map(c, log):
  rows = []
  for (d, n, N) in c.map_configs:
    net = approximator.build_approximator('token_times_mean', d=d, n=n, resolution=N)
    for dtype in approximator.FLOAT_BITS:
      best = None
      tried = []
      for eps in c.map_epsilons:
        for lam in c.map_lams:
          rep = approximator.realization_error(
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


def run(c, outdir, log=print, workers=None) -> dict:
  """The main job (module doc). Float realizations are labelled in the log and the
  report (PRECISION FAILURE, window notes), so their FloatRealizationWarnings are not
  repeated on stderr."""
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', yun_plan.FloatRealizationWarning)
    return _run(c, outdir, log)


def _run(c, outdir, log) -> dict:
  _validate(c)
  os.makedirs(outdir, exist_ok=True)
  t_start = time.time()
  prov = provenance.record(' '.join(['python'] + sys.argv))
  positional = _positional_for(c.target, c.positional)
  net = approximator.build_approximator(c.target, d=c.d, n=c.n, resolution=c.resolution,
                                        positional=positional)
  log(net.describe())
  dep = {'built': {**construction.stage_counts(net.layer_counts()), 'total': net.depth()},
         'formula': {**net.paper_layer_counts(),
                     'total': sum(net.paper_layer_counts().values())},
         'by_kind': construction.kind_counts(net.layer_counts())}
  log(f'{"stage":<14}{"built":>10}{"paper formula":>16}')
  for key in ('quantization', 'contextual', 'value', 'total'):
    log(f'{key:<14}{dep["built"][key]:>10}{dep["formula"][key]:>16}')
  log('')
  certified = run_certificates(c, positional, log, workers)
  log(f'\n{c.dtype} network g (sampled, not certified): lam={c.lam:g}, '
      f'epsilon={c.epsilon:g}')
  g = net.realize(lam=c.lam, epsilon=c.epsilon, dtype=c.dtype)
  log(f'  realized g: {g.block_counts()} ({g.num_params()} weights)')
  dec = approximator.error_decomposition(net, g, p=c.p, samples=c.samples, seed=c.seed).as_dict()
  g_int = net.realize(lam=c.lam, epsilon=c.interior_epsilon, dtype=c.dtype)
  rep = approximator.realization_error(net, g_int, samples=c.map_samples, seed=c.seed)
  # The precision verdict is error_decomposition's check that the float g represents
  # g_bar on cube interiors: if not, the d_p rows with g are rounding, not Lemma 6, and
  # are not printed (the JSON keeps them). If it does, a large d_p(g_bar, g) comes from
  # the ramp windows (g_windows), and the rows are printed with that note.
  dec['precision_failure'] = not dec.get('g_represents_g_bar', True)
  dp_gg = dec['estimates']['g_bar|g']['value']
  value_range = float(np.max(np.abs(net.values))) if net.values.size else 0.0
  log(f'  error decomposition, p={c.p:g}, {c.samples} uniform samples, 95% CI')
  for key, e in dec['estimates'].items():
    a, b = key.split('|')
    if 'g' in (a, b) and dec['precision_failure']:
      continue  # not a measurement of Lemma 6: see the PRECISION FAILURE line below
    log(f'    d_p({a:>5}, {b:<5}) = {e["value"]:.5f}  [{e["ci_low"]:.5f}, {e["ci_high"]:.5f}]')
  if dec['precision_failure']:
    t_r = float(net.g_bar.contextual.t_r)
    log(f'  PRECISION FAILURE, not a measurement (t_r = {t_r:.3g}, lam={c.lam:g}, '
        f'epsilon={c.epsilon:g}, sampled d_p(g_bar, g) = {dp_gg:.3g} for values |A| <= '
        f'{value_range:.3g}): {dec.get("g_note")} The certified rows above hold instead.')
  elif dec.get('g_note'):
    log(f'  note: {dec["g_note"]}')
  if 'exact' in dec:
    log(f'  exact: bad-set measure {dec["exact"]["bad_set_measure"]:.5f}, '
        f'd_p(f_bar, g_bar) = {dec["exact"]["dp_f_bar_g_bar"]:.5f}')
  if 'exact' in dec and not positional:
    log('  d_p(f, g_bar) is mostly d_p(f_bar, g_bar): the bad set (inputs with repeated '
        f'columns, measure {dec["exact"]["bad_set_measure"]:.5f} here, -> 0 like delta) is '
        'where Theorem 2\'s g_bar is 0 instead of f_bar; elsewhere g_bar = f_bar.')
  log(f'  g with epsilon={c.interior_epsilon:g} on cube interiors (margin '
      f'{rep["margin"]} delta): max |g - g_bar| = {rep["max_abs_error"]:.3g} '
      f'(reproduces g_bar: {rep["reproduces"]})')
  log('\nresolution ladder')
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
  log('\nlambda / epsilon sweeps')
  sweeps = run_sweeps(net, c, log)
  pmap = None
  if c.precision_map:
    log('\nprecision map (token_times_mean)')
    pmap = run_precision_map(c, log)
  result = {'config': c.to_dict(), 'provenance': prov, 'positional': positional,
            'depth': dep, 'realized_depth': g.block_counts(), 'decomposition': dec,
            'realization': rep, 'certified': certified,
            'ladders': ladders, 'sweeps': sweeps,
            'precision_map': pmap}
  result['figures'] = report.make_figures(result, net, outdir)
  result['seconds'] = round(time.time() - t_start, 1)
  path = os.path.join(outdir, 'approximate.json')
  outputs.atomic_json(path, result, indent=1,
                      default=lambda o: o.tolist() if hasattr(o, 'tolist') else str(o))
  report.write_report(result, os.path.join(outdir, 'approximate.md'))
  log(f'\nwrote {path}, approximate.md and {len(result["figures"])} figures in '
      f'{result["seconds"]} s')
  return result


def main(argv, config, output_dir):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  cli.output_dir(output_dir.value, '--output_dir', writes=OUTPUT_FILES)  # before the work
  try:
    workers = executor.from_flags(None, flags.FLAGS.dask_scheduler, flags.FLAGS.state_dir,
                                  ('--overwrite',))
    run(config.value, output_dir.value, workers=workers)
  except ValueError as e:  # one line, no traceback
    cli.fail(str(e))


if __name__ == '__main__':
  _flags = _define_flags()
  cli.run(lambda argv: main(argv, *_flags))
