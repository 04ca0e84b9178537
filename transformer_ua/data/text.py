"""Tokenizer and BERT pre-training batches from WordNet text (Yun et al. 2020, H.4).

H.4 follows BERT (Devlin et al. 2018): masked-LM plus next-sentence prediction. Here:

* Tokenizer: WordPiece (lower-cased, BERT normalizer and pre-tokenizer) trained with
  Hugging Face ``tokenizers`` on the pre-training text (training synsets only).
* Masked LM: 15% of the non-special tokens of each sequence (at least one, at most
  ``max_predictions``) are predicted; of those 80% become ``[MASK]``, 10% a random
  token, 10% stay.
* Sentence-pair objective (the NSP analogue): segment A is a synset's headline
  ``'lemma, lemma: definition'``; segment B is one of the *same* synset's example
  sentences (label 1, "IsNext") or an example of a random other synset (label 0).
  Synsets without examples still feed the masked LM: a third of the instances are a
  headline alone, with NSP weight 0, so every training gloss is pre-training text.

Every batch is a pure function of ``(seed, step)`` (``PretrainData.batch``), so a run
resumed from a checkpoint sees exactly the batches the uninterrupted run saw.

Batch arrays (B = batch size, n = max_len, P = max_predictions):

    input_ids  [B, n] int32   [CLS] A [SEP] B [SEP] [PAD]...
    type_ids   [B, n] int32   0 for [CLS] A [SEP], 1 for B [SEP], 0 on padding
    mask       [B, n] bool    True on real tokens
    mlm_positions [B, P] int32, mlm_ids [B, P] int32, mlm_weights [B, P] float32
    nsp_labels [B] int32,  nsp_weights [B] float32

Sequence packing (``PretrainData.batch(step, B, max_segments=S)`` with S > 1): WordNet
instances are short (28 tokens on average), so one instance per row leaves 44% (max_len
64) or 42% (max_len 48) of every batch as padding. A packed row holds up to S instances
``r = I_1 I_2 ... I_s [PAD]...`` (each ``[CLS] A [SEP] (B [SEP])``, truncated to n as
before), placed *first-fit* in draw order: instance t goes into the first row with
room for it and fewer than S instances; the batch is complete at the first instance
that fits no row (that one instance is dropped; on the WordNet lengths this keeps the
mean instance length within 0.3% of the unpacked stream and fills 87% (n = 48, B = 64)
or 91% (n = 64, B = 32) of the positions). Masking is per row: 15% of the row's
non-special tokens (at most P), 80/10/10 as above. Extra arrays:

    segment_ids [B, n] int32  s = 1..S on the tokens of instance s, 0 on padding
    positions   [B, n] int32  position inside its instance (0 at its [CLS]), 0 on padding
    cls_positions [B, S] int32  row index of instance s's [CLS] (0 for an empty slot)
    nsp_labels [B, S] int32,  nsp_weights [B, S] float32   (weight 0 for an empty slot)

The model keeps instances apart (``transformer_ua.models.mixers``: every mixing layer
mixes only tokens of the same segment; positions restart at 0 per instance), so a
packed row computes exactly what its instances would compute in rows of their own.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from transformer_ua import outputs
from transformer_ua.data import wordnet

SPECIAL = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
PAD, UNK, CLS, SEP, MASK = range(5)


def pretraining_text(synsets: dict[str, wordnet.Synset], heldout_fraction: float):
  """Headlines and examples of the training synsets (the tokenizer's training text)."""
  for s in synsets.values():
    if not wordnet.is_heldout(s.id, heldout_fraction):
      yield s.headline
      yield from s.examples


def train_tokenizer(texts, vocab_size: int):
  """A lower-cased BERT WordPiece tokenizer trained on ``texts``; ids 0-4 are SPECIAL."""
  from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
  tok = Tokenizer(models.WordPiece(unk_token='[UNK]'))
  tok.normalizer = normalizers.BertNormalizer(lowercase=True)
  tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
  tok.decoder = decoders.WordPiece()
  trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                      min_frequency=2, show_progress=False)
  tok.train_from_iterator(texts, trainer=trainer)
  return tok


def load_or_train_tokenizer(path: str, synsets, vocab_size: int, heldout_fraction: float):
  """Loads ``path`` if it exists, else trains on the training text and saves there."""
  from tokenizers import Tokenizer
  if os.path.exists(path):
    return Tokenizer.from_file(path)
  tok = train_tokenizer(pretraining_text(synsets, heldout_fraction), vocab_size)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  outputs.atomic_write(path, tok.to_str(pretty=True))
  return tok


def encode_all(tok, texts: list[str]) -> list[np.ndarray]:
  """Token ids without special tokens, one int32 array per text."""
  encs = tok.encode_batch(texts, add_special_tokens=False)
  return [np.asarray(e.ids, np.int32) for e in encs]


def truncate_pair(a: np.ndarray, b: np.ndarray | None, budget: int):
  """Truncates the longer segment first until ``len(a) + len(b) <= budget``."""
  la, lb = len(a), 0 if b is None else len(b)
  while la + lb > budget:
    if la >= lb:
      la -= 1
    else:
      lb -= 1
  return a[:la], (None if b is None else b[:lb])


def pack_pair(a, b, max_len: int):
  """``[CLS] a [SEP] b [SEP]`` (or ``[CLS] a [SEP]``), truncated; returns ids, types."""
  a, b = truncate_pair(a, b, max_len - (3 if b is not None else 2))
  ids = [CLS, *a.tolist(), SEP]
  types = [0] * len(ids)
  if b is not None:
    ids += [*b.tolist(), SEP]
    types += [1] * (len(b) + 1)
  return ids, types


def mask_tokens(ids: np.ndarray, rng: np.random.Generator, vocab_size: int,
                mask_prob: float, max_predictions: int):
  """BERT masking of one sequence: returns (masked ids, positions, original ids)."""
  ids = ids.copy()
  cand = np.flatnonzero((ids != PAD) & (ids != CLS) & (ids != SEP))
  k = min(max_predictions, max(1, int(round(len(cand) * mask_prob))))
  pos = np.sort(rng.choice(cand, size=k, replace=False))
  orig = ids[pos].copy()
  u = rng.random(k)
  ids[pos[u < 0.8]] = MASK
  rnd = pos[(u >= 0.8) & (u < 0.9)]
  ids[rnd] = rng.integers(len(SPECIAL), vocab_size, size=len(rnd))
  return ids, pos, orig


@dataclasses.dataclass
class PretrainData:
  """Pre-training instances over the training synsets; ``batch(step)`` is deterministic."""
  headlines: list[np.ndarray]      # one per training synset
  examples: list[list[np.ndarray]] # examples of each training synset (may be empty)
  vocab_size: int
  max_len: int
  max_predictions: int
  mask_prob: float = 0.15
  seed: int = 0

  def __post_init__(self):
    self.with_examples = np.array([i for i, e in enumerate(self.examples) if e], np.int64)
    if len(self.with_examples) < 2:
      raise ValueError('pre-training needs at least two synsets with example sentences')

  @classmethod
  def from_synsets(cls, synsets, tok, *, heldout: bool, heldout_fraction: float, **kw):
    """Instances over the training (``heldout=False``) or held-out synsets."""
    chosen = [s for s in synsets.values()
              if wordnet.is_heldout(s.id, heldout_fraction) == heldout]
    heads = encode_all(tok, [s.headline for s in chosen])
    flat = encode_all(tok, [e for s in chosen for e in s.examples])
    examples, i = [], 0
    for s in chosen:
      examples.append(flat[i:i + len(s.examples)])
      i += len(s.examples)
    return cls(heads, examples, tok.get_vocab_size(), **kw)

  def instance(self, rng: np.random.Generator):
    kind = rng.integers(3)             # 0: IsNext, 1: NotNext, 2: headline alone
    if kind == 2:
      s = rng.integers(len(self.headlines))
      return self.headlines[s], None, 0, 0.0
    s = self.with_examples[rng.integers(len(self.with_examples))]
    if kind == 0:
      ex = self.examples[s]
      return self.headlines[s], ex[rng.integers(len(ex))], 1, 1.0
    t = s
    while t == s:
      t = self.with_examples[rng.integers(len(self.with_examples))]
    ex = self.examples[t]
    return self.headlines[s], ex[rng.integers(len(ex))], 0, 1.0

  def batch(self, step: int, batch_size: int, max_segments: int = 1
            ) -> dict[str, np.ndarray]:
    """Batch ``step``: one instance per row (``max_segments=1``) or packed rows of up
    to ``max_segments`` instances (module doc)."""
    if max_segments != 1:
      return self._packed_batch(step, batch_size, max_segments)
    rng = np.random.default_rng([self.seed, int(step)])
    n, P = self.max_len, self.max_predictions
    out = {
        'input_ids': np.zeros((batch_size, n), np.int32),
        'type_ids': np.zeros((batch_size, n), np.int32),
        'mask': np.zeros((batch_size, n), bool),
        'mlm_positions': np.zeros((batch_size, P), np.int32),
        'mlm_ids': np.zeros((batch_size, P), np.int32),
        'mlm_weights': np.zeros((batch_size, P), np.float32),
        'nsp_labels': np.zeros((batch_size,), np.int32),
        'nsp_weights': np.zeros((batch_size,), np.float32),
    }
    for i in range(batch_size):
      a, b, label, w = self.instance(rng)
      ids, types = pack_pair(a, b, n)
      ids = np.asarray(ids, np.int32)
      masked, pos, orig = mask_tokens(ids, rng, self.vocab_size, self.mask_prob, P)
      out['input_ids'][i, :len(ids)] = masked
      out['type_ids'][i, :len(ids)] = types
      out['mask'][i, :len(ids)] = True
      out['mlm_positions'][i, :len(pos)] = pos
      out['mlm_ids'][i, :len(pos)] = orig
      out['mlm_weights'][i, :len(pos)] = 1.0
      out['nsp_labels'][i] = label
      out['nsp_weights'][i] = w
    return out

  def _packed_batch(self, step: int, batch_size: int, max_segments: int):
    """Packed rows (module doc): first-fit in draw order, complete at the first misfit."""
    if not isinstance(max_segments, int) or max_segments < 1:
      raise ValueError(f'max_segments must be a positive integer, got {max_segments!r}')
    rng = np.random.default_rng([self.seed, int(step), max_segments])
    B, n, P, S = batch_size, self.max_len, self.max_predictions, max_segments
    free = np.full(B, n)                       # room left in each row
    rows = [[] for _ in range(B)]              # (ids, types, nsp label, nsp weight)
    while True:
      a, b, label, w = self.instance(rng)
      ids, types = pack_pair(a, b, n)
      fits = np.flatnonzero((free >= len(ids)) & (np.array([len(r) for r in rows]) < S))
      if not len(fits):
        break
      i = fits[0]
      rows[i].append((ids, types, label, w))
      free[i] -= len(ids)
    out = {
        'input_ids': np.zeros((B, n), np.int32), 'type_ids': np.zeros((B, n), np.int32),
        'mask': np.zeros((B, n), bool), 'segment_ids': np.zeros((B, n), np.int32),
        'positions': np.zeros((B, n), np.int32),
        'mlm_positions': np.zeros((B, P), np.int32), 'mlm_ids': np.zeros((B, P), np.int32),
        'mlm_weights': np.zeros((B, P), np.float32),
        'cls_positions': np.zeros((B, S), np.int32), 'nsp_labels': np.zeros((B, S), np.int32),
        'nsp_weights': np.zeros((B, S), np.float32),
    }
    for i, row in enumerate(rows):
      start = 0
      for s, (ids, types, label, w) in enumerate(row):
        end = start + len(ids)
        out['input_ids'][i, start:end] = ids
        out['type_ids'][i, start:end] = types
        out['segment_ids'][i, start:end] = s + 1
        out['positions'][i, start:end] = np.arange(len(ids))
        out['cls_positions'][i, s] = start
        out['nsp_labels'][i, s] = label
        out['nsp_weights'][i, s] = w
        start = end
      out['mask'][i, :start] = True
      masked, pos, orig = mask_tokens(out['input_ids'][i], rng, self.vocab_size,
                                      self.mask_prob, P)
      out['input_ids'][i] = masked
      out['mlm_positions'][i, :len(pos)] = pos
      out['mlm_ids'][i, :len(pos)] = orig
      out['mlm_weights'][i, :len(pos)] = 1.0
    return out
