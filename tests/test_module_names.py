"""One name, one module: a file name repeats only as a documented mirror (docs/layout.md).

A mirror lives in a folder that names its role (a binary, its config, a report writer, a
benchmark, a whole-grid check, a registered variant) and serves the module of the same
name elsewhere; every other module's name is unique across the package, the binaries and
the benchmarks.
"""

import collections
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIRRORS = ('experiments', 'experiments/configs', 'transformer_ua/reports', 'benchmarks',
           'transformer_ua/verify', 'transformer_ua/yun/variants')


def _modules() -> dict:
  """File name -> the folders (relative to the checkout) holding a module of that name."""
  out = collections.defaultdict(list)
  for top in ('transformer_ua', 'experiments', 'benchmarks'):
    for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
      for f in files:
        if f.endswith('.py') and f != '__init__.py':
          out[f].append(os.path.relpath(dirpath, ROOT).replace(os.sep, '/'))
  return out


def test_a_repeated_name_is_a_mirror():
  bad = {name: folders for name, folders in _modules().items() if len(folders) > 1
         and sum(folder not in MIRRORS for folder in folders) > 1}
  assert bad == {}


def test_the_mirror_folders_are_named_in_the_layout():
  text = open(os.path.join(ROOT, 'docs', 'layout.md'), encoding='utf-8').read()
  section = text[text.index('## One name, one module'):]
  for folder in MIRRORS:
    short = folder.replace('transformer_ua/', '')
    assert f'`{short}/`' in section, folder
