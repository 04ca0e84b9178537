"""Every binary in experiments/ starts after the README's install command.

The README installs with ``pip install -e ".[experiments]"``: the core requirements plus
the ``experiments`` extra of setup.py. This test reads, without building a venv, every
import a binary can reach (its own, and those of each ``transformer_ua`` module it
imports, transitively, at any nesting level) and checks that each third-party module
comes from a distribution that install brings: one it names, or one those require
(``importlib.metadata``, from the environment the tests run in).
"""

import ast
import functools
import glob
import importlib.metadata as metadata
import os
import re
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARIES = sorted(glob.glob(os.path.join(ROOT, 'experiments', '*.py')))
BINARIES = [b for b in BINARIES if os.path.basename(b) != '__init__.py']
#: The README's first install command.
README_EXTRAS = ('experiments',)
#: Top-level names that are this repository's own code, not distributions.
LOCAL = ('transformer_ua', 'experiments', 'benchmarks')


@functools.lru_cache(maxsize=None)
def _setup_kwargs() -> dict:
  """The keyword arguments setup.py passes to ``setuptools.setup`` (run with a stand-in)."""
  captured = {}
  fake = types.ModuleType('setuptools')
  fake.setup = lambda **kw: captured.update(kw)
  fake.find_packages = lambda *a, **kw: []
  saved = sys.modules.get('setuptools')
  sys.modules['setuptools'] = fake
  try:
    path = os.path.join(ROOT, 'setup.py')
    exec(compile(open(path, encoding='utf-8').read(), path, 'exec'), {'__name__': 'setup'})  # pylint: disable=exec-used
  finally:
    if saved is None:
      del sys.modules['setuptools']
    else:
      sys.modules['setuptools'] = saved
  return captured


def _norm(name: str) -> str:
  return re.sub(r'[-_.]+', '-', name).lower()


def _req_name(req: str) -> str:
  return _norm(re.split(r'[\s<>=!~;\[(]', req.strip(), maxsplit=1)[0])


def _closure(names) -> set:
  """The distributions ``names`` bring, with everything they require (installed metadata;
  requirements behind an extra or a marker that does not hold here are skipped)."""
  out, todo = set(), [_norm(n) for n in names]
  while todo:
    name = todo.pop()
    if name in out:
      continue
    out.add(name)
    try:
      reqs = metadata.requires(name) or []
    except metadata.PackageNotFoundError:
      continue
    for r in reqs:
      marker = r.split(';', 1)[1] if ';' in r else ''
      if 'extra' in marker:
        continue
      todo.append(_req_name(r))
  return out


def _guarded(tree) -> set:
  """The import nodes inside a ``try`` whose handlers catch ImportError (or
  ModuleNotFoundError): optional dependencies, each with its own one-line refusal."""
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Try) and any(
        isinstance(h.type, ast.Name) and h.type.id in ('ImportError', 'ModuleNotFoundError')
        for h in node.handlers):
      for stmt in node.body:
        out.update(id(n) for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom)))
  return out


def _imports(path: str) -> set:
  """Absolute module names imported anywhere in a file (``from a import b`` gives both
  a and a.b: b may be a submodule), except optional ones (``_guarded``)."""
  tree = ast.parse(open(path, encoding='utf-8').read())
  guarded = _guarded(tree)
  out = set()
  for node in ast.walk(tree):
    if id(node) in guarded:
      continue
    if isinstance(node, ast.Import):
      out.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      assert node.level == 0, f'{path}: relative import of {node.module}'
      out.add(node.module)
      out.update(f'{node.module}.{a.name}' for a in node.names)
  return out


def _local_file(name: str):
  base = os.path.join(ROOT, *name.split('.'))
  if os.path.isfile(os.path.join(base, '__init__.py')):
    return os.path.join(base, '__init__.py')
  return base + '.py' if os.path.isfile(base + '.py') else None


def third_party_imports(path: str) -> dict:
  """{top-level module: the file importing it} of every third-party import reachable from
  ``path`` through this repository's modules."""
  seen, todo, out = set(), [path], {}
  while todo:
    f = todo.pop()
    if f in seen:
      continue
    seen.add(f)
    for name in _imports(f):
      top = name.split('.')[0]
      if top in LOCAL:
        parts = name.split('.')
        for i in range(1, len(parts) + 1):  # a package's __init__ runs too
          local = _local_file('.'.join(parts[:i]))
          if local:
            todo.append(local)
      elif top not in sys.stdlib_module_names and top != '__future__':
        out.setdefault(top, os.path.relpath(f, ROOT))
  return out


def test_setup_is_read():
  kw = _setup_kwargs()
  assert kw['install_requires'] and set(README_EXTRAS) <= set(kw['extras_require'])


def test_the_scan_sees_a_known_import():
  # verify_contextual_mapping.py reaches mpmath through transformer_ua.verify.one_layer.
  found = third_party_imports(os.path.join(ROOT, 'experiments',
                                           'verify_contextual_mapping.py'))
  assert found.get('mpmath') == os.path.join('transformer_ua', 'verify', 'one_layer.py')
  assert 'sqlite3' not in found and 'transformer_ua' not in found


def test_an_import_guarded_by_import_error_is_optional(tmp_path):
  path = tmp_path / 'mod.py'
  path.write_text('import numpy\n'
                  'def f():\n'
                  '  try:\n'
                  '    from distributed import Client\n'
                  '  except ImportError:\n'
                  '    raise ValueError("pip install dask[distributed]") from None\n'
                  '  try:\n'
                  '    import tokenizers\n'
                  '  except KeyError:\n'
                  '    pass\n')
  assert _imports(str(path)) == {'numpy', 'tokenizers'}


def test_a_missing_extra_is_caught():
  # The check itself: tokenizers is in the experiments extra only, so the core alone
  # does not bring it.
  kw = _setup_kwargs()
  core = _closure(_req_name(r) for r in kw['install_requires'])
  assert 'tokenizers' not in core
  assert 'tokenizers' in _closure(_req_name(r) for r in kw['extras_require']['experiments'])


@functools.lru_cache(maxsize=None)
def _readme_install():
  """(distributions the README's install brings, {module: distributions})."""
  kw = _setup_kwargs()
  declared = [_req_name(r) for r in kw['install_requires']]
  for extra in README_EXTRAS:
    declared += [_req_name(r) for r in kw['extras_require'][extra]]
  return _closure(declared), metadata.packages_distributions()


@pytest.mark.parametrize('path', BINARIES, ids=os.path.basename)
def test_binary_imports_are_installed_by_the_readme(path):
  installed, providers = _readme_install()
  missing = []
  for module, where in sorted(third_party_imports(path).items()):
    dists = {_norm(d) for d in providers.get(module, [])}
    if not dists:
      missing.append(f'{module} (imported by {where}; no installed distribution provides it)')
    elif not dists & installed:
      missing.append(f'{module} (imported by {where}; from {sorted(dists)}, which '
                     f'pip install -e ".[{",".join(README_EXTRAS)}]" does not install)')
  assert not missing, f'{os.path.basename(path)}: ' + '; '.join(missing)
