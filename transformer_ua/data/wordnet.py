"""WordNet 3.0 as an offline English corpus (Yun et al. 2020, Appendix H.3-H.4 data).

The paper pre-trains on Wikipedia + BooksCorpus; no machine here reaches a dataset
hub, so the text is WordNet 3.0 as Debian's ``wordnet-base`` package installs it
(``apt-get install wordnet-base`` puts ``data.noun``, ``data.verb``, ``data.adj`` and
``data.adv`` under ``/usr/share/wordnet``). Licence: the WordNet 3.0 licence
(BSD-style, Princeton University), reproduced in every data file's header.

One line of a ``data.POS`` file (``man 5 wndb``):

    offset lex_filenum ss_type w_cnt(hex) {word lex_id}*w_cnt p_cnt(dec)
        {ptr_symbol offset pos source/target}*p_cnt [frames] | gloss

The gloss is ``definition; "example sentence"; "another example"``. Lines starting
with two spaces are the licence header. A ``Synset`` keeps the lemmas, the pointers
(relation symbol, target id), the definition and the quoted examples. Synset ids are
``pos + offset`` (``'n02084071'`` is dog); adjective satellites (``s``) live in
``data.adj`` and get the prefix ``a``.

The split into training and held-out synsets is a hash of the id (``is_heldout``), so
it is the same for every run, every task and every size of corpus: no gloss of a
held-out synset is seen in pre-training or in fine-tuning training data.
"""

from __future__ import annotations

import dataclasses
import os
import re
import zlib

DEFAULT_DIR = '/usr/share/wordnet'
POS_FILES = {'n': 'data.noun', 'v': 'data.verb', 'a': 'data.adj', 'r': 'data.adv'}
HYPERNYM = '@'            # '@i' (instance hypernym) is kept apart on purpose
HYPONYM = '~'

_QUOTED = re.compile(r'"([^"]*)"')


class CorpusMissingError(FileNotFoundError):
  """Raised when the WordNet data files are not where they are looked for."""


@dataclasses.dataclass(frozen=True)
class Synset:
  id: str                     # 'n02084071'
  pos: str                    # n | v | a | r
  lexfile: int                # lexicographer file number (noun.animal = 5, ...)
  lemmas: tuple[str, ...]     # ('dog', 'domestic dog', 'Canis familiaris')
  pointers: tuple[tuple[str, str], ...]   # (symbol, target id)
  definition: str
  examples: tuple[str, ...]

  def related(self, symbol: str) -> list[str]:
    return [t for s, t in self.pointers if s == symbol]

  @property
  def headline(self) -> str:
    """``'dog, domestic dog, Canis familiaris: a member of the genus Canis ...'``."""
    return ', '.join(self.lemmas) + ': ' + self.definition


def _clean_lemma(word: str) -> str:
  word = re.sub(r'\([a-z]+\)$', '', word)   # adjective markers: beautiful(p)
  return word.replace('_', ' ')


def parse_line(line: str) -> Synset | None:
  """Parses one data-file line; None for licence header lines."""
  if line.startswith('  ') or not line.strip():
    return None
  head, _, gloss = line.partition(' | ')
  f = head.split()
  offset, lexfile, ss_type = f[0], int(f[1]), f[2]
  pos = 'a' if ss_type == 's' else ss_type
  w_cnt = int(f[3], 16)
  words = tuple(_clean_lemma(f[4 + 2 * i]) for i in range(w_cnt))
  i = 4 + 2 * w_cnt
  p_cnt = int(f[i])
  ptrs = []
  for j in range(p_cnt):
    sym, off, ppos = f[i + 1 + 4 * j: i + 4 + 4 * j]
    ptrs.append((sym, ('a' if ppos == 's' else ppos) + off))
  gloss = gloss.strip()
  examples = tuple(e.strip() for e in _QUOTED.findall(gloss) if e.strip())
  definition = _QUOTED.sub('', gloss)
  definition = re.sub(r'\s*;\s*(?=;|$)', '', definition)        # empty ';' pieces
  definition = re.sub(r'(\s*;)+\s*$', '', definition).strip()
  definition = re.sub(r'\s+', ' ', definition).strip(' ;')
  return Synset(pos + offset, pos, lexfile, words, tuple(ptrs), definition, examples)


def check_corpus(directory: str | None = None) -> str:
  """Returns the WordNet directory, or raises ``CorpusMissingError`` saying what to do."""
  directory = directory or os.environ.get('WORDNET_DIR') or DEFAULT_DIR
  missing = [n for n in POS_FILES.values() if not os.path.isfile(os.path.join(directory, n))]
  if missing:
    raise CorpusMissingError(
        f'WordNet corpus not found: {", ".join(missing)} missing in {directory}. '
        'Install it with `apt-get install wordnet-base` (Debian/Ubuntu), or point '
        '--config.data.wordnet_dir / $WORDNET_DIR at a directory with data.noun, '
        'data.verb, data.adj, data.adv.')
  return directory


def load(directory: str | None = None) -> dict[str, Synset]:
  """All synsets of the four data files, keyed by id (in file order)."""
  directory = check_corpus(directory)
  synsets: dict[str, Synset] = {}
  for name in POS_FILES.values():
    with open(os.path.join(directory, name), encoding='utf-8', errors='replace') as f:
      for line in f:
        s = parse_line(line)
        if s is not None and s.definition:
          synsets[s.id] = s
  return synsets


def is_heldout(synset_id: str, fraction: float = 0.1) -> bool:
  """Deterministic split: a fixed hash of the id decides, the same for every task."""
  return (zlib.crc32(synset_id.encode()) % 10_000) < fraction * 10_000
