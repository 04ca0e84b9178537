r"""The certified size-vs-epsilon law: how big is a provably epsilon-accurate Transformer?

For each target f, construction c, arithmetic a and epsilon, ``yun.search.approximate(f,
epsilon, construction=c, arithmetic=a)`` returns a standard softmax/ReLU Transformer g with
a certificate d_p(f, g) <= total <= epsilon over the whole unit cube, for g as arithmetic a
computes it ('float64' / 'float32': the network as IEEE runtimes run it, the integer-id
constructions; 'exact': the real network with exact parameters, the others). A row records
its size (N, depth in blocks, attention layers, the largest hidden width, parameters,
bits per parameter -- the format's significand for a float row, the plan's working
precision for an exact row -- and their product, the total bits), the certified terms and
their total, an independent check and the seconds spent. The independent check of a float
row runs g in JAX and in onnxruntime on 10^4 points of the cube interiors and 10^4 of the
windows (``verify.float_certificate``); of an exact row, a stratified Monte Carlo with an
mpmath evaluator that shares no code with the certificate's arb evaluator
(``verify.certificate_mc``).

The law is read off a log-log fit per construction:

    log P = a + s_P log epsilon,      log D = b + s_D log epsilon

over its certified rows (P: parameters, D: depth in blocks). The theory's slopes, for a
target with a modulus (d_p(f, f_bar) ~ 1/N, so N ~ 1/epsilon) and M = N^d cells:

    paper g_c + Lemma 9 value map   D ~ n C(M, n)             ~ N^{nd}  -> s_D = -nd
    ties='complete'                 D ~ n C(M + n - 1, n)     ~ N^{nd}  -> s_D = -nd
    one-layer map, deep value map   D ~ M C(M + n - 2, n - 1) ~ N^{nd}  -> s_D = -nd
    one-layer map, wide value map   D = const                          -> s_D = 0
    Theorem 3 (positional)          D ~ N^{nd} sweep layers            -> s_D = -nd
    Theorem 3, shallow and wide     D = const                          -> s_D = 0
    parameters, every construction  P ~ (#contexts) ~ N^{nd}           -> s_P = -nd

Each row runs in its own spawned process under a wall-clock limit (``row_minutes``), with
``approximate``'s own budget at half of it: a row whose network is estimated past the
budget is refused at once with the size it would need (its construction, N, blocks,
parameters and estimated minutes), so every row is run or refused, none skipped. Rows are
written one JSON file each, so an interrupted study started again with the same arguments
runs only the rows it lacks.
"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import os
import time
import traceback

import matplotlib
matplotlib.use('Agg')
import matplotlib.ticker  # pylint: disable=wrong-import-position
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position
import numpy as np

from transformer_ua import outputs, provenance
from transformer_ua.decimal_text import bound_text
from transformer_ua.targets import functions as targets_lib
from transformer_ua.verify import certificate_mc, float_certificate
from transformer_ua.yun import search
from transformer_ua.yun.bounds import f_term
from transformer_ua.yun.variants import registry

#: The study's default grid (the issue's rows; Theorem 3's target is prefix_mean).
TARGETS = (('token_times_mean', 1, 3), ('attention_map', 1, 3), ('prefix_mean', 1, 3),
           ('token_times_mean', 2, 2))
EPSILONS = (0.5, 0.2, 0.1, 0.05, 0.02, 0.01)
ROWS_DIR = 'rows'


@dataclasses.dataclass(frozen=True)
class RowSpec:
  """One certificate to attempt: f (a built-in name), d, n, construction, epsilon."""

  target: str
  d: int
  n: int
  construction: str
  epsilon: float
  arithmetic: str = 'exact'

  @property
  def key(self) -> str:
    return (f'{self.target}_d{self.d}_n{self.n}_{self.construction}_{self.arithmetic}'
            f'_eps{self.epsilon:g}')


def fit_slope(xs, ys) -> float | None:
  """Least-squares slope of log y against log x (None for fewer than two points)."""
  xs, ys = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
  if len(xs) < 2 or np.ptp(xs) == 0:
    return None
  return float(np.polyfit(xs, ys, 1)[0])


def default_specs(targets=TARGETS, constructions=None, epsilons=EPSILONS) -> list[RowSpec]:
  """Every (target, construction, epsilon) of the study: Theorem 2's constructions for
  the permutation-equivariant targets, Theorem 3's for the others (prefix_mean); a
  construction named in ``constructions`` is run wherever it applies."""
  for e in epsilons:
    if not (isinstance(e, (int, float)) and math.isfinite(e) and e > 0):
      raise ValueError(f'epsilon {e!r}: each epsilon must be a positive finite number.')
  specs = []
  for name, d, n in targets:
    equivariant = targets_lib.get_target(name, d=d, n=n).permutation_equivariant
    for c in registry.VARIANTS.values():
      if c.equivariant and not equivariant:
        continue
      if constructions is None and not c.equivariant and equivariant:
        continue
      if constructions is not None and c.name not in constructions:
        continue
      floats = [a for a in c.arithmetics if a != 'exact']
      for a in floats or ['exact']:
        specs.extend(RowSpec(name, d, n, c.name, float(e), a) for e in epsilons)
  return specs


def run_row(spec: RowSpec, *, mc_points: int = 1000, seed: int = 0, max_minutes: float = 30.0,
            workers=None, progress=True) -> dict:
  """One certificate and its independent check, as a JSON-able row (``progress``: as
  ``approximate``'s)."""
  c = registry.VARIANTS[spec.construction]
  row = dataclasses.asdict(spec)
  t0 = time.perf_counter()
  try:
    res = search.approximate(spec.target, spec.epsilon, d=spec.d, n=spec.n,
                             positional=not c.equivariant, construction=spec.construction,
                             max_minutes=max_minutes, workers=workers, progress=progress,
                             arithmetic=spec.arithmetic)
  except ValueError as e:
    row.update(status='refused', reason=str(e), seconds=time.perf_counter() - t0)
    return row
  cert, net, g = res.certificate, res.net, res.g
  size = net.variant.size()
  bits = int(g.bits_per_param()) if spec.arithmetic != 'exact' else int(cert.bits)
  row.update(
      status='certified', resolution=net.resolution, blocks=int(g.depth()),
      attention_layers=int(size['attention_layers']), max_width=int(size['max_width']),
      params=int(g.num_params()), params_closed_form=int(size['params']), bits=bits,
      total_bits=int(g.num_params()) * bits,
      terms={k: float(v) for k, v in cert.terms.items()}, total=float(cert.total),
      assumptions=str(cert), certify_seconds=float(cert.seconds),
      approximate_seconds=time.perf_counter() - t0,
      attempts=[{k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v))
                 for k, v in a.items()} for a in res.attempts])
  if spec.arithmetic != 'exact':
    row['float_check'] = float_certificate.check(net, g, cert, seed=seed)
    row['seconds'] = time.perf_counter() - t0
    return row
  mc = certificate_mc.certificate_mc(net, g, cert, points=mc_points, seed=seed)
  row['monte_carlo'] = {
      'points': {k: int(v) for k, v in mc['points'].items()},
      'terms': {k: {kk: float(vv) for kk, vv in t.items() if kk in ('estimate', 'ci_low',
                                                                    'ci_high')}
                for k, t in mc['terms'].items()},
      'compare': certificate_mc.compare(mc, cert), 'seconds': float(mc['seconds'])}
  row['monte_carlo']['compare'] = [{k: (bool(v) if k == 'below' else v) for k, v in r.items()}
                                   for r in row['monte_carlo']['compare']]
  row['seconds'] = time.perf_counter() - t0
  return row


def _row_process(spec_dict: dict, path: str, kwargs: dict) -> None:
  """Child process: one row, written atomically to ``path`` (errors as a 'failed' row)."""
  spec = RowSpec(**spec_dict)

  def progress(line: str) -> None:   # the attempt under way, for a row that runs out of time
    print(line, flush=True)
    if ': attempt ' in line:
      with outputs.atomic_open(path + ATTEMPT_SUFFIX) as f:
        f.write(line)

  try:
    row = run_row(spec, progress=progress, **kwargs)
  except Exception as e:  # pylint: disable=broad-except
    row = dict(spec_dict, status='failed', reason=f'{type(e).__name__}: {e}',
               traceback=traceback.format_exc())
  row['provenance'] = provenance.record()
  with outputs.atomic_open(path) as f:
    json.dump(row, f, indent=1, default=str)


#: The side file a row's process keeps its latest attempt line in.
ATTEMPT_SUFFIX = '.attempt'


def _last_attempt(path: str) -> str:
  try:
    with open(path + ATTEMPT_SUFFIX) as f:
      return f.read().strip()
  except OSError:
    return ''


def row_path(out_dir: str, spec: RowSpec) -> str:
  return os.path.join(out_dir, ROWS_DIR, spec.key + '.json')


def run(specs, out_dir: str, *, row_minutes: float = 30.0, parallel: int = 1,
        mc_points: int = 1000, seed: int = 0, log=print, report_only: bool = False) -> list[dict]:
  """Runs the rows ``specs`` lacks under ``out_dir/rows/`` (``parallel`` at a time, each in
  a spawned process killed after ``row_minutes``, ``approximate``'s budget half of it);
  returns every row on disk. A construction's rows for one target go in decreasing
  epsilon, one at a time."""
  os.makedirs(os.path.join(out_dir, ROWS_DIR), exist_ok=True)
  ctx = multiprocessing.get_context('spawn')
  # breadth first: every line's largest epsilon, then the next (a line runs in order)
  specs = sorted(specs, key=lambda s: (-s.epsilon, s.target, s.d, s.n, s.construction,
                                       s.arithmetic))
  kwargs = {'mc_points': mc_points, 'seed': seed, 'max_minutes': row_minutes / 2}
  running: dict = {}
  pending = [s for s in specs if not os.path.exists(row_path(out_dir, s))]
  if report_only:
    log(f'size law: {len(specs) - len(pending)} of {len(specs)} rows on disk; the other '
        f'{len(pending)} are reported as not run')
    return [_load(out_dir, s) for s in specs]
  log(f'size law: {len(specs)} rows, {len(specs) - len(pending)} on disk, {len(pending)} to '
      f'run, {parallel} at a time, <= {row_minutes:g} min each')

  def busy_line(s):
    return any((t.target, t.d, t.n, t.construction, t.arithmetic)
               == (s.target, s.d, s.n, s.construction, s.arithmetic) for t in running.values())

  while pending or running:
    for proc, s in list((p, s) for p, s in running.items()):
      if not proc.is_alive() or time.time() - proc.started > row_minutes * 60:
        if proc.is_alive():
          proc.kill()
          proc.join()
          attempt = _last_attempt(row_path(out_dir, s))
          row = dict(dataclasses.asdict(s), status='timeout',
                     reason=f'no answer within {row_minutes:g} minutes'
                     + (f'; the attempt under way: {attempt}' if attempt else ''),
                     provenance=provenance.record())
          with outputs.atomic_open(row_path(out_dir, s)) as f:
            json.dump(row, f, indent=1)
        proc.join()
        del running[proc]
        if os.path.exists(row_path(out_dir, s) + ATTEMPT_SUFFIX):
          os.remove(row_path(out_dir, s) + ATTEMPT_SUFFIX)
        with open(row_path(out_dir, s)) as f:
          r = json.load(f)
        log(f'  {s.key}: {r["status"]}' + (f', N={r["resolution"]}, {r["params"]} params, '
                                           f'total <= {bound_text(r["total"], 4)}'
                                           if r['status'] == 'certified' else ''))
    for s in list(pending):
      if len(running) >= parallel:
        break
      if busy_line(s):
        continue
      pending.remove(s)
      proc = ctx.Process(target=_row_process,
                         args=(dataclasses.asdict(s), row_path(out_dir, s), kwargs))
      proc.start()
      proc.started = time.time()
      running[proc] = s
      log(f'  started {s.key}')
    time.sleep(0.5)
  return [_load(out_dir, s) for s in specs]


def _load(out_dir: str, spec: RowSpec) -> dict:
  """The row of ``spec`` on disk, or a 'not run' row."""
  if not os.path.exists(row_path(out_dir, spec)):
    return dict(dataclasses.asdict(spec), status='not run',
                reason='the study stopped before this row')
  with open(row_path(out_dir, spec)) as f:
    return json.load(f)


#: The slope of log(parameters) and log(depth) against log(epsilon) the theory predicts
#: (module doc), as functions of (d, n).
THEORY_SLOPES = {
    'paper': lambda d, n: {'params': -n * d, 'blocks': -n * d},
    'ties_complete': lambda d, n: {'params': -n * d, 'blocks': -n * d},
    'one_layer': lambda d, n: {'params': -n * d, 'blocks': -n * d},
    'one_layer_wide': lambda d, n: {'params': -n * d, 'blocks': 0},
    'positional': lambda d, n: {'params': -n * d, 'blocks': -n * d},
    'positional_wide': lambda d, n: {'params': -n * d, 'blocks': 0},
    'integer_ids': lambda d, n: {'params': -n * d, 'blocks': 0},
    'positional_integer_ids': lambda d, n: {'params': -n * d, 'blocks': 0},
}


#: The smallest-epsilon rows of a line that its 'fine' slope is fitted on (the theory's
#: slopes are asymptotic: at small N the counts grow slower than N^{nd}).
FINE_POINTS = 3


def _line(r) -> str:
  """A construction's line in one arithmetic: 'integer_ids (float64)'."""
  return f'{r["construction"]} ({r.get("arithmetic", "exact")})'


def fits(rows) -> list[dict]:
  """Per (target, d, n, construction): the fitted slopes of log params and log blocks
  against log (certified total), over its certified rows (and of params over its
  ``FINE_POINTS`` smallest), beside the theory's."""
  lines = {}
  for r in rows:
    if r.get('status') == 'certified':
      lines.setdefault((r['target'], r['d'], r['n'], _line(r)), []).append(r)
  out = []
  for (t, d, n, c), rs in sorted(lines.items()):
    eps = [r['total'] for r in rs]
    theory = THEORY_SLOPES.get(c.split(' ')[0],
                               lambda d, n: {'params': None, 'blocks': None})(d, n)
    fine = sorted(rs, key=lambda r: r['total'])[:FINE_POINTS]
    out.append({'target': t, 'd': d, 'n': n, 'construction': c, 'points': len(rs),
                'params_slope': fit_slope(eps, [r['params'] for r in rs]),
                'params_slope_fine': fit_slope([r['total'] for r in fine],
                                               [r['params'] for r in fine])
                                     if len(rs) > FINE_POINTS else None,
                'blocks_slope': fit_slope(eps, [r['blocks'] for r in rs]),
                'theory_params_slope': theory['params'], 'theory_blocks_slope': theory['blocks']})
  return out


def _g(v, digits=4) -> str:
  if v is None:
    return '—'
  return f'{v:.{digits}g}' if isinstance(v, float) else str(v)


def _up(v) -> str:
  """A certified bound as printed: rounded up to 4 digits (what a reader copies holds)."""
  return '—' if v is None else bound_text(v, 4)


def _check_cell(r) -> str:
  """The independent check of a certified row: JAX / onnxruntime (float) or the mpmath
  Monte Carlo (exact), d_p(f, g) sampled [95%]."""
  if 'float_check' in r:
    fc = r['float_check']
    j, o = fc['runtimes']['jax'], fc['runtimes']['onnxruntime']
    ok = 'within' if j['within'] and o['within'] else 'OUTSIDE'
    return (f'JAX {_g(j["dp"]["estimate"])} [{_g(j["dp"]["ci_low"])}, {_g(j["dp"]["ci_high"])}], '
            f'onnxruntime {"the same" if fc["jax_equals_onnxruntime"] else _g(o["dp"]["estimate"])}'
            f'; max gap I {_g(j["max_interior_gap"], 3)}, W {_g(j["max_window_gap"], 3)}: {ok} '
            f'({fc["points"]["interior"]} + {fc["points"]["window"]})')
  mc = r['monte_carlo']
  m, pts = mc['terms']['total'], mc['points']
  return (f'MC {_g(m["estimate"])} [{_g(m["ci_low"])}, {_g(m["ci_high"])}] '
          f'({pts["interior"]} + {pts["window"]})')


def table_markdown(rows) -> str:
  head = ('| target | d, n | construction | arithmetic | epsilon | status | N | blocks | '
          'attention layers | max width | params | bits / param | total bits | '
          'd_p(f, f_bar) <= | d_p(f_bar, g_bar) <= | d_p(g_bar, g) <= | certified total <= | '
          'independent check: d_p(f, g) sampled [95%] (points I + W) | certify s |\n'
          + '|---' * 19 + '|\n')
  out = [head]
  for r in rows:
    lead = (f'| {r["target"]} | {r["d"]}, {r["n"]} | {r["construction"]} | '
            f'{r.get("arithmetic", "exact")} | {r["epsilon"]:g} ')
    if r.get('status') != 'certified':
      out.append(lead + f'| {r.get("status")}: {r.get("reason", "")} ' + '|' * 14 + '\n')
      continue
    t = r['terms']
    out.append(lead + f'| certified | {r["resolution"]} | {r["blocks"]} | '
               f'{r["attention_layers"]} | {r["max_width"]:,} | {r["params"]:,} | {r["bits"]} | '
               f'{r.get("total_bits", r["params"] * r["bits"]):,} | '
               f'{_g(t["f_fbar"])} | {_g(t["fbar_gbar"])} | {_g(t["gbar_g"])} | '
               f'**{_up(r["total"])}** | {_check_cell(r)} | {r["certify_seconds"]:.1f} |\n')
  return ''.join(out)


def _slope(v) -> str:
  return '—' if v is None else f'{round(v, 2) + 0.0:.2f}'


def fits_markdown(fit_rows) -> str:
  out = [f'| target | d, n | construction | points | params slope (fit, all) | params slope '
         f'(fit, {FINE_POINTS} smallest epsilons) | params slope (theory) | depth slope (fit) | '
         'depth slope (theory) |\n|---|---|---|---|---|---|---|---|---|\n']
  for f in fit_rows:
    out.append(f'| {f["target"]} | {f["d"]}, {f["n"]} | {f["construction"]} | {f["points"]} | '
               f'{_slope(f["params_slope"])} | {_slope(f["params_slope_fine"])} | '
               f'{_g(f["theory_params_slope"])} | '
               f'{_slope(f["blocks_slope"])} | {_g(f["theory_blocks_slope"])} |\n')
  return ''.join(out)


def figure(rows, fit_rows, path: str) -> None:
  """Parameters and depth against certified epsilon (log-log), one line per construction,
  one column per target; fitted and theory slopes in the legend."""
  targets = sorted({(r['target'], r['d'], r['n']) for r in rows})
  fig, axes = plt.subplots(2, len(targets), figsize=(4.6 * len(targets), 10.5), squeeze=False)
  slope = {(f['target'], f['d'], f['n'], f['construction']): f for f in fit_rows}
  for j, (t, d, n) in enumerate(targets):
    for i, (key, label) in enumerate((('params', 'parameters'), ('blocks', 'depth (blocks)'))):
      ax = axes[i][j]
      for c in sorted({_line(r) for r in rows}):
        rs = sorted((r for r in rows if (r['target'], r['d'], r['n'], _line(r))
                     == (t, d, n, c) and r.get('status') == 'certified'),
                    key=lambda r: r['total'])
        if not rs:
          continue
        f = slope[(t, d, n, c)]
        fit = _slope(f[f'{key}_slope'])
        if key == 'params' and f['params_slope_fine'] is not None:
          fit += f', smallest 3: {_slope(f["params_slope_fine"])}'
        ax.loglog([r['total'] for r in rs], [r[key] for r in rs], 'o-',
                  label=f'{c}: slope {fit} (theory {_g(f[f"theory_{key}_slope"])})')
      ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
      ax.set_xlabel('certified d_p(f, g) bound')
      ax.set_ylabel(label)
      ax.set_title(f'{t} (d={d}, n={n})', fontsize=9)
      ax.grid(True, which='both', alpha=0.3)
      if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6.5, loc='upper center', bbox_to_anchor=(0.5, -0.16))
  fig.tight_layout()
  with outputs.atomic_open(path, 'wb') as fh:
    fig.savefig(fh, format='png', dpi=110)
  plt.close(fig)


#: f's cube mean minus its value at the cube centre, per entry, for the polynomial
#: built-ins (so d_2(f, cube means)^2 = d_2(f, centre values)^2 - nd correction^2):
#: token_times_mean f_j = x_j mean_k x_k: E[u_j mean_k u_k] = E u_j^2 / n = delta^2 / (12 n);
#: prefix_mean is linear: 0.
MEAN_CORRECTION = {'token_times_mean': lambda n, N: 1 / (12 * n * N * N),
                   'prefix_mean': lambda n, N: 0.0}


def grid_error(target: str, d: int, n: int, N: int) -> float | None:  # pylint: disable=invalid-name
  """E(N) = d_2(f, the cube means of the N-grid): no function constant on the cubes of
  the N-grid is closer to f in L2 (the mean is the best constant on each cube). From the
  exact rational integral of ``f_term`` (centre values) less the mean correction; None
  for a target without a closed-form cube mean."""
  if target not in MEAN_CORRECTION:
    return None
  centre = f_term.bound(target, d=d, n=n, resolution=N, p=2.0,
                        positional=target == 'prefix_mean').bound
  return math.sqrt(max(centre ** 2 - n * d * MEAN_CORRECTION[target](n, N) ** 2, 0.0))


def grid_lower_bounds(rows) -> list[dict]:
  """Per (target, d, n, epsilon) with certified rows: the smallest N whose grid error
  E(N) is <= epsilon (every N-grid-constant g_bar needs at least it), next to the
  smallest N a construction certified with."""
  out = []
  keys = sorted({(r['target'], r['d'], r['n'], r['epsilon']) for r in rows
                 if r.get('status') == 'certified' and r['target'] in MEAN_CORRECTION})
  for t, d, n, eps in keys:
    used = min(r['resolution'] for r in rows if r.get('status') == 'certified'
               and (r['target'], r['d'], r['n'], r['epsilon']) == (t, d, n, eps))
    need = next((N for N in range(2, used + 1) if grid_error(t, d, n, N) <= eps), None)
    out.append({'target': t, 'd': d, 'n': n, 'epsilon': eps, 'grid_lower_N': need,
                'smallest_N_certified': used})
  return out


def lower_bounds_markdown(bounds) -> str:
  out = ['| target | d, n | epsilon | smallest N with E(N) <= epsilon (any grid-constant '
         'approximant) | smallest N certified |\n|---|---|---|---|---|\n']
  for b in bounds:
    out.append(f'| {b["target"]} | {b["d"]}, {b["n"]} | {b["epsilon"]:g} | '
               f'{b["grid_lower_N"]} | {b["smallest_N_certified"]} |\n')
  return ''.join(out)


MARKDOWN = 'size_law.md'
JSON = 'size_law.json'
FIGURE = 'size_law.png'


def write_report(rows, out_dir: str, prov: dict) -> dict:
  """size_law.{md,json,png} in ``out_dir`` from the rows (atomic writes)."""
  rows = sorted(rows, key=lambda r: (r['target'], r['d'], r['n'], r['construction'],
                                     r.get('arithmetic', 'exact'), -r['epsilon']))
  fit_rows = fits(rows)
  bounds = grid_lower_bounds(rows)
  figure(rows, fit_rows, os.path.join(out_dir, FIGURE))
  with outputs.atomic_open(os.path.join(out_dir, JSON)) as f:
    json.dump({'provenance': prov, 'rows': rows, 'fits': fit_rows,
               'grid_lower_bounds': bounds}, f, indent=1, default=str)
  md = ('# The certified size-vs-epsilon law\n\n' + provenance.markdown_header(prov, 'report command')
        + '\nEvery row carries its own command, revision, machine and load in `' + JSON + '`.\n\n'
        '## Rows\n\nBounds are proved (`<=`); the Monte Carlo column is sampled, with its '
        'points in the interiors (I) and the ramp windows (W).\n\n' + table_markdown(rows)
        + '\n## Fitted slopes\n\nlog(parameters) and log(depth) against log(certified total).\n\n'
        + fits_markdown(fit_rows)
        + '\n## The grid\'s lower bound\n\nE(N) = d_2(f, cube means of the N-grid), exact '
        'rationals for the polynomial targets: no function constant on the N-grid\'s cubes '
        'is closer to f.\n\n' + lower_bounds_markdown(bounds)
        + f'\n![parameters and depth against epsilon]({FIGURE})\n')
  with outputs.atomic_open(os.path.join(out_dir, MARKDOWN)) as f:
    f.write(md)
  return {'rows': rows, 'fits': fit_rows, 'grid_lower_bounds': bounds}


def parse_targets(text: str) -> tuple:
  """'name:d:n,name:d:n' -> ((name, d, n), ...) (ValueError, one line, when malformed)."""
  out = []
  for item in filter(None, (t.strip() for t in text.split(','))):
    parts = item.split(':')
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
      raise ValueError(f'target {item!r}: write name:d:n, e.g. token_times_mean:1:3.')
    out.append((parts[0], int(parts[1]), int(parts[2])))
  if not out:
    raise ValueError('no target given; write name:d:n[,name:d:n...].')
  return tuple(out)


def study(specs, out_dir: str, *, row_minutes: float = 30.0, parallel: int = 1,
          mc_points: int = 1000, seed: int = 0, log=print, report_only: bool = False) -> dict:
  """The law: runs the missing rows (``run``; none with ``report_only``), then writes
  size_law.{md,json,png} from every row on disk."""
  for s in specs:
    search.check_construction(s.construction)
    targets_lib.get_target(s.target, d=s.d, n=s.n)
  if mc_points < certificate_mc.MIN_POINTS:
    raise ValueError(f'mc_points={mc_points}; at least {certificate_mc.MIN_POINTS} per stratum.')
  rows = run(specs, out_dir, row_minutes=row_minutes, parallel=parallel, mc_points=mc_points,
             seed=seed, log=log, report_only=report_only)
  return write_report(rows, out_dir, provenance.record())
