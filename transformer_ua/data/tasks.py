"""Fine-tuning tasks from real WordNet relations: MNLI and SQuAD analogues (Yun et al.
2020, H.3-H.4, Table 1 and Figure 1).

**Relations task ("MNLI analogue", 3-class sentence pairs).** For every noun or verb
synset ``s`` with a hypernym ``h`` (WordNet pointer ``@``) and at least one co-hyponym,
one pair (premise = headline of ``s``, hypothesis = headline of ``t``) with a label
drawn uniformly:

    0 "hypernym"    t = h, a hypernym of s           ("a dog is a kind of canine")
    1 "co-hyponym"  t = another hyponym of h         ("dog" vs "wolf")
    2 "unrelated"   t = a random synset of the same part of speech from a *different*
                    lexicographer file (noun.animal vs noun.artifact, ...)

A headline is ``'lemma, lemma: definition'``. Labels are balanced by construction, so
the majority-class baseline is ~33% (``majority_baseline`` gives the exact figure on the
split). Train pairs have both synsets in the training split; test pairs have a held-out
premise synset ``s``, whose gloss was never seen in pre-training or training pairs, so
the pair relation cannot be memorised.

**Span task ("SQuAD analogue", extractive QA with EM and F1).** For every example
sentence of a synset, the question is the synset's definition and the context is the
example; the answer is the span of the example where one of the synset's lemmas occurs
(exact, or with a regular inflection: -s, -es, -ed, -d, -ing, -ies, -ied, -er, -est,
doubled final consonant, dropped final e or y). Examples with zero or several matches
are dropped. Input ``[CLS] definition [SEP] example [SEP]``; the model predicts start
and end tokens inside the example. EM and F1 follow the SQuAD script (lower-case,
strip punctuation and articles, token-bag F1) on the predicted character span.
Baselines: the first word of the context, and the word at the most common answer
position of the training set (``span_baselines``). Train/test split as above.

Arrays (B examples, n = max_len):

    input_ids, type_ids [B, n] int32;  mask [B, n] bool
    labels [B] int32                                  (relations)
    starts, ends [B] int32 token indices; context_mask [B, n] bool   (span)
"""

from __future__ import annotations

import collections
import dataclasses
import re
import string

import numpy as np

from transformer_ua.data import text, wordnet

RELATION_LABELS = ('hypernym', 'co-hyponym', 'unrelated')


# ----------------------------------------------------------------------------------
# Relations (MNLI analogue)
# ----------------------------------------------------------------------------------

def relation_pairs(synsets: dict[str, wordnet.Synset], *, heldout: bool,
                   heldout_fraction: float, seed: int = 0):
  """[(premise_id, hypothesis_id, label)] for the train (heldout=False) or test split."""
  rng = np.random.default_rng(seed)
  by_lexfile = collections.defaultdict(list)
  for s in synsets.values():
    if s.pos in 'nv':
      by_lexfile[(s.pos, s.lexfile)].append(s.id)
  lexfiles = {pos: [k for k in by_lexfile if k[0] == pos] for pos in 'nv'}
  pairs = []
  for s in synsets.values():
    if s.pos not in 'nv' or wordnet.is_heldout(s.id, heldout_fraction) != heldout:
      continue
    ok = lambda t: t in synsets and (heldout or not wordnet.is_heldout(t, heldout_fraction))
    hypers = [h for h in s.related(wordnet.HYPERNYM) if ok(h)]
    if not hypers:
      continue
    h = hypers[rng.integers(len(hypers))]
    sibs = [c for c in synsets[h].related(wordnet.HYPONYM) if c != s.id and ok(c)]
    others = [k for k in lexfiles[s.pos] if k[1] != s.lexfile]
    if not sibs or not others:
      continue
    label = int(rng.integers(3))
    if label == 0:
      t = h
    elif label == 1:
      t = sibs[rng.integers(len(sibs))]
    else:
      for _ in range(100):
        pool = by_lexfile[others[rng.integers(len(others))]]
        t = pool[rng.integers(len(pool))]
        if ok(t):
          break
      else:
        continue
    pairs.append((s.id, t, label))
  return pairs


def encode_pairs(tok, synsets, pairs, max_len: int) -> dict[str, np.ndarray]:
  """Packs ``[CLS] premise [SEP] hypothesis [SEP]`` for each pair."""
  B = len(pairs)
  heads = {}
  need = sorted({i for p in pairs for i in p[:2]})
  for i, ids in zip(need, text.encode_all(tok, [synsets[i].headline for i in need])):
    heads[i] = ids
  out = {'input_ids': np.zeros((B, max_len), np.int32),
         'type_ids': np.zeros((B, max_len), np.int32),
         'mask': np.zeros((B, max_len), bool),
         'labels': np.zeros((B,), np.int32)}
  for r, (s, t, label) in enumerate(pairs):
    ids, types = text.pack_pair(heads[s], heads[t], max_len)
    out['input_ids'][r, :len(ids)] = ids
    out['type_ids'][r, :len(ids)] = types
    out['mask'][r, :len(ids)] = True
    out['labels'][r] = label
  return out


def majority_baseline(labels: np.ndarray) -> tuple[int, float]:
  """(most frequent label, its frequency) — the accuracy of always predicting it."""
  counts = np.bincount(labels, minlength=len(RELATION_LABELS))
  return int(counts.argmax()), float(counts.max() / max(1, counts.sum()))


# ----------------------------------------------------------------------------------
# Spans (SQuAD analogue)
# ----------------------------------------------------------------------------------

_SUFFIXES = ('', 's', 'es', 'ed', 'd', 'ing', 'er', 'est')


def _lemma_pattern(lemma: str) -> re.Pattern:
  """Regex for the lemma with a regular inflection on its last word."""
  words = lemma.lower().split()
  last = words[-1]
  stems = {last}
  if last.endswith('e'):
    stems.add(last[:-1])
  forms = [re.escape(s) + '(?:' + '|'.join(_SUFFIXES) + ')' for s in sorted(stems)]
  if last.endswith('y'):
    forms.append(re.escape(last[:-1]) + '(?:ies|ied)')
  if len(last) >= 3 and last[-1] not in 'aeiouwxy':
    forms.append(re.escape(last + last[-1]) + '(?:ed|ing|er|est)')
  head = ''.join(re.escape(w) + r'\s+' for w in words[:-1])
  return re.compile(r'(?<![\w-])' + head + '(?:' + '|'.join(forms) + r')(?![\w-])')


def find_answer(synset: wordnet.Synset, example: str) -> tuple[int, int] | None:
  """The unique (start, end) character span of a lemma of ``synset`` in ``example``."""
  low = example.lower()
  spans = set()
  for lemma in synset.lemmas:
    for m in _lemma_pattern(lemma).finditer(low):
      spans.add((m.start(), m.end()))
  # A multi-word match contains its single-word sub-matches: keep maximal spans.
  spans = {a for a in spans if not any(b != a and b[0] <= a[0] and a[1] <= b[1]
                                       for b in spans)}
  return spans.pop() if len(spans) == 1 else None


@dataclasses.dataclass(frozen=True)
class SpanExample:
  synset_id: str
  question: str        # the definition
  context: str         # the example sentence
  answer: tuple[int, int]   # character span in context

  @property
  def answer_text(self) -> str:
    return self.context[self.answer[0]:self.answer[1]]


def span_examples(synsets, *, heldout: bool, heldout_fraction: float):
  out = []
  for s in synsets.values():
    if wordnet.is_heldout(s.id, heldout_fraction) != heldout:
      continue
    for ex in s.examples:
      span = find_answer(s, ex)
      if span is not None:
        out.append(SpanExample(s.id, s.definition, ex, span))
  return out


def encode_spans(tok, examples: list[SpanExample], max_len: int):
  """Encodes examples; drops those whose answer is truncated away.

  Returns (arrays, kept examples, token->char offsets [B, n, 2]).
  """
  rows, kept, offs = [], [], []
  q_ids = text.encode_all(tok, [e.question for e in examples])
  encs = tok.encode_batch([e.context for e in examples], add_special_tokens=False)
  for e, q, enc in zip(examples, q_ids, encs):
    c = np.asarray(enc.ids, np.int32)
    q, c = text.truncate_pair(q, c, max_len - 3)
    ids, types = text.pack_pair(q, c, max_len)
    base = len(q) + 2                       # index of the first context token
    offsets = enc.offsets[:len(c)]
    starts = [i for i, (a, b) in enumerate(offsets) if a <= e.answer[0] < b]
    ends = [i for i, (a, b) in enumerate(offsets) if a < e.answer[1] <= b]
    if not starts or not ends:
      continue
    rows.append((ids, types, base + starts[0], base + ends[0], base, len(c)))
    kept.append(e)
    off = np.zeros((max_len, 2), np.int32)
    off[base:base + len(c)] = np.asarray(offsets, np.int32).reshape(-1, 2)
    offs.append(off)
  B = len(rows)
  out = {'input_ids': np.zeros((B, max_len), np.int32),
         'type_ids': np.zeros((B, max_len), np.int32),
         'mask': np.zeros((B, max_len), bool),
         'context_mask': np.zeros((B, max_len), bool),
         'starts': np.zeros((B,), np.int32), 'ends': np.zeros((B,), np.int32)}
  for r, (ids, types, st, en, base, lc) in enumerate(rows):
    out['input_ids'][r, :len(ids)] = ids
    out['type_ids'][r, :len(ids)] = types
    out['mask'][r, :len(ids)] = True
    out['context_mask'][r, base:base + lc] = True
    out['starts'][r], out['ends'][r] = st, en
  return out, kept, np.stack(offs) if offs else np.zeros((0, max_len, 2), np.int32)


def best_spans(start_logits, end_logits, context_mask, max_answer_tokens: int = 10):
  """Arg max of start+end score over start <= end < start + max_answer_tokens."""
  s = np.where(context_mask, start_logits, -np.inf)
  e = np.where(context_mask, end_logits, -np.inf)
  n = s.shape[1]
  i, j = np.arange(n)[:, None], np.arange(n)[None, :]
  ok = (j >= i) & (j < i + max_answer_tokens)
  score = np.where(ok[None], s[:, :, None] + e[:, None, :], -np.inf)
  flat = score.reshape(len(s), -1).argmax(-1)
  return flat // n, flat % n


def normalize_answer(s: str) -> str:
  """SQuAD v1.1 normalisation: lower, no punctuation, no articles, single spaces."""
  s = s.lower()
  s = ''.join(ch for ch in s if ch not in set(string.punctuation))
  s = re.sub(r'\b(a|an|the)\b', ' ', s)
  return ' '.join(s.split())


def exact_match(pred: str, gold: str) -> float:
  return float(normalize_answer(pred) == normalize_answer(gold))


def f1_score(pred: str, gold: str) -> float:
  p, g = normalize_answer(pred).split(), normalize_answer(gold).split()
  common = collections.Counter(p) & collections.Counter(g)
  same = sum(common.values())
  if not p or not g:
    return float(p == g)
  if same == 0:
    return 0.0
  prec, rec = same / len(p), same / len(g)
  return 2 * prec * rec / (prec + rec)


def span_scores(preds: list[str], golds: list[str]) -> dict[str, float]:
  """Mean EM and F1 in percent."""
  if not golds:
    return {'em': float('nan'), 'f1': float('nan')}
  return {'em': 100 * float(np.mean([exact_match(p, g) for p, g in zip(preds, golds)])),
          'f1': 100 * float(np.mean([f1_score(p, g) for p, g in zip(preds, golds)]))}


def span_baselines(train: list[SpanExample], test: list[SpanExample]) -> dict:
  """EM/F1 of 'first word of the context' and 'word at the most common answer index'."""
  def word_index(e):
    return len(e.context[:e.answer[0]].split())
  common = collections.Counter(word_index(e) for e in train).most_common(1)
  k = common[0][0] if common else 0
  golds = [e.answer_text for e in test]
  first = [e.context.split()[0] if e.context.split() else '' for e in test]
  at_k = [(e.context.split() or [''])[min(k, len(e.context.split()) - 1)] for e in test]
  return {'first_word': span_scores(first, golds),
          f'word_at_index_{k}': span_scores(at_k, golds)}
