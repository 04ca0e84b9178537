r"""Theorems 2 and 3 as a certificate: standard Transformers with a proved d_p(f, g).

``run(c, out_dir)`` (``c``: a config of experiments/configs/certify_approximation.py,
checked first by ``validate``; experiments/certify_approximation.py is its binary).
Every number called certified is an upper bound proved over the whole unit cube by
``yun.bounds.certificate.certify_lp`` (exact rationals and arb balls). Next to each certificate
of the table and the ladder, an independent stratified Monte Carlo of its terms
(``verify.certificate_mc``): g evaluated by the mpmath oracle (``transformer_ua.oracle``,
no code shared with ``exact.ball``), points drawn uniformly on the cube interiors I and on
the ramp windows W separately (``mc_points`` / ``ladder_mc_points`` each, >= 1000) and
weighted by their exact measures, then compared term by term (``certificate_mc.compare``):

    d_p(f, f_bar), d_p(f_bar, g_bar), int_I |g_bar - g|^p, int_W |g_bar - g|^p,
    d_p(g_bar, g), d_p(f, g)      each against its certified bound.

A bound inside or above its term's 95% interval is consistent (a tight bound lies inside
it); a certificate is contradicted only when a term's whole 95% interval lies above its
bound (ci_low > bound, beyond the float64 resolution of the sampled values). ``run`` then
raises ``Contradicted`` (one line naming the row and the term: it would be a bug) after
writing every file.

Parts (config):
  table   ``search.approximate(f, epsilon)`` for each target and epsilon: N, depth,
          parameters, bits, the three terms, the total, seconds, Monte Carlo, ratio;
          rows deeper than ``max_layers`` are listed with the N and depth they need;
  ladder  ``certify_lp`` at a ladder of N (the paper's g_c, ties='complete', Theorem 3);
  lemma6  the certified d_p(g_bar, g) against the ramp epsilon and lambda, with and
          without the output clamp, and the fitted rate in epsilon;
  clamp   what the output clamp buys at one target epsilon.

Writes certify_approximation.json (part by part, as each ends), .md and two PNG figures
(``reports.certification``) into ``out_dir``; ``rebuild`` writes the report (and the Lemma 6
fits) again from a finished run's JSON.
"""

from __future__ import annotations

import json
import math
import os
import time
from fractions import Fraction

import numpy as np

from transformer_ua import outputs, provenance
from transformer_ua.reports import certification as report
from transformer_ua.targets import functions as targets_lib
from transformer_ua.verify import certificate_mc
from transformer_ua.yun import build_approximator, search
from transformer_ua.yun.bounds import certificate
from transformer_ua.yun.realization import plan as plan_lib

#: Files written into the output directory.
JSON_NAME = 'certify_approximation.json'
WRITES = (JSON_NAME, report.MARKDOWN_NAME, report.LADDER_PNG, report.LEMMA6_PNG)

#: What evaluates g in the Monte Carlo (recorded in every row).
MC_EVALUATOR = 'transformer_ua.oracle (mpmath; no code shared with exact.ball)'


def monte_carlo_record(mc: dict, comparison: list) -> dict:
  """The JSON record of ``certificate_mc.certificate_mc``'s result ``mc`` and of
  ``certificate_mc.compare(mc, cert)`` (``comparison``): points per stratum, the strata's
  exact measures (as floats), each term's {estimate, ci_low, ci_high}, the comparison
  rows {term, bound, estimate, ci_low, ci_high, slack, below} and 'contradicted', the
  terms whose whole 95% interval lies above their bound (not 'below')."""
  return {'evaluator': MC_EVALUATOR,
          'points': {k: int(v) for k, v in mc['points'].items()},
          'weights': {k: float(v) for k, v in mc['weights'].items()},
          'terms': {name: {k: float(t[k]) for k in ('estimate', 'ci_low', 'ci_high')}
                    for name, t in mc['terms'].items()},
          'compare': [{**r, 'below': bool(r['below'])} for r in comparison],
          'contradicted': [r['term'] for r in comparison if not r['below']],
          'max_window_gap': float(mc['max_window_gap']), 'slack': float(mc['slack']),
          'prec': int(mc['prec']), 'seconds': float(mc['seconds']), 'where': mc['where'],
          'workers': int(mc['workers'])}


def _monte_carlo(net, g, cert, points, seed, workers) -> dict:
  mc = certificate_mc.certificate_mc(net, g, cert, points=points, seed=seed, workers=workers)
  return monte_carlo_record(mc, certificate_mc.compare(mc, cert))


def add_ratio(row: dict) -> dict:
  """Adds 'ratio': the certified total over the Monte Carlo estimate of d_p(f, g)."""
  est = row['monte_carlo']['terms']['total']['estimate']
  row['ratio'] = row['certificate']['total'] / est if est > 0 else math.inf
  return row


def contradiction_line(bad: list) -> str:
  """One line naming the first contradicted term (and how many there are)."""
  r, c = bad[0]
  return (f'error: {len(bad)} certified bound(s) contradicted by the Monte Carlo, e.g. '
          f'{report.row_name(r)}: term {c["term"]}: 95% interval [{c["ci_low"]:.6g}, '
          f'{c["ci_high"]:.6g}] lies wholly above the bound {c["bound"]:.6g}; a bug in '
          'the certificate.')


def _cert_dict(cert) -> dict:
  d = cert.as_dict()
  det = d.pop('details')
  d['interior_seconds'] = det['interior']['seconds']
  d['cubes'] = det['interior']['cubes']
  d['workers'] = det['interior']['workers']
  d['window_part'] = det['gbar_g']['window_part']
  d['interior_part'] = det['gbar_g']['interior_part']
  d['rounding_part'] = det['f_fbar']['rounding_part']
  d['assumptions'] = det['assumptions']
  return d


def _mc_summary(mc: dict) -> str:
  t = mc['terms']
  cells = ', '.join(f'{name} {t[name]["estimate"]:.4g} [{t[name]["ci_low"]:.4g}, '
                    f'{t[name]["ci_high"]:.4g}]' for name in ('f_fbar', 'fbar_gbar', 'gbar_g',
                                                              'total'))
  bad = mc['contradicted']
  return (f'MC {cells} from {mc["points"]["interior"]} + {mc["points"]["window"]} points in '
          f'{mc["seconds"]:.1f} s' + (f'; CONTRADICTED: {", ".join(bad)}' if bad else ''))


def _layers(g) -> int:
  return int(sum(s.depth for s in g.segments))


# ---------------------------------------------------------------------------
# The parts.
# ---------------------------------------------------------------------------


def run_table(c, log, workers) -> list:
  rows = []
  for index, (name, positional, ties, epsilons) in enumerate(c.table):
    for j, eps in enumerate(epsilons):
      head = {'target': name, 'theorem': 3 if positional else 2, 'positional': positional,
              'ties': 'paper' if positional else ties, 'epsilon': eps}
      t0 = time.perf_counter()
      try:
        res = search.approximate(name, eps, d=c.d, n=c.n, p=c.p, positional=positional,
                                 construction=('positional' if positional else
                                               {'complete': 'ties_complete'}.get(ties, ties)),
                                 clamp=True, max_layers=c.max_layers, workers=workers,
                                 progress=lambda s: log('  ' + s))
      except ValueError as e:
        log(f'{name} epsilon={eps:g}: not run: {e}')
        rows.append({**head, 'status': 'out of reach', 'reason': str(e)})
        continue
      seconds = time.perf_counter() - t0
      g, net, cert = res.g, res.net, res.certificate
      mc = _monte_carlo(net, g, cert, c.mc_points, [c.seed, index, j], workers)
      row = add_ratio({**head, 'status': 'certified', 'resolution': net.resolution,
                    'layers': _layers(g), 'params': int(g.num_params()),
                    'certificate': _cert_dict(cert), 'approximate_seconds': seconds,
                    'attempts': list(res.attempts), 'monte_carlo': mc})
      log(f'{name} epsilon={eps:g}: N={net.resolution}, {row["layers"]} layers, '
          f'{row["params"]} params, {cert.bits} bits, total {cert.total:.4g} '
          f'({seconds:.1f} s); {_mc_summary(mc)}; ratio {row["ratio"]:.3g}')
      rows.append(row)
  return rows


def _planned(net, tolerance, margin, clamp, lam_scale=Fraction(1)):
  pl = plan_lib.plan_realization(net, tolerance=tolerance, margin=float(margin))
  g = net.realize(lam=pl.lam * lam_scale, epsilon=pl.epsilon, dtype='exact', clamp=clamp)
  return pl, g


def run_ladder(c, log, workers) -> list:
  rows = []
  margin = Fraction(2) ** c.ladder_margin_log2
  for index, (series, name, positional, ties, resolutions) in enumerate(c.ladder):
    for N in resolutions:
      t0 = time.perf_counter()
      net = build_approximator(name, d=c.d, n=c.n, resolution=N, positional=positional,
                               ties=ties)
      _, g = _planned(net, c.ladder_tolerance, margin, True)
      build = time.perf_counter() - t0
      cert = certificate.certify_lp(net, g, c.p, margin=margin, workers=workers)
      mc = _monte_carlo(net, g, cert, c.ladder_mc_points, [c.seed, 100 + index, N], workers)
      row = add_ratio({'series': series, 'target': name, 'positional': positional,
                    'ties': net.ties, 'resolution': N, 'layers': _layers(g),
                    'params': int(g.num_params()), 'build_seconds': build,
                    'certificate': _cert_dict(cert), 'monte_carlo': mc})
      log(f'ladder {series} N={N}: {row["layers"]} layers, total {cert.total:.4g} '
          f'(terms {cert.terms["f_fbar"]:.3g} + {cert.terms["fbar_gbar"]:.3g} + '
          f'{cert.terms["gbar_g"]:.3g}), {cert.seconds:.1f} s; {_mc_summary(mc)}')
      rows.append(row)
  return rows


def _lemma6_row(net, g, cert, **extra) -> dict:
  return {**extra, 'resolution': net.resolution, 'ties': net.ties,
          'clamp': g.clamp is not None, 'layers': _layers(g), 'lam': float(g.lam),
          'ramp': float(g.epsilon), 'bits': cert.bits, 'gbar_g': cert.terms['gbar_g'],
          'interior_sup': cert.interior_sup, 'window_sup': cert.window_sup,
          'window_measure': cert.window_measure,
          'window_part': cert.details['gbar_g']['window_part'],
          'interior_part': cert.details['gbar_g']['interior_part'],
          'total': cert.total, 'seconds': cert.seconds}


def run_lemma6(c, log, workers) -> dict:
  ramp_rows, lam_rows = [], []
  for N in c.lemma6_resolutions:
    for ties in c.lemma6_ties:
      net = build_approximator(c.lemma6_target, d=c.d, n=c.n, resolution=N, ties=ties)
      for k in c.lemma6_margins_log2:
        margin = Fraction(2) ** k
        for clamp in (True, False):
          pl, g = _planned(net, c.lemma6_tolerance, margin, clamp)
          cert = certificate.certify_lp(net, g, c.p, margin=margin, workers=workers)
          row = _lemma6_row(net, g, cert, margin_log2=k, plan_bits=pl.bits)
          ramp_rows.append(row)
          log(f'lemma6 N={N} {ties} margin 2^{k} {"clamp" if clamp else "no clamp"}: '
              f'ramp {row["ramp"]:.3g}, lam {row["lam"]:.3g}, {row["bits"]} bits, '
              f'd_p(g_bar, g) <= {row["gbar_g"]:.4g} (window sup {row["window_sup"]:.3g}), '
              f'{row["seconds"]:.1f} s')
      margin = Fraction(2) ** c.lemma6_lam_margin_log2
      for s in c.lemma6_lam_shifts_log2:
        for clamp in (True, False):
          _, g = _planned(net, c.lemma6_tolerance, margin, clamp, Fraction(2) ** s)
          cert = certificate.certify_lp(net, g, c.p, margin=margin, workers=workers)
          row = _lemma6_row(net, g, cert, margin_log2=c.lemma6_lam_margin_log2,
                            lam_shift_log2=s)
          lam_rows.append(row)
          log(f'lemma6 N={N} {ties} lam x 2^{s} {"clamp" if clamp else "no clamp"}: '
              f'd_p(g_bar, g) <= {row["gbar_g"]:.4g} (interior sup '
              f'{row["interior_sup"]:.3g}), {row["bits"]} bits, {row["seconds"]:.1f} s')
  return {'ramp': ramp_rows, 'lam': lam_rows,
          'fits': fit_rates(ramp_rows, c.lemma6_tolerance)}


def fit_rates(rows, tolerance=None) -> list:
  """Least-squares slope of log d_p(g_bar, g) against log ramp, per (N, ties, clamp),
  over the points whose cube interiors certified (interior sup <= ``tolerance``, the
  plan's; all points when None): where they do not, the interior term is the range of g
  and says nothing about the ramp."""
  groups = {}
  for r in rows:
    groups.setdefault((r['resolution'], r['ties'], r['clamp']), []).append(r)
  fits = []
  for (N, ties, clamp), rs in sorted(groups.items()):
    ok = [r for r in rs if tolerance is None or r['interior_sup'] <= tolerance]
    pts = [(math.log(r['ramp']), math.log(r['gbar_g'])) for r in ok
           if math.isfinite(r['gbar_g']) and r['gbar_g'] > 0]
    slope = float(np.polyfit(*zip(*pts), 1)[0]) if len(pts) >= 2 else None
    fits.append({'resolution': N, 'ties': ties, 'clamp': clamp, 'slope': slope,
                 'points': len(pts), 'interiors_failed': len(rs) - len(ok),
                 'smallest_ramp_fitted': min((r['ramp'] for r in ok), default=None)})
  return fits


def run_clamp(c, log, workers) -> dict:
  eps, name = c.clamp_epsilon, c.clamp_target
  t0 = time.perf_counter()
  with_clamp = search.approximate(name, eps, d=c.d, n=c.n, p=c.p, clamp=True,
                                  construction='ties_complete', workers=workers,
                                  progress=log)
  clamp_seconds = time.perf_counter() - t0
  cc = with_clamp.certificate
  out = {'target': name, 'epsilon': eps,
         'clamp': {'resolution': cc.resolution, 'layers': _layers(with_clamp.g),
                   'lam': cc.lam, 'ramp': cc.epsilon, 'bits': cc.bits, 'margin': cc.margin,
                   'total': cc.total, 'window_sup': cc.window_sup,
                   'certify_seconds': cc.seconds, 'approximate_seconds': clamp_seconds}}
  log(f'clamp: {cc.describe()}')
  # approximate(clamp=False) as the library runs it (margin 2^-20, up to 4 resolutions).
  attempts = []
  t0 = time.perf_counter()
  if not c.clamp_run_unclamped_search:
    out['approximate_unclamped'] = {'certified': None, 'message': 'not run (config)'}
  else:
    try:
      res = search.approximate(name, eps, d=c.d, n=c.n, p=c.p, clamp=False,
                               construction='ties_complete', workers=workers,
                               progress=attempts.append)
      out['approximate_unclamped'] = {'certified': True, 'total': res.certificate.total,
                                      'resolution': res.net.resolution}
    except ValueError as e:
      out['approximate_unclamped'] = {'certified': False, 'message': str(e)}
  out['approximate_unclamped'].update(attempts=attempts,
                                      seconds=time.perf_counter() - t0)
  log(f'approximate(clamp=False): {out["approximate_unclamped"]}')
  # The paper's network at the clamped N: shrink the windows until it certifies.
  net = with_clamp.net
  lower = cc.terms['f_fbar'] + cc.terms['fbar_gbar']
  tol = (eps - lower) * float(search.INTERIOR_SHARE) / (c.d * c.n) ** (1 / c.p) / 2
  tries = []
  # Margins below certificate.MIN_MARGIN (arb's 30-bit radii) are refused: the search
  # steps by 2^-step and ends at the smaller of 2^-max_log2 and MIN_MARGIN.
  max_log2 = min(c.clamp_margin_max_log2, -math.floor(math.log2(certificate.MIN_MARGIN)))
  ks = list(range(c.clamp_margin_step_log2, max_log2 + 1, c.clamp_margin_step_log2))
  ks += [max_log2] if not ks or ks[-1] != max_log2 else []
  for k in ks:
    margin = Fraction(1, 2 ** k)
    _, g = _planned(net, tol, margin, False)
    cert = certificate.certify_lp(net, g, c.p, margin=margin, workers=workers)
    tries.append({'margin_log2': -k, 'lam': cert.lam, 'ramp': cert.epsilon,
                  'bits': cert.bits, 'window_sup': cert.window_sup,
                  'gbar_g': cert.terms['gbar_g'], 'total': cert.total,
                  'seconds': cert.seconds, 'layers': _layers(g)})
    log(f'no clamp, N={net.resolution}, margin 2^-{k}: total {cert.total:.4g} '
        f'(window sup {cert.window_sup:.3g}), {cert.bits} bits, {cert.seconds:.1f} s')
    if cert.holds(eps):
      break
  out['unclamped_same_n'] = {'resolution': net.resolution, 'tolerance': tol, 'tries': tries,
                             'smallest_margin_log2': -max_log2,
                             'certified': bool(tries and tries[-1]['total'] <= eps)}
  return out



# ---------------------------------------------------------------------------
# The config.
# ---------------------------------------------------------------------------


class ConfigError(ValueError):
  """A bad configuration value (one line)."""


def _positive_ints(name, values, low=1):
  if not isinstance(values, (tuple, list)) or any(
      isinstance(v, bool) or not isinstance(v, int) or v < low for v in values):
    raise ConfigError(f'config.{name}={values!r}; it must list integers >= {low}.')


def _positive(name, v):
  if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
    raise ConfigError(f'config.{name}={v!r}; it must be a positive finite number.')


def _target(name, where, positional):
  if name not in targets_lib.BUILTIN_TARGETS:
    raise ConfigError(f'{where}: target {name!r}; allowed: '
                      f'{sorted(targets_lib.BUILTIN_TARGETS)}.')
  if not positional and not targets_lib.BUILTIN_TARGETS[name].permutation_equivariant:
    raise ConfigError(f'{where}: {name!r} is not permutation equivariant; Theorem 2 does '
                      'not apply (set positional=True).')


def validate(c) -> None:
  """Every check of the config ``c`` before any work (ConfigError: one line)."""
  for name in ('d', 'n', 'mc_points', 'ladder_mc_points', 'max_layers', 'workers'):
    _positive_ints(name, [c[name]],
                   certificate_mc.MIN_POINTS if name.endswith('mc_points') else 1)
  for name in ('p', 'ladder_tolerance', 'lemma6_tolerance', 'clamp_epsilon'):
    _positive(name, c[name])
  if c.p < 1:
    raise ConfigError(f'config.p={c.p!r}; it must be >= 1.')
  for i, row in enumerate(c.table):
    if len(row) != 4:
      raise ConfigError(f'config.table[{i}]={row!r}; expected (target, positional, ties, '
                        'epsilons).')
    name, positional, ties, epsilons = row
    _target(name, f'config.table[{i}]', positional)
    if ties not in ('paper', 'complete'):
      raise ConfigError(f"config.table[{i}]: ties={ties!r}; allowed: 'paper', 'complete'.")
    for e in epsilons:
      _positive(f'table[{i}] epsilon', e)
  for i, row in enumerate(c.ladder):
    if len(row) != 5:
      raise ConfigError(f'config.ladder[{i}]={row!r}; expected (series, target, positional, '
                        'ties, resolutions).')
    _target(row[1], f'config.ladder[{i}]', row[2])
    _positive_ints(f'ladder[{i}] resolutions', list(row[4]), 2)
  _target(c.lemma6_target, 'config.lemma6_target', False)
  if c.clamp_target:
    _target(c.clamp_target, 'config.clamp_target', False)
  _positive_ints('lemma6_resolutions', list(c.lemma6_resolutions), 2)
  for t in c.lemma6_ties:
    if t not in ('paper', 'complete'):
      raise ConfigError(f"config.lemma6_ties: {t!r}; allowed: 'paper', 'complete'.")
  for name in ('lemma6_margins_log2', 'lemma6_lam_shifts_log2'):
    if any(isinstance(v, bool) or not isinstance(v, int) for v in c[name]):
      raise ConfigError(f'config.{name}={c[name]!r}; it must list integers.')
  if any(v > -2 for v in list(c.lemma6_margins_log2) + [c.lemma6_lam_margin_log2,
                                                         c.ladder_margin_log2]):
    raise ConfigError('margins are 2^k delta per side with k <= -2 (the cube interiors '
                      'need margin < 1/2).')
  _positive_ints('clamp_margin_step_log2', [c.clamp_margin_step_log2])
  _positive_ints('clamp_margin_max_log2', [c.clamp_margin_max_log2])



# ---------------------------------------------------------------------------
# The run.
# ---------------------------------------------------------------------------


class Contradicted(Exception):
  """A certified bound contradicted by its Monte Carlo: the one-line message of
  ``contradiction_line`` (the files are written)."""


def rebuild(path, out_dir, log=print) -> dict:
  """The report (and Lemma 6 fits) again from a finished run's JSON at ``path``, into
  ``out_dir``. ValueError (one line) when the file is not such a JSON."""
  try:
    with open(path, encoding='utf-8') as f:
      result = json.load(f)
  except (OSError, ValueError) as e:
    raise ValueError(f'--from_json={path}: cannot be read as JSON ({e}).') from None
  if 'provenance' not in result or 'config' not in result:
    raise ValueError(f'--from_json={path}: not a {JSON_NAME} (no provenance or config).')
  old = [r for r in report.checked_rows(result) if 'compare' not in r['monte_carlo']]
  if old:
    raise ValueError(f'--from_json={path}: its {len(old)} Monte Carlo record(s) predate '
                     'the stratified, term-by-term Monte Carlo (no per-term comparison); '
                     'rerun the experiment to rebuild them.')
  if 'lemma6' in result:
    result['lemma6']['fits'] = fit_rates(result['lemma6']['ramp'],
                                         result['config']['lemma6_tolerance'])
  result['report_rebuilt'] = provenance.record()
  outputs.atomic_json(os.path.join(out_dir, JSON_NAME), result, indent=1, default=str)
  for p in report.write(result, out_dir):
    log(f'wrote {p}')
  return result


def stamped(s: str) -> None:
  """The run's console line: ``[HH:MM:SS] s``, flushed."""
  print(f'[{time.strftime("%H:%M:%S")}] {s}', flush=True)


def run(c, out_dir, log=stamped, workers=None) -> dict:
  """Every part of ``c`` into ``out_dir`` (module doc); the JSON is rewritten as each part
  ends. Raises ``Contradicted`` after writing the files when a bound is contradicted."""
  prov = provenance.record()
  t0 = time.perf_counter()
  result = {'provenance': prov, 'config': c.to_dict(), 'd': c.d, 'n': c.n, 'p': c.p}
  json_path = os.path.join(out_dir, JSON_NAME)
  for part, fn in (('table', run_table), ('ladder', run_ladder), ('lemma6', run_lemma6),
                   ('clamp', run_clamp)):
    if part == 'clamp' and not c.clamp_target:
      continue
    result[part] = fn(c, log, workers)
    result['seconds'] = time.perf_counter() - t0
    result['parts_done'] = list(result.get('parts_done', [])) + [part]
    outputs.atomic_json(json_path, result, indent=1, default=str)  # partial, part by part
  bad = report.contradictions(result)
  result['certificates_checked'] = len(report.checked_rows(result))
  result['contradicted'] = [{'row': report.row_name(r), 'term': c['term']} for r, c in bad]
  outputs.atomic_json(json_path, result, indent=1, default=str)
  for path in report.write(result, out_dir):
    log(f'wrote {path}')
  log(f'wrote {os.path.join(out_dir, JSON_NAME)} ({result["seconds"]:.0f} s)')
  if bad:
    raise Contradicted(contradiction_line(bad))
  return result
