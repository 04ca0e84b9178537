"""transformer_ua.reports.mixing_plateau: the plateau comparison across schedules, on
hand-made sweeps (the helpers that make them are test_mixing's)."""

import json

import pytest

from tests.test_mixing import PROV, _fake_run, _three_schedules
from transformer_ua.reports import mixing_plateau


def test_plateau_comparison_on_hand_made_sweeps(tmp_path):
  short, long_, longer = tmp_path / 'short', tmp_path / 'long', tmp_path / 'longer'
  for seed, (att, sep) in enumerate([(20.0, 24.0), (21.0, 25.0), (22.0, 26.0)]):
    _fake_run(short, 'attention', seed, 2000, [(1500, att - 2), (2000, att)], mlm=att)
    _fake_run(short, 'sepconv', seed, 2000, [(1500, sep - 1), (2000, sep)], mlm=sep)
  _fake_run(long_, 'attention', 0, 6000, [(4500, 24.5), (6000, 25.0)], mlm=25.0)
  _fake_run(long_, 'sepconv', 0, 6000, [(4000, 25.0), (4500, 26.0), (6000, 30.0)], mlm=30.0)
  _fake_run(long_, 'sepconv', 1, 6000, [(4500, 27.0), (6000, 28.0)], mlm=28.0)
  _fake_run(long_, 'attention', 0, 1000, [], stage='mnli', mnli=60.0)
  _fake_run(longer, 'attention', 0, 18000, [(13500, 25.4), (18000, 25.5)], mlm=25.5)
  _fake_run(longer, 'sepconv', 0, 18000, [(13500, 33.0), (18000, 34.0)], mlm=34.0)
  # any order in, shortest schedule first out
  scheds, rows, plateau, checks = mixing_plateau.compare_schedules(
      [str(longer), str(short), str(long_)])
  assert [x['steps'] for x in scheds] == [2000, 6000, 18000]
  att, sep = rows['attention'], rows['sepconv']
  assert att[0]['gain_seed0'] is None
  assert [att[1]['gain_seed0'], att[2]['gain_seed0']] == pytest.approx([5.0, 0.5])
  assert [sep[1]['gain_seed0'], sep[2]['gain_seed0']] == pytest.approx([6.0, 4.0])
  assert att[0]['gain_last_quarter']['mean'] == pytest.approx(2.0)
  assert att[1]['gain_last_quarter']['values'] == pytest.approx([0.5])
  assert sep[1]['gain_last_quarter']['values'] == pytest.approx([4.0, 1.0])
  assert sep[1]['mlm']['mean'] == pytest.approx(29.0) and sep[1]['mlm']['n'] == 2
  assert att[0]['nsp']['mean'] == pytest.approx(51.0) and att[1]['nsp']['values'] == [50.0]
  assert rows['average'][1]['mlm_seed0'] is None and plateau['average'] is None
  assert att[2]['train_mlm_seed0'] == pytest.approx(24.5)   # the training rows' fraction, in %
  # 6000 -> 18000 buys the Transformer 0.5 < PLATEAU_POINTS = 1, SepConv 4.0
  assert plateau['attention'] == {'steps': 18000, 'from_steps': 6000,
                                  'gain': pytest.approx(0.5), 'plateaued': True}
  assert plateau['sepconv']['plateaued'] is False
  assert sorted(checks) == [6000, 18000]     # the shortest schedule's are in its own report
  by = {s: {c['claim'].split(' (')[0]: c for c in cs} for s, cs in checks.items()}
  # 6000 steps: Transformer 25 (n = 1, seed noise = the 2000-step seeds' std 1.0) against
  # SepConv 29 (n = 2, its own std sqrt(2)): SE = sqrt(1/1 + 2/2) = 1.414, |-4| >= 2 SE.
  c = by[6000]['MLM: Transformer above SepConv']
  assert c['measured'] == '-4.0 ± 1.4 points (n = 1 vs 2)' and c['verdict'].startswith('fails')
  # 18000 steps: one run each; the Transformer borrows 1.0 from 2000 steps (6000 has one
  # seed), SepConv sqrt(2) from 6000: SE = sqrt(1 + 2) = 1.732, d = 25.5 - 34 = -8.5.
  c = by[18000]['MLM: Transformer above SepConv']
  assert c['measured'] == '-8.5 ± 1.7 points (n = 1 vs 1)' and c['verdict'].startswith('fails')
  # MNLI: only the Transformer has a run, and no shorter schedule gives it a seed std.
  c = by[6000]['MNLI analogue: Transformer above the majority class']
  assert c['measured'].startswith('+24.0 points') and c['verdict'].startswith('not judged')
  prov = {'command': 'c', 'git_revision': 'r', 'machine': 'm', 'utc_time': 't',
          'load_average_1min_at_start': 0.0}
  p = mixing_plateau.plateau_report([str(short), str(long_), str(longer)], str(tmp_path / 'rep'),
                                  prov, tokens_per_step=8)
  assert p is None
  md = (tmp_path / 'rep' / 'mixing_layers_plateau.md').read_text()
  assert '| gain over 6000 steps (seed 0) | — | — | +4.0 | +0.5 |' in md
  assert '| MLM, mean ± std (n) | — | — | 29.0 ± 1.4 (n=2) | 25.0 (n=1) |' in md
  assert ('| **plateau?** | — | — | still rising (+4.0, 6000 -> 18000) | '
          'plateaued (+0.5, 6000 -> 18000) |') in md
  out = json.loads((tmp_path / 'rep' / 'mixing_layers_plateau.json').read_text())
  assert out['plateau']['attention']['plateaued'] is True
  assert out['learning_curves_seed0']['mlm']['18000']['sepconv'] == [[13500, 33.0],
                                                                      [18000, 34.0]]
  assert (tmp_path / 'rep' / 'mixing_layers_plateau.png').stat().st_size > 0
  lonely = tmp_path / 'lonely'                       # one mixer: no claim to judge yet
  _fake_run(lonely, 'attention', 0, 18000, [(18000, 25.5)], mlm=25.5)
  assert mixing_plateau.plateau_report([str(short), str(lonely)], str(tmp_path / 'rep1'), prov,
                                     tokens_per_step=8) is None
  md = (tmp_path / 'rep1' / 'mixing_layers_plateau.md').read_text()
  assert "## The paper's Table 1 claims at 18000 steps" in md and '| claim |' not in md
  assert md.rstrip().endswith('No two mixers have finished this schedule yet.')
  for roots, fragment in (([str(short), str(short)], 'two workdirs hold the same 2000-step'),
                          ([str(short), str(tmp_path / 'rep')], 'holds no pre-training run')):
    with pytest.raises(mixing_plateau.ScheduleError, match=fragment):
      mixing_plateau.compare_schedules(roots)


def _earlier_report(tmp_path):
  """The three schedules' plateau report, made while their workdirs existed; returns the
  18000-step workdir and the report's JSON path."""
  short, long_, longer = _three_schedules(tmp_path)
  assert mixing_plateau.plateau_report([str(short), str(long_), str(longer)],
                                       str(tmp_path / 'rep'), PROV, tokens_per_step=8) is None
  return longer, str(tmp_path / 'rep' / 'mixing_layers_plateau.json')


def test_plateau_report_goes_on_from_an_earlier_report_when_workdirs_are_gone(tmp_path):
  longer, earlier = _earlier_report(tmp_path)
  # the workdirs are gone; a new machine reruns SepConv at 18000 steps and adds average
  new = tmp_path / 'new'
  _fake_run(new, 'sepconv', 0, 18000, [(13500, 34.0), (18000, 35.0)], mlm=35.0)
  _fake_run(new, 'average', 0, 18000, [(13500, 15.0), (18000, 15.2)], mlm=15.2)
  scheds, rows, plateau, checks = mixing_plateau.compare_schedules([earlier, str(new)])
  assert [x['steps'] for x in scheds] == [2000, 6000, 18000]
  att, sep, avg = rows['attention'], rows['sepconv'], rows['average']
  # the earlier report's rows, as recorded, and marked with where they were read
  assert [r['mlm_seed0'] for r in att] == [20.0, 25.0, 25.5]
  assert att[2]['source'] == str(longer) and att[2]['via'] == f'{earlier} (report at abcdef0)'
  assert sep[1]['mlm']['values'] == [30.0, 28.0] and sep[1]['gain_last_quarter']['values'] == [
      4.0, 1.0]
  # the new workdir's rows; gains over the earlier report's shorter schedules
  assert sep[2]['source'] == str(new) and sep[2].get('via') is None
  assert sep[2]['gain_seed0'] == pytest.approx(35.0 - 30.0)
  assert avg[2]['mlm_seed0'] == 15.2 and avg[2]['gain_seed0'] is None
  assert plateau['attention']['plateaued'] is True and plateau['sepconv']['gain'] == 5.0
  srcs = {s['root']: s for s in scheds[2]['sources']}
  assert srcs[str(new)]['mixers'] == ['average', 'sepconv'] and srcs[str(new)]['via'] is None
  assert srcs[str(longer)]['mixers'] == ['attention'] and srcs[str(longer)]['via']
  # 18000 steps, recomputed with the 6000-step schedule's MNLI baseline: Transformer 25.5
  # (seed std 1.0 from 2000 steps) vs SepConv 35 (sqrt(2) from 6000): SE = sqrt(3)
  c = next(c for c in checks[18000] if c['claim'].startswith('MLM: Transformer above SepConv'))
  assert c['measured'] == '-9.5 ± 1.7 points (n = 1 vs 1)'
  # a report from before baselines were stored: its schedules recorded whole keep its
  # judgement of the claims; a merged schedule is judged anew (without the baselines)
  with open(earlier) as f:
    d = json.load(f)
  for x in d['schedules']:
    del x['baselines']
  d['claims']['6000'][0]['verdict'] = 'as recorded'
  with open(earlier, 'w') as f:
    json.dump(d, f)
  scheds, rows, _, checks = mixing_plateau.compare_schedules([earlier, str(new)])
  assert checks[6000][0]['verdict'] == 'as recorded' and scheds[1]['claims_via']
  assert not any('majority' in c['claim'] for c in checks[18000])
  assert 'claims_via' not in scheds[2]
  # the new report holds everything the next one needs: rebuilt from it alone, same rows
  assert mixing_plateau.plateau_report([earlier, str(new)], str(tmp_path / 'rep2'), PROV,
                                     tokens_per_step=8) is None
  md = (tmp_path / 'rep2' / 'mixing_layers_plateau.md').read_text()
  assert f'- Transformer: runs in `{longer}`, as recorded in `{earlier} (report at abcdef0)`' in md
  assert f'- Average attention, SepConv: runs in `{new}`' in md
  again = mixing_plateau.compare_schedules([str(tmp_path / 'rep2' / 'mixing_layers_plateau.json')])
  strip = lambda rs: {m: [{k: v for k, v in r.items() if k not in ('via', 'source')} for r in rr]
                      for m, rr in rs.items()}
  assert strip(json.loads(json.dumps(again[1]))) == strip(json.loads(json.dumps(rows)))
  # rebuilt from that report and the same workdir again: each mixer under its own source
  twice = mixing_plateau.compare_schedules([str(tmp_path / 'rep2' / 'mixing_layers_plateau.json'),
                                          str(new)])
  assert sorted((s['root'], s['via'] is None, s['mixers']) for s in twice[0][2]['sources']) == [
      (str(longer), False, ['attention']), (str(new), True, ['average', 'sepconv'])]
  (tmp_path / 'other.json').write_text('{"table1": {}}')     # e.g. a per-config report
  for bad in (tmp_path / 'other.json', tmp_path / 'none.json', tmp_path / 'rep2' / 'x.json'):
    with pytest.raises(mixing_plateau.ScheduleError, match='is not a plateau report'):
      mixing_plateau.compare_schedules([str(bad)])


def test_plateau_report_keeps_a_replaced_run_as_a_rerun(tmp_path):
  longer, earlier = _earlier_report(tmp_path)
  # another machine reruns the Transformer's 18000-step seed 0: it replaces the recorded
  # row (a workdir over a report), and the recorded run stays as a rerun with its curve
  new = tmp_path / 'new'
  _fake_run(new, 'attention', 0, 18000, [(9000, 22.0), (13500, 26.0), (18000, 26.5)],
            mlm=26.5, utc='t2')
  scheds, rows, _, _ = mixing_plateau.compare_schedules([earlier, str(new)])
  att = rows['attention'][2]
  assert att['mlm_seed0'] == 26.5 and att['source'] == str(new)
  assert [(r['source'], r['mlm_seed0'], r['machines']) for r in att['reruns']] == [
      (str(longer), 25.5, ['m'])]
  assert att['reruns'][0]['via'] == f'{earlier} (report at abcdef0)'
  assert all(not r['reruns'] for m in rows for r in rows[m][:2])
  # 26.0 - 25.4 at step 13500, 26.5 - 25.5 at 18000; step 9000 is the new run's alone
  assert mixing_plateau.curve_difference(
      [(9000, 22.0), (13500, 26.0), (18000, 26.5)], [[13500, 25.4], [18000, 25.5]]) == (
          pytest.approx(1.0), 18000, 2)
  assert mixing_plateau.curve_difference([(100, 1.0)], [(200, 1.0)]) is None
  assert mixing_plateau.plateau_report([earlier, str(new)], str(tmp_path / 'rep2'), PROV,
                                       tokens_per_step=8) is None
  md = (tmp_path / 'rep2' / 'mixing_layers_plateau.md').read_text()
  assert '## Seed 0 run more than once' in md
  assert (f'| Transformer, 18000 steps | 26.5: `{new}` (m) | 25.5: `{longer}` as recorded in '
          f'`{earlier} (report at abcdef0)` (m) | +1.0 | 1.0 points at step 18000 (2 common '
          'evaluations) |') in md
  # a later seed on another machine: the row names the seed-0 run's own machine only
  _fake_run(new, 'attention', 1, 18000, [(18000, 27.0)], mlm=27.0, utc='t3', machine='m2')
  mixing_plateau.plateau_report([earlier, str(new)], str(tmp_path / 'rep3'), PROV,
                                tokens_per_step=8)
  md3 = (tmp_path / 'rep3' / 'mixing_layers_plateau.md').read_text()
  assert f'| Transformer, 18000 steps | 26.5: `{new}` (m) | 25.5:' in md3
  (new / 'attention_s1').rename(tmp_path / 'attention_s1_aside')
  # rebuilt from the new report alone, or with the same workdir again: the same rerun, once
  again = str(tmp_path / 'rep2' / 'mixing_layers_plateau.json')
  for roots in ([again], [again, str(new)]):
    att = mixing_plateau.compare_schedules(roots)[1]['attention'][2]
    assert [(r['source'], r['mlm_seed0']) for r in att['reruns']] == [(str(longer), 25.5)]
  # a copy of the workdir (its archive) holds the same runs, not reruns
  import shutil
  shutil.copytree(new, tmp_path / 'copy')
  att = mixing_plateau.compare_schedules([again, str(tmp_path / 'copy')])[1]['attention'][2]
  assert att['source'] == str(tmp_path / 'copy')
  assert [(r['source'], r['mlm_seed0']) for r in att['reruns']] == [(str(longer), 25.5)]
  # a report from before run ids were stored: the same run is known by its curve
  with open(again) as f:
    d = json.load(f)
  for rr in d['rows'].values():
    for r in rr:
      r.pop('run_seed0')
  with open(again, 'w') as f:
    json.dump(d, f)
  att = mixing_plateau.compare_schedules([again, str(tmp_path / 'copy')])[1]['attention'][2]
  assert [(r['source'], r['mlm_seed0']) for r in att['reruns']] == [(str(longer), 25.5)]
  # without a rerun, no section
  assert '## Seed 0 run more than once' not in (tmp_path / 'rep' / 'mixing_layers_plateau.md'
                                                ).read_text()
