"""experiments/certify_approximation.py (studies.certification), its report and the Monte
Carlo check it runs.

Oracles: hand-made Monte Carlo records and certificates whose verdicts are worked by hand
(a bound inside its 95% interval is consistent, a whole interval above it is not), the
closed form d_2(f_bar, 0) = 9/16 of token_times_mean at N = 2, and the binary's own
one-line refusals.
"""

import json
import math
import os
import subprocess
import sys
import types

import pytest

from fractions import Fraction

from experiments.configs import certify_approximation as config_lib
from transformer_ua import cli
from transformer_ua.reports import certification as report
from transformer_ua.studies import certification
from transformer_ua.verify import certificate_mc
from transformer_ua.yun import build_approximator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'experiments', 'certify_approximation.py')
TINY = 'experiments/configs/certify_approximation.py:tiny'


def _run(*args, timeout=600):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                        env=env, cwd=ROOT, timeout=timeout, check=False)


# -- the Monte Carlo check: term by term, contradicted only by a whole interval above ----

TERMS = ('f_fbar', 'fbar_gbar', 'gbar_g_interior', 'gbar_g_window', 'gbar_g', 'total')


def _hand_cert(total=0.7503, f_fbar=0.1878, fbar_gbar=0.5625, gbar_g=0.0, interior=0.0,
               window=0.0):
  return types.SimpleNamespace(
      terms={'f_fbar': f_fbar, 'fbar_gbar': fbar_gbar, 'gbar_g': gbar_g}, total=total,
      details={'gbar_g': {'interior_part': interior, 'window_part': window}})


def _hand_mc(**intervals):
  """A certificate_mc result: each term (estimate, ci_low, ci_high) given or (0, 0, 0);
  p = 2, n d = 3, V = 1, so the slack is sqrt(3) 2^-50 ~ 1.5e-15."""
  terms = {t: dict(zip(('estimate', 'ci_low', 'ci_high'), intervals.get(t, (0., 0., 0.))),
                   interior=0.0, window=0.0) for t in TERMS}
  return {'p': 2.0, 'slack': math.sqrt(3) * 2.0 ** -50, 'terms': terms,
          'points': {'interior': 1000, 'window': 1000},
          'weights': {'interior': Fraction(27, 64), 'window': Fraction(37, 64)},
          'max_window_gap': 0.0, 'max_interior_gap': 0.0, 'value_scale': 1.0, 'prec': 130,
          'seconds': 2.5, 'where': 'in-process', 'workers': 1}


def _record(mc, cert):
  return certification.monte_carlo_record(mc, certificate_mc.compare(mc, cert))


def test_a_tight_total_inside_the_interval_is_consistent():
  # the tiny run's paper N=2 ladder row under the old rule: total 0.7503 below the upper
  # end 0.762 of its interval [0.594, 0.762] was called a bug; it is inside the interval
  rec = _record(_hand_mc(total=(0.678, 0.594, 0.762), f_fbar=(0.19, 0.18, 0.20),
                         fbar_gbar=(0.56, 0.55, 0.58)), _hand_cert())
  assert rec['contradicted'] == []
  assert [c['term'] for c in rec['compare']] == list(TERMS)
  assert rec['terms']['total'] == {'estimate': 0.678, 'ci_low': 0.594, 'ci_high': 0.762}
  assert rec['points'] == {'interior': 1000, 'window': 1000}
  assert rec['weights'] == {'interior': 27 / 64, 'window': 37 / 64}
  assert 'mpmath' in rec['evaluator'] and 'exact.ball' in rec['evaluator']
  assert json.loads(json.dumps(rec)) == rec               # JSON as it stands


@pytest.mark.parametrize('term,interval,cert', [
    ('total', (0.80, 0.7504, 0.85), {}),                    # whole interval above 0.7503
    ('f_fbar', (0.2, 0.19, 0.21), {}),                      # above 0.1878, total inside
    ('fbar_gbar', (1e-3, 1e-14, 2e-3), {'fbar_gbar': 0.0}),  # above 0 by more than 1.5e-15
    ('gbar_g_window', (0.05, 0.0401, 0.06), {'window': 0.04}),   # a p-th power, above 0.04
    ('gbar_g_interior', (3e-3, 2e-3, 4e-3), {'interior': 1e-3}),
])
def test_a_whole_interval_above_its_bound_contradicts_that_term_only(term, interval, cert):
  rec = _record(_hand_mc(**{term: interval}), _hand_cert(**cert))
  assert rec['contradicted'] == [term]


def test_bounds_at_their_interval_or_within_float_noise_are_consistent():
  cases = [('total', (0.76, 0.7503, 0.77), {}),             # ci_low == bound
           ('fbar_gbar', (1e-16, 1e-16, 2e-16), {'fbar_gbar': 0.0}),   # noise < 1.5e-15
           ('gbar_g_window', (0.04, 0.04, 0.05), {'window': 0.04})]
  for term, interval, cert in cases:
    assert _record(_hand_mc(**{term: interval}), _hand_cert(**cert))['contradicted'] == []


def _checked_row(contradicted=(), series=None, total=0.3, est=0.1):
  compare = [{'term': t, 'bound': 0.3, 'estimate': 0.35 if t in contradicted else 0.1,
              'ci_low': 0.32 if t in contradicted else 0.05, 'ci_high': 0.4, 'slack': 0.0,
              'below': t not in contradicted} for t in TERMS]
  head = ({'series': series} if series else {'target': 'token_times_mean', 'epsilon': 0.5})
  return {**head, 'resolution': 3, 'certificate': {'total': total},
          'monte_carlo': {'compare': compare, 'terms': {'total': {'estimate': est}}}}


def test_ratio_and_the_stop_line_name_the_row_and_the_term():
  assert certification.add_ratio(_checked_row(total=0.3, est=0.1))['ratio'] == (
      pytest.approx(3.0))
  assert certification.add_ratio(_checked_row(est=0.0))['ratio'] == math.inf
  result = {'table': [_checked_row(), {'target': 'x', 'status': 'out of reach'}],
            'ladder': [_checked_row(('gbar_g_window', 'total'), series='paper')]}
  bad = report.contradictions(result)
  assert [(report.row_name(r), c['term']) for r, c in bad] == [
      ('ladder paper N=3', 'gbar_g_window'), ('ladder paper N=3', 'total')]
  line = certification.contradiction_line(bad)
  assert '\n' not in line and line.startswith('error: 2 certified bound(s) contradicted')
  assert ('ladder paper N=3: term gbar_g_window: 95% interval [0.32, 0.4] lies wholly '
          'above the bound 0.3') in line
  assert report.contradictions({'table': [_checked_row()], 'ladder': []}) == []


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
  with pytest.raises(certification.ConfigError, match=None) as e:
    certification.validate(c)
  assert fragment in str(e.value) and '\n' not in str(e.value)


def test_configs_validate():
  for variant in ('default', 'tiny', 'lemma6', 'clamp'):
    certification.validate(config_lib.get_config(variant))
  with pytest.raises(ValueError, match='unknown config variant'):
    config_lib.get_config('huge')


# -- the report --------------------------------------------------------------------


def _cert(total, terms=(0.3, 0.0, 0.01)):
  return {'total': total, 'terms': dict(zip(('f_fbar', 'fbar_gbar', 'gbar_g'), terms)),
          'bits': 100, 'seconds': 1.5}


def _mc(cert, est, contradicted=()):
  """A Monte Carlo record of a certificate row: the d_p estimates ``est`` x the bound,
  interval +-10%; the terms in ``contradicted`` get an interval above their bound."""
  bounds = {**cert['terms'], 'total': cert['total'], 'gbar_g_interior': 1e-20,
            'gbar_g_window': cert['terms']['gbar_g'] ** 2}
  terms, compare = {}, []
  for t in TERMS:
    e = bounds[t] * (2.0 if t in contradicted else est)
    terms[t] = {'estimate': e, 'ci_low': e * 0.9, 'ci_high': e * 1.1}
    compare.append({'term': t, 'bound': bounds[t], **terms[t], 'slack': 1e-16,
                    'below': t not in contradicted})
  return {'points': {'interior': 1000, 'window': 1000}, 'terms': terms, 'compare': compare,
          'contradicted': list(contradicted), 'seconds': 3.0}


def _synthetic(bad=False):
  ladder = []
  for series, ties in (('paper', 'paper'), ('complete', 'complete')):
    for N in (2, 4, 8):
      cert = _cert(1.0 / N + (0.5 / math.sqrt(N) if ties == 'paper' else 0),
                   (1.0 / N, 0.5 / math.sqrt(N) if ties == 'paper' else 0, 1e-3))
      row = {'series': series, 'resolution': N, 'layers': 10 * N, 'params': 100 * N,
             'certificate': cert, 'monte_carlo': _mc(cert, 0.3)}
      ladder.append(certification.add_ratio(row))
  cert = _cert(0.47)
  table = [certification.add_ratio({'target': 'token_times_mean', 'theorem': 2, 'epsilon': 0.5,
                                    'status': 'certified', 'resolution': 3, 'layers': 31,
                                    'params': 713, 'certificate': cert, 'approximate_seconds': 10.0,
                                    'monte_carlo': _mc(cert, 0.2,
                                                       ('gbar_g_window',) if bad else ())}),
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
          'lemma6': {'ramp': ramp, 'lam': lam, 'fits': certification.fit_rates(ramp)},
          'clamp': clamp, 'seconds': 12.0}


def test_fit_rates_recovers_the_square_root():
  fits = _synthetic()['lemma6']['fits']
  assert {(f['clamp'], round(f['slope'], 12)) for f in fits} == {(True, 0.5), (False, 0.5)}


def test_report_writes_tables_and_figures(tmp_path):
  paths = report.write(_synthetic(), str(tmp_path))
  assert sorted(os.path.basename(p) for p in paths) == sorted(
      [report.MARKDOWN_NAME, report.LADDER_PNG, report.LEMMA6_PNG])
  text = (tmp_path / report.MARKDOWN_NAME).read_text()
  assert 'no certified bound is contradicted (7 certificates, 42 terms compared)' in text
  # bounds marked <=, each next to its Monte Carlo [95%]; then the sample counts
  assert ('| d_p(f, f_bar) <= | MC d_p(f, f_bar) [95%] | d_p(f_bar, g_bar) <= | '
          'MC d_p(f_bar, g_bar) [95%] | d_p(g_bar, g) <= | MC d_p(g_bar, g) [95%] | '
          'certified d_p(f, g) <= | MC d_p(f, g) [95%] | MC points (I + W) |') in text
  assert ('| token_times_mean | 2 | 0.5 | 3 | 31 | 713 | 100 | 0.3 | 0.06 [0.054, 0.066] '
          '| 0 | 0 [0, 0] | 0.01 | 0.002 [0.0018, 0.0022] | **0.47** | 0.094 '
          '[0.0846, 0.1034] | 1000 + 1000 | 1.5 | 10.0 | 3 | 5 |') in text
  assert ('| paper | 2 | 20 | 200 | 100 | 0.5 | 0.15 [0.135, 0.165] |') in text
  assert (r'| ladder complete N=8 | int_W \|g_bar - g\|^p (windows) | 1e-06 | '
          '3e-07 [2.7e-07, 3.3e-07] | 1000 + 1000 | consistent |') in text
  for line in text.splitlines():               # every table line has its header's cells
    if line.startswith('| token_times_mean | 2 | 0.5 |'):
      assert line.count(' | ') == 19
  assert 'out of reach: needs resolution N >= 53' in text
  assert '| 4 | paper | yes | 0.5 | 3 |' in text      # the fitted slope row
  assert 'no certificate' in text and 'git revision: `abc`' in text
  for name in (report.LADDER_PNG, report.LEMMA6_PNG):
    assert (tmp_path / name).read_bytes()[:4] == b'\x89PNG'


def test_report_says_when_the_check_failed_and_which_parts_are_missing(tmp_path):
  result = _synthetic(bad=True)
  del result['lemma6'], result['clamp']
  text = report.markdown(result)
  assert ('CHECK FAILED: 1 certified bound(s) contradicted by the Monte Carlo (first: '
          r'token_times_mean epsilon=0.5 N=3, int_W \|g_bar - g\|^p (windows))') in text
  assert ('| 0.0001 | 0.0002 [0.00018, 0.00022] | 1000 + 1000 | **CONTRADICTED** (whole '
          '95% interval above the bound) |') in text
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
  old = out / certification.JSON_NAME
  old.write_text('{"old": 1}')
  proc = _run(f'--config={TINY}', *[a.format(file=a_file, tmp=out) for a in args],
              timeout=120)
  lines = [l for l in proc.stderr.splitlines() if l.strip()]
  assert proc.returncode == cli.USAGE_ERROR, proc.stderr
  assert 'Traceback' not in proc.stderr
  assert lines[0].startswith('error: ') and fragment in lines[0], proc.stderr
  assert len(lines) <= 2
  assert sorted(os.listdir(out)) == [certification.JSON_NAME] and old.read_text() == '{"old": 1}'


@pytest.mark.slow
def test_tiny_run_end_to_end(tmp_path):
  proc = _run(f'--config={TINY}', f'--output_dir={tmp_path}')
  assert proc.returncode == 0, proc.stderr[-3000:]
  r = json.loads((tmp_path / certification.JSON_NAME).read_text())
  assert r['parts_done'] == ['table', 'ladder', 'lemma6', 'clamp']
  assert r['contradicted'] == [] and r['certificates_checked'] == 4
  row = r['table'][0]
  assert row['status'] == 'certified' and row['certificate']['total'] <= row['epsilon']
  for checked in r['table'] + r['ladder']:
    mc, cert = checked['monte_carlo'], checked['certificate']
    assert mc['points'] == {'interior': 1000, 'window': 1000}
    assert 'mpmath' in mc['evaluator'] and mc['contradicted'] == []
    bounds = {c['term']: c['bound'] for c in mc['compare']}
    assert bounds == {**cert['terms'], 'total': cert['total'],
                      'gbar_g_interior': cert['interior_part'],
                      'gbar_g_window': cert['window_part']}
  # the paper's map at N = 2 < n = 3 has no good cube (g_bar = 0): d_2(f_bar, g_bar) is
  # d_2(f_bar, 0) over the 8 cubes of centres in {1/4, 3/4}^3, by hand
  # E[sum_j c_j^2 mean(c)^2] = 81/256, so exactly 9/16; the sampled interval covers it
  paper2 = next(x for x in r['ladder'] if x['series'] == 'paper' and x['resolution'] == 2)
  assert paper2['certificate']['terms']['fbar_gbar'] == pytest.approx(9 / 16, rel=1e-12)
  t = paper2['monte_carlo']['terms']['fbar_gbar']
  assert t['ci_low'] <= 9 / 16 <= t['ci_high']
  # with the clamp the windows' sup is within g_bar's range; without it it is not
  ramp = r['lemma6']['ramp']
  assert max(x['window_sup'] for x in ramp if x['clamp']) < 1
  assert min(x['window_sup'] for x in ramp if not x['clamp']) > 1e3
  for name in (report.MARKDOWN_NAME, report.LADDER_PNG, report.LEMMA6_PNG):
    assert (tmp_path / name).stat().st_size > 0
  # a second run into the same directory is refused without --overwrite
  again = _run(f'--config={TINY}', f'--output_dir={tmp_path}', timeout=120)
  assert again.returncode == cli.USAGE_ERROR and '--overwrite' in again.stderr


CONTRADICTED_RUN = r'''
import runpy
from transformer_ua.verify import certificate_mc
real = certificate_mc.compare
def compare(mc, cert):   # the window term's interval moved wholly above its bound
  rows = real(mc, cert)
  for r in rows:
    if r['term'] == 'gbar_g_window':
      r.update(ci_low=r['bound'] + 1, ci_high=r['bound'] + 2, below=False)
  return rows
certificate_mc.compare = compare
runpy.run_path('experiments/certify_approximation.py', run_name='__main__')
'''


@pytest.mark.slow
def test_a_contradicted_term_stops_the_run_in_one_line_exit_1(tmp_path):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  proc = subprocess.run(
      [sys.executable, '-c', CONTRADICTED_RUN, f'--config={TINY}', '--config.table=()',
       "--config.ladder=(('paper', 'token_times_mean', False, 'paper', (2,)),)",
       '--config.lemma6_resolutions=()', '--config.clamp_target=',
       f'--output_dir={tmp_path}'], capture_output=True, text=True, env=env, cwd=ROOT,
      timeout=600, check=False)
  assert proc.returncode == 1 and 'Traceback' not in proc.stderr, proc.stderr[-2000:]
  lines = [l for l in proc.stderr.splitlines() if l.strip()]
  # the paper's map at N = 2 < n = 3 is 0 on every cube and the clamp keeps g in [0, 0]:
  # the window part's bound is 0, so the moved interval is [1, 2]
  assert lines == ['error: 1 certified bound(s) contradicted by the Monte Carlo, e.g. '
                   'ladder paper N=2: term gbar_g_window: 95% interval [1, 2] lies wholly '
                   'above the bound 0; a bug in the certificate.']
  r = json.loads((tmp_path / certification.JSON_NAME).read_text())
  assert r['contradicted'] == [{'row': 'ladder paper N=2', 'term': 'gbar_g_window'}]
  assert 'CHECK FAILED: 1 certified bound(s)' in (tmp_path / report.MARKDOWN_NAME).read_text()


def test_from_json_rebuilds_the_report_and_refits_only_certified_interiors(tmp_path):
  result = _synthetic()
  result['config'] = {'lemma6_tolerance': 1e-9}
  result['lemma6']['ramp'][0]['interior_sup'] = 0.5      # its interiors did not certify
  src = tmp_path / 'src.json'
  src.write_text(json.dumps(result))
  out = tmp_path / 'out'
  proc = _run(f'--from_json={src}', f'--output_dir={out}', timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  got = json.loads((out / certification.JSON_NAME).read_text())
  fits = {f['clamp']: f for f in got['lemma6']['fits']}
  assert fits[True]['interiors_failed'] == 1 and fits[True]['points'] == 2
  assert fits[False]['interiors_failed'] == 0 and fits[False]['points'] == 3
  assert got['provenance'] == result['provenance'] and 'report_rebuilt' in got
  assert (out / report.MARKDOWN_NAME).exists() and (out / report.LEMMA6_PNG).exists()
  bad = _run(f'--from_json={tmp_path / "missing.json"}', f'--output_dir={tmp_path / "o2"}',
             timeout=120)
  assert bad.returncode == cli.USAGE_ERROR and 'cannot be read' in bad.stderr


def test_from_json_refuses_rows_from_before_the_term_by_term_monte_carlo(tmp_path):
  result = _synthetic()
  result['config'] = {'lemma6_tolerance': 1e-9}
  result['ladder'][0]['monte_carlo'] = {'estimate': 0.1, 'ci_low': 0.09, 'ci_high': 0.11,
                                        'points': 1000, 'seconds': 1.0}   # the old record
  src = tmp_path / 'old.json'
  src.write_text(json.dumps(result))
  proc = _run(f'--from_json={src}', f'--output_dir={tmp_path / "out"}', timeout=300)
  lines = [l for l in proc.stderr.splitlines() if l.startswith('error: ')]
  assert proc.returncode == cli.USAGE_ERROR and 'Traceback' not in proc.stderr
  assert len(lines) == 1 and 'predate the stratified, term-by-term Monte Carlo' in lines[0]
