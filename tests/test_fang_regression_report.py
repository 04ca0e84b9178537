"""The Section 5 report on a partial sweep: finished runs in Table 1 with their seed
count, unfinished runs listed apart (epoch reached, resumable checkpoint, latest MSEs),
never-started runs named; nothing unfinished enters the table or the claims."""

import json
import os

import numpy as np

from transformer_ua.reports import fang_regression as regression_report
from transformer_ua.train.checkpointing import Checkpointer
from transformer_ua.train.metrics import MetricsWriter

PROV = {'command': 'python experiments/fang_regression.py --config=fang_f2.py',
        'git_revision': 'abc123', 'machine': 'test machine',
        'load_average_1min_at_start': 1.0}


def _finished(workdir, name, model, seed, mse_test, **sizes):
  run = os.path.join(workdir, 'f2', name)
  os.makedirs(run)
  history = [{'epoch': e, 'train_mse': 10.0 / e, **({'test_mse': 11.0 / e} if e % 2 == 0 else {})}
             for e in range(1, 11)]
  result = {'name': name, 'target': 'f2', 'model': model, 'seed': seed, 'data_seed': 0,
            'd': 10, 'q': 5, **sizes, 'num_params': 123, 'epochs_done': 10, 'complete': True,
            'run_time_s': 20.0, 'mse_train': mse_test - 0.1, 'mse_test': mse_test,
            'mse_train_vs_f': 0.01, 'mse_test_vs_f': 0.02, 'epochs_to_convergence': 4,
            'epochs_to_stable_convergence': 6, 'run_time_to_convergence_s': 8.0,
            'history': history, 'provenance': PROV}
  with open(os.path.join(run, 'result.json'), 'w') as f:
    json.dump(result, f)


def _unfinished(workdir, name, epochs, checkpoint_epoch, elapsed):
  run = os.path.join(workdir, 'f2', name)
  writer = MetricsWriter(run, tensorboard=False)
  for e in range(1, epochs + 1):
    writer.write(e, {'train_mse': 100.0 / e, 'lr': 1e-3, **({'test_mse': 200.0 / e}
                                                             if e % 5 == 0 else {})})
  ckpt = Checkpointer(os.path.join(run, 'checkpoints'))
  ckpt.save(checkpoint_epoch, {'w': np.zeros(3, np.float32)},
            meta={'history': [], 'elapsed': elapsed})
  ckpt.close()


def test_partial_sweep_report(tmp_path):
  work, res = str(tmp_path / 'runs'), str(tmp_path / 'res')
  _finished(work, 'f2_nn_depth_120_seed0', 'nn_depth', 0, 50.0, num_tokens=0, depth_width=120)
  _finished(work, 'f2_nn_depth_120_seed1', 'nn_depth', 1, 52.0, num_tokens=0, depth_width=120)
  _unfinished(work, 'f2_attention_2002_seed0', epochs=12, checkpoint_epoch=10, elapsed=25.0)
  plans = {'f2': {'f2_attention_2002_seed0': 2000, 'f2_nn_depth_120_seed0': 2000,
                  'f2_nn_depth_120_seed1': 2000, 'f2_nn_width_4368_seed0': 2000}}
  md = open(regression_report.write_report(work, res, plans)).read()
  f2 = md[md.index('## f2'):]
  assert 'Sweep status: 2 of 4 planned runs finished, 1 unfinished, 1 not started.' in f2
  # Table 1 row: the finished runs only, with their seed count.
  row = next(l for l in f2.splitlines() if l.startswith('| nn_depth (width 120) |'))
  assert row.split('|')[3].strip() == '2' and '51 ± 1.414' in row      # sample std of 50, 52: sqrt(2)
  assert not any(l.startswith('| attention') for l in f2.splitlines())
  # The unfinished run: epoch reached, checkpoint, latest MSE_Tr / MSE_Te, s/epoch.
  row = next(l for l in f2.splitlines() if l.startswith('| f2_attention_2002_seed0'))
  assert '(UNFINISHED)' in row and '| 12 / 2000 | 10 |' in row
  assert f'| {100 / 12:.4g} | {200 / 10:.4g} (10) | 25 | 2.5 |' in row
  assert 'Not started: f2_nn_width_4368_seed0.' in f2
  claims = f2[f2.index('Claims of the paper'):]
  assert 'nn_depth (width 120)' in claims and 'attention' not in claims.split('Figure 3')[0]
  data = json.load(open(os.path.join(res, 'fang_regression_f2.json')))
  assert [u['name'] for u in data['unfinished_runs']] == ['f2_attention_2002_seed0']
  assert data['not_started'] == ['f2_nn_width_4368_seed0']
  assert os.path.getsize(os.path.join(res, 'fang_f2_convergence.png')) > 10000
  assert '## f1' in md and 'No runs yet.' in md


def test_resumed_metrics_keep_the_rewritten_rows(tmp_path):
  """metrics.jsonl may hold rows of an interrupted attempt past the checkpoint; the
  newest row per epoch wins, and a torn last line is skipped."""
  run = tmp_path / 'runs' / 'f2' / 'f2_nn_depth_120_seed0'
  run.mkdir(parents=True)
  rows = [{'step': 1, 'train_mse': 9.0}, {'step': 2, 'train_mse': 8.0},
          {'step': 2, 'train_mse': 7.0}]
  (run / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows) + '{"step": 3,')
  (u,) = regression_report._load_unfinished(str(tmp_path / 'runs'), 'f2', set())
  assert u['epochs_reached'] == 2 and u['last_train_mse'] == 7.0
  assert u['checkpoint_epoch'] is None and u['seconds_per_epoch'] is None


def test_optimum_rows_beside_the_trained_rows(tmp_path):
  """With results_dir/fang_optimum_f2.json present, the f2 JSON carries it under
  'optimum' and Table 1 gains its rows (numbers taken from that file)."""
  work, res = str(tmp_path / 'runs'), str(tmp_path / 'res')
  _finished(work, 'f2_attention_2002_seed0', 'attention', 0, 6.5, num_tokens=2002,
            depth_width=120)
  fixed = lambda seed, tr: {'num_tokens': 2002, 'F': 'init', 'seed': seed, 'rank': 3003,
                            'max_rank': 3003, 'cond_G_on_rank': 1e6, 'num_params': 10011,
                            'mse_train': tr, 'mse_test': 1.25, 'mse_test_vs_f': 0.25}
  opt = {'target': 'f2', 'data_seed': 0, 'provenance': PROV,
         'polynomial': {'rank': 3003, 'num_features': 3003, 'cond_equilibrated': 123.0,
                        'mse_train': 0.9375, 'mse_test': 1.0625, 'mse_test_vs_f': 0.0625},
         'fixed_F': {'a': fixed(0, 0.9375), 'b': fixed(1, 0.9375)}}
  os.makedirs(res)
  with open(os.path.join(res, 'fang_optimum_f2.json'), 'w') as f:
    json.dump(opt, f)
  md = open(regression_report.write_report(work, res)).read()
  lines = md[md.index('## f2'):].splitlines()
  glob_row = next(l for l in lines if l.startswith('| OPTIMUM over (F, beta, b)'))
  assert '| 0.9375 | 1.062 | 0.0625 |' in glob_row and 'rank 3003 of 3003' in glob_row
  fixed_row = next(l for l in lines if l.startswith('| OPTIMUM over (beta, b)'))
  assert 'attention (n = 2002)' in fixed_row and '| 2 (seeds 0, 1) |' in fixed_row
  assert lines.index(fixed_row) > lines.index(next(l for l in lines if l.startswith(
      '| attention (n = 2002)')))
  data = json.load(open(os.path.join(res, 'fang_regression_f2.json')))
  assert data['optimum'] == opt
  assert 'entries kept (--resume)' not in md
  # A resumed optimum (fang_optimum --resume) names the runs its kept entries came from.
  opt['earlier_runs'] = [{'seconds': 1.0, 'provenance': dict(PROV, git_revision='feed123')}]
  with open(os.path.join(res, 'fang_optimum_f2.json'), 'w') as f:
    json.dump(opt, f)
  md = open(regression_report.write_report(work, res)).read()
  assert 'entries kept (--resume)' in md and '`feed123`' in md


def test_deviation_rows_are_labelled_and_kept_out_of_the_claims(tmp_path):
  """A run with a config that deviates from the paper (its own workdir) is a Table 1 row
  named '[DEVIATION: label]', in the JSON under 'deviations', and not in the claims."""
  work, dev, res = (str(tmp_path / d) for d in ('runs', 'adam', 'res'))
  _finished(work, 'f2_attention_2002_seed0', 'attention', 0, 6.5, num_tokens=2002,
            depth_width=120)
  _finished(dev, 'f2_attention_2002_seed0', 'attention', 0, 1.0625, num_tokens=2002,
            depth_width=120)
  md = open(regression_report.write_report(work, res, deviations={'Adam': dev})).read()
  lines = md[md.index('## f2'):].splitlines()
  row = next(l for l in lines if l.startswith('| attention (n = 2002) [DEVIATION: Adam] |'))
  assert '| 1.062 |' in row
  claims = md[md.index('Claims of the paper', md.index('## f2')):].split('Figure 3')[0]
  assert 'DEVIATION' not in claims and '6.5 vs noise variance 1' in claims
  data = json.load(open(os.path.join(res, 'fang_regression_f2.json')))
  (name,) = data['deviations']
  assert name == 'attention (n = 2002) [DEVIATION: Adam]'
  assert data['deviations'][name]['runs'][0]['mse_test'] == 1.0625
  assert [r['mse_test'] for r in data['runs']] == [6.5]


def test_report_names_the_command_that_built_it(tmp_path):
  """The tables and figures carry the report command's own provenance (the runs' commands
  are listed per section): in the Markdown header and in every target's JSON."""
  work, res = str(tmp_path / 'runs'), str(tmp_path / 'res')
  _finished(work, 'f2_nn_depth_120_seed0', 'nn_depth', 0, 50.0, num_tokens=0, depth_width=120)
  report = dict(PROV, command='python experiments/fang_regression.py --report_only',
                git_revision='cafe456', utc_time='2026-11-23T20:00:00+00:00')
  md = open(regression_report.write_report(work, res, report_provenance=report)).read()
  head = md[:md.index('## f1')]
  assert '- report command (tables, figures): `python experiments/fang_regression.py ' \
         '--report_only`' in head and '- git revision: `cafe456`' in head
  data = json.load(open(os.path.join(res, 'fang_regression_f2.json')))
  assert data['report_provenance'] == report
  # Without one (library use), no report command is claimed.
  md = open(regression_report.write_report(work, res)).read()
  assert 'report command' not in md
