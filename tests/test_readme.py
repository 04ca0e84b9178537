"""The front page and the docs, as a user reads them.

* The front page keeps the order a reader needs: what this is (3 sentences), the headline
  results (one sentence and one number each, new results apart from reproductions), the
  two commands (verbatim), a quickstart of at most 10 lines that runs and prints what its
  comments say, a claims table (claim of at most 20 words | kind of evidence | record),
  assumptions and limits, and a glossary linked from the first use of each term. It
  holds no timings and no loads (those are in results/fresh_clone.md).
* Every ```python snippet in README.md and docs/**/*.md runs as written (a user copies them).
* Every relative link in them, in colabs/README.md and in the READMEs of results/ points
  at a file or folder that exists.
* The front page quotes measured figures only next to the record that holds them: every
  number-with-unit in it sits in a paragraph that links results/, and appears in that
  file verbatim.
"""

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The front page. Its draft is written with links relative to the repository root, where
#: it will live; when it replaces README.md, this names README.md.
FRONT = 'README.md'
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


def test_docs_have_snippets():
  assert len(SNIPPETS) >= 4


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
    base = '' if page == FRONT else os.path.dirname(page)
    path = os.path.normpath(os.path.join(base, target.split('#')[0]))
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


def test_front_page_quotes_figures_only_next_to_their_record():
  text = re.sub(r'```.*?```', '', _read(FRONT), flags=re.S)
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


# The front page, section by section.

#: Its sections, in the order a reader needs them.
FRONT_SECTIONS = ['What this is', 'Headline results', 'The two commands', 'Quickstart',
                  'Claims', 'Assumptions and limits', 'Glossary']
#: The two commands, verbatim (CI and results/fresh_clone.md time exactly these).
TWO_COMMANDS = ('pip install -e ".[experiments]" && python experiments/approximate.py\n'
                'pip install -e ".[test]" && python -m pytest -q -n 2\n')
#: The kinds of evidence a claim may rest on, strongest first.
EVIDENCE = ('proved', 'verified exhaustively', 'certified', 'sampled', 'trained')
#: The slot the lead fills with the certifier of any Transformer.
SLOT = 'CERTIFY-ANY'


def _front_sections() -> dict:
  text = re.sub(r'<!--.*?-->', '', _read(FRONT), flags=re.S)
  parts = re.split(r'^## (.+)$', text, flags=re.M)
  return dict(zip(parts[1::2], parts[2::2]))


def _prose(text: str) -> str:
  return re.sub(r'```.*?```', '', text, flags=re.S)


def _sentences(text: str) -> list:
  """Sentences of prose: a break is [.!?] then space then a capital or a backtick."""
  text = re.sub(r'\s+', ' ', text).strip()
  return [s for s in re.split(r'(?<=[.!?]) (?=[A-Z`])', text) if s]


def test_front_page_sections_in_order():
  assert list(_front_sections()) == FRONT_SECTIONS


def test_sentence_split():
  # The check itself: "et al. 2020" and "e.g. 1716" do not end a sentence.
  assert len(_sentences('Yun et al. 2020 did it. It runs, e.g. 1716 blocks. `g` too.')) == 3


def test_front_page_says_what_this_is_in_three_sentences():
  assert len(_sentences(_front_sections()['What this is'])) == 3


def test_front_page_opening_paragraph_is_at_most_110_words():
  """Issue 69: the opening paragraph (link targets not counted) stays at most 110 words."""
  para = _prose(_front_sections()['What this is']).strip().split('\n\n')[0]
  assert len(re.sub(r'\]\([^)]*\)', ']', para).split()) <= 110


def _bullets(text: str) -> list:
  return [re.sub(r'\s+', ' ', b).strip() for b in re.findall(
      r'^\* (.*?)(?=^\* |^\S|\Z)', text, flags=re.S | re.M)]


def test_front_page_headlines_one_sentence_one_number_new_results_apart():
  text = _front_sections()['Headline results']
  assert text.index('New results') < text.index('Reproductions')
  new, reproductions = text.split('Reproductions')
  for group in (new, reproductions):
    bullets = [b for b in _bullets(group) if SLOT not in b]
    assert len(bullets) >= 4
    for b in bullets:
      assert len(_sentences(b)) == 1, b
      assert re.search(r'\d', re.sub(r'\]\([^)]*\)', '', b)), f'no number: {b}'
      assert re.search(r'\]\((results|docs)/', b), f'no record: {b}'


def test_front_page_gives_the_two_commands_verbatim():
  blocks = re.findall(r'^```bash\n(.*?)^```', _front_sections()['The two commands'],
                      flags=re.S | re.M)
  assert blocks == [TWO_COMMANDS]


def _quickstart() -> str:
  blocks = re.findall(r'^```python\n(.*?)^```', _front_sections()['Quickstart'],
                      flags=re.S | re.M)
  assert len(blocks) == 1
  return blocks[0]


def test_quickstart_runs_and_prints_what_its_comments_say(capsys):
  """The quickstart (<= 10 lines, a few seconds) runs as written, and every number a
  print line's comment quotes is in what that print wrote."""
  code = _quickstart()
  lines = code.splitlines()
  assert len(lines) <= 10
  exec(compile(code, f'{FRONT} quickstart', 'exec'), {'__name__': 'readme'})  # pylint: disable=exec-used
  out = capsys.readouterr().out
  promised = [w for line in lines if line.startswith('print(') and '#' in line
              for w in re.findall(r'\d[\d.]*\d|\d', line.split('#', 1)[1])
              if w not in ('2',)]   # d_2, binary64's digits stand for names, not outputs
  assert promised, 'the quickstart promises nothing'
  missing = [w for w in promised if w not in out]
  assert missing == [], out


def _claims() -> list:
  rows = [l for l in _front_sections()['Claims'].splitlines() if l.startswith('|')]
  assert rows[0] == '| claim | evidence | record |'
  return [[c.strip() for c in r.strip('|').split(' | ')] for r in rows[2:]]


def test_claims_short_with_a_kind_of_evidence_and_a_record():
  claims = _claims()
  assert len(claims) >= 15
  for claim, evidence, record in claims:
    if claim.startswith(SLOT):
      continue
    assert len(claim.split()) <= 20, claim
    assert evidence.startswith(EVIDENCE), (claim, evidence)
    assert re.search(r'\]\((results|docs|tests)/[^)]+\)', record), (claim, record)


def test_front_page_states_its_assumptions_and_limits():
  text = re.sub(r'\s+', ' ', _front_sections()['Assumptions and limits'])
  for needed in ('float runtime model', 'Tiny n and d', 'epsilon^-(nd)',
                 'Section H is an analogue study'):
    assert needed in text


def test_glossary_terms_are_linked_from_their_first_use():
  sections = _front_sections()
  glossary = sections['Glossary']
  terms = re.findall(r'<a id="(g-[\w-]+)"></a>([^|,]+?)\s*[|,]', glossary)
  assert len(terms) >= 6
  body = _prose(''.join(t for name, t in sections.items() if name != 'Glossary'))
  for anchor, term in terms:
    i = body.lower().find(term.lower())
    assert i > 0, f'glossary term {term!r} is never used'
    assert body[i - 1] == '[' and body[i + len(term):].startswith(f'](#{anchor})'), (
        f'first use of {term!r} is not linked to the glossary')


_TIMING = re.compile(r'(?<![\w.])\d+(?:\.\d+)?\s?(s|min|h)(?!\w)')


def test_front_page_holds_no_timings_and_no_loads():
  text = re.sub(r'`[^`]*`', '', _prose(_read(FRONT)))
  assert _TIMING.findall(text) == [] and not re.search(r'\bload\b', text)


def _slug(heading: str) -> str:
  """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
  text = re.sub(r'[^\w\- ]', '', heading.strip().lower())
  return text.replace(' ', '-')


def _anchors(page: str) -> set:
  text = re.sub(r'```.*?```', '', _read(page), flags=re.S)
  return ({_slug(h) for h in re.findall(r'^#+ (.+)$', text, flags=re.M)}
          | set(re.findall(r'<a id="([^"]+)"', text)))


def test_slug():
  assert _slug("Appendix G.2's ordering is false") == 'appendix-g2s-ordering-is-false'
  assert _slug("Certified as it runs: `arithmetic='float64'` and `'float32'`") == \
      'certified-as-it-runs-arithmeticfloat64-and-float32'


@pytest.mark.parametrize('page', LINKED)
def test_link_anchors_exist(page):
  """A link to a heading of a markdown page (page.md#anchor, or #anchor on the page
  itself) names a heading or an <a id> that is there."""
  text = re.sub(r'```.*?```', '', _read(page), flags=re.S)
  base = '' if page == FRONT else os.path.dirname(page)
  missing = []
  for target in re.findall(r'\]\(([^)\s]+)\)', text):
    if re.match(r'^[a-z]+:', target) or '#' not in target:
      continue
    path, anchor = target.split('#', 1)
    linked = page if not path else os.path.normpath(os.path.join(base, path))
    if linked.endswith('.md') and os.path.exists(os.path.join(ROOT, linked)) and \
        anchor not in _anchors(linked):
      missing.append(target)
  assert missing == [], f'{page} links to anchors that do not exist'
