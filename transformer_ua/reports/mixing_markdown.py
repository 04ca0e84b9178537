"""The markdown of the Appendix H sweep report (``reports.mixing_sweep``): tables, claims,
where each number comes from, and the runs' provenance lines."""

from __future__ import annotations

import os

from transformer_ua import provenance
from transformer_ua.reports.mixing_claims import OWN_SEEDS_MIN, SE_MULTIPLE
from transformer_ua.reports.mixing_rows import NAMES, TABLE_MODELS, fmt_mean_std


def _seed_noise_sentence(seed_noise):
  """What the claims took as the seed noise of single runs (report's ``seed_noise``)."""
  if not seed_noise:
    return ''
  fields = {'mlm_accuracy': 'MLM', 'mnli_accuracy': 'MNLI'}
  used = '; '.join(f"{NAMES[m]} {fields[f]} {v['std']:.1f} ({v['steps']} steps)"
                   for m in TABLE_MODELS for f, v in seed_noise.get(m, {}).items())
  return (' Here a Table 1 mixer (and its Figure 1 column) with one finished run takes as '
          'its seed noise the sample std of its seeds under the longest shorter schedule '
          f'with >= 2 seeds (--compare_to; an assumption): {used}. A hybrid with one run '
          'borrows the other side\'s.')


def _markdown(out, table, figure, L, config, stem, prov, stem_path='', curves=False,
              rerendered=''):
  m = config.model
  lines = [f'# Yun et al. 2020, Appendix H at our scale (`{out["config"]}` config)', '',
           provenance.markdown_header(prov, 'report command') + rerendered,
           *_sources_lines(out),
           f'Model: {L} layers, d = {m.hidden}, {m.num_heads} heads, FF {m.mlp_dim}, '
           f'max_len {m.max_len}, SepConv {m.conv_filters} filters of width {m.conv_width}; '
           f'pre-training {config.pretrain.num_steps} steps x batch '
           f'{config.pretrain.batch_size}, fine-tuning {config.finetune.num_steps} steps x '
           f'batch {config.finetune.batch_size}. Values are mean ± sample std over seeds '
           '(n = number of seeds finished). Every run directory holds its own '
           '`result.json` with command, revision and machine.', '',
           '## Table 1 analogue', '',
           '| | ' + ' | '.join(NAMES[x] for x in TABLE_MODELS) + ' |',
           '|---|' + '---|' * len(TABLE_MODELS)]
  row = lambda label, f: lines.append(f'| {label} | ' + ' | '.join(
      f(table[x]) for x in TABLE_MODELS) + ' |')
  row('# params (encoder + pooler)', lambda t: f"{t['params_encoder_pooler']:,}"
      if t['params_encoder_pooler'] else '—')
  row('Masked LM accuracy (%)', lambda t: fmt_mean_std(t['mlm_accuracy']))
  row('MLM gain over the last quarter of steps (points)',
      lambda t: fmt_mean_std(t['mlm_gain_last_quarter']))
  row('Sentence-pair accuracy (%)', lambda t: fmt_mean_std(t['nsp_accuracy']))
  row('MNLI-analogue accuracy (%)', lambda t: fmt_mean_std(t['mnli_accuracy']))
  row('SQuAD-analogue EM / F1 (%)', lambda t: (fmt_mean_std(t['squad_em']) + ' / ' +
                                               fmt_mean_std(t['squad_f1'])) if t['squad_em'] else '—')
  row('pre-training tokens/s', lambda t: fmt_mean_std(t['pretrain_tokens_per_s'], 0))
  lines += ['', 'Paper (BERT-base, Wikipedia + books): params 88.3M / 90M / 102.5M / 110M; '
            'MLM 28 / 59 / 60 / 63; MNLI 66 / 72.3 / 73 / 78.2.', '',
            '## Figure 1 analogue', '',
            f'k lower layers SepConv, {L} - k upper layers self-attention (k = 0 is the '
            f'Transformer, k = {L} is the all-SepConv model of the table).', '',
            '| k | # params | MLM acc (%) | MLM gain, last quarter | MNLI-analogue acc (%) | '
            'SQuAD-analogue EM (%) | SQuAD-analogue F1 (%) |', '|---|---|---|---|---|---|---|']
  for k in range(L + 1):
    f = figure[k]
    lines.append(f"| {k} | {f['params_encoder_pooler'] or '—':,} | {fmt_mean_std(f['mlm_accuracy'])} | "
                 f"{fmt_mean_std(f['mlm_gain_last_quarter'])} | {fmt_mean_std(f['mnli_accuracy'])} | "
                 f"{fmt_mean_std(f['squad_em'])} | {fmt_mean_std(f['squad_f1'])} |"
                 if f['params_encoder_pooler'] else f'| {k} | — | — | — | — | — | — |')
  lines += ['', f'![Table 1]({os.path.basename(stem)}_table1.png)',
            f'![Figure 1]({os.path.basename(stem)}_figure1.png)', '']
  if out['claims'] and out.get('own_seeds'):
    lines += ["## The paper's claims, checked automatically", '',
              'Differences are mean over seeds minus mean over seeds, ± their standard error '
              'sqrt(s_a^2/n_a + s_b^2/n_b), each side with the sample variance of its own '
              f'seeds: a side needs >= {OWN_SEEDS_MIN} finished seeds, no seed noise is '
              'borrowed from the other side or from another schedule. A claim holds or fails '
              f'only when |difference| >= {SE_MULTIPLE} SE (with 2 seeds a side the SE itself '
              'is rough); finished runs only. "missing" names the runs that a side still '
              'lacks towards 3 seeds (run/stage; pretrain+mnli: both are missing).', '',
              '| claim | measured difference | verdict |', '|---|---|---|']
    lines += [f"| {c['claim']} | {c['measured']} | {c['verdict']} |" for c in out['claims']]
    lines.append('')
  elif out['claims']:
    lines += ["## The paper's claims, checked automatically", '',
              'Differences are mean over seeds minus mean over seeds, ± their standard error '
              'sqrt(s_a^2/n_a + s_b^2/n_b) (a single run borrows the other side\'s '
              f'variance). A claim holds or fails only when |difference| >= {SE_MULTIPLE} SE; '
              'finished runs only.' + _seed_noise_sentence(out.get('seed_noise')), '',
              '| claim | measured difference | verdict |', '|---|---|---|']
    lines += [f"| {c['claim']} | {c['measured']} | {c['verdict']} |" for c in out['claims']]
    lines.append('')
  if curves:
    lines += ['## Learning curves', '', 'Held-out masked-LM accuracy during pre-training '
              f'(every {config.pretrain.eval_every} steps; mean ± std band over the seeds '
              'that reached each step). The learning rate warms up linearly over '
              f'{config.pretrain.warmup_steps} steps, then decays linearly to 0 at step '
              f'{config.pretrain.num_steps}: a curve that still rises over the last quarter '
              '(the "MLM gain" row above) was stopped by the end of its schedule, not by a '
              'plateau.', '',
              f'![Learning curves]({os.path.basename(stem)}_curves.png)', '']
  if out['not_done']:
    lines += ['## Not finished', '', f"{len(out['not_done'])} stages of the sweep are not "
              'done; the tables above cover only the finished ones:', '']
    lines += [f"- {r['run']}/{r['stage']}: " + (f"partial, step {r['step']} of "
              f"{r['num_steps']}" if r['state'] == 'partial' else 'missing')
              for r in out['not_done']]
    lines.append('')
  lines += _per_run_lines(out)
  td = out['task_data']
  lines += ['## Tasks, sizes and baselines', '']
  if out['pretrain_data']:
    p = out['pretrain_data']
    lines.append(f"- Pre-training: WordNet 3.0 (Debian `wordnet-base`), {p['train_synsets']:,} "
                 f"training synsets ({p['train_pair_synsets']:,} with example sentences for "
                 f"the sentence-pair objective), {p['heldout_synsets']:,} held-out synsets "
                 f"for evaluation ({p['eval_sequences']} sequences); WordPiece vocabulary "
                 f"{p['vocab_size']}. Sentence-pair chance: 50%.")
  if 'mnli' in td:
    t = td['mnli']
    lines.append(f"- MNLI analogue (hypernym / co-hyponym / unrelated gloss pairs): "
                 f"{t['train_examples']:,} training pairs, {t['test_examples']:,} test pairs "
                 f"with held-out premise synsets; majority class '{t['majority_label']}' = "
                 f"{t['majority_baseline_accuracy']:.1f}%.")
  if 'squad' in td:
    t = td['squad']
    b = '; '.join(f"{k}: EM {v['em']:.1f} / F1 {v['f1']:.1f}" for k, v in t['baselines'].items())
    lines.append(f"- SQuAD analogue (find the defined word in its example sentence): "
                 f"{t['train_examples']:,} training, {t['test_examples']:,} test questions "
                 f"(held-out synsets); baselines {b}.")
  lines.append('')
  notes = stem_path + '_notes.md'
  if os.path.exists(notes):
    with open(notes) as f:
      lines += ['## Discussion', '', f.read().strip(), '']
  return '\n'.join(lines)


def _source_text(r):
  """Where a per-run row was read: its workdir (or archive), or the report it was
  recorded in."""
  if r.get('via'):
    return f"recorded in `{r['via']}`" + (f" (runs in `{r['source']}`)" if r.get('source')
                                          else '')
  return f"`{r['source']}`"


def _sources_lines(out):
  """The header's run provenance: the workdir's runs, then each recorded report's."""
  if not out.get('recorded'):
    return runs_lines(out['runs_summary'])
  lines = []
  if out['runs_summary']['result_files']:
    lines += ['Runs read from the workdir or its archive (result.json files):', '',
              *runs_lines(out['runs_summary'])]
  for x in out['recorded']:
    lines += [f"Rows recorded in `{os.path.basename(x['path'])}` (the report of this config "
              f"at git revision `{x['report_revision'][:7]}`; their workdirs are gone): "
              f"{len(x['rows'])} stages. Its runs:", '']
    lines += runs_lines(x['runs_summary']) if x.get('runs_summary') else ['']
  return lines


def _per_run_lines(out):
  """'Where each number comes from': every run's stage, value and source."""
  rows = out.get('per_run')
  if not rows:
    return []
  show = {'pretrain': ('mlm_accuracy', 'nsp_accuracy'), 'mnli': ('mnli_accuracy',),
          'squad': ('squad_em', 'squad_f1')}
  fmt = lambda vals, stage: ', '.join(f'{f.split("_")[0] if stage != "squad" else f} '
                                      f'{vals[f]:.2f}' for f in show[stage] if f in vals)
  lines = ['## Where each number comes from', '',
           'Every finished stage in the tables and claims above, with its source: the '
           'archived runs (each with its `result.json`: every attempt\'s command, revision, '
           'machine and load), or a row recorded in an earlier report of this config whose '
           'workdir is gone (its commands, revisions and machines are in the header). A row '
           'run again here replaces the recorded one, which is shown beside it.', '',
           '| run | stage | values (%) | source | replaces |', '|---|---|---|---|---|']
  for r in sorted(rows, key=lambda r: (r['k'], TABLE_MODELS.index(r['mixing']), r['seed'],
                                       STAGE_ORDER.index(r['stage']))):
    rep_ = r.get('replaces')
    lines.append(f"| {r['run']} | {r['stage']} | {fmt(r['values'], r['stage'])} | "
                 f"{_source_text(r)} | " + (f"{fmt(rep_['values'], r['stage'])}, "
                                            f"{_source_text(rep_)}" if rep_ else '') + ' |')
  return lines + ['']


STAGE_ORDER = ('pretrain', 'mnli', 'squad')


def runs_lines(rs):
  if not rs['result_files']:
    return []
  resumed = (f" ({rs['resumed']} resumed from checkpoints: {rs['attempts']} attempts in all)"
             if rs.get('resumed') else '')
  if rs.get('attempts_untracked'):
    resumed += (f" ({rs['attempts_untracked']} written before attempts were kept: their "
                'resumes, if any, are not in the record)')
  return [f"- runs: {rs['result_files']} stages{resumed}, {rs['utc_range'][0]} to "
          f"{rs['utc_range'][1]} UTC, 1-min load {rs['load_average_1min_range'][0]}-"
          f"{rs['load_average_1min_range'][1]} at stage starts" + (
              ' and resumes' if rs.get('resumed') else ''),
          '- run commands: ' + '; '.join(f'`{c}`' for c in rs['sweep_commands']),
          '- run revisions: ' + ', '.join(f'`{r}`' for r in rs['git_revisions']),
          '- run machines: ' + '; '.join(rs['machines']), '']
