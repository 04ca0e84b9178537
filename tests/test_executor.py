"""transformer_ua.executor: one executor for certification work (spans, shipment, state).

Closed forms: sum_{i=s}^{e-1} i^2 = S(e) - S(s), S(k) = (k - 1) k (2k - 1) / 6. The
certificates are compared with the in-process run (the same arb computation, one cube at
a time): a pool or a cluster must give the same bound, the same worst cube and bits.
"""

import concurrent.futures as cf
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from transformer_ua import cli, executor
from transformer_ua import binary_interrupts

import executor_helpers as helpers
from realization_fixtures import exact134, net134, ties134  # pylint: disable=unused-import

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, 'tests')


def _squares(s, e, offset=0):
  S = lambda k: (k - 1) * k * (2 * k - 1) // 6  # noqa: E731  sum_{i<k} i^2
  return S(e + offset) - S(s + offset)


def _same_certificate(a, b):
  assert a['max_abs_error'] == b['max_abs_error']
  assert a['worst_cube'] == b['worst_cube']
  assert a['bits'] == b['bits'] and a['cubes'] == b['cubes']


@pytest.fixture
def no_fork(monkeypatch):
  """Any os.fork or fork-started multiprocessing process fails the test."""
  import multiprocessing.popen_fork as popen_fork  # pylint: disable=import-outside-toplevel

  def refuse(*args, **kwargs):
    raise AssertionError('a process was started with fork')
  monkeypatch.setattr(os, 'fork', refuse)
  monkeypatch.setattr(popen_fork.Popen, '_launch', refuse)


def _env():
  return dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, TESTS]), JAX_PLATFORMS='cpu')


# -- spans, order, shipment ---------------------------------------------------


@pytest.mark.parametrize('where', ['in-process', 'threads'])
def test_spans_cover_in_order_with_closed_form_sums(where):
  w = executor.Workers(1) if where == 'in-process' else \
      executor.Workers(executor=cf.ThreadPoolExecutor(3))
  out = executor.map_spans(helpers.sum_of_squares, executor.ship(helpers.build_offset, 5),
                           100, w)
  spans = [s for s, _ in out.results]
  assert spans[0][0] == 0 and spans[-1][1] == 100
  assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))          # contiguous, ordered
  for (s, e), r in out.results:
    assert r['sum'] == _squares(s, e, 5)
  assert sum(r['sum'] for _, r in out.results) == _squares(0, 100, 5)


def test_local_pool_spawns_and_ships_once_per_worker(no_fork):
  w = executor.Workers(2, min_pool_seconds=0)      # always the pool
  out = executor.map_spans(helpers.sum_of_squares, executor.ship(helpers.build_offset, 1),
                           64, w)
  assert out.where == 'processes' and out.workers == 2
  assert len(out.results) == executor.CHUNKS_PER_WORKER * 2            # 16 chunks of 4
  assert sum(r['sum'] for _, r in out.results) == _squares(0, 64, 1)
  pids = {r['pid'] for _, r in out.results}
  assert os.getpid() not in pids and 1 <= len(pids) <= 2
  assert {r['builds'] for _, r in out.results} == {1}    # built once in each worker


def test_small_work_stays_in_process():
  out = executor.map_spans(helpers.sum_of_squares, executor.ship(helpers.build_offset, 0),
                           10, executor.Workers(2))
  assert out.where == 'in-process' and out.workers == 1
  assert {r['pid'] for _, r in out.results} == {os.getpid()}


@pytest.mark.parametrize('bad,fragment', [
    (0, 'workers=0'), (2.5, 'workers=2.5'), ('two', "workers='two'"), (True, 'workers=True')])
def test_bad_workers_is_one_line(bad, fragment):
  with pytest.raises(ValueError, match=re.escape(fragment)) as e:
    executor.as_workers(bad)
  assert '\n' not in str(e.value)


def test_processes_and_executor_together_are_refused():
  with pytest.raises(ValueError, match='not both'):
    executor.Workers(2, executor=cf.ThreadPoolExecutor(1))


# -- certificates: the same wherever they run ---------------------------------


def test_pool_and_threads_give_the_in_process_certificate(exact134, no_fork):
  _, g = exact134
  here = g.certify_interiors(workers=1)
  pool = g.certify_interiors(workers=executor.Workers(2, min_pool_seconds=0))
  threads = g.certify_interiors(executor=cf.ThreadPoolExecutor(2))
  assert pool['workers'] == 2 and here['workers'] == 1 and here['certified']
  _same_certificate(here, pool)
  _same_certificate(here, threads)


# -- resumable state ----------------------------------------------------------


def test_state_resumes_only_missing_chunks(exact134, tmp_path):
  _, g = exact134
  ref = g.certify_interiors(workers=1)
  first = g.certify_interiors(workers=1, state_dir=str(tmp_path))
  state = tmp_path / 'certification_0'
  chunks = sorted(state.glob('chunk_*.json'))
  assert first['resumed_chunks'] == 0 and len(chunks) == 7   # spans of ceil(20 / 8) = 3
  rec = json.loads(chunks[0].read_text())
  assert rec['span'] == [0, 3] and rec['identity']['bits'] == ref['bits']
  assert set(rec['result']) == {'worst', 'index', 'cube'} and len(rec['identity']['params_sha256']) == 64
  for c in chunks[2:]:
    c.unlink()
  again = g.certify_interiors(workers=1, state_dir=str(tmp_path))
  assert again['resumed_chunks'] == 2
  _same_certificate(ref, again)
  assert len(list(state.glob('chunk_*.json'))) == len(chunks)


def test_state_of_other_bits_or_network_is_refused_in_one_line(exact134, ties134, tmp_path):
  _, g = exact134
  g.certify_interiors(workers=1, state_dir=str(tmp_path))
  with pytest.raises(ValueError, match=r'belongs to another certification \(bits: stored '
                     r'\d+, this run \d+\)') as e:
    g.certify_interiors(bits=g.planned_bits() + 8, workers=1, state_dir=str(tmp_path))
  assert '\n' not in str(e.value)
  _, _, other = ties134
  with pytest.raises(ValueError, match='params_sha256: stored') as e:
    other.certify_interiors(workers=1, state_dir=str(tmp_path))
  assert '\n' not in str(e.value)


RESUME_SCRIPT = r'''
import json, sys, time
from transformer_ua import executor
from transformer_ua.yun import build_approximator
from transformer_ua.yun.realization import certified_eval, plan
net = build_approximator('token_times_mean', d=1, n=3, resolution=4)
p = plan.plan_realization(net)
g = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact')
if sys.argv[2] == 'slow':       # 1 s per chunk, so the kill lands between chunks
  fast = certified_eval.interiors_chunk
  def chunk(work, start, stop):
    time.sleep(1.0)
    return fast(work, start, stop)
  certified_eval.interiors_chunk = chunk
out = certified_eval.certify_interiors(g, workers=executor.Workers(1, state_dir=sys.argv[1]))
print(json.dumps({k: out[k] for k in ('max_abs_error', 'worst_cube', 'bits', 'cubes',
                                      'resumed_chunks')}))
'''


def test_killed_certification_resumes_to_the_same_certificate(exact134, tmp_path):
  _, g = exact134
  ref = g.certify_interiors(workers=1)
  state = tmp_path / 'state'
  cmd = [sys.executable, '-c', RESUME_SCRIPT, str(state)]
  proc = subprocess.Popen(cmd + ['slow'], env=_env(), cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
  chunks = state / 'certification_0'
  deadline = time.time() + 240
  while len(list(chunks.glob('chunk_*.json'))) < 2:
    assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
    assert time.time() < deadline, 'no chunk finished in 240 s'
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)
  proc.communicate()
  kept = len(list(chunks.glob('chunk_*.json')))
  assert 2 <= kept < 7
  done = subprocess.run(cmd + ['fast'], env=_env(), cwd=ROOT, capture_output=True,
                        text=True, timeout=300, check=True)
  out = json.loads(done.stdout.strip().splitlines()[-1])
  assert out['resumed_chunks'] == kept
  _same_certificate(ref, out)


def test_binary_edge_declares_the_state_for_the_interrupt_line(tmp_path, monkeypatch):
  monkeypatch.setattr(binary_interrupts, '_RESUMABLE', [])
  w = cli.executor_from_flags(1, None, str(tmp_path))
  assert w.state_dir == str(tmp_path) and w.executor is None and w.processes == 1
  (tmp_path / 'certification_0').mkdir()
  (tmp_path / 'certification_0' / 'chunk_000000000000_000000000003.json').write_text('{}')
  line = binary_interrupts.interrupt_line('SIGINT')
  assert f'state kept in {tmp_path}; resume with: python ' in line


# -- no fork, no orphans --------------------------------------------------------


def test_no_fork_anywhere_in_the_code():
  """Process pools start only in transformer_ua/executor.py, and only with spawn."""
  banned = re.compile(r"os\.fork\(|get_context\(\s*['\"](fork|forkserver)|set_start_method|"
                      r"multiprocessing\.(Pool|Process)\(|ProcessPoolExecutor\(|\.Pool\(")
  found = []
  for top in ('transformer_ua', 'experiments', 'benchmarks'):
    for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
      for name in files:
        path = os.path.join(dirpath, name)
        if not name.endswith('.py') or path.endswith(os.path.join('transformer_ua',
                                                                  'executor.py')):
          continue
        with open(path, encoding='utf-8') as f:
          found += [f'{path}:{i}' for i, line in enumerate(f, 1) if banned.search(line)]
  assert not found, found
  with open(os.path.join(ROOT, 'transformer_ua', 'executor.py'), encoding='utf-8') as f:
    text = f.read()
  assert set(re.findall(r"get_context\(([^)]*)\)", text)) == {"'spawn'"}
  assert 'os.fork(' not in text and text.count('ProcessPoolExecutor(') == 1


ORPHAN_SCRIPT = r'''
import sys
from transformer_ua import executor
import executor_helpers as h
executor.map_spans(h.spin, executor.ship(h.identity, sys.argv[1]), 2,
                   executor.Workers(2, min_pool_seconds=0))
'''


def _alive(pid: int) -> bool:
  try:
    with open(f'/proc/{pid}/stat', encoding='utf-8') as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'    # a zombie has exited
  except FileNotFoundError:
    return False


def test_workers_exit_within_seconds_of_a_killed_parent(tmp_path):
  pid_dir, err = tmp_path / 'pids', tmp_path / 'stderr'
  pid_dir.mkdir()
  with open(err, 'w', encoding='utf-8') as f:   # a file, not a pipe the workers inherit
    proc = subprocess.Popen([sys.executable, '-c', ORPHAN_SCRIPT, str(pid_dir)], env=_env(),
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=f)
  deadline = time.time() + 120
  while len(list(pid_dir.glob('pid_*'))) < 2:
    assert proc.poll() is None, err.read_text()[-2000:]
    assert time.time() < deadline, 'the workers did not start in 120 s'
    time.sleep(0.05)
  pids = [int(p.read_text()) for p in pid_dir.glob('pid_*')]
  assert all(_alive(p) for p in pids) and proc.pid not in pids
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  t0 = time.time()
  while any(_alive(p) for p in pids) and time.time() - t0 < 10:
    time.sleep(0.1)
  left = [p for p in pids if _alive(p)]
  for p in left:    # clean up before failing
    os.kill(p, signal.SIGKILL)
  assert not left, f'workers {left} ran on after their parent was killed'


# -- Dask ---------------------------------------------------------------------


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def test_unreachable_scheduler_is_one_line():
  pytest.importorskip('distributed')
  address = f'tcp://127.0.0.1:{_free_port()}'
  with pytest.raises(ValueError, match=f'no Dask scheduler answered at {address} within 1 s') as e:
    executor.dask_executor(address, timeout=1)
  assert '\n' not in str(e.value) and 'dask scheduler' in str(e.value)


@pytest.mark.slow
def test_dask_local_cluster_gives_the_in_process_certificate(exact134):
  distributed = pytest.importorskip('distributed')
  _, g = exact134
  here = g.certify_interiors(workers=1)
  with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                dashboard_address=None) as cluster, \
      distributed.Client(cluster) as client:
    ex = client.get_executor()
    out = g.certify_interiors(executor=ex)
    assert out['workers'] == 2
    _same_certificate(here, out)
    pids = client.run(os.getpid)
    assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()
    sums = executor.map_spans(helpers.sum_of_squares, executor.ship(helpers.build_offset, 2),
                              64, executor.Workers(executor=ex))
    assert sum(r['sum'] for _, r in sums.results) == _squares(0, 64, 2)
    assert {r['pid'] for _, r in sums.results} <= set(pids.values())
    assert {r['builds'] for _, r in sums.results} == {1}    # scattered once, built once


# -- binaries -------------------------------------------------------------------


def _binary(name, *args, **kw):
  return subprocess.run([sys.executable, os.path.join(ROOT, 'experiments', name), *args],
                        capture_output=True, text=True, env=_env(), cwd=ROOT, check=False,
                        **kw)


@pytest.mark.slow
def test_binary_with_an_unreachable_scheduler_is_one_line(tmp_path):
  pytest.importorskip('distributed')
  address = f'tcp://127.0.0.1:{_free_port()}'
  r = _binary('one_layer_certificate.py', f'--output_dir={tmp_path}',
              '--configs=token_times_mean:1,2,3', f'--dask_scheduler={address}', timeout=300)
  assert r.returncode == cli.USAGE_ERROR and 'Traceback' not in r.stderr
  lines = [l for l in r.stderr.splitlines() if l.startswith('error: ')]
  assert len(lines) == 1 and f'no Dask scheduler answered at {address}' in lines[0], r.stderr


def _certified(tree):
  """Every certified number of a certify_approximation.json, in order."""
  out = []
  if isinstance(tree, dict):
    for k in sorted(tree):
      if k in ('total', 'interior_sup', 'bits') and not isinstance(tree[k], (dict, list)):
        out.append((k, tree[k]))
      elif k not in ('provenance', 'config', 'seconds', 'monte_carlo'):
        out += _certified(tree[k])
  elif isinstance(tree, list):
    for v in tree:
      out += _certified(v)
  return out


@pytest.mark.slow
def test_interrupted_binary_says_how_to_resume_and_resumes_to_the_same_json(tmp_path):
  config = '--config=experiments/configs/certify_approximation.py:tiny'
  clean = _binary('certify_approximation.py', config, f'--output_dir={tmp_path / "clean"}',
                  timeout=900)
  assert clean.returncode == 0, clean.stderr[-2000:]
  state, out = tmp_path / 'state', tmp_path / 'out'
  proc = subprocess.Popen([sys.executable, os.path.join(ROOT, 'experiments',
                                                        'certify_approximation.py'),
                           config, f'--output_dir={out}', f'--state_dir={state}'],
                          env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
  deadline = time.time() + 600
  while not (state / 'certification_2').is_dir():
    assert proc.poll() is None, proc.stderr.read()[-2000:]
    assert time.time() < deadline
    time.sleep(0.1)
  proc.send_signal(signal.SIGINT)
  err = proc.communicate(timeout=120)[1]
  assert proc.returncode == binary_interrupts.INTERRUPTED, err[-2000:]
  line = err.strip().splitlines()[-1]
  assert line.startswith(f'interrupted (SIGINT); state kept in {state}; resume with: python ')
  command = line.split('resume with: ', 1)[1]
  assert f'--state_dir={state}' in command and '--overwrite' in command
  again = subprocess.run(command, shell=True, capture_output=True, text=True, env=_env(),
                         cwd=ROOT, timeout=900, check=False)
  assert again.returncode == 0, again.stderr[-2000:]
  a = json.loads((tmp_path / 'clean' / 'certify_approximation.json').read_text())
  b = json.loads((out / 'certify_approximation.json').read_text())
  assert _certified(a) and _certified(a) == _certified(b)


def test_an_executor_that_forks_is_refused():
  import multiprocessing  # pylint: disable=import-outside-toplevel
  pool = cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context('fork'))
  with pytest.raises(ValueError, match="a process pool started with 'fork'"):
    executor.as_workers(pool)
  pool.shutdown()
