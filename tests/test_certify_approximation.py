"""experiments/certify_approximation.py, its report and the Monte Carlo check it runs.

Oracles: hand-computed Monte Carlo intervals, ``Realized.apply_certified`` for the
worker pool, and the binary's own one-line refusals.
"""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from transformer_ua import cli
from transformer_ua.reports import certificate as report
from transformer_ua.yun import build_approximator, certified_mc, plan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'experiments', 'certify_approximation.py')
TINY = 'experiments/configs/certify_approximation.py:tiny'
sys.path.insert(0, os.path.join(ROOT, 'experiments'))
import certify_approximation as binary  # noqa: E402  pylint: disable=wrong-import-position
from configs import certify_approximation as config_lib  # noqa: E402


def _run(*args, timeout=600):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                        env=env, cwd=ROOT, timeout=timeout, check=False)


# -- the Monte Carlo interval ----------------------------------------------------


def test_mc_interval_by_hand():
  # |f - g| = 0.5 at every entry of 3 tokens: sum_ji |f - g|^2 = 0.75, d_2 = sqrt(0.75)
  f = np.full((100, 3, 1), 0.5)
  got = certified_mc.mc_interval(f, np.zeros_like(f), np.zeros_like(f), 2.0)
  assert got['estimate'] == pytest.approx(math.sqrt(0.75), rel=1e-15)
  assert got['ci_low'] == pytest.approx(math.sqrt(0.75)) == got['ci_high']
  # a radius widens both ends: (0.5 - 0.1)^2 * 3 and (0.5 + 0.1)^2 * 3
  got = certified_mc.mc_interval(f, np.zeros_like(f), np.full_like(f, 0.1), 2.0)
  assert got['ci_low'] == pytest.approx(math.sqrt(3 * 0.16))
  assert got['ci_high'] == pytest.approx(math.sqrt(3 * 0.36))
  assert got['max_rad'] == 0.1 and got['points'] == 100


def test_mc_interval_clips_the_lower_end_at_0_and_covers_the_estimate():
  rng = np.random.default_rng(0)
  f = rng.random((500, 3, 1))
  mid = f + rng.normal(scale=0.01, size=f.shape)
  rad = np.full_like(f, 0.05)          # wider than most errors: lower ends clip to 0
  got = certified_mc.mc_interval(f, mid, rad, 2.0)
  assert 0 <= got['ci_low'] < got['estimate'] < got['ci_high']
  e = np.sum((np.abs(f - mid) + rad) ** 2, axis=(1, 2))
  assert got['ci_high'] == pytest.approx(
      math.sqrt(np.mean(e) + certified_mc.Z95 * np.std(e, ddof=1) / math.sqrt(500)))


def test_the_check_flags_a_certificate_below_the_monte_carlo_upper_end():
  ok = binary._check({'certificate': {'total': 0.3},
                      'monte_carlo': {'ci_high': 0.2, 'estimate': 0.1}})
  bad = binary._check({'certificate': {'total': 0.1},
                       'monte_carlo': {'ci_high': 0.2, 'estimate': 0.15}})
  assert ok['certificate_ge_mc_upper'] and ok['ratio'] == pytest.approx(3.0)
  assert not bad['certificate_ge_mc_upper']


@pytest.mark.slow
def test_pool_enclosure_is_apply_certified():
  net = build_approximator('token_times_mean', d=1, n=3, resolution=2, ties='complete')
  p = plan.plan_realization(net, tolerance=1e-6, margin=2.0 ** -8)
  g = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact', clamp=True)
  x = np.random.default_rng(3).random((8, 3, 1))
  mid, rad = certified_mc.enclose(g, x, workers=2)
  ref_mid, ref_rad = g.apply_certified(x)
  assert np.array_equal(mid, ref_mid) and np.array_equal(rad, ref_rad)


def test_output_range_of_a_grid_with_no_good_cube_is_0():
  # the paper's map at N=2 < n=3: every cube has a repeated cell, g_bar = 0 everywhere
  net = build_approximator('token_times_mean', d=1, n=3, resolution=2, ties='paper')
  assert net.values.size == 0
  assert net.output_range() == ([0], [0])


# -- config validation -----------------------------------------------------------


@pytest.mark.parametrize('key,value,fragment', [
    ('mc_points', 1, 'config.mc_points'),
    ('p', 0.5, 'config.p=0.5'),
    ('clamp_epsilon', -1.0, 'config.clamp_epsilon'),
    ('lemma6_ties', ('hybrid',), "'hybrid'"),
    ('lemma6_margins_log2', (-1,), 'k <= -2'),
    ('table', (('prefix_mean', False, 'complete', (0.5,)),), 'not permutation equivariant'),
    ('table', (('nope', False, 'complete', (0.5,)),), "target 'nope'"),
    ('ladder', (('s', 'token_times_mean', False, 'paper', (1,)),), 'integers >= 2'),
])
def test_validate_names_the_bad_value_in_one_line(key, value, fragment):
  c = config_lib.get_config('tiny')
  c[key] = value
  with pytest.raises(binary.ConfigError, match=None) as e:
    binary.validate(c)
  assert fragment in str(e.value) and '\n' not in str(e.value)


def test_configs_validate():
  for variant in ('default', 'tiny', 'lemma6', 'clamp'):
    binary.validate(config_lib.get_config(variant))
  with pytest.raises(ValueError, match='unknown config variant'):
    config_lib.get_config('huge')


# -- the report --------------------------------------------------------------------


def _cert(total, terms=(0.3, 0.0, 0.01)):
  return {'total': total, 'terms': dict(zip(('f_fbar', 'fbar_gbar', 'gbar_g'), terms)),
          'bits': 100, 'seconds': 1.5}


def _mc(est):
  return {'estimate': est, 'ci_low': est * 0.9, 'ci_high': est * 1.1, 'points': 10000,
          'seconds': 3.0}


def _synthetic(bad=False):
  ladder = []
  for series, ties in (('paper', 'paper'), ('complete', 'complete')):
    for N in (2, 4, 8):
      row = {'series': series, 'resolution': N, 'layers': 10 * N, 'params': 100 * N,
             'certificate': _cert(1.0 / N + (0.5 / math.sqrt(N) if ties == 'paper' else 0),
                                  (1.0 / N, 0.5 / math.sqrt(N) if ties == 'paper' else 0,
                                   1e-3)),
             'monte_carlo': _mc(0.3 / N)}
      ladder.append(binary._check(row))
  table = [binary._check({'target': 'token_times_mean', 'theorem': 2, 'epsilon': 0.5,
                          'status': 'certified', 'resolution': 3, 'layers': 31,
                          'params': 713, 'certificate': _cert(0.05 if bad else 0.47),
                          'approximate_seconds': 10.0, 'monte_carlo': _mc(0.126)}),
           {'target': 'attention_map', 'theorem': 2, 'epsilon': 0.1,
            'status': 'out of reach', 'reason': 'needs resolution N >= 53'}]
  ramp = []
  for N in (4,):
    for clamp in (True, False):
      for k, ramp_w in ((-4, 2.0 ** -10), (-8, 2.0 ** -14), (-16, 2.0 ** -22)):
        ramp.append({'resolution': N, 'ties': 'paper', 'clamp': clamp, 'margin_log2': k,
                     'ramp': ramp_w, 'lam': 2.0 ** 12, 'bits': 120,
                     'gbar_g': (1.0 if clamp else 1e6) * math.sqrt(ramp_w),
                     'interior_sup': 1e-20, 'window_sup': 0.5 if clamp else 1e6,
                     'window_measure': 6 * ramp_w, 'seconds': 0.5})
  lam = [{**r, 'lam_shift_log2': 0} for r in ramp[:2]]
  clamp = {'target': 'token_times_mean', 'epsilon': 0.5,
           'clamp': {'resolution': 3, 'layers': 31, 'lam': 8192.0, 'ramp': 2.0 ** -17,
                     'bits': 193, 'margin': 2.0 ** -12, 'total': 0.47, 'window_sup': 0.69,
                     'certify_seconds': 3.0},
           'approximate_unclamped': {'certified': False, 'message': 'no certificate',
                                     'attempts': ['N=3: ...'], 'seconds': 60.0},
           'unclamped_same_n': {'resolution': 3, 'tries': [
               {'margin_log2': -8, 'lam': 8192.0, 'ramp': 2.0 ** -10, 'bits': 190,
                'window_sup': 4e16, 'gbar_g': 1e15, 'total': 1e15, 'seconds': 2.0,
                'layers': 30}], 'certified': False}}
  return {'provenance': {'command': 'python experiments/certify_approximation.py',
                         'git_revision': 'abc', 'machine': 'test', 'utc_time': 'now',
                         'load_average_1min_at_start': 1.0},
          'd': 1, 'n': 3, 'p': 2.0, 'table': table, 'ladder': ladder,
          'lemma6': {'ramp': ramp, 'lam': lam, 'fits': binary.fit_rates(ramp)},
          'clamp': clamp, 'seconds': 12.0}


def test_fit_rates_recovers_the_square_root():
  fits = _synthetic()['lemma6']['fits']
  assert {(f['clamp'], round(f['slope'], 12)) for f in fits} == {(True, 0.5), (False, 0.5)}


def test_report_writes_tables_and_figures(tmp_path):
  paths = report.write(_synthetic(), str(tmp_path))
  assert sorted(os.path.basename(p) for p in paths) == sorted(
      [report.MARKDOWN_NAME, report.LADDER_PNG, report.LEMMA6_PNG])
  text = (tmp_path / report.MARKDOWN_NAME).read_text()
  assert 'every certified total is >= the upper end' in text
  assert '| token_times_mean | 2 | 0.5 | 3 | 31 | 713 | 100 |' in text
  assert 'out of reach: needs resolution N >= 53' in text
  assert '| 4 | paper | yes | 0.5 | 3 |' in text      # the fitted slope row
  assert 'no certificate' in text and 'git revision: `abc`' in text
  for name in (report.LADDER_PNG, report.LEMMA6_PNG):
    assert (tmp_path / name).read_bytes()[:4] == b'\x89PNG'


def test_report_says_when_the_check_failed_and_which_parts_are_missing(tmp_path):
  result = _synthetic(bad=True)
  del result['lemma6'], result['clamp']
  text = report.markdown(result)
  assert 'CHECK FAILED: 1 certified total(s) below' in text
  assert 'Parts not run: lemma6, clamp.' in text
  assert [os.path.basename(p) for p in report.write(result, str(tmp_path))] == [
      report.MARKDOWN_NAME, report.LADDER_PNG]


# -- the binary ----------------------------------------------------------------------


@pytest.mark.parametrize('args,fragment', [
    (('--config.mc_points=1',), 'config.mc_points'),
    (('--config.mc_pionts=5',), 'mc_points'),
    (('--nosuchflag',), 'nosuchflag'),
    (('--output_dir={file}',), 'is a file'),
    (('--output_dir={tmp}',), 'certify_approximation.json'),   # exists: refused
])
def test_bad_input_is_one_line_exit_2_before_any_work(args, fragment, tmp_path):
  a_file = tmp_path / 'a_file'
  a_file.write_text('x')
  out = tmp_path / 'out'
  out.mkdir()
  old = out / binary.JSON_NAME
  old.write_text('{"old": 1}')
  proc = _run(f'--config={TINY}', *[a.format(file=a_file, tmp=out) for a in args],
              timeout=120)
  lines = [l for l in proc.stderr.splitlines() if l.strip()]
  assert proc.returncode == cli.USAGE_ERROR, proc.stderr
  assert 'Traceback' not in proc.stderr
  assert lines[0].startswith('error: ') and fragment in lines[0], proc.stderr
  assert len(lines) <= 2
  assert sorted(os.listdir(out)) == [binary.JSON_NAME] and old.read_text() == '{"old": 1}'


@pytest.mark.slow
def test_tiny_run_end_to_end(tmp_path):
  proc = _run(f'--config={TINY}', f'--output_dir={tmp_path}')
  assert proc.returncode == 0, proc.stderr[-3000:]
  r = json.loads((tmp_path / binary.JSON_NAME).read_text())
  assert r['parts_done'] == ['table', 'ladder', 'lemma6', 'clamp']
  assert r['all_certificates_above_mc']
  row = r['table'][0]
  assert row['status'] == 'certified' and row['certificate']['total'] <= row['epsilon']
  assert row['monte_carlo']['points'] == 64
  assert row['monte_carlo']['ci_high'] <= row['certificate']['total']
  # with the clamp the windows' sup is within g_bar's range; without it it is not
  ramp = r['lemma6']['ramp']
  assert max(x['window_sup'] for x in ramp if x['clamp']) < 1
  assert min(x['window_sup'] for x in ramp if not x['clamp']) > 1e3
  for name in (report.MARKDOWN_NAME, report.LADDER_PNG, report.LEMMA6_PNG):
    assert (tmp_path / name).stat().st_size > 0
  # a second run into the same directory is refused without --overwrite
  again = _run(f'--config={TINY}', f'--output_dir={tmp_path}', timeout=120)
  assert again.returncode == cli.USAGE_ERROR and '--overwrite' in again.stderr


def test_from_json_rebuilds_the_report_and_refits_only_certified_interiors(tmp_path):
  result = _synthetic()
  result['config'] = {'lemma6_tolerance': 1e-9}
  result['lemma6']['ramp'][0]['interior_sup'] = 0.5      # its interiors did not certify
  src = tmp_path / 'src.json'
  src.write_text(json.dumps(result))
  out = tmp_path / 'out'
  proc = _run(f'--from_json={src}', f'--output_dir={out}', timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  got = json.loads((out / binary.JSON_NAME).read_text())
  fits = {f['clamp']: f for f in got['lemma6']['fits']}
  assert fits[True]['interiors_failed'] == 1 and fits[True]['points'] == 2
  assert fits[False]['interiors_failed'] == 0 and fits[False]['points'] == 3
  assert got['provenance'] == result['provenance'] and 'report_rebuilt' in got
  assert (out / report.MARKDOWN_NAME).exists() and (out / report.LEMMA6_PNG).exists()
  bad = _run(f'--from_json={tmp_path / "missing.json"}', f'--output_dir={tmp_path / "o2"}',
             timeout=120)
  assert bad.returncode == cli.USAGE_ERROR and 'cannot be read' in bad.stderr
