"""Tests of transformer_ua/data on the shipped WordNet fixture (tests/fixtures/wordnet,
real WordNet 3.0 lines, WordNet licence in its LICENSE file); no apt, no network."""

import collections
import os

import numpy as np
import pytest

from transformer_ua.data import tasks, text, wordnet

FIXTURE = os.path.join(os.path.dirname(__file__), 'fixtures', 'wordnet')

# Copied from the real data.noun (and the fixture): dog, and its hypernym canine.
DOG_LINE = ('02084071 05 n 03 dog 0 domestic_dog 0 Canis_familiaris 0 003 @ 02083346 n 0000 '
            '@ 01317541 n 0000 ~ 01322604 n 0000 | a member of the genus Canis (probably '
            'descended from the common wolf) that has been domesticated by man since '
            'prehistoric times; occurs in many breeds; "the dog barked all night"  \n')


@pytest.fixture(scope='module')
def synsets():
  return wordnet.load(FIXTURE)


@pytest.fixture(scope='module')
def tok(synsets):
  return text.train_tokenizer(text.pretraining_text(synsets, 0.1), 400)


def test_parse_line():
  s = wordnet.parse_line(DOG_LINE)
  assert s.id == 'n02084071' and s.pos == 'n' and s.lexfile == 5
  assert s.lemmas == ('dog', 'domestic dog', 'Canis familiaris')
  assert s.related('@') == ['n02083346', 'n01317541'] and s.related('~') == ['n01322604']
  assert s.definition == ('a member of the genus Canis (probably descended from the common '
                          'wolf) that has been domesticated by man since prehistoric times; '
                          'occurs in many breeds')
  assert s.examples == ('the dog barked all night',)
  assert wordnet.parse_line('  1 This software and database is being provided\n') is None


def test_adjective_markers_and_satellites():
  line = ('01800349 00 s 01 beautiful(p) 0 001 & 01800195 a 0000 | pleasing; "a beautiful '
          'day"; "beautiful music"  \n')
  s = wordnet.parse_line(line)
  assert s.id == 'a01800349' and s.lemmas == ('beautiful',)
  assert s.examples == ('a beautiful day', 'beautiful music')
  assert s.definition == 'pleasing' and s.pointers == (('&', 'a01800195'),)


def test_load_fixture_counts_every_line(synsets):
  n = 0
  for name in wordnet.POS_FILES.values():
    with open(os.path.join(FIXTURE, name)) as f:
      n += sum(1 for l in f if not l.startswith('  '))
  assert len(synsets) == n
  dog = synsets['n02084071']
  assert 'n02083346' in dog.related('@')
  assert synsets['n02083346'].lemmas == ('canine', 'canid')


def test_missing_corpus_says_apt_get(tmp_path):
  with pytest.raises(wordnet.CorpusMissingError, match='apt-get install wordnet-base'):
    wordnet.load(str(tmp_path))


def test_heldout_split_is_deterministic_and_sized():
  ids = [f'n{i:08d}' for i in range(20000)]
  held = [wordnet.is_heldout(i, 0.1) for i in ids]
  assert held == [wordnet.is_heldout(i, 0.1) for i in ids]
  assert 0.08 < np.mean(held) < 0.12


def test_tokenizer_specials_and_roundtrip(tok):
  for i, name in enumerate(text.SPECIAL):
    assert tok.token_to_id(name) == i
  enc = tok.encode('the dog barked all night', add_special_tokens=False)
  assert tok.decode(enc.ids) == 'the dog barked all night'


def test_masking_rates():
  rng = np.random.default_rng(0)
  V, n = 1000, 60
  ids = np.concatenate([[text.CLS], rng.integers(5, V, n - 2), [text.SEP]]).astype(np.int32)
  counts = collections.Counter()
  total = 0
  for _ in range(3000):
    masked, pos, orig = text.mask_tokens(ids, rng, V, 0.15, 100)
    assert len(pos) == round((n - 2) * 0.15)
    assert not np.isin(pos, [0, n - 1]).any()              # never [CLS] / [SEP]
    np.testing.assert_array_equal(orig, ids[pos])
    total += len(pos)
    counts['mask'] += int((masked[pos] == text.MASK).sum())
    counts['same'] += int((masked[pos] == ids[pos]).sum())
    untouched = np.setdiff1d(np.arange(n), pos)
    np.testing.assert_array_equal(masked[untouched], ids[untouched])
  assert abs(counts['mask'] / total - 0.8) < 0.01
  # 'same' is the 10% kept plus random replacements that hit the same token (~0.1%).
  assert abs(counts['same'] / total - 0.1) < 0.01


def test_pack_pair_truncates_longest_first():
  a, b = np.arange(10, 30), np.arange(40, 45)
  ids, types = text.pack_pair(a, b, 16)
  assert len(ids) == 16 and ids[0] == text.CLS and ids.count(text.SEP) == 2
  assert ids[-6:] == [40, 41, 42, 43, 44, text.SEP]          # short segment kept whole
  assert types == [0] * 10 + [1] * 6


def test_pretrain_batches(synsets, tok):
  data = text.PretrainData.from_synsets(synsets, tok, heldout=False, heldout_fraction=0.1,
                                        max_len=32, max_predictions=5, seed=3)
  b1, b2 = data.batch(7, 16), data.batch(7, 16)
  for k in b1:
    np.testing.assert_array_equal(b1[k], b2[k])
  assert not np.array_equal(b1['input_ids'], data.batch(8, 16)['input_ids'])
  assert b1['input_ids'].shape == (16, 32) and b1['mlm_positions'].shape == (16, 5)
  assert (b1['input_ids'][:, 0] == text.CLS).all()
  assert not b1['input_ids'][~b1['mask']].any()
  assert b1['mlm_weights'].sum() > 0
  # The sentence-pair labels say whether B is an example of A's own synset.
  rng = np.random.default_rng(0)
  seen = collections.Counter()
  for _ in range(300):
    a, b, label, w = data.instance(rng)
    s = next(i for i, h in enumerate(data.headlines) if h is a)
    if w == 0:
      assert b is None
    else:
      own = any(np.array_equal(b, e) for e in data.examples[s])
      assert own == bool(label) or (not label and own)   # identical examples may repeat
      seen[label] += 1
  assert seen[0] > 50 and seen[1] > 50


def test_relation_pairs_are_real_relations(synsets):
  for heldout in (False, True):
    pairs = tasks.relation_pairs(synsets, heldout=heldout, heldout_fraction=0.1)
    assert pairs
    for s, t, label in pairs:
      assert wordnet.is_heldout(s, 0.1) == heldout
      if not heldout:
        assert not wordnet.is_heldout(t, 0.1)
      hypers_s = set(synsets[s].related('@'))
      if label == 0:
        assert t in hypers_s
      elif label == 1:
        assert t != s and hypers_s & set(synsets[t].related('@'))
      else:
        assert synsets[t].lexfile != synsets[s].lexfile and synsets[t].pos == synsets[s].pos


def test_encode_pairs_and_majority(synsets, tok):
  pairs = tasks.relation_pairs(synsets, heldout=False, heldout_fraction=0.1)
  enc = tasks.encode_pairs(tok, synsets, pairs, 48)
  np.testing.assert_array_equal(enc['labels'], [p[2] for p in pairs])
  assert (enc['type_ids'] == 1).any(axis=1).all()
  label, freq = tasks.majority_baseline(np.array([0, 1, 1, 2, 1]))
  assert (label, freq) == (1, 0.6)


@pytest.mark.parametrize('example, want', [
    ('the dog barked all night', 'dog'),
    ('two Dogs barked', 'Dogs'),
    ('a cat sat', None),                               # no lemma
    ('dog eat dog', None),                             # ambiguous: two matches
    ('the domestic dog is old', 'domestic dog'),       # multi-word lemma wins
    ('the doghouse roof', None),                       # 'dog' inside a longer word
])
def test_find_answer(example, want):
  s = wordnet.parse_line(DOG_LINE)
  span = tasks.find_answer(s, example)
  assert (None if span is None else example[span[0]:span[1]]) == want


def test_inflections():
  run = wordnet.Synset('v1', 'v', 38, ('run',), (), 'move fast', ())
  carry = wordnet.Synset('v2', 'v', 38, ('carry',), (), 'hold and move', ())
  make = wordnet.Synset('v3', 'v', 36, ('make',), (), 'create', ())
  assert tasks.find_answer(run, 'she was running late') == (8, 15)
  assert tasks.find_answer(carry, 'he carried it') == (3, 10)
  assert tasks.find_answer(make, 'making bread') == (0, 6)


def test_em_f1_match_squad_definitions():
  assert tasks.exact_match('The Dog!', 'dog') == 1.0
  assert tasks.exact_match('dogs', 'dog') == 0.0
  # pred 'big brown dog' vs gold 'brown dog': precision 2/3, recall 1 -> F1 0.8
  assert tasks.f1_score('big brown dog', 'brown dog') == pytest.approx(0.8)
  assert tasks.f1_score('cat', 'dog') == 0.0
  assert tasks.span_scores(['a dog', 'cat'], ['dog', 'dog']) == {'em': 50.0, 'f1': 50.0}


def test_best_spans():
  start = np.array([[0., 5., 1., 0., 9.]])
  end = np.array([[0., 0., 4., 1., 0.]])
  ctx = np.array([[False, True, True, True, False]])       # token 4 is not context
  st, en = tasks.best_spans(start, end, ctx, max_answer_tokens=3)
  assert (st[0], en[0]) == (1, 2)
  st, en = tasks.best_spans(start, end, ctx, max_answer_tokens=1)
  assert (st[0], en[0]) == (1, 1)


def test_span_examples_encode_to_their_answers(synsets, tok):
  exs = tasks.span_examples(synsets, heldout=False, heldout_fraction=0.1)
  assert len(exs) > 50
  enc, kept, offs = tasks.encode_spans(tok, exs, 48)
  assert len(kept) > 0.8 * len(exs)
  for r, e in enumerate(kept):
    st, en = enc['starts'][r], enc['ends'][r]
    assert enc['context_mask'][r, st] and enc['context_mask'][r, en] and st <= en
    assert e.context[offs[r, st, 0]:offs[r, en, 1]] == e.answer_text
  base = tasks.span_baselines(exs, kept)
  assert 0 <= base['first_word']['em'] <= 100
