"""docs/layout.md's layout section names every module of the package, and only real ones."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _layout_block() -> str:
  text = open(os.path.join(ROOT, 'docs', 'layout.md'), encoding='utf-8').read()
  start = text.index('## Layout')
  return text[text.index('```', start) + 3:text.index('```', text.index('```', start) + 3)]


def _package_files() -> set:
  out = set()
  for dirpath, _, files in os.walk(os.path.join(ROOT, 'transformer_ua')):
    for f in files:
      if f.endswith('.py') and f != '__init__.py':
        out.add(os.path.relpath(os.path.join(dirpath, f), os.path.join(ROOT, 'transformer_ua')))
  return out


def _sections(block: str) -> dict:
  """'' (top level) or 'sub/' -> the text of that entry (its line and continuations)."""
  out, key = {}, None
  for line in block.splitlines():
    m = re.match(r'^  (\S+)', line)
    if m:
      key = m.group(1) if m.group(1).endswith('/') else ''
    if key is not None and line.startswith('  '):
      out[key] = out.get(key, '') + line + '\n'
  return out


def test_layout_names_every_module_in_its_directory():
  sections = _sections(_layout_block())
  missing = []
  for path in sorted(_package_files()):
    folder, name = os.path.split(path)
    text = sections.get(folder + '/' if folder else '', '')
    if not re.search(rf'(?<![\w/]){re.escape(name)}', text):
      missing.append(path)
  assert missing == []


def test_layout_names_only_real_files_and_folders():
  files = _package_files()
  sections = _sections(_layout_block())
  assert set(sections) - {''} == {os.path.dirname(f) + '/' for f in files if '/' in f}
  for key, text in sections.items():
    for name in re.findall(r'(?<![\w/])(\w+\.py)', text):
      assert os.path.join(key, name) in files, (key, name)


def test_layout_states_the_binaries_exit_statuses_as_cli_defines_them():
  """The conventions table of docs/layout.md (moved off the front page) gives the exit
  statuses cli.py actually uses."""
  from transformer_ua import cli
  from transformer_ua import binary_interrupts
  text = open(os.path.join(ROOT, 'docs', 'layout.md'), encoding='utf-8').read()
  section = text[text.index("## The binaries' conventions"):]
  section = section[:section.index('\n## ', 1)]
  status = {row.split(' | ')[0].strip('| '): row.rsplit(' | ', 1)[1].strip(' |')
            for row in section.splitlines() if row.startswith('| ') and ' | ' in row}
  assert status['bad input (unknown flag, bad value, config-key typo, a path it cannot use)'] \
      == str(cli.USAGE_ERROR)
  assert status['Ctrl-C (SIGINT)'] == str(binary_interrupts.INTERRUPTED)
  assert status['SIGTERM'] == str(binary_interrupts.TERMINATED)
