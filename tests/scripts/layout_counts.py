"""The layout's counts, measured from the source text (ast), for any checkout.

    python tests/scripts/layout_counts.py [ROOT]        # prints one line per count
    python tests/scripts/layout_counts.py ROOT --list   # and the names behind each

Counts: public functions taking (d, n, resolution); calls of ``grid.choose`` outside its
module and of ``grid.of``; ``noqa: F401`` lines; ``raise NotImplementedError`` in the
library; binaries over 150 lines; assert lines in tests/ (``assert`` statements and
``assert*`` / ``pytest.raises`` calls); imports from models/ into train/ and back, and of
``cli`` below the binaries.
"""

import ast
import pathlib
import sys


def _py(root, sub):
  return sorted(p for p in (root / sub).rglob('*.py') if '.ipynb' not in p.name)


def _tree(path):
  return ast.parse(path.read_text(), filename=str(path))


def functions_taking_d_n_resolution(root):
  out = []
  for p in _py(root, 'transformer_ua'):
    for node in ast.walk(_tree(p)):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith('_'):
        a = node.args
        names = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
        if {'d', 'n', 'resolution'} <= names:
          out.append(f'{p.relative_to(root)}:{node.lineno}:{node.name}')
  return out


def _calls(root, attr_pairs):
  out = []
  for p in _py(root, 'transformer_ua') + _py(root, 'experiments'):
    for node in ast.walk(_tree(p)):
      if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        f = node.func
        if isinstance(f.value, ast.Name) and (f.value.id, f.attr) in attr_pairs:
          out.append(f'{p.relative_to(root)}:{node.lineno}:{f.value.id}.{f.attr}')
  return out


def grid_choose_outside(root):
  homes = ('transformer_ua/yun/grid.py', 'transformer_ua/yun/variants/registry.py')
  return [c for c in _calls(root, {('grid', 'choose'), ('registry', 'choose')})
          if not c.startswith(homes)]


def grid_of(root):
  return _calls(root, {('grid', 'of'), ('registry', 'of')})


def noqa_f401(root):
  out = []
  for p in _py(root, 'transformer_ua') + _py(root, 'experiments'):
    for i, line in enumerate(p.read_text().splitlines(), 1):
      if 'noqa: F401' in line:
        out.append(f'{p.relative_to(root)}:{i}')
  return out


def not_implemented(root):
  out = []
  for p in _py(root, 'transformer_ua'):
    for node in ast.walk(_tree(p)):
      if isinstance(node, ast.Raise) and node.exc is not None:
        e = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(e, ast.Name) and e.id == 'NotImplementedError':
          out.append(f'{p.relative_to(root)}:{node.lineno}')
  return out


def long_binaries(root, limit=150):
  out = []
  for p in _py(root, 'experiments'):
    n = len(p.read_text().splitlines())
    if n > limit:
      out.append(f'{p.relative_to(root)}:{n}')
  return out


def assert_lines(root):
  n = 0
  for p in _py(root, 'tests'):
    lines = set()
    for node in ast.walk(_tree(p)):
      if isinstance(node, ast.Assert):
        lines.add(node.lineno)
      elif isinstance(node, ast.Call):
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, 'id', '')
        if name.startswith('assert') or name == 'raises':
          lines.add(node.lineno)
    n += len(lines)
  return n


def _imports(path):
  out = []
  for node in ast.walk(_tree(path)):
    if isinstance(node, ast.ImportFrom) and node.module:
      out += [node.module] + [f'{node.module}.{a.name}' for a in node.names]
    elif isinstance(node, ast.Import):
      out += [a.name for a in node.names]
  return out


def upward_imports(root):
  """models/ importing train/, and the library (not cli.py) importing cli."""
  out = []
  for p in _py(root, 'transformer_ua'):
    rel = str(p.relative_to(root))
    for m in _imports(p):
      if rel.startswith('transformer_ua/models/') and m.startswith('transformer_ua.train'):
        out.append(f'{rel} -> {m}')
      if rel != 'transformer_ua/cli.py' and m in ('transformer_ua.cli', 'transformer_ua.cli.Interrupted'):
        out.append(f'{rel} -> {m}')
  return sorted(set(out))


def _module_name(root, path):
  rel = path.relative_to(root).with_suffix('')
  parts = rel.parts[:-1] if rel.name == '__init__' else rel.parts
  return '.'.join(parts)


def yun_import_depth(root):
  """The longest chain of module-level imports among yun's own modules: its modules, in
  order (the count is the number of levels)."""
  files = {_module_name(root, p): p for p in _py(root, 'transformer_ua/yun')
           if p.name != '__init__.py'}
  graph = {}
  for name, path in files.items():
    deps = set()
    for node in _tree(path).body:
      if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith('transformer_ua.yun'):
        for a in node.names:
          full = f'{node.module}.{a.name}'
          deps.add(full if full in files else node.module)
      elif isinstance(node, ast.Import):
        deps |= {a.name for a in node.names if a.name in files}
    graph[name] = {d for d in deps if d in files and d != name}
  best = {}

  def longest(m, seen=()):
    if m in best:
      return best[m]
    chains = [longest(d, seen + (m,)) for d in graph[m] if d not in seen]
    best[m] = [m] + max(chains, key=len, default=[])
    return best[m]
  chain = max((longest(m) for m in graph), key=len)
  return [c.replace('transformer_ua.yun.', '') for c in chain]


def yun_arrows(root):
  """Imports between yun's parts as 'importer -> imported' (part: the sub-package, or the
  module for the top level), each once."""
  files = {_module_name(root, p): p for p in _py(root, 'transformer_ua/yun')
           if p.name != '__init__.py'}
  part = lambda m: m.split('.')[2] if m.count('.') >= 2 else m  # noqa: E731
  arrows = set()
  for name, path in files.items():
    for node in _tree(path).body:
      if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith('transformer_ua.yun.'):
        a, b = part(name), part(node.module)
        if a != b:
          arrows.add(f'{a} -> {b}')
  return sorted(arrows)


def yun_cycles(root):
  """Pairs of yun parts importing each other (directly or through others)."""
  graph = {}
  for arrow in yun_arrows(root):
    a, b = arrow.split(' -> ')
    graph.setdefault(a, set()).add(b)
  def reach(a):
    seen, todo = set(), [a]
    while todo:
      for b in graph.get(todo.pop(), ()):
        if b not in seen:
          seen.add(b)
          todo.append(b)
    return seen
  return sorted(f'{a} <-> {b}' for a in graph for b in reach(a) if a < b and a in reach(b))


def flat_yun_modules(root):
  return sorted(p.name for p in (root / 'transformer_ua' / 'yun').glob('*.py') if p.name != '__init__.py')


COUNTS = {
    'public functions taking (d, n, resolution)': functions_taking_d_n_resolution,
    'choose calls outside its module (grid.choose, registry.choose)': grid_choose_outside,
    'of calls (grid.of, registry.of)': grid_of,
    'noqa: F401 lines': noqa_f401,
    'raise NotImplementedError in the library': not_implemented,
    'binaries over 150 lines': long_binaries,
    'upward imports (models -> train, library -> cli)': upward_imports,
    'modules directly in yun/': flat_yun_modules,
    'yun import levels (longest chain of module imports)': yun_import_depth,
    'cycles between yun parts (sub-packages, top-level modules)': yun_cycles,
}


def main(argv):
  root = pathlib.Path(argv[1] if len(argv) > 1 and not argv[1].startswith('--') else '.')
  for name, fn in COUNTS.items():
    items = fn(root)
    print(f'{name}: {len(items)}')
    if '--list' in argv:
      for it in items:
        print(f'    {it}')
  print(f'assert lines in tests/: {assert_lines(root)}')


if __name__ == '__main__':
  main(sys.argv)
