"""The Appendix H sweep (studies.mixing_sweep, experiments/mixing_sweep.py) and its
reports (reports.mixing_sweep, reports.mixing_plateau) on hand-made workdirs: status, recorded
rows, plateau, archive.
The training loops' tests are in test_mixing_train.py."""

import json
import os
import subprocess
import sys

import pytest

from experiments.configs import mixing_cpu, mixing_cpu_longer
from transformer_ua.reports import mixing_sweep as mixing_report
from transformer_ua.reports import mixing_markdown, mixing_plateau, mixing_rows
from transformer_ua.studies import mixing_sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _binary(args, env_extra=None):
  env = dict(os.environ, JAX_PLATFORMS='cpu', **(env_extra or {}))
  return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                        timeout=300, env=env)

def test_sweep_jobs_table_seed_major_then_hybrids():
  jobs = mixing_sweep.jobs(4, 2, [1, 2])
  assert [j[0] for j in jobs] == [
      'average_s0', 'bilinear_s0', 'sepconv_s0', 'attention_s0',
      'average_s1', 'bilinear_s1', 'sepconv_s1', 'attention_s1',
      'hybrid_k1_s0', 'hybrid_k2_s0', 'hybrid_k1_s1', 'hybrid_k2_s1']
  assert [j[0] for j in mixing_sweep.jobs(4, 3, [1, 3], 1)[-2:]] == ['hybrid_k1_s0',
                                                                     'hybrid_k3_s0']
  assert len(mixing_sweep.jobs(4, 3, [], 1)) == 12
  # --table_mixers keeps Table 1's order whatever order it is given in
  assert [j[0] for j in mixing_sweep.jobs(4, 1, [], 0, ['attention', 'sepconv'])] == [
      'sepconv_s0', 'attention_s0']
  # --first_seed=1 leaves out seed 0 of every model (Table 1 mixers and hybrids)
  assert [j[0] for j in mixing_sweep.jobs(4, 3, [2], 2, ['average'], first_seed=1)] == [
      'average_s1', 'average_s2', 'hybrid_k2_s1']
  assert [j[0] for j in mixing_sweep.jobs(4, 3, [1], None, [], first_seed=2)] == [
      'hybrid_k1_s2']


def _fake_sweep(root):
  """attention_s0: pre-training done (2000 steps in 1000 s) and MNLI partial (step 300,
  its checkpoint meta says 60 s); average_s0: pre-training partial at step 500 with no
  meta; everything else missing. A learning curve for the partial average_s0."""
  done = root / 'attention_s0' / 'pretrain'
  done.mkdir(parents=True)
  (done / 'result.json').write_text(json.dumps({'step': 2000, 'wall_s': 1000.0}))
  meta = root / 'attention_s0' / 'mnli' / 'checkpoints' / '300' / 'meta'
  meta.mkdir(parents=True)
  (meta / 'metadata').write_text(json.dumps({'step': 300, 'elapsed': 60.0}))
  part = root / 'average_s0' / 'pretrain'
  (part / 'checkpoints' / '500').mkdir(parents=True)
  (part / 'checkpoints' / '600.orbax-checkpoint-tmp-1').mkdir()   # unfinished save
  (part / 'config.json').write_text(json.dumps({'seed': 0, 'model': {
      'mixing': 'average', 'num_conv_layers': 0}}))
  (part / 'metrics.jsonl').write_text(''.join(
      json.dumps({'step': s, 'eval_mlm_accuracy': a}) + '\n'
      for s, a in ((100, 5.0), (200, 7.5))))


def test_sweep_status_on_a_fake_workdir(tmp_path):
  _fake_sweep(tmp_path)
  c = mixing_cpu.get_config()
  c.pretrain.num_steps, c.finetune.num_steps = 2000, 1000
  job_list = mixing_sweep.jobs(4, 1, [1], 1)
  rows, summary = mixing_sweep.status(c, str(tmp_path), job_list)
  by = {(r['run'], r['stage']): r for r in rows}
  assert len(rows) == 2 + 2 + 3 + 3 + 3          # average, bilinear, sepconv, attention, k1
  assert by[('attention_s0', 'pretrain')]['state'] == 'done'
  assert by[('attention_s0', 'mnli')]['state'] == 'partial'
  assert by[('attention_s0', 'mnli')]['step'] == 300
  assert by[('average_s0', 'pretrain')]['state'] == 'partial'
  assert by[('average_s0', 'pretrain')]['step'] == 500
  assert by[('hybrid_k1_s0', 'squad')]['state'] == 'missing'
  assert (summary['done'], summary['partial'], summary['missing']) == (1, 2, 10)
  assert summary['seconds_per_step'] == {'pretrain': 0.5, 'finetune': 0.2}
  # pre-training left: 1500 (average) + 3 x 2000 = 7500 steps x 0.5 s; fine-tuning left:
  # 700 (attention mnli) + 7 x 1000 = 7700 steps x 0.2 s.
  assert summary['eta_seconds'] == pytest.approx(7500 * 0.5 + 7700 * 0.2)
  text = mixing_sweep.format_status(rows, summary)
  assert 'average_s0/pretrain' in text and 'partial (step 500 of 2000)' in text
  assert '1 done, 2 partial, 10 missing' in text and 'ETA 1.5 h at these rates' in text
  # A fresh workdir has no rate to extrapolate: the ETA is unknown, not 0.0 h.
  rows, summary = mixing_sweep.status(c, str(tmp_path / 'fresh'), job_list)
  assert summary['stages_without_rate'] == 13 and summary['eta_seconds'] == 0
  text = mixing_sweep.format_status(rows, summary)
  assert 'ETA unknown (13 stages left with no measured rate yet)' in text and '0.0 h' not in text
  # A stage 150 steps into 2000 has mostly compiled: its rate would give an absurd ETA.
  meta = tmp_path / 'fresh' / 'average_s0' / 'pretrain' / 'checkpoints' / '150' / 'meta'
  meta.mkdir(parents=True)
  (meta / 'metadata').write_text(json.dumps({'step': 150, 'elapsed': 700.0}))
  rows, summary = mixing_sweep.status(c, str(tmp_path / 'fresh'), job_list)
  assert [r['step'] for r in rows if r['state'] == 'partial'] == [150]
  assert summary['seconds_per_step']['pretrain'] is None and summary['eta_seconds'] == 0


def test_sweep_status_and_report_only_binaries_on_a_partial_workdir(tmp_path):
  _fake_sweep(tmp_path / 'runs')
  args = ['experiments/mixing_sweep.py', '--config=experiments/configs/mixing_cpu.py',
          f'--workdir={tmp_path}/runs', '--seeds=1', '--hybrid_ks=', '--stages=pretrain']
  p = _binary([*args, '--status'])
  assert p.returncode == 0, p.stderr
  assert p.stdout.splitlines()[0].split() == ['average_s0/pretrain', 'partial', '(step',
                                              '500', 'of', '2000)']
  assert '1 done, 1 partial, 2 missing' in p.stdout
  (tmp_path / 'runs' / 'attention_s0' / 'pretrain' / 'result.json').unlink()  # a stub
  p = _binary([*args, '--report_only', f'--output_dir={tmp_path}/rep'])
  assert p.returncode == 0, p.stderr
  # the report lists every stage of the sweep that is not done, not only --stages'
  assert '10 stages not done' in p.stdout and 'bilinear_s0/pretrain' in p.stdout
  md = (tmp_path / 'rep' / 'mixing_layers.md').read_text()
  assert '- average_s0/pretrain: partial, step 500 of 2000' in md
  assert (tmp_path / 'rep' / 'mixing_layers_curves.png').stat().st_size > 0
  out = json.loads((tmp_path / 'rep' / 'mixing_layers.json').read_text())
  assert out['learning_curves']['average_k0']['0'] == [[100, 5.0], [200, 7.5]]
  # the workdir gone, a new discussion: --rerender rewrites the .md from the .json alone
  (tmp_path / 'rep' / 'mixing_layers_notes.md').write_text('New discussion.\n')
  gone = tmp_path / 'runs'
  gone.rename(tmp_path / 'gone')
  mixing_report.rerender(str(tmp_path / 'rep'), 'cpu', PROV)
  again = (tmp_path / 'rep' / 'mixing_layers.md').read_text()
  header_end = md.index('- time (UTC)')
  header_end = md.index('\n', header_end) + 1
  assert again == (md[:header_end] + '- discussion re-rendered from `mixing_layers.json` and the '
                   'notes by `c` at git revision `abcdef0123`, t\n' + md[header_end:]
                   + '\n## Discussion\n\nNew discussion.\n')
  p = _binary(['experiments/mixing_sweep.py', '--config=experiments/configs/mixing_cpu.py',
               '--rerender', f'--output_dir={tmp_path}/gone'])
  assert p.returncode != 0 and p.stderr.startswith('error: --rerender: ')
  assert 'Traceback' not in p.stderr
  (tmp_path / 'gone').rename(gone)
  (tmp_path / 'rep' / 'other.json').write_text('[]')
  same = tmp_path / 'same'       # e.g. the workdir's own archive: not another schedule
  _fake_run(same, 'attention', 0, 2000, [(2000, 20.0)], mlm=20.0)
  for bad, fragment in ((f'--compare_to={tmp_path}/none', 'error: --compare_to: '),
                        (f'--compare_to={tmp_path}', 'error: --compare_to: '),
                        (f'--compare_to={tmp_path}/rep/other.json',
                         'error: --compare_to: '),
                        (f'--compare_to={same}', f'error: --compare_to: {same} holds runs of '
                         "this config's own 2000-step schedule"),
                        (f'--archive_to={tmp_path}/rep/other.json', 'error: --archive_to='),
                        ('--table_mixers=attn', 'error: --table_mixers must be a subset'),
                        ('--first_seed=-1', 'error: --first_seed must be >= 0'),
                        (f'--recorded={tmp_path}/none.json', 'error: --recorded: '),
                        (f'--recorded={tmp_path}/rep/other.json',      # not a report
                         'error: --recorded: ')):
    p = _binary([*args, '--report_only', bad])
    assert p.returncode != 0 and p.stderr.strip().splitlines()[0].startswith(fragment), p.stderr
    assert 'Traceback' not in p.stderr


def _mnli_data(root, run):
  """The task record a real MNLI-analogue result.json carries (the report prints it)."""
  path = root / run / 'mnli' / 'result.json'
  r = json.loads(path.read_text())
  r['data'] = {'majority_baseline_accuracy': 36.0, 'majority_label': 'unrelated',
               'train_examples': 10, 'test_examples': 5}
  path.write_text(json.dumps(r))


def test_report_combines_recorded_rows_with_new_runs_and_says_which_is_which(tmp_path):
  from experiments.configs import mixing_cpu_long
  config = mixing_cpu_long.get_config()
  old, new = tmp_path / 'old', tmp_path / 'new'
  # an earlier report (no per-run list): the Transformer's seeds 0, 1 and average seed 0,
  # MNLI of the Transformer's seed 0 only (seed 1's is listed as not done)
  _fake_run(old, 'attention', 0, 6000, [(4500, 29.0), (6000, 30.0)], mlm=30.0)
  _fake_run(old, 'attention', 1, 6000, [(4500, 31.0), (6000, 32.0)], mlm=32.0)
  _fake_run(old, 'average', 0, 6000, [(4500, 19.5), (6000, 20.0)], mlm=20.0)
  _fake_run(old, 'attention', 0, 1000, [], stage='mnli', mnli=70.0)
  _mnli_data(old, 'attention_s0')
  gone = [{'run': 'attention_s1', 'stage': 'mnli', 'state': 'missing', 'step': 0,
           'num_steps': 1000}]
  mixing_report.report(config, str(old), str(tmp_path / 'rec'), 'cpu_long', PROV, gone)
  recorded = str(tmp_path / 'rec' / 'mixing_layers_cpu_long.json')
  assert 'per_run' not in json.loads(open(recorded).read())
  # the new runs: average seed 1, and the Transformer's seed 1 run again (34, not 32)
  _fake_run(new, 'average', 1, 6000, [(4500, 21.0), (6000, 22.0)], mlm=22.0)
  _fake_run(new, 'attention', 1, 6000, [(4500, 33.0), (6000, 34.0)], mlm=34.0)
  expected = [(name, (m, k), seed, stage) for name, m, k, seed, tasks in mixing_sweep.jobs(
      4, 3, []) for stage in ('pretrain', *tasks)]
  out_dir = tmp_path / 'out'
  mixing_report.report(config, str(new), str(out_dir), 'cpu_long', PROV, recorded=[recorded],
                       own_seeds=True, expected=expected)
  out = json.loads((out_dir / 'mixing_layers_cpu_long.json').read_text())
  att, avg = out['table1']['attention'], out['table1']['average']
  assert (att['mlm_accuracy']['values'], att['mlm_accuracy']['seeds']) == ([30.0, 34.0], [0, 1])
  assert (avg['mlm_accuracy']['values'], avg['mlm_accuracy']['seeds']) == ([20.0, 22.0], [0, 1])
  assert att['mnli_accuracy']['values'] == [70.0]
  assert att['mlm_gain_last_quarter']['values'] == [1.0, 1.0]   # seed 1: the new curve
  by = {(r['run'], r['stage']): r for r in out['per_run']}
  assert by[('attention_s0', 'pretrain')]['source'] is None
  assert by[('attention_s0', 'pretrain')]['via'] == 'mixing_layers_cpu_long.json (report at abcdef0)'
  assert by[('average_s1', 'pretrain')] ['source'] == str(new)
  assert by[('attention_s1', 'pretrain')]['replaces']['values']['mlm_accuracy'] == 32.0
  claims = {c['claim'].split(' (')[0]: c for c in out['claims']}
  # d = 32 - 21 = 11, SE = sqrt(8/2 + 2/2) = sqrt(5) = 2.24: holds on both sides' own seeds
  c = claims['MLM: Transformer above average attention']
  assert c['measured'] == '+11.0 ± 2.2 points (n = 2 vs 2)'
  assert c['verdict'] == 'holds (at n = 2 vs 2; missing: attention_s2/pretrain, average_s2/pretrain)'
  c = claims['MNLI analogue: Transformer above the majority class']
  assert c['verdict'].endswith('missing: attention_s1/mnli, attention_s2/pretrain+mnli)')
  # the recorded stages are done: not listed as not done
  assert out['not_done'] == [] and out['recorded'][0]['rows'] == [
      'attention_s0/mnli', 'attention_s0/pretrain', 'attention_s1/pretrain', 'average_s0/pretrain']
  md = (out_dir / 'mixing_layers_cpu_long.md').read_text()
  assert ('| attention_s1 | pretrain | mlm 34.00, nsp 51.00 | `' + str(new) + '` | mlm 32.00, '
          'nsp 51.00, recorded in `mixing_layers_cpu_long.json (report at abcdef0)` |') in md
  assert 'Rows recorded in `mixing_layers_cpu_long.json`' in md and 'no seed noise is borrowed' in md
  # rebuilt over its own .json: the same numbers, each row still naming its first source
  mixing_report.report(config, str(new), str(out_dir), 'cpu_long', PROV,
                       recorded=[str(out_dir / 'mixing_layers_cpu_long.json')], own_seeds=True,
                       expected=expected)
  again = json.loads((out_dir / 'mixing_layers_cpu_long.json').read_text())
  assert again['table1'] == out['table1'] and again['claims'] == out['claims']
  assert again['per_run'] == out['per_run'] and again['recorded'] == out['recorded']


def test_recorded_rows_refuse_values_whose_seeds_cannot_be_told(tmp_path):
  from experiments.configs import mixing_cpu_long
  _fake_run(tmp_path / 'old', 'average', 0, 6000, [(4500, 19.5), (6000, 20.0)], mlm=20.0)
  mixing_report.report(mixing_cpu_long.get_config(), str(tmp_path / 'old'), str(tmp_path),
                       'cpu_long', PROV)
  path = tmp_path / 'mixing_layers_cpu_long.json'
  d = json.loads(path.read_text())
  d['table1']['average']['mlm_accuracy'] = mixing_rows.mean_std([20.0, 21.0])  # 2 values
  path.write_text(json.dumps(d))                                                  # 1 curve
  with pytest.raises(mixing_rows.RecordError, match='average_s\\*/pretrain'):
    mixing_rows.recorded_rows(str(path))


def _fake_run(root, mixing, seed, steps, curve, stage='pretrain', mlm=None, mnli=None,
              utc='t', machine='m'):
  """A finished stage under root/<mixing>_s<seed>/<stage> with the fields collect() reads."""
  d = root / f'{mixing}_s{seed}' / stage
  d.mkdir(parents=True)
  prov = {'command': 'fake', 'git_revision': 'r', 'machine': machine, 'utc_time': utc,
          'load_average_1min_at_start': 0.0}
  r = {'stage': stage, 'task': stage, 'mixing': mixing, 'num_conv_layers': 0, 'seed': seed,
       'step': steps, 'provenance': prov, 'data': {'majority_baseline_accuracy': 36.0},
       'params_encoder_pooler': 1000, 'train_tokens_per_s': 1.0}
  if stage == 'pretrain':
    r['data'] = {'train_synsets': 10, 'train_pair_synsets': 5, 'heldout_synsets': 2,
                 'eval_sequences': 4, 'vocab_size': 50}
  r['eval'] = ({'mlm_accuracy': mlm, 'nsp_accuracy': 50.0 + seed} if stage == 'pretrain'
               else {'accuracy': mnli})
  (d / 'result.json').write_text(json.dumps(r))
  if stage == 'pretrain':
    (d / 'config.json').write_text(json.dumps({'seed': seed, 'model': {
        'mixing': mixing, 'num_conv_layers': 0, 'max_len': 4},
        'pretrain': {'batch_size': 2, 'num_steps': steps}}))
    (d / 'metrics.jsonl').write_text(''.join(
        json.dumps({'step': s, 'eval_mlm_accuracy': a, 'mlm_accuracy': a / 100 - 0.01}) + '\n'
        for s, a in curve))


def _three_schedules(tmp_path):
  """2000 steps: 3 seeds of the Transformer and SepConv; 6000: seed 0 of both, and SepConv
  seed 1, and the Transformer's MNLI (baseline 36); 18000: seed 0 of the Transformer."""
  short, long_, longer = tmp_path / 'short', tmp_path / 'long', tmp_path / 'longer'
  for seed, (att, sep) in enumerate([(20.0, 24.0), (21.0, 25.0), (22.0, 26.0)]):
    _fake_run(short, 'attention', seed, 2000, [(1500, att - 2), (2000, att)], mlm=att)
    _fake_run(short, 'sepconv', seed, 2000, [(1500, sep - 1), (2000, sep)], mlm=sep)
  _fake_run(long_, 'attention', 0, 6000, [(4500, 24.5), (6000, 25.0)], mlm=25.0)
  _fake_run(long_, 'sepconv', 0, 6000, [(4500, 26.0), (6000, 30.0)], mlm=30.0)
  _fake_run(long_, 'sepconv', 1, 6000, [(4500, 27.0), (6000, 28.0)], mlm=28.0)
  _fake_run(long_, 'attention', 0, 1000, [], stage='mnli', mnli=60.0)
  _fake_run(longer, 'attention', 0, 18000, [(13500, 25.4), (18000, 25.5)], mlm=25.5)
  return short, long_, longer


PROV = {'command': 'c', 'git_revision': 'abcdef0123', 'machine': 'm', 'utc_time': 't',
        'load_average_1min_at_start': 0.0}


def test_sweep_report_takes_single_runs_seed_noise_from_shorter_schedules(tmp_path):
  short, long_, longer = _three_schedules(tmp_path)
  _fake_run(longer, 'sepconv', 0, 18000, [(13500, 33.0), (18000, 34.0)], mlm=34.0)
  # 18000 steps: the Transformer's nearest shorter schedule with >= 2 seeds is 2000 (its
  # seeds 20, 21, 22: std 1.0), SepConv's 6000 (30, 28: std sqrt 2); no MNLI has 2 seeds
  noise = mixing_plateau.seed_noise([str(short), str(long_), str(longer)], 18000)
  assert noise == {'attention': {'mlm_accuracy': {'std': pytest.approx(1.0), 'steps': 2000}},
                   'sepconv': {'mlm_accuracy': {'std': pytest.approx(2 ** 0.5), 'steps': 6000}}}
  assert mixing_plateau.seed_noise([str(short), str(long_)], 6000)['sepconv'] == {
      'mlm_accuracy': {'std': pytest.approx(1.0), 'steps': 2000}}   # shorter only
  config = mixing_cpu_longer.get_config()
  by = {}
  for name, given in (('without', None), ('with', noise)):
    mixing_report.report(config, str(longer), str(tmp_path / name), 'cpu_longer', PROV,
                         seed_noise=given)
    out = json.loads((tmp_path / name / 'mixing_layers_cpu_longer.json').read_text())
    by[name] = {c['claim'].split(' (')[0]: c for c in out['claims']}
  # one run each: no spread without the shorter schedules' seed noise
  c = by['without']['MLM: Transformer above SepConv']
  assert c['measured'] == '-8.5 points (n = 1 vs 1)' and c['verdict'].startswith('not judged')
  # with it: d = 25.5 - 34 = -8.5, SE = sqrt(1.0^2 + 2) = 1.73, beyond 2 SE
  c = by['with']['MLM: Transformer above SepConv']
  assert c['measured'] == '-8.5 ± 1.7 points (n = 1 vs 1)' and c['verdict'].startswith('fails')
  # and Figure 1's k = L column is SepConv's, k = 0 the Transformer's: the same noise
  c = by['with']['Figure 1, MLM: k = 4 SepConv layers worse than the Transformer']
  assert c['measured'] == '+8.5 ± 1.7 points (n = 1 vs 1)' and c['verdict'].startswith('fails')
  md = (tmp_path / 'with' / 'mixing_layers_cpu_longer.md').read_text()
  assert 'seed noise the sample std of its seeds under the longest shorter schedule' in md
  assert 'SepConv MLM 1.4 (6000 steps); Transformer MLM 1.0 (2000 steps).' in md
  assert 'seed noise' not in (tmp_path / 'without' / 'mixing_layers_cpu_longer.md').read_text()
  saved = {name: json.loads((tmp_path / name / 'mixing_layers_cpu_longer.json').read_text())
           for name in by}
  assert saved['without']['seed_noise'] == {} and saved['with']['seed_noise'] == noise
  # a mixer with >= 2 seeds keeps its own spread: noise given for it is neither used nor listed
  mixing_report.report(mixing_cpu.get_config(), str(short), str(tmp_path / 'own'), 'cpu', PROV,
                       seed_noise={'attention': {'mlm_accuracy': {'std': 9.0, 'steps': 1}}})
  out = json.loads((tmp_path / 'own' / 'mixing_layers.json').read_text())
  c = next(c for c in out['claims'] if c['claim'].startswith('MLM: Transformer above SepConv'))
  assert c['measured'] == '-4.0 ± 0.8 points (n = 3 vs 3)'     # sqrt(1/3 + 1/3)
  assert out['seed_noise'] == {} and '9.0' not in (tmp_path / 'own' / 'mixing_layers.md').read_text()


def test_runs_summary_counts_every_attempt_of_a_resumed_run():
  seg = lambda utc, load, rev: {**PROV, 'utc_time': utc, 'load_average_1min_at_start': load,
                                'git_revision': rev}
  once = {'provenance': seg('t1', 0.5, 'a')}                     # before segments existed
  resumed = {'provenance': seg('t4', 3.0, 'c'),
             'segments': [seg('t2', 1.0, 'b'), seg('t4', 3.0, 'c')]}
  rs = mixing_rows.runs_summary({('attention', 0): {'pretrain': [once, resumed]}})
  assert (rs['result_files'], rs['resumed'], rs['attempts']) == (2, 1, 3)
  assert rs['git_revisions'] == ['a', 'b', 'c'] and rs['load_average_1min_range'] == [0.5, 3.0]
  assert rs['attempts_untracked'] == 1     # `once` predates attempt tracking
  assert mixing_markdown.runs_lines(rs)[0] == (
      '- runs: 2 stages (1 resumed from checkpoints: 3 attempts in all) (1 written before '
      'attempts were kept: their resumes, if any, are not in the record), t1 to t4 UTC, '
      '1-min load 0.5-3.0 at stage starts and resumes')
  assert mixing_plateau._run_id(resumed) == 'm at t2'          # known by its first attempt


def test_archive_keeps_what_the_reports_read(tmp_path):
  _, long_, _ = _three_schedules(tmp_path)
  (long_ / 'sepconv_s0' / 'pretrain' / 'checkpoints' / '6000').mkdir(parents=True)
  (long_ / 'sepconv_s0' / 'pretrain' / 'tokenizer.json').write_text('{}')
  partial = long_ / 'sepconv_s2' / 'pretrain'               # unfinished: not archived
  partial.mkdir(parents=True)
  (partial / 'metrics.jsonl').write_text('{"step": 100}\n')
  arch = tmp_path / 'archive'
  assert mixing_sweep.archive(str(long_), str(arch)) == 4
  assert sorted(str(p.relative_to(arch)) for p in arch.rglob('*') if p.is_file()) == sorted(
      [f'{r}/pretrain/{f}' for r in ('attention_s0', 'sepconv_s0', 'sepconv_s1')
       for f in ('config.json', 'metrics.jsonl', 'result.json')]
      + ['attention_s0/mnli/result.json'])
  assert mixing_sweep.archive(str(long_), str(arch)) == 0      # nothing new
  a = mixing_plateau.compare_schedules([str(arch), str(tmp_path / 'short')])
  b = mixing_plateau.compare_schedules([str(long_), str(tmp_path / 'short')])
  drop = lambda rs: {m: [{k: v for k, v in r.items() if k != 'source'} for r in rr]
                     for m, rr in rs.items()}
  assert drop(a[1]) == drop(b[1]) and a[3] == b[3]
  res = long_ / 'sepconv_s1' / 'pretrain' / 'result.json'      # a rerun with another result
  res.write_text(res.read_text().replace('28.0', '28.5'))
  with pytest.raises(mixing_sweep.SweepError, match='already holds a different record'):
    mixing_sweep.archive(str(long_), str(arch))
  assert '28.0' in (arch / 'sepconv_s1' / 'pretrain' / 'result.json').read_text()


@pytest.mark.parametrize('name, steps', [('mixing_cpu_long', 6000), ('mixing_cpu_longer', 18000),
                                         ('mixing_cpu_longest', 54000)])
def test_longer_schedules_change_only_the_step_count(name, steps):
  import runpy
  path = os.path.join(os.path.dirname(__file__), '..', 'experiments', 'configs', name + '.py')
  c = runpy.run_path(path)['get_config']().to_dict()
  base = mixing_cpu.get_config().to_dict()
  assert c['pretrain'].pop('num_steps') == steps and base['pretrain'].pop('num_steps') == 2000
  assert c == base


def test_sweep_skips_a_run_another_live_process_is_training(tmp_path):
  """Two copies of one sweep command share a workdir: a run whose running.lock names a
  live process is left to it (nothing trained, the lock untouched)."""
  _fake_sweep(tmp_path / 'runs')
  (tmp_path / 'runs' / 'attention_s0' / 'pretrain' / 'result.json').unlink()  # a stub
  lock = tmp_path / 'runs' / 'average_s0' / 'running.lock'
  lock.write_text(str(os.getpid()))                       # this test: a live process
  corpus = tmp_path / 'wordnet'                           # never read: nothing trains
  corpus.mkdir()
  for name in ('data.noun', 'data.verb', 'data.adj', 'data.adv'):
    (corpus / name).write_text('')
  p = _binary(['experiments/mixing_sweep.py', '--config=experiments/configs/mixing_cpu.py',
               f'--workdir={tmp_path}/runs', '--seeds=1', '--hybrid_ks=',
               '--table_mixers=average', '--stages=pretrain', f'--output_dir={tmp_path}/rep'],
              env_extra={'WORDNET_DIR': str(corpus)})
  assert p.returncode == 0, p.stderr
  assert 'average_s0: trained by another process (running.lock); skipped' in p.stdout
  assert lock.read_text() == str(os.getpid())
  assert not (tmp_path / 'runs' / 'average_s0' / 'pretrain' / 'result.json').exists()
