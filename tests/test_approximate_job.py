"""The main job (experiments/approximate.py, studies.approximation): its checks, its
console, its resolutions.

The fast tests check the refusals (one line, the size asked for and the limit) and the
sweep verdicts; the slow ones run the job at N = 2, 4, 8, 16 with a light config and read
its console top to bottom.
"""

import os
import re
import subprocess
import sys

import pytest

from experiments.configs import approximate as configs
from transformer_ua.studies import approximation
from transformer_ua.yun import approximator
from transformer_ua.yun.variants.paper import Paper
from transformer_ua.yun.grid import Grid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(**kw):
  c = configs.get_config()
  for k, v in kw.items():
    c[k] = v
  return c


@pytest.mark.parametrize('kw, fragments', [
    ({'n': 40}, ('config.n=40', 'cannot exist', 'ramps epsilon >=', 'allowed: n <= ')),
    ({'n': 10 ** 6}, ('config: d=1, n=1000000', 'n=1000000 tokens is too many', '3556 bits')),
    ({'n': 1000}, ('n=1000', 'contextual ids reach t_r = about', '3556 bits')),
    ({'resolution': 10 ** 6}, ('resolution=1000000', 'layers', 'at most 2000000')),
    ({'ladder': (2, 4, 10 ** 5)}, ('config.ladder (N=100000)', 'at most 2000000')),
    ({'resolution': 16, 'epsilon': 0.1}, ('config.epsilon=0.1', 'cube interiors',
                                          '--config.epsilon >= 1.19e-07 and < 0.0156')),
    ({'epsilon': 1e-14}, ('config.epsilon=1e-14', 'below what float64 resolves')),
])
def test_size_refusals_are_one_line_naming_the_size_and_the_limit(kw, fragments):
  with pytest.raises(approximation.ConfigError) as e:
    approximation.validate(_config(**kw))
  msg = str(e.value)
  assert '\n' not in msg and 'np.' not in msg and 'float64(' not in msg, msg
  for f in fragments:
    assert f in msg, (f, msg)


def test_float_limits_in_the_n_40_message_are_right():
  # At N = 4, d = 1: t_r = 4^(2n) 3 (Lemma 8) needs ramps of 4 float64 ulps of t_r, which
  # must stay below delta/4 = 1/16 (ulp(x) = 2^(floor(log2 x) - 52)).
  def fits(n):
    t_r = 4 ** (2 * n) * 3
    ulp = 2.0 ** (t_r.bit_length() - 1 - 52)
    return 4 * ulp < 1 / 16
  largest = max(n for n in range(2, 40) if fits(n))
  assert fits(largest) and not fits(largest + 1)
  with pytest.raises(approximation.ConfigError, match=f'n <= {largest} at d=1, resolution=4'):
    approximation.validate(_config(n=40))


def test_the_default_config_passes_and_so_do_the_resolutions():
  for N in (2, 4, 8, 16):
    approximation.validate(_config(resolution=N))


@pytest.mark.parametrize('row, want', [
    ({'reproduces': True, 'window_share': 0.9, 'epsilon': 1e-3, 'lam': 1e4},
     'reproduces g_bar; d_p from the ramp windows'),
    ({'reproduces': True, 'window_share': 0.1, 'epsilon': 1e-3, 'lam': 1e4}, 'reproduces g_bar'),
    ({'reproduces': False, 'window_share': 1.0, 'epsilon': 0.1, 'lam': 1e4},
     'ramps reach the cube interiors'),
    ({'reproduces': False, 'window_share': 1.0, 'epsilon': 1e-3, 'lam': 1.0},
     "lambda below the plan's 4096"),
    ({'reproduces': False, 'window_share': 1.0, 'epsilon': 1e-6, 'lam': 1e4},
     'the plan needs 75 bits here, float64 has 53'),
])
def test_sweep_verdicts_name_their_cause(row, want):
  got = approximation.sweep_verdict(row, resolution=4, plan_lam=4096.0, bits_needed=75,
                                    dtype='float64')
  assert got.startswith('off: ' + want) or got == want, got


def test_a_verdict_names_every_reason_and_the_figure_tags_the_first():
  from transformer_ua.reports import approximate as report
  row = {'reproduces': False, 'window_share': 1.0, 'epsilon': 1e-6, 'lam': 1.0}
  got = approximation.sweep_verdict(row, resolution=4, plan_lam=4096.0, bits_needed=75,
                                    dtype='float64')
  assert "lambda below the plan's 4096" in got and 'needs 75 bits' in got
  assert report.verdict_tag({**row, 'verdict': got}) == 'off: lambda'
  row = {'reproduces': False, 'window_share': 1.0, 'epsilon': 1e-6, 'lam': 1e4}
  got = approximation.sweep_verdict(row, resolution=4, plan_lam=4096.0, bits_needed=50,
                                    dtype='float64')
  assert got == 'off: above the interior tolerance'


def _run_binary(*args, timeout=300):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  return subprocess.run([sys.executable, os.path.join(ROOT, 'experiments', 'approximate.py'),
                         *args], capture_output=True, text=True, env=env, cwd=ROOT,
                        timeout=timeout, check=False)


@pytest.mark.parametrize('flag, fragment', [
    ('--config.n=1000000', 'n=1000000 tokens is too many'),
    ('--config.n=40', 'config.n=40'),
])
def test_binary_refuses_a_size_in_one_line_and_leaves_no_directory(tmp_path, flag, fragment):
  out = tmp_path / 'new' / 'run'
  proc = _run_binary(flag, f'--output_dir={out}')
  assert proc.returncode == 2, proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 2 and lines[0].startswith('error: ') and fragment in lines[0], lines
  assert 'Traceback' not in proc.stderr
  assert not (tmp_path / 'new').exists()


def _light(N):
  return _config(resolution=N, certify_epsilon=0.5, ladder=(2, 4), compare_ties=False,
                 samples=2000, sweep_samples=1000, map_samples=256, lam_sweep=(1.0, 1e4),
                 epsilon_sweep=(1e-1, 1e-3, 1e-6, 1e-8))


def _read_console(N, tmp_path):
  lines = []
  result = approximation.run(_light(N), str(tmp_path), log=lines.append)
  return result, '\n'.join(lines)


@pytest.mark.slow
@pytest.mark.parametrize('N', [2, 4, 8, 16])
def test_the_job_runs_on_every_resolution_and_reads_top_to_bottom(N, tmp_path):
  result, text = _read_console(N, tmp_path)
  # The three networks are introduced once, then referred to by their tags.
  lines = text.splitlines()
  for tag in ('[certified]', '[paper]', '[float64]'):
    assert sum(l.startswith(f'  {tag} ') for l in lines) == 1, tag   # the introduction
    assert sum(l.startswith(tag) for l in lines) >= 1, tag            # its sections
  assert 'CERTIFIED: d_p(f, g) <=' in text
  # Every certified d_p is a bound; every sampled one carries its sample count.
  for line in text.splitlines():
    if re.search(r'd_p\(f, g\) [<=]', line) and 'certified' in line.lower():
      assert 'd_p(f, g) <=' in line, line
  assert 'sampled on 2000 uniform points' in text
  assert 'sampled on 1000 uniform points' in text
  # The paper's network as built: its large bound explained in its own line.
  built = next(l for l in text.splitlines() if 'as the paper builds it ' in l
               and 'd_p(f, g) <=' in l)
  assert 'ramp windows' in built and 'nothing bounds' in built
  # The sweeps keep the ramps the resolution allows, and say which were skipped.
  low = approximator.min_epsilon(Paper(Grid(1, 3, N)))
  swept = [r['epsilon'] for r in result['sweeps']['epsilon']]
  assert swept and all(low <= e < 1 / N for e in swept)
  for e in (1e-1, 1e-3, 1e-6, 1e-8):
    assert (e in swept) == (low <= e < 1 / N)
    if e not in swept:
      assert f'epsilon={e:g} ' in text and 'skipped' in text
  assert 'np.float64' not in text
  assert os.path.exists(tmp_path / 'approximate.md')


def test_help_lists_every_config_field_and_the_cli_flags():
  out = _run_binary('--help', timeout=120)
  text = ' '.join((out.stdout + out.stderr).split())   # (absl's --help exits with 1)
  for field, value in configs.get_config().items():
    assert f'{field}={value!r}' in text, field
  for flag in ('--config', '--output_dir', '--[no]overwrite', '--state_dir', '--dask_scheduler'):
    assert flag in text
