r"""Has Appendix H pre-training plateaued? (experiments/mixing_sweep.py --compare_to)

Sweeps of one model, data, batch order and peak learning rate under schedules of
different lengths (`cpu` 2000 steps, `cpu_long` 6000, `cpu_longer` 18000, `cpu_longest`
54000: the --compare_to workdirs and this call's --workdir). Only the step count
differs, and with it the linear decay of the learning rate to 0. With acc_S(m, s) the held-out
masked-LM accuracy (%) of Table 1 mixer m, seed s, at the end of the S-step schedule,
and S' the next shorter schedule:

    gain(m, S)    = acc_S(m, 0) - acc_S'(m, 0)             what S / S' x the tokens buy
    gain_lq(m, S) = acc_S(m, s; step S) - acc_S(m, s; 3S/4) the last quarter, per seed

m has plateaued at S when gain(m, S) < PLATEAU_POINTS. Every schedule but the shortest
(whose claims are in its own report) is checked against the paper's Table 1 claims by
claims(), on the means over its finished seeds; a mixer with one finished seed takes
as its seed noise the sample std of its nearest shorter schedule with >= 2 seeds (an
assumption, stated in the report).

Writes mixing_layers_plateau.{md,json,png}. Each schedule comes from a workdir, its
--archive_to copy, or an earlier mixing_layers_plateau.json (sweeps whose workdirs
are gone).
"""

from __future__ import annotations

import glob
import json
import os

import numpy as np

from transformer_ua import provenance
from transformer_ua.outputs import atomic_write
from transformer_ua.reports.mixing_claims import SE_MULTIPLE, claims
from transformer_ua.reports.mixing_markdown import runs_lines
from transformer_ua.reports.mixing_rows import (NAMES, TABLE_MODELS, collect, fmt_mean_std,
                                                last_quarter_gain, learning_curves_of,
                                                mean_std, runs_summary, task_baselines)

PLATEAU_STEM = 'mixing_layers_plateau'
PLATEAU_SEED = 0        # every schedule has it; its batches are the same across schedules
PLATEAU_POINTS = 1.0    # plateaued: the last tripling of the tokens bought < 1 point
# a row's summary -> the claims() table field it is judged as (the Table 1 claims' metrics)
CLAIM_FIELDS = {'mlm': 'mlm_accuracy', 'mnli': 'mnli_accuracy'}
CURVE_METRICS = {'mlm': ('eval_mlm_accuracy', 'held-out masked-LM accuracy (%)'),
                 'nsp': ('eval_nsp_accuracy', 'held-out sentence-pair accuracy (%)')}


class ScheduleError(ValueError):
  """A --compare_to / --workdir set that cannot be compared (one line for the user)."""


def schedule_steps(root):
  """The pre-training step count of the sweep under ``root``, from its runs' config.json."""
  steps = set()
  for path in glob.glob(os.path.join(root, '*', 'pretrain', 'config.json')):
    with open(path) as f:
      n = json.load(f).get('pretrain', {}).get('num_steps')
    if n is None:
      raise ScheduleError(f'{path} has no pretrain.num_steps')
    steps.add(int(n))
  if len(steps) != 1:
    raise ScheduleError(f'{root} holds ' + (f'runs of several schedules ({sorted(steps)} steps)'
                                            if steps else 'no pre-training run'))
  return steps.pop()


def _finals(runs, m, stage, field):
  """{seed: value} of the finished ``stage`` runs of Table 1 mixer m."""
  return {r['seed']: r['eval'][field] for r in runs.get((m, 0), {}).get(stage, [])}


def _run_id(result):
  """What tells one pre-training run from another: its machine and start time, that of
  its first attempt if it was resumed (a copy of a workdir, e.g. its --archive_to
  archive, holds the same runs)."""
  p = (result.get('segments') or [result['provenance']])[0]
  return f"{p['machine']} at {p['utc_time']}"


def _schedule_of_workdir(root):
  """One schedule from the runs under ``root`` (a workdir or its --archive_to copy):
  {'steps', 'baselines', 'sources': [{'root', 'via': None, 'runs_summary'}],
   'rows': {mixer: row without 'gain_seed0'}, 'curves': {'mlm' | 'nsp': {mixer: seed-0
   points or None}}}; a row's 'source' is ``root``."""
  steps = schedule_steps(root)
  runs = collect(root)
  train_metric = 'mlm_accuracy'   # training rows, a fraction
  c = learning_curves_of(root, [m for m, _ in CURVE_METRICS.values()] + [train_metric])
  mlm_curves = c[CURVE_METRICS['mlm'][0]]
  seed = PLATEAU_SEED
  rows = {}
  for m in TABLE_MODELS:
    mlm, mnli = _finals(runs, m, 'pretrain', 'mlm_accuracy'), _finals(runs, m, 'mnli', 'accuracy')
    train = dict(c[train_metric].get((m, 0), {}).get(seed, []))
    rows[m] = {
        'steps': steps, 'source': root, 'mlm': mean_std(list(mlm.values())),
        'mlm_seed0': mlm.get(seed),
        'gain_last_quarter': mean_std(last_quarter_gain(mlm_curves.get((m, 0), {}), steps)),
        'nsp': mean_std(list(_finals(runs, m, 'pretrain', 'nsp_accuracy').values())),
        'mnli': mean_std(list(mnli.values())), 'mnli_seed0': mnli.get(seed),
        'train_mlm_seed0': (100 * train[steps] if seed in mlm and steps in train else None),
        'run_seed0': next((_run_id(r) for r in runs.get((m, 0), {}).get('pretrain', [])
                           if r['seed'] == seed), None)}
  curves = {key: {m: c[metric].get((m, 0), {}).get(seed) for m in TABLE_MODELS}
            for key, (metric, _) in CURVE_METRICS.items()}
  return {'steps': steps, 'baselines': task_baselines(runs), 'rows': rows, 'curves': curves,
          'sources': [{'root': root, 'via': None, 'runs_summary': runs_summary(runs)}]}


def _schedules_of_report(path):
  """The schedules of an earlier plateau report (its ``.json``), shaped as
  _schedule_of_workdir's: the record of sweeps whose workdirs are gone. Every source
  and row gets 'via': ``path`` and the report's revision (an earlier 'via' is kept)."""
  try:
    with open(path) as f:
      d = json.load(f)
    scheds, rev = d['schedules'], d['report_provenance']['git_revision'][:7]
    rows, curves = d['rows'], d['learning_curves_seed0']
    steps_of = [int(x['steps']) for x in scheds]
    row_steps = {m: [r['steps'] for r in rows.get(m, [])] for m in TABLE_MODELS}
  except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
    raise ScheduleError(f'{path} is not a plateau report written by --compare_to '
                        f'({type(e).__name__}: {e})') from None
  via = f'{path} (report at {rev})'
  out = []
  for x, steps in zip(scheds, steps_of):
    if any(row_steps[m].count(steps) != 1 for m in TABLE_MODELS):
      raise ScheduleError(f'{path} is not a plateau report written by --compare_to (its '
                          f'rows do not hold one row per mixer for {steps} steps)')
    srcs = x.get('sources') or [{'root': x['root'], 'runs_summary': x['runs_summary']}]
    out.append({
        'steps': steps, 'baselines': x.get('baselines') or {},
        'sources': [dict(s, via=s.get('via') or via) for s in srcs],
        'rows': {m: dict(r, source=r.get('source') or srcs[0]['root'],
                         via=r.get('via') or via)
                 for m in TABLE_MODELS for r in rows.get(m, []) if r['steps'] == steps},
        'curves': {key: {m: [tuple(p) for p in pts] if pts else None
                         for m, pts in curves.get(key, {}).get(str(steps), {}).items()}
                   for key in CURVE_METRICS},
        'claims': d.get('claims', {}).get(str(steps))})
  return out


def _points(curve):
  return [tuple(p) for p in curve or ()]


def _reruns(ps, pick, m):
  """The other seed-0 runs of mixer m among one schedule's parts ``ps`` (and the reruns
  that their rows recorded), each once: [{'source', 'via', 'run_seed0', 'machines',
  'mlm_seed0', 'mnli_seed0', 'curve_mlm'}]. A run is known by _run_id (rows recorded
  before it was stored: by their source). Same mixer, schedule and seed means the same batches, so
  they differ only by the machine's numerics (or a code change between them)."""
  ident = lambda r: r.get('run_seed0') or r['source']   # reports before 2026-11-24: source
  seen, out = {ident(pick[m]['rows'][m])}, []
  used_curve = _points(pick[m]['curves']['mlm'].get(m))
  for p in ps:
    r = p['rows'][m]
    found = list(r.get('reruns') or [])
    if p is not pick[m] and r['mlm_seed0'] is not None:
      found.insert(0, {
          'source': r['source'], 'via': r.get('via'), 'run_seed0': r.get('run_seed0'),
          'mlm_seed0': r['mlm_seed0'],
          'mnli_seed0': r['mnli_seed0'], 'curve_mlm': p['curves']['mlm'].get(m),
          'machines': next((s['runs_summary']['machines'] for s in p['sources']
                            if s['root'] == r['source']), [])})
    for x in found:   # an identical curve: the same run (or an exact repeat), nothing to add
      if ident(x) not in seen and _points(x['curve_mlm']) != used_curve:
        seen.add(ident(x))
        out.append(x)
  return out


def _merge_schedules(parts):
  """One schedule per step count, shortest first, from _schedule_of_workdir() and
  _schedules_of_report() parts. Per mixer, the part with the most finished seeds gives the
  row and the curves (ties: one with a learning curve, then a workdir over a report), so a
  rerun in a workdir replaces what an earlier report recorded, and the replaced seed-0 run
  is kept in the row's 'reruns' (_reruns). Two workdirs of one schedule raise
  ScheduleError."""
  by_steps = {}
  for p in parts:
    by_steps.setdefault(p['steps'], []).append(p)
  out = []
  for steps, ps in sorted(by_steps.items()):
    if sum(p['sources'][0]['via'] is None for p in ps) > 1:
      raise ScheduleError(f'two workdirs hold the same {steps}-step schedule')
    rank = lambda p, m: ((p['rows'][m]['mlm'] or {}).get('n', 0),
                         p['curves']['mlm'].get(m) is not None, p['sources'][0]['via'] is None)
    pick = {m: max(ps, key=lambda p: rank(p, m)) for m in TABLE_MODELS}
    used = [p for p in ps if any(pick[m] is p for m in TABLE_MODELS)]
    x = {'steps': steps,
         'baselines': next((p['baselines'] for p in ps if p['baselines']), {}),
         'sources': [dict(s, mixers=ms) for p in used for s in p['sources'] if (ms := [
             m for m in TABLE_MODELS if pick[m] is p and pick[m]['rows'][m]['source'] == s['root']
             and rank(p, m)[:2] != (0, False)])],
         'rows': {m: dict(pick[m]['rows'][m], reruns=_reruns(ps, pick, m))
                  for m in TABLE_MODELS},
         'curves': {key: {m: pick[m]['curves'][key].get(m) for m in TABLE_MODELS}
                    for key in CURVE_METRICS}}
    if len(used) == 1 and used[0].get('claims') is not None:
      x['report_claims'] = used[0]['claims']
    out.append(x)
  return out


def _noise_donor(mixer_rows, i, key):
  """The index of the nearest schedule shorter than schedule i whose ``key`` summary has
  >= 2 seeds (its sample std is the seed noise a single run borrows), or None."""
  return next((j for j in reversed(range(i)) if (mixer_rows[j][key] or {}).get('n', 0) > 1),
              None)


def seed_noise(roots, steps):
  """{mixer: {'mlm_accuracy' | 'mnli_accuracy': {'std', 'steps'}}}: for each Table 1 mixer,
  the sample std over seeds of its held-out MLM and MNLI-analogue accuracy under the
  longest schedule of ``roots`` (compare_schedules) shorter than ``steps`` that has >= 2
  finished seeds. A sweep of ``steps`` steps with one run of a mixer takes it as that
  run's seed noise (mixing.report), as the plateau report does. Raises ScheduleError."""
  scheds, rows, _, _ = compare_schedules(roots)
  i = sum(x['steps'] < steps for x in scheds)      # schedules are shortest first
  out = {}
  for m in TABLE_MODELS:
    for key, field in CLAIM_FIELDS.items():
      j = _noise_donor(rows[m], i, key)
      if j is not None:
        out.setdefault(m, {})[field] = {'std': rows[m][j][key]['std'],
                                        'steps': scheds[j]['steps']}
  return out


def compare_schedules(roots):
  """(schedules, rows, plateau, checks) for the sweeps of one model under schedules of
  different lengths, shortest first. Each of ``roots`` is a workdir (or its archive) or
  the ``.json`` of an earlier plateau report (for sweeps whose workdirs are gone).

  schedules: [{'steps', 'baselines', 'sources': [{'root', 'via', 'runs_summary',
        'mixers'}], 'curves': {'mlm' | 'nsp': {mixer: seed-0 learning curve}}}];
  rows: {mixer: [one dict per schedule: mlm, gain_last_quarter, nsp, mnli (mean ± std over
        finished seeds), mlm_seed0, mnli_seed0, gain_seed0 (over the previous schedule),
        train_mlm_seed0 (% on the training batches of the last log window, with dropout:
        far above the held-out mlm means memorisation), source (its workdir), via (the
        report it was read from, if any)]};
  plateau: {mixer: None or {'steps', 'from_steps', 'gain', 'plateaued'}} at its longest
        schedule with a gain; checks: {steps: claims()} from the second schedule on.
  """
  parts = []
  for r in roots:
    parts += _schedules_of_report(r) if r.endswith('.json') else [_schedule_of_workdir(r)]
  scheds = _merge_schedules(parts)
  rows, plateau = {}, {}
  for m in TABLE_MODELS:
    rows[m] = []
    for i, x in enumerate(scheds):
      r = dict(x['rows'][m])
      prev = rows[m][-1]['mlm_seed0'] if i else None
      r['gain_seed0'] = (r['mlm_seed0'] - prev if r['mlm_seed0'] is not None
                         and prev is not None else None)
      rows[m].append(r)
    last = next((i for i in reversed(range(len(scheds))) if rows[m][i]['gain_seed0'] is not None),
                None)
    plateau[m] = None if last is None else {
        'steps': scheds[last]['steps'], 'from_steps': scheds[last - 1]['steps'],
        'gain': rows[m][last]['gain_seed0'],
        'plateaued': rows[m][last]['gain_seed0'] < PLATEAU_POINTS}
  for x in scheds:
    del x['rows']

  def with_noise(m, i, key):
    """Schedule i's summary of m's ``key``; one run borrows a shorter schedule's std."""
    s = rows[m][i][key]
    if s is None or s['n'] > 1:
      return s
    j = _noise_donor(rows[m], i, key)
    return dict(s, seed_std=rows[m][j][key]['std'] if j is not None else None)

  # The task data do not depend on the step count (the configs differ only in it), so
  # any schedule's fine-tuning runs give the baselines. Without any (reports before
  # 2026-11-24 did not store them), a schedule recorded whole by one report keeps that
  # report's judgement of the claims, which had them.
  baselines = next((x['baselines'] for x in scheds if x['baselines']), {})
  checks = {}
  for i in range(1, len(scheds)):
    kept = scheds[i].pop('report_claims', None)
    if kept is not None and not baselines:
      scheds[i]['claims_via'] = scheds[i]['sources'][0]['via']
      checks[scheds[i]['steps']] = kept
      continue
    table = {m: {field: with_noise(m, i, key) for key, field in CLAIM_FIELDS.items()}
             for m in TABLE_MODELS}
    checks[scheds[i]['steps']] = [{'claim': c, 'measured': v, 'verdict': w}
                                  for c, v, w in claims(table, None, 0, baselines)]
  scheds[0].pop('report_claims', None)
  return scheds, rows, plateau, checks


SCHEDULE_STYLES = (':', '--', '-', '-.')


def _plot_schedules(scheds, rows, tokens_per_step, path):
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 3, figsize=(19, 4.8))
  colors = {m: f'C{i}' for i, m in enumerate(TABLE_MODELS)}
  mpos = lambda steps: np.asarray(steps) * tokens_per_step / 1e6
  for ax, (key, (_, ylabel)) in zip(axes, CURVE_METRICS.items()):
    for i, x in enumerate(scheds):
      for m in TABLE_MODELS:
        pts = x['curves'][key].get(m)
        if pts:
          steps, acc = zip(*pts)
          ax.plot(mpos(steps), acc, ls=SCHEDULE_STYLES[i % len(SCHEDULE_STYLES)],
                  color=colors[m], label=f"{NAMES[m]}, {x['steps']} steps")
    ax.set_xscale('log')
    ax.set_xlabel('training token positions (M) = step x batch x max_len')
    ax.set_ylabel(ylabel)
    ax.set_title(f'seed {PLATEAU_SEED}, one line style per schedule')
    ax.grid(alpha=0.3, which='both')
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=6, ncol=2)
  bx = axes[-1]
  for m in TABLE_MODELS:
    pts = [(x['steps'], r['mlm']) for x, r in zip(scheds, rows[m]) if r['mlm']]
    if not pts:
      continue
    steps, summ = zip(*pts)
    bx.errorbar(mpos(steps), [s['mean'] for s in summ], yerr=[s['std'] for s in summ],
                color=colors[m], marker='o', capsize=3, label=NAMES[m])
    for st, s in pts:
      bx.scatter(mpos([st] * s['n']), s['values'], color=colors[m], s=8, alpha=0.5)
  bx.set_xscale('log')
  bx.set_xticks(mpos([x['steps'] for x in scheds]))
  bx.set_xticklabels([f"{p:.1f}M\n{x['steps']} steps"
                      for p, x in zip(mpos([x['steps'] for x in scheds]), scheds)])
  bx.minorticks_off()
  bx.set_xlabel('schedule length (token positions)')
  bx.set_ylabel('final held-out masked-LM accuracy (%)')
  bx.set_title('end of each schedule: mean ± std over seeds (dots: seeds)')
  bx.grid(alpha=0.3, which='both')
  bx.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _num(v, fmt='{:.1f}'):
  return '—' if v is None else fmt.format(v)


def _fmt_n(s):
  """fmt_mean_std(), without a spread for one run."""
  return f"{s['mean']:.1f} (n=1)" if s and s['n'] == 1 else fmt_mean_std(s)


def curve_difference(a, b):
  """(largest |a - b|, at which step, how many common steps) over the evaluation steps
  two learning curves [(step, accuracy)] share; None when they share none."""
  da, db = dict(a or ()), dict(b or ())
  common = sorted(set(da) & set(db))
  if not common:
    return None
  step = max(common, key=lambda s: abs(da[s] - db[s]))
  return abs(da[step] - db[step]), step, len(common)


def _reruns_markdown(scheds, rows):
  """The 'Seed 0 run more than once' section: each rerun against the run used."""
  def run(r, ms):
    if r.get('run_seed0'):   # the seed-0 run's own machine, not every machine of its source
      ms = [r['run_seed0'].rsplit(' at ', 1)[0]]
    return (f"{_num(r['mlm_seed0'])}: `{r['source']}`"
            + (f" as recorded in `{r['via']}`" if r.get('via') else '')
            + ' (' + ('; '.join(x.split(',')[0] for x in ms) or 'machine not recorded') + ')')
  out = []
  for i, x in enumerate(scheds):
    for m in TABLE_MODELS:
      used = rows[m][i]
      used_machines = next((s['runs_summary']['machines'] for s in x['sources']
                            if s['root'] == used['source']), [])
      for r in used.get('reruns') or ():
        d = curve_difference(x['curves']['mlm'].get(m), r['curve_mlm'])
        gap = (used['mlm_seed0'] - r['mlm_seed0'] if used['mlm_seed0'] is not None else None)
        out.append(f"| {NAMES[m]}, {x['steps']} steps | {run(used, used_machines)} | "
                   f"{run(r, r['machines'])} | {_num(gap, '{:+.1f}')} | "
                   + (f'{d[0]:.1f} points at step {d[1]} ({d[2]} common evaluations)'
                      if d else '—') + ' |')
  if not out:
    return []
  return ['## Seed 0 run more than once', '',
          f'The same mixer, schedule and seed {PLATEAU_SEED}, so the same batches, run again '
          'elsewhere: runs on two machines differ only by their numerics (CPUs differ in the '
          'last bits), which training can amplify. The tables use the first run of each row.',
          '', '| mixer, schedule | run used above: final held-out MLM (%) | other run | '
          'used - other (points) | largest gap along the held-out MLM curves |',
          '|---|---|---|---|---|', *out, '']


def _schedules_markdown(scheds, rows, plateau, checks, prov, tokens_per_step):
  ms = TABLE_MODELS
  cols = ' | '.join(NAMES[m] for m in ms)
  lines = [
      '# Appendix H pre-training: has held-out masked-LM accuracy plateaued?', '',
      provenance.markdown_header(prov, 'report command')]
  for x in scheds:
    lines += [f"**{x['steps']} steps**:", '']
    for src in x['sources']:
      whose = ', '.join(NAMES[m] for m in src['mixers'])
      lines += [f"- {whose}: runs in `{src['root']}`" + (
          f", as recorded in `{src['via']}`" if src['via'] else '')]
      lines += ['  ' + l if l else l for l in runs_lines(src['runs_summary'])] or ['']
  lines += [
      'Same model, data, batch order and peak learning rate under every schedule; only '
      'the step count differs, and with it the linear decay of the learning rate to 0. '
      'Held-out masked-LM accuracy (%) on 640 sequences; MNLI analogue on its 1000 held-out '
      f'pairs. "gain" is seed {PLATEAU_SEED}\'s final accuracy minus its final accuracy under '
      'the next shorter schedule; a mixer counts as plateaued when that gain is below '
      f'{PLATEAU_POINTS:.1f} point.', '',
      f'The learning curves and the "gain over" rows are seed {PLATEAU_SEED}\'s; the rows '
      'marked (n) are mean ± std over the schedule\'s finished seeds.', '',
      f'![plateau]({PLATEAU_STEM}.png)', '',
      f'| | {cols} |', '|---|' + '---|' * len(ms)]
  row = lambda name, f, i: f'| {name} | ' + ' | '.join(f(rows[m][i]) for m in ms) + ' |'
  for i, x in enumerate(scheds):
    S = f"{x['steps']} ({x['steps'] * tokens_per_step / 1e6:.1f}M positions)"
    lines += [
        row(f'**{S}**: MLM, seed {PLATEAU_SEED}', lambda r: _num(r['mlm_seed0']), i),
        row('MLM, mean ± std (n)', lambda r: _fmt_n(r['mlm']), i),
        *([row(f'gain over {scheds[i - 1]["steps"]} steps (seed {PLATEAU_SEED})',
               lambda r: _num(r['gain_seed0'], '{:+.1f}'), i)] if i else []),
        row(f'train MLM at the end (seed {PLATEAU_SEED}; training batches, dropout on)',
            lambda r: _num(r['train_mlm_seed0']), i),
        row('last-quarter gain, mean ± std (n)', lambda r: _fmt_n(r['gain_last_quarter']), i),
        row('sentence pair, mean ± std (n)', lambda r: _fmt_n(r['nsp']), i),
        row('MNLI analogue, mean ± std (n)', lambda r: _fmt_n(r['mnli']), i)]
  verdict_of = lambda p: '—' if p is None else (
      f"{'plateaued' if p['plateaued'] else 'still rising'} ({p['gain']:+.1f}, "
      f"{p['from_steps']} -> {p['steps']})")
  lines += ['| **plateau?** | ' + ' | '.join(verdict_of(plateau[m]) for m in ms) + ' |', '']
  lines += _reruns_markdown(scheds, rows)
  via = {x['steps']: x.get('claims_via') for x in scheds}
  for steps, cs in checks.items():
    lines += [
        f"## The paper's Table 1 claims at {steps} steps", '',
        'Means over the finished seeds. A mixer with one finished seed takes as its seed '
        'noise the sample std of its nearest shorter schedule with >= 2 seeds (an '
        f'assumption). A difference counts at >= {SE_MULTIPLE} SE.' + (
            f' As judged in `{via[steps]}` (the same runs; it had their task baselines).'
            if via[steps] else ''), '',
        *(['| claim | measured | verdict |', '|---|---|---|',
           *[f"| {c['claim']} | {c['measured']} | {c['verdict']} |" for c in cs]] if cs else
          ['No two mixers have finished this schedule yet.']), '']
  return '\n'.join(lines)


def plateau_report(roots, results_dir, prov, tokens_per_step):
  """Writes ``mixing_layers_plateau.{md,json,png}`` for ``roots`` (see compare_schedules)
  to ``results_dir``; None, or why not. ``tokens_per_step`` (batch x max_len) puts the
  curves on a token axis. Raises ScheduleError for roots that cannot be compared."""
  scheds, rows, plateau, checks = compare_schedules(roots)
  if not any(pts for x in scheds for pts in x['curves']['mlm'].values()):
    return 'no pre-training learning curve yet'
  out = {'schedules': [{k: v for k, v in x.items() if k != 'curves'} for x in scheds],
         'rows': rows, 'plateau': plateau, 'plateau_points': PLATEAU_POINTS,
         'claims': checks, 'report_provenance': prov, 'tokens_per_step': tokens_per_step,
         'learning_curves_seed0': {key: {x['steps']: x['curves'][key] for x in scheds}
                                   for key in CURVE_METRICS}}
  os.makedirs(results_dir, exist_ok=True)
  stem = os.path.join(results_dir, PLATEAU_STEM)
  # read every root before writing: the report may be rebuilt over its own .json
  atomic_write(stem + '.json', json.dumps(out, indent=1, sort_keys=True, default=str))
  _plot_schedules(scheds, rows, tokens_per_step, stem + '.png')
  atomic_write(stem + '.md', _schedules_markdown(scheds, rows, plateau, checks, prov,
                                                  tokens_per_step))
  return None
