"""Every ```python snippet in README.md runs as written (a user copies them)."""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _snippets():
  with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
    text = f.read()
  return re.findall(r'^```python\n(.*?)^```', text, flags=re.S | re.M)


def test_readme_has_snippets():
  assert len(_snippets()) >= 3


@pytest.mark.slow  # ~20 s of CPU: builds, realizes and exports; the fast check is below
@pytest.mark.parametrize('index', range(len(_snippets())))
def test_readme_snippet_runs(index, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  code = _snippets()[index].replace('/tmp/g.onnx', str(tmp_path / 'g.onnx'))
  exec(compile(code, f'README.md snippet {index + 1}', 'exec'), {'__name__': 'readme'})  # pylint: disable=exec-used


def _undefined_names(code):
  """Names a snippet reads before any import or assignment defines them."""
  import ast
  import builtins
  defined, missing = set(dir(builtins)), []
  for stmt in ast.parse(code).body:
    loads = [n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Load)]
    missing += [n for n in loads if n not in defined]
    for n in ast.walk(stmt):
      if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
        defined.add(n.id)
      elif isinstance(n, ast.alias):
        defined.add((n.asname or n.name).split('.')[0])
  return missing


@pytest.mark.parametrize('index', range(len(_snippets())))
def test_readme_snippet_defines_what_it_uses(index):
  """Fast half of the check (the run itself is slow): no name is used undefined."""
  assert _undefined_names(_snippets()[index]) == []
