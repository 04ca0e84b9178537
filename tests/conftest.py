"""Shared test configuration: deterministic hypothesis, the ``slow`` marker."""

import hypothesis

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
  import pytest
  if config.getoption('--runslow'):
    return
  skip = pytest.mark.skip(reason='slow: run with --runslow')
  for item in items:
    if 'slow' in item.keywords:
      item.add_marker(skip)
