"""Shared test configuration: deterministic hypothesis, the ``slow`` marker."""

import os
import tempfile

import hypothesis
import pytest

# One on-disk XLA compilation cache per test session, shared by the xdist workers and
# the binaries' subprocesses (they inherit the environment): the many identical
# programs (each training run rebuilds its jitted step; subprocesses recompile what the
# parent compiled) are compiled once. Results are unchanged: a hit is the same
# executable. Set JAX_COMPILATION_CACHE_DIR yourself to keep it across sessions.
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:
  os.environ['JAX_COMPILATION_CACHE_DIR'] = tempfile.mkdtemp(prefix='transformer_ua_xla_')
  os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0.2')
import jax  # pylint: disable=wrong-import-position
jax.config.update('jax_compilation_cache_dir', os.environ['JAX_COMPILATION_CACHE_DIR'])
jax.config.update('jax_persistent_cache_min_compile_time_secs',
                  float(os.environ.get('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '1')))

# Deterministic: the same examples every run, no example database on disk.
hypothesis.settings.register_profile(
    'ci', derandomize=True, database=None, deadline=None, max_examples=25,
    print_blob=True)
hypothesis.settings.load_profile('ci')


def pytest_configure(config):
  config.addinivalue_line('markers', 'slow: end-to-end runs, skipped unless --runslow')


def pytest_addoption(parser):
  parser.addoption('--runslow', action='store_true', default=False,
                   help='also run tests marked slow')


def pytest_collection_modifyitems(config, items):
  if config.getoption('--runslow'):
    return
  skip = pytest.mark.skip(reason='slow: run with --runslow')
  for item in items:
    if 'slow' in item.keywords:
      item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
  """A test that leaves JAX's x64 switched differently than it found it fails here: x64 is
  process-wide, and under xdist the next test on the worker would run in the wrong mode."""
  before = bool(jax.config.jax_enable_x64)
  yield
  after = bool(jax.config.jax_enable_x64)
  assert after == before, (f'{item.nodeid} left jax_enable_x64 {after} (it found it {before});'
                           ' use `with jax.enable_x64(...)`')
