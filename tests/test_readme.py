"""The front page and the docs, as a user reads them.

* Every ```python snippet in README.md and docs/**/*.md runs as written (a user copies them).
* Every relative link in them, in colabs/README.md and in the READMEs of results/ points
  at a file or folder that exists.
* The README quotes measured figures only next to the record that holds them: every
  number-with-unit in it sits in a paragraph that links results/, and appears in that
  file verbatim.
"""

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ['README.md'] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(
    os.path.join(ROOT, 'docs', '**', '*.md'), recursive=True))
LINKED = PAGES + ['colabs/README.md'] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, 'results', '**',
                                                             'README.md'), recursive=True))
#: Folders reserved in the index whose README is still being written (none now).
RESERVED = ()
#: Where a path in a record starts when it names a file of this repository.
REPO_DIRS = ('tests/', 'experiments/', 'transformer_ua/', 'results/', 'benchmarks/', 'docs/',
             'colabs/', '.ci/')
#: How such a path ends when it names a file (or a folder: '/').
_FILE_END = re.compile(r'(\.(py|md|json|jsonl|png|sh|ipynb|csv|txt)|/)$')


def _read(page):
  with open(os.path.join(ROOT, page), encoding='utf-8') as f:
    return f.read()


def _snippets(page):
  return re.findall(r'^```python\n(.*?)^```', _read(page), flags=re.S | re.M)


SNIPPETS = [(page, i) for page in PAGES for i in range(len(_snippets(page)))]


def test_readme_has_snippets():
  assert len(_snippets('README.md')) >= 2 and len(SNIPPETS) >= 4


@pytest.mark.slow  # ~1 min of CPU: builds, realizes, certifies and exports
@pytest.mark.filterwarnings('ignore::transformer_ua.yun.realization.plan.FloatRealizationWarning')
@pytest.mark.parametrize('page, index', SNIPPETS, ids=[f'{p}:{i}' for p, i in SNIPPETS])
def test_snippet_runs(page, index, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  code = _snippets(page)[index].replace('/tmp/g.onnx', str(tmp_path / 'g.onnx'))
  exec(compile(code, f'{page} snippet {index + 1}', 'exec'), {'__name__': 'readme'})  # pylint: disable=exec-used


def _undefined_names(code):
  """Names a snippet reads before any import or assignment defines them."""
  import ast
  import builtins
  defined, missing = set(dir(builtins)), []
  for stmt in ast.parse(code).body:
    local = {n.arg for n in ast.walk(stmt) if isinstance(n, ast.arg)} | {
        n.name for n in ast.walk(stmt) if isinstance(n, ast.ExceptHandler) and n.name} | {
        s.id for f in ast.walk(stmt) if isinstance(f, (ast.FunctionDef, ast.For))
        for s in ast.walk(f) if isinstance(s, ast.Name) and isinstance(s.ctx, ast.Store)} | {
        s.id for c in ast.walk(stmt) if isinstance(c, ast.comprehension)
        for s in ast.walk(c.target) if isinstance(s, ast.Name)}
    loads = [n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Load)]
    missing += [n for n in loads if n not in defined | local]
    for n in ast.walk(stmt):
      if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
        defined.add(n.id)
      elif isinstance(n, ast.alias):
        defined.add((n.asname or n.name).split('.')[0])
      elif isinstance(n, (ast.FunctionDef, ast.ClassDef)):
        defined.add(n.name)
  return missing


@pytest.mark.parametrize('page, index', SNIPPETS, ids=[f'{p}:{i}' for p, i in SNIPPETS])
def test_snippet_defines_what_it_uses(page, index):
  """Fast half of the check (the run itself is slow): no name is used undefined."""
  assert _undefined_names(_snippets(page)[index]) == []


def _links(page):
  """Relative link targets of a markdown page, resolved against its folder."""
  text = re.sub(r'```.*?```', '', _read(page), flags=re.S)
  out = []
  for target in re.findall(r'\]\(([^)\s]+)\)', text):
    if re.match(r'^[a-z]+:', target) or target.startswith('#'):
      continue
    path = os.path.normpath(os.path.join(os.path.dirname(page), target.split('#')[0]))
    out.append(path.replace(os.sep, '/'))
  return out


@pytest.mark.parametrize('page', LINKED)
def test_links_resolve(page):
  links = _links(page)
  missing = [l for l in links if not os.path.exists(os.path.join(ROOT, l))
             and not any(l.startswith(r.rstrip('/')) for r in RESERVED)]
  assert missing == [], f'{page} links to what does not exist'


def _backticked_paths(page):
  """Repository paths the prose of a page names in backticks: whole words (in a command
  too) that start with a top folder of the repository and end like a file or a folder,
  with no pattern in them (`grids/*.json`, `..._N{N}.json`) and no `::test` suffix."""
  text = re.sub(r'```.*?```', '', _read(page), flags=re.S)
  out = []
  for span in re.findall(r'`([^`\n]+)`', text):
    for word in span.split():
      word = word.split('::')[0].rstrip('.,;:)')
      if (word.startswith(REPO_DIRS) and _FILE_END.search(word)
          and not re.search(r'[*{}<>\[\]$|]|\.\.\.', word)):
        out.append(word)
  return out


RECORDS = ['README.md'] + PAGES[1:] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, 'results', '**', '*.md'),
                                                recursive=True))


def test_backticked_paths_are_found():
  # The check itself: a path in a command and a bare one are read; patterns are not.
  page = 'results/README.md'
  paths = _backticked_paths(page)
  assert 'experiments/certify_approximation.py' in paths
  assert not any('*' in p or '...' in p for p in paths)


@pytest.mark.parametrize('page', RECORDS)
def test_no_dead_file_reference_in_the_prose(page):
  """A file a record names in backticks exists: at that path from the checkout, or from
  the record's own folder (results/README.md writes `benchmarks/benchmarks.md`)."""
  here = os.path.dirname(page)
  dead = [p for p in _backticked_paths(page)
          if not os.path.exists(os.path.join(ROOT, p))
          and not os.path.exists(os.path.join(ROOT, here, p))]
  assert dead == [], f'{page} names files that do not exist'


def test_every_results_folder_with_a_readme_is_linked_from_the_folder_above():
  missing = []
  for readme in glob.glob(os.path.join(ROOT, 'results', '*', '**', 'README.md'),
                          recursive=True):
    folder = os.path.dirname(readme)
    parent = os.path.join(os.path.dirname(folder), 'README.md')
    target = os.path.relpath(readme, os.path.dirname(folder)).replace(os.sep, '/')
    if f']({target})' not in _read(os.path.relpath(parent, ROOT)):
      missing.append(os.path.relpath(folder, ROOT))
  assert missing == []


def test_every_result_file_is_listed_by_its_folder():
  """Nothing in results/ is unreferenced: each file is named, or matched by a pattern in
  backticks (`grids/*.json`, `..._N{N}_d{d}.json`), by the README of its folder or of a
  folder above it; the archived runs under mixing/runs/ are listed by their folders."""
  import fnmatch
  results = os.path.join(ROOT, 'results')
  unlisted = []
  for path in sorted(glob.glob(os.path.join(results, '**', '*'), recursive=True)):
    rel = os.path.relpath(path, results).replace(os.sep, '/')
    if (os.path.isdir(path) or rel.endswith('README.md') or rel.startswith('mixing/runs/')
        or any(('results/' + rel).startswith(r) for r in RESERVED)):
      continue
    listed, folder = False, os.path.dirname(rel)
    while not listed:
      readme = os.path.join(results, folder, 'README.md')
      if os.path.exists(readme):
        text = open(readme, encoding='utf-8').read()
        here = os.path.relpath(path, os.path.join(results, folder)).replace(os.sep, '/')
        stem = re.sub(r'\.(json|md|png)$', '', os.path.basename(rel))
        patterns = [re.sub(r'\{[^}]*\}', '*', p) for p in re.findall(r'`([^`]+)`', text)]
        listed = (here in text or stem in text or any(
            fnmatch.fnmatch(name, p) for p in patterns
            for name in (here, os.path.basename(rel))))
      if not folder:
        break
      folder = os.path.dirname(folder)
    if not listed:
      unlisted.append(rel)
  assert unlisted == []


_MEASURE = re.compile(r'(?<![\w.])(\d+(?:\.\d+)?(?: min \d+)?)\s?(s|min|h|GB|MB|x|%)(?!\w)')


def test_readme_quotes_figures_only_next_to_their_record():
  text = re.sub(r'```.*?```', '', _read('README.md'), flags=re.S)
  for para in re.split(r'\n\s*\n', text):
    figures = [m.group(0) for m in _MEASURE.finditer(re.sub(r'`[^`]*`', '', para))]
    if not figures:
      continue
    records = [os.path.normpath(os.path.join(ROOT, l)) for l in re.findall(
        r'\]\((results/[^)\s]+\.md)\)', para)]
    assert records, f'figures {figures} quoted without a link to their record: {para!r}'
    held = ''.join(open(r, encoding='utf-8').read() for r in records)
    assert [f for f in figures if f not in held] == [], para


#: An absolute path into a machine's own directory layout, as a command line writes it.
_MACHINE_PATH = re.compile(r"""(?:^|[\s='"`,(])/(?:work|tmp|home|root|Users|mnt)/[^\s'"`,)]*""",
                           flags=re.M)


def test_no_record_names_a_machine_directory():
  """The record names the project, not where a machine kept it: a recorded command's
  paths are relative to the checkout or `<outside_checkout>/<name>` (provenance.portable),
  in every text file of results/ and on the front page."""
  found = []
  files = ['README.md'] + [os.path.relpath(p, ROOT) for p in glob.glob(
      os.path.join(ROOT, 'results', '**', '*'), recursive=True)
      if p.endswith(('.md', '.json', '.jsonl', '.txt', '.csv'))]
  for rel in sorted(files):
    for m in _MACHINE_PATH.finditer(_read(rel)):
      found.append(f'{rel}: {m.group(0).strip()}')
  assert found == []
