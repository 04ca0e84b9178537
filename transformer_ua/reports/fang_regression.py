"""Table 1 / Figures 2-3 of Fang et al. Section 5 from finished runs' result.json files.

``write_report(workdir, results_dir)`` reads ``<workdir>/<target>/*/result.json`` and
writes ``results_dir/fang_regression.md``, ``fang_regression_<target>.json``,
``fang_f1_surfaces.png`` (Figure 2) and ``fang_<target>_convergence.png`` (Figure 3;
also drawn for f1). ``results_dir/fang_regression_notes.md``, if present, is
included verbatim (the human reading of the numbers).

Partial sweeps: a run directory without a complete ``result.json`` is reported
separately as UNFINISHED -- the epoch its ``metrics.jsonl`` reached, the epoch of its
newest checkpoint (where it resumes), its latest MSE_Tr / MSE_Te and its time per
epoch so far -- and never enters the Table 1 rows, the seed statistics or the claims.
With ``plans`` (target -> planned run names, from the configs) the runs of the sweep
that were never started are listed too. Unfinished curves are drawn dashed in the
convergence figure.

Deviations from the paper (``deviations``: label -> workdir of a sweep run with a
changed config, e.g. ``{'Adam': ...}`` for experiments/configs/fang_f2_adam.py) enter
Table 1 and Figure 3 as rows named ``<model> [DEVIATION: <label>]``, with their own
commands, and are kept out of the automatic claims about the paper.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re

import numpy as np

from transformer_ua import provenance
from transformer_ua.fang import regression

NOISE_VARIANCE = regression.NOISE_STD ** 2


def _load(workdir, target):
  out = []
  for path in sorted(glob.glob(os.path.join(workdir, target, '*', 'result.json'))):
    with open(path) as f:
      r = json.load(f)
    if r.get('complete'):
      r['_dir'] = os.path.dirname(path)
      out.append(r)
  return out


_RUN_RE = re.compile(r'^(?P<target>f\d+)_(?P<model>attention|nn_width|nn_depth)_'
                     r'(?P<width>\d+)_seed(?P<seed>\d+)$')


def _read_jsonl(path):
  rows = []
  if os.path.exists(path):
    with open(path) as f:
      for line in f:
        try:
          rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written by a live run
          pass
  return rows


def _latest_checkpoint(run_dir):
  """(epoch, seconds trained up to it) of the newest committed checkpoint, or (None, None).

  The time comes from the checkpoint's JSON meta (``Checkpointer.save(meta=...)``)."""
  ckdir = os.path.join(run_dir, 'checkpoints')
  steps = sorted((int(s) for s in (os.listdir(ckdir) if os.path.isdir(ckdir) else [])
                  if s.isdigit() and os.path.exists(os.path.join(ckdir, s, 'commit_success.txt'))),
                 reverse=True)
  for step in steps:
    try:
      with open(os.path.join(ckdir, str(step), 'meta', 'metadata')) as f:
        return step, float(json.load(f)['elapsed'])
    except (OSError, ValueError, KeyError, TypeError):
      return step, None
  return None, None


def _load_unfinished(workdir, target, finished_names, epochs_planned=None):
  """Runs under ``workdir/target`` without a complete result.json (see module doc)."""
  out = []
  for run_dir in sorted(glob.glob(os.path.join(workdir, target, '*'))):
    name = os.path.basename(run_dir)
    m = _RUN_RE.match(name)
    if name in finished_names or not m or not os.path.isdir(run_dir):
      continue
    rows = [r for r in _read_jsonl(os.path.join(run_dir, 'metrics.jsonl'))
            if isinstance(r.get('step'), int)]
    # A resumed run rewrites rows past its checkpoint: keep the last row per epoch.
    by_epoch = {r['step']: r for r in rows}
    history = [dict(by_epoch[e], epoch=e) for e in sorted(by_epoch)]
    ckpt_epoch, elapsed = _latest_checkpoint(run_dir)
    last_test = next(((h['epoch'], h['test_mse']) for h in reversed(history)
                      if 'test_mse' in h), (None, None))
    model, width = m['model'], int(m['width'])
    out.append({
        'name': name, 'target': target, 'model': model, 'seed': int(m['seed']),
        'num_tokens': width if model != 'nn_depth' else None,
        'depth_width': width if model == 'nn_depth' else None,
        'epochs_reached': history[-1]['epoch'] if history else 0,
        'epochs_planned': (epochs_planned or {}).get(name),
        'checkpoint_epoch': ckpt_epoch, 'seconds_to_checkpoint': elapsed,
        'seconds_per_epoch': (elapsed / ckpt_epoch if elapsed and ckpt_epoch else None),
        'last_train_mse': history[-1]['train_mse'] if history else None,
        'last_test_epoch': last_test[0], 'last_test_mse': last_test[1],
        'history': history})
  return out


def _entry(r):
  if r['model'] == 'nn_depth':
    return f"nn_depth (width {r['depth_width']})"
  return f"{r['model']} (n = {r['num_tokens']})"


def _group(results):
  groups = {}
  for r in results:
    groups.setdefault(_entry(r), []).append(r)
  order = lambda k: (regression.MODELS.index(k.split(' ')[0]), k)
  return {k: sorted(groups[k], key=lambda r: r['seed']) for k in sorted(groups, key=order)}


def _ms(vals, fmt='{:.4g}'):
  vals = [v for v in vals if v is not None and math.isfinite(v)]
  if not vals:
    return 'never'
  if len(vals) == 1:
    return fmt.format(vals[0])
  return f"{fmt.format(np.mean(vals))} ± {fmt.format(np.std(vals, ddof=1))}"


def load_optimum(results_dir, target):
  """``results_dir/fang_optimum_<target>.json`` (experiments/fang_optimum.py) or None."""
  path = os.path.join(results_dir, f'fang_optimum_{target}.json')
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def optimum_rows(opt) -> list[str]:
  """Table 1 rows of the float64 least-squares optima (``fang.optimum``): the global one
  over (F, beta, b) and, per token count, (beta, b) at each seed's F (mean ± std)."""
  blank = ' | '.join(['—'] * 6)
  p = opt['polynomial']
  rows = [f"| OPTIMUM over (F, beta, b) = least squares on all polynomials of degree "
          f"<= q (float64; rank {p['rank']} of {p['num_features']}, cond "
          f"{p['cond_equilibrated']:.3g} column-equilibrated) | {p['num_features']} coef. | "
          f"data_seed {opt['data_seed']} | {p['mse_train']:.4g} | {p['mse_test']:.4g} | "
          f"{p['mse_test_vs_f']:.4g} | {blank} |"]
  by = {}
  for r in opt['fixed_F'].values():
    by.setdefault((r['num_tokens'], r['F']), []).append(r)
  for (n, which), rs in sorted(by.items()):
    rank = sorted({r['rank'] for r in rs})
    cond = _ms([r['cond_G_on_rank'] for r in rs], '{:.3g}')
    rows.append(
        f"| OPTIMUM over (beta, b), F fixed at the {which} F of attention (n = {n}) "
        f"(rank of G {'/'.join(map(str, rank))} of {rs[0]['max_rank']}, cond(G) {cond}) | "
        f"{rs[0]['num_params']} | {len(rs)} (seeds {', '.join(str(r['seed']) for r in rs)}) | "
        f"{_ms([r['mse_train'] for r in rs])} | {_ms([r['mse_test'] for r in rs])} | "
        f"{_ms([r['mse_test_vs_f'] for r in rs])} | {blank} |")
  return rows


def table(groups, optimum=None, deviation_groups=None) -> str:
  lines = ['| model | params | seeds | MSE_Tr | MSE_Te | MSE_Te vs f (noiseless) | '
           '# epochs (paper rule) | epochs (rule holds from then on) | run time to conv. (s) '
           '| run time total (s) | s / epoch |',
           '|---|---|---|---|---|---|---|---|---|---|---|']
  for name, rs in {**groups, **(deviation_groups or {})}.items():
    conv = [r['epochs_to_convergence'] for r in rs]
    lines.append(
        f"| {name} | {rs[0]['num_params']} | {len(rs)} | {_ms([r['mse_train'] for r in rs])} | "
        f"{_ms([r['mse_test'] for r in rs])} | {_ms([r['mse_test_vs_f'] for r in rs])} | "
        f"{_ms(conv, '{:.0f}')}{' (never: ' + str(conv.count(None)) + ')' if None in conv else ''}"
        f" | {_ms([r['epochs_to_stable_convergence'] for r in rs], '{:.0f}')} | "
        f"{_ms([r['run_time_to_convergence_s'] for r in rs], '{:.0f}')} | "
        f"{_ms([r['run_time_s'] for r in rs], '{:.0f}')} | "
        f"{_ms([r['run_time_s'] / max(1, r['epochs_done']) for r in rs], '{:.3g}')} |")
  if optimum:
    lines += optimum_rows(optimum)
  return '\n'.join(lines)


def unfinished_table(unfinished) -> str:
  lines = ['| run | epochs reached / planned | newest checkpoint (resumes from) | MSE_Tr at '
           'epoch reached | latest MSE_Te (epoch) | time to checkpoint (s) | s / epoch |',
           '|---|---|---|---|---|---|---|']
  f = lambda v, fmt='{:.4g}': '?' if v is None else fmt.format(v)
  for u in unfinished:
    lines.append(
        f"| {u['name']} (UNFINISHED) | {u['epochs_reached']} / {f(u['epochs_planned'], '{}')} | "
        f"{f(u['checkpoint_epoch'], '{}')} | {f(u['last_train_mse'])} | "
        f"{f(u['last_test_mse'])} ({f(u['last_test_epoch'], '{}')}) | "
        f"{f(u['seconds_to_checkpoint'], '{:.0f}')} | {f(u['seconds_per_epoch'], '{:.3g}')} |")
  return '\n'.join(lines)


def convergence_figure(groups, path, title, unfinished=(), optimum=None):
  """Figure 3 analogue: MSE_Tr and MSE_Te per epoch, mean over seeds with a band of
  +- 1 sample std (ddof 1, as in Table 1), the noise variance, and -- given the
  ``fang_optimum`` record -- the float64 least-squares optimum of the ATTENTION class."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
  names = list(groups) + [n for n in dict.fromkeys(_entry(u) for u in unfinished)
                          if n not in groups]
  order = lambda k: (regression.MODELS.index(k.split(' ')[0]), k)
  colors = {n: f'C{i}' for i, n in enumerate(sorted(names, key=order))}
  for u in unfinished:
    for ax, key in zip(axes, ('train_mse', 'test_mse')):
      pts = [(h['epoch'], h[key]) for h in u['history'] if key in h]
      if pts:
        ax.plot(*zip(*pts), color=colors[_entry(u)], ls='--', lw=1,
                label=f"{_entry(u)}, seed {u['seed']}: UNFINISHED at epoch "
                      f"{u['epochs_reached']}")
  for name, rs in groups.items():
    color = colors[name]
    for ax, key in zip(axes, ('train_mse', 'test_mse')):
      curves = []
      for r in rs:
        pts = [(h['epoch'], h[key]) for h in r['history'] if key in h]
        curves.append(pts)
      n = min(len(c) for c in curves)
      ep = np.asarray([p[0] for p in curves[0][:n]])
      vals = np.asarray([[p[1] for p in c[:n]] for c in curves])
      seeds = f"{len(rs)} seed{'s' if len(rs) > 1 else ''}"
      ax.plot(ep, np.mean(vals, 0), color=color, label=f'{name} ({seeds})')
      if len(rs) > 1:
        mean, std = np.mean(vals, 0), np.std(vals, 0, ddof=1)
        # log axis: mean - std can be <= 0, so the lower edge stops at a tenth of the mean
        ax.fill_between(ep, np.maximum(mean - std, mean / 10), mean + std, color=color,
                        alpha=0.2)
  poly = (optimum or {}).get('polynomial')
  for ax, title_, opt_key in zip(axes, ('MSE_Tr (epoch mean of batch losses)', 'MSE_Te'),
                                 ('mse_train', 'mse_test')):
    ax.set_yscale('log')
    ax.axhline(NOISE_VARIANCE, color='k', ls=':', lw=1, label='noise variance 1')
    if poly:
      ax.axhline(poly[opt_key], color='0.4', ls='--', lw=1,
                 label='least-squares optimum of the ATTENTION class (float64): '
                       f"MSE_Tr {poly['mse_train']:.3f}, MSE_Te {poly['mse_test']:.3f}")
    ax.set_xlabel('epoch')
    ax.set_title(title_)
  axes[0].set_ylabel('MSE')
  fig.suptitle(title)
  fig.tight_layout()
  fig.legend(*axes[0].get_legend_handles_labels(), loc='upper center',
             bbox_to_anchor=(0.5, 0), ncol=2, fontsize=7, frameon=False)
  fig.savefig(path, dpi=110, bbox_inches='tight')      # the box takes in the legend
  plt.close(fig)


def surfaces_figure(groups, path):
  """Figure 2: f1 truth and each model's output surface (first seed) on [-30, 30]^2."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  import jax
  g = np.linspace(-30, 30, 61)
  X1, X2 = np.meshgrid(g, g)
  xs = np.stack([X1.ravel(), X2.ravel()], -1)
  panels = [('truth f1 = x1^2 + x2^2', (X1 ** 2 + X2 ** 2))]
  for name, rs in groups.items():
    r = rs[0]
    flat = regression.load_params(r['_dir'])
    if r['model'] == 'attention':
      params = {k: np.asarray(v, np.float64) for k, v in flat.items()}
    else:
      nl = len({k.split('/')[1] for k in flat})
      params = {'layers': [{'w': np.asarray(flat[f'layers/{i}/w'], np.float64),
                            'b': np.asarray(flat[f'layers/{i}/b'], np.float64)}
                           for i in range(nl)]}
    with jax.enable_x64(True):
      z = np.asarray(regression.apply_fn(r['model'])(params, xs)).reshape(X1.shape)
    panels.append((f"{name}, seed {r['seed']}\nMSE_Te {r['mse_test']:.4g}, "
                   f"vs f {r['mse_test_vs_f']:.4g}", z))
  fig = plt.figure(figsize=(4.2 * len(panels), 4.2))
  for i, (title, z) in enumerate(panels):
    ax = fig.add_subplot(1, len(panels), i + 1, projection='3d')
    ax.plot_surface(X1, X2, z, cmap='viridis', linewidth=0, antialiased=True)
    ax.set_title(title, fontsize=8)
    ax.set_xlabel('x1')
    ax.set_ylabel('x2')
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def claims(groups) -> str:
  """Automatic check of the paper's claims against the numbers (finished runs only)."""
  lines = []
  att = {k: v for k, v in groups.items() if k.startswith('attention')}
  mlp = {k: v for k, v in groups.items() if not k.startswith('attention')}
  for name, rs in att.items():
    te = np.mean([r['mse_test'] for r in rs])
    verdict = ('fits to the noise level' if te <= 1.5 * NOISE_VARIANCE
               else 'does NOT reach the noise level')
    lines.append(f'- {name}: mean MSE_Te {te:.4g} vs noise variance 1 -> {verdict}.')
  best_att = min((np.mean([r['mse_test'] for r in rs]) for rs in att.values()), default=math.nan)
  for name, rs in mlp.items():
    te = np.mean([r['mse_test'] for r in rs])
    if not att:
      lines.append(f'- {name}: mean MSE_Te {te:.4g}; no finished ATTENTION run to compare with.')
      continue
    rel = 'worse than' if te > best_att else 'not worse than'
    lines.append(f'- {name}: mean MSE_Te {te:.4g}, {rel} the best ATTENTION run ({best_att:.4g}).')
  return '\n'.join(lines)


def _deviation_groups(deviations, target):
  """label -> workdir  =>  ({'<model> [DEVIATION: label]': runs}, [runs])."""
  groups, runs = {}, []
  for label, wd in (deviations or {}).items():
    rs = [dict(r, _deviation=label) for r in _load(wd, target)]
    runs += rs
    groups.update({f'{name} [DEVIATION: {label}]': g for name, g in _group(rs).items()})
  return groups, runs


def _curves(runs):
  return {r['name']: [[h['epoch'], h['train_mse'], h.get('test_mse')] for h in r['history']]
          for r in runs}


def write_report(workdir: str, results_dir: str, plans: dict | None = None,
                 deviations: dict | None = None, report_provenance: dict | None = None
                 ) -> str:
  """Writes the report; ``plans``: target -> {run name: planned epochs} of the full sweep;
  ``deviations``: label -> workdir of runs with a config that deviates from the paper;
  ``report_provenance``: ``provenance.record()`` of the command building the report and
  its figures (each run's own command is listed in its section)."""
  os.makedirs(results_dir, exist_ok=True)
  plans = plans or {}
  md = ['# Fang et al. 2022, Section 5: noisy polynomial regression', '',
        'Generated by `experiments/fang_regression.py` from the runs\' `result.json` files '
        '(`transformer_ua/reports/fang_regression.py`). MSE_Tr / MSE_Te are against the '
        'noisy targets y = f + N(0,1) (noise variance 1 is the floor); "vs f" is against '
        'the noiseless f on the test set. Epochs to convergence: the paper\'s rule, the first '
        'epoch with |MSE_Tr(e) - MSE_Tr(e-1)| < 0.01 (MSE_Tr = mean of the epoch\'s batch '
        'losses), and the first epoch from which the rule holds to the end. Mean ± sample std (ddof 1) over '
        'seeds (model initialization and batch order; one data set, data_seed 0).', '']
  if report_provenance:
    md += [provenance.markdown_header(report_provenance, 'report command (tables, figures)')]
  for target in regression.TARGETS:
    results = _load(workdir, target)
    planned = plans.get(target, {})
    unfinished = _load_unfinished(workdir, target, {r['name'] for r in results}, planned)
    started = {r['name'] for r in results} | {u['name'] for u in unfinished}
    not_started = [n for n in planned if n not in started]
    if not results and not unfinished:
      md += [f'## {target}', '', 'No runs yet.', '']
      continue
    groups = _group(results)
    dev_groups, dev_runs = _deviation_groups(deviations, target)
    slim = lambda runs: [{k: v for k, v in r.items() if k not in ('history', '_dir',
                                                                  '_deviation')}
                         for r in runs]
    opt = load_optimum(results_dir, target)
    with open(os.path.join(results_dir, f'fang_regression_{target}.json'), 'w') as f:
      json.dump({'runs': slim(results), 'curves_epoch_train_test': _curves(results),
                 'optimum': opt,
                 'deviations': {name: {'runs': slim(rs), 'curves_epoch_train_test': _curves(rs)}
                                for name, rs in dev_groups.items()},
                 'unfinished_runs': [{k: v for k, v in u.items() if k != 'history'}
                                     for u in unfinished],
                 'unfinished_curves_epoch_train_test': _curves(unfinished),
                 'not_started': not_started, 'report_provenance': report_provenance},
                f, indent=1)
    conv_png = f'fang_{target}_convergence.png'
    convergence_figure({**groups, **dev_groups}, os.path.join(results_dir, conv_png),
                       f'{target}: MSE per epoch (mean over seeds, band = +- 1 sample '
                       'std; dashed = unfinished run)', unfinished, opt)
    spec = regression.DATA[target]
    md += [f'## {target} (d = {spec["d"]}, q = {spec["q"]}, {spec["num_train"]} train / '
           f'{spec["num_samples"] - spec["num_train"]} test)', '']
    if planned:
      md += [f'Sweep status: {len(results)} of {len(planned)} planned runs finished, '
             f'{len(unfinished)} unfinished, {len(not_started)} not started.', '']
    md += _finished_section(target, results, groups, opt, dev_groups, dev_runs) if results else [
        'No finished runs yet: no Table 1 rows.', '']
    if unfinished:
      md += ['UNFINISHED runs -- not in Table 1 nor in the automatic claims; their numbers '
             'are at the epoch reached, in the middle of the one-cycle schedule, not final:',
             '', unfinished_table(unfinished), '']
    if not_started:
      md += [f'Not started: {", ".join(not_started)}.', '']
    if results:
      md += ['Claims of the paper, checked automatically (finished runs only):', '',
             claims(groups), '']
    if target == 'f1' and results:
      surf = 'fang_f1_surfaces.png'
      surfaces_figure({k: v for k, v in groups.items()}, os.path.join(results_dir, surf))
      md += [f'Figure 2 analogue: ![f1 surfaces]({surf})', '']
    md += [f'Figure 3 analogue: ![{target} convergence]({conv_png})', '']
  disc = os.path.join(results_dir, 'fang_regression_notes.md')
  if os.path.exists(disc):
    with open(disc) as f:
      md += [f.read()]
  path = os.path.join(results_dir, 'fang_regression.md')
  with open(path, 'w') as f:
    f.write('\n'.join(md) + '\n')
  return path


def _optimum_note(opt) -> str:
  pv = opt['provenance']
  return ('OPTIMUM rows: the best the ATTENTION representation can do on this training '
          'set (`transformer_ua/fang/optimum.py`, float64 least squares; MSE_Te is the test '
          'error of the train-optimal fit, not a bound). Training MSE of every model in the '
          'class, trained rows included, is >= the first OPTIMUM row. '
          f"Command `{pv['command']}` at revision `{pv['git_revision']}`, {pv['machine']}, "
          f"1-min load {pv['load_average_1min_at_start']}" + ''.join(
              f"; entries kept (--resume) from `{e['provenance']['command']}` at revision "
              f"`{e['provenance']['git_revision']}`, 1-min load "
              f"{e['provenance']['load_average_1min_at_start']}"
              for e in opt.get('earlier_runs', [])) + '.')


def _finished_section(target, results, groups, optimum=None, deviation_groups=None,
                      deviation_runs=()):
  md = []
  provs = {json.dumps({k: r['provenance'][k] for k in ('command', 'git_revision')})
           for r in [*results, *deviation_runs]}
  for pv in sorted(provs):
    pv = json.loads(pv)
    md.append(f"- command: `{pv['command']}` at revision `{pv['git_revision']}`")
  r0 = results[0]['provenance']
  loads = [r['provenance']['load_average_1min_at_start'] for r in [*results, *deviation_runs]]
  md += [f"- machine: {r0['machine']}; 1-min load when the results were recorded "
         f"{min(loads)}..{max(loads)} "
         '(shared machine: run times include contention)', '']
  md += [table(groups, optimum, deviation_groups), '']
  if optimum:
    md += [_optimum_note(optimum), '']
  lit = [(r['name'] + (f" [DEVIATION: {r['_deviation']}]" if '_deviation' in r else ''),
          r['literal_check']) for r in [*results, *deviation_runs] if 'literal_check' in r]
  if lit:
    md += ['Literal network (trained F, beta, b + the fixed Lemma 3.1 blocks, float64) vs the '
           'compact path the model was trained through, on test inputs:', '',
           '| run | points | B (max data norm) | max rel. literal vs compact | max rel. '
           'compact vs training fn | literal time (s) |', '|---|---|---|---|---|---|']
    for name, c in lit:
      md.append(f"| {name} | {c['points']} | {c['bound_B']:.4g} | "
                f"{c['max_rel_literal_vs_compact']:.3g} | "
                f"{c['max_rel_compact_vs_training_fn']:.3g} | {c['literal_seconds']:.1f} |")
    md.append('')
  skipped = [r['name'] for r in results if r['model'] == 'attention' and 'literal_check' not in r]
  if skipped:
    md += [f"No literal-network check recorded for {', '.join(skipped)} "
           '(literal_check_points = 0 or not the first seed).', '']
  for r in results:
    if 'literal_check_error' in r:
      md += [f"Literal check of {r['name']} failed: {r['literal_check_error']}", '']
  return md
