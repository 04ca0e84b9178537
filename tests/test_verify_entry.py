"""verify.entry: one entry point; the subject's type picks its check."""

import json

import pytest

from transformer_ua.verify import entry
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import contextual_ties as ct
from transformer_ua.yun.variants import registry
from transformer_ua.yun.stages import contextual


def test_each_subject_has_its_check_and_record_name():
  cases = [
      (registry.choose(1, 2, 3), 'Theorem2Check', 'contextual_mapping_N3_d1_n2_full.json'),
      (registry.choose(1, 2, 3, ties='complete'), 'TiesVariantCheck',
       'ties_contextual_N3_d1_n2_full.json'),
      (registry.choose(1, 2, 3, contextual='one_layer'), 'OneLayerCheck', 'd1_n2_N3.json'),
      (contextual.ContextualMapping.build(Grid(1, 2, 3)), 'ContextualCheck',
       'contextual_mapping_N3_d1_n2_full.json'),
      (ct.build(Grid(1, 2, 3)), 'TiesCheck', 'ties_contextual_N3_d1_n2_full.json'),
  ]
  for subject, check, name in cases:
    k = entry.kind(subject)
    assert type(k).__name__ == check
    assert k.grid == Grid(1, 2, 3)
    assert k.record_name('full') == name


def test_refusals():
  with pytest.raises(ValueError, match='no whole-grid verification'):
    entry.verify(registry.choose(1, 2, 2, positional=True))
  with pytest.raises(ValueError, match="enumeration='full'"):
    entry.verify(registry.choose(1, 3, 4, contextual='one_layer'), enumeration='full')
  with pytest.raises(ValueError, match="enumeration='sparse'"):
    entry.verify(contextual.ContextualMapping.build(Grid(1, 2, 2)), enumeration='sparse')


def test_ties_variant_is_built_and_verified():
  r = entry.verify(registry.choose(1, 3, 3, ties='complete'), enumeration='multiset',
                   arithmetic='limbs')
  assert r['all_hold'], r['violations']
  assert r['grid'] == 'multiset' and r['distinct_ids'] == ct.num_ids(Grid(1, 3, 3))
  assert r['arithmetic'].startswith('limbs')


def test_verify_and_record_prints_and_writes(tmp_path, capsys):
  variant = registry.choose(1, 3, 4, contextual='one_layer')
  path = tmp_path / entry.kind(variant).record_name('multiset')
  r = entry.verify_and_record(variant, enumeration='multiset', json_path=str(path), samples=8)
  lines = capsys.readouterr().out.strip().splitlines()
  assert r['all_hold'] and lines[-2] == 'ALL PROPERTIES HOLD'
  # The time split closes the summary: compiling counted from JAX's events (this check
  # runs in arb: no JAX program), import not given here (no binary), the write timed.
  assert lines[-1].startswith('  time split: compile ') and ', write ' in lines[-1]
  assert r['time_split']['import'] is None and r['compiling']['programs'] == 0
  assert r['time_split']['compile'] == r['compiling']['total'] == 0
  assert r['time_split']['checks'] > 0
  saved = json.loads(path.read_text())
  assert saved['ids'] == 40 and saved['provenance']['command']
  quiet = tmp_path / 'quiet.json'
  entry.verify_and_record(variant, enumeration='multiset', json_path=str(quiet), samples=8,
                          report=False)
  assert not quiet.exists() and capsys.readouterr().out == ''
