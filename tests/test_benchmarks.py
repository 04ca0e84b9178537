"""benchmarks/build_compile_vs_depth.py and bert_throughput.py end to end at tiny sizes; the
shared line writer; the one output flag of the benchmarks, --output_dir (files under fixed
names); bad flag values refused in one line, exit 2."""

import json
import os
import subprocess
import sys

import pytest

from transformer_ua import cli, provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'benchmarks', 'build_compile_vs_depth.py')


def test_build_compile_vs_depth_runs_and_references_agree(tmp_path):
  md = tmp_path / 'benchmarks.md'   # the files under their fixed names in --output_dir
  out = tmp_path / 'build_compile_vs_depth.json'
  proc = subprocess.run([sys.executable, SCRIPT, '--depths=3,6', '--networks=contextual',
                         '--methods=scan,per_layer_loop', f'--output_dir={tmp_path}'],
                        capture_output=True, text=True, timeout=600, cwd=ROOT)
  assert proc.returncode == 0, proc.stderr[-3000:]
  r = json.loads(out.read_text())
  rows = {(x['method'], x['depth']): x for x in r['rows']}
  assert set(rows) == {(m, d) for m in ('scan', 'per_layer_loop') for d in (3, 6)}
  for x in rows.values():
    assert x['total_s'] >= x['compile_s'] > 0 and x['output_finite']
  assert rows['per_layer_loop', 6]['output_matches_scan'] and r['outputs_agree']
  # Different depths compute different functions (the checksum is not a constant).
  assert rows['scan', 3]['output_checksum'] != rows['scan', 6]['output_checksum']
  text = md.read_text()
  assert text.startswith(provenance.BENCHMARKS_HEADER)
  assert 'scan (ours)' in text and 'per layer loop' in text and 'rev `' in text
  assert (tmp_path / 'build_compile_vs_depth.png').stat().st_size > 0


def test_benchmark_line_names_command_revision_machine(tmp_path):
  prov = provenance.record(command='python x.py --a=1')
  path = tmp_path / 'sub' / 'b.md'
  provenance.append_benchmark_line(str(path), 'first', prov)
  line = provenance.append_benchmark_line(str(path), 'second', prov)
  text = path.read_text()
  assert text.count(provenance.BENCHMARKS_HEADER.splitlines()[0]) == 1
  assert text.endswith(line) and line.startswith('- second — `python x.py --a=1`')
  assert prov['git_revision'] in line and prov['machine'] in line
  assert provenance.append_benchmark_line('', 'none', prov) == line.replace('second', 'none')


def _refusal(script, *args):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  proc = subprocess.run([sys.executable, os.path.join(ROOT, 'benchmarks', script), *args],
                        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
                        check=False)
  lines = [l for l in proc.stderr.splitlines() if l.strip()]
  assert proc.returncode == cli.USAGE_ERROR, proc.stderr
  assert 'Traceback' not in proc.stderr and len(lines) == 2, proc.stderr
  return lines[0]


def test_output_dir_holding_the_result_is_refused_before_the_work(tmp_path):
  """--output_dir=results/benchmarks is the record: its JSON (fixed name) is replaced
  only with --overwrite; the log benchmarks.md is appended to, never refused."""
  (tmp_path / 'fang_literal_vs_compact.json').write_text('the record')
  (tmp_path / 'benchmarks.md').write_text('the log')
  line = _refusal('fang_literal_vs_compact.py', f'--output_dir={tmp_path}')
  assert 'already holds fang_literal_vs_compact.json; pass --overwrite' in line, line
  assert (tmp_path / 'fang_literal_vs_compact.json').read_text() == 'the record'
  assert (tmp_path / 'benchmarks.md').read_text() == 'the log'


def test_the_old_file_flags_are_gone(tmp_path):
  """--out / --output_json / --markdown named files; --output_dir replaces them all."""
  for script, flag in (('bert_throughput.py', 'out'), ('verify_throughput.py', 'output_json'),
                       ('certify_scaling.py', 'markdown')):
    line = _refusal(script, f'--{flag}={tmp_path / "x.json"}')
    assert f"Unknown command line flag '{flag}'" in line, line
  assert os.listdir(tmp_path) == []


def test_throughput_benchmark_runs_without_torch(tmp_path):
  """benchmarks/bert_throughput.py at a tiny shape, ours alone (--reference=none)."""
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  p = subprocess.run([sys.executable, os.path.join(ROOT, 'benchmarks', 'bert_throughput.py'),
                      '--reference=none', '--hidden=16', '--layers=1', '--heads=2', '--mlp=32',
                      '--seq=16', '--batch=2', '--vocab=50', '--steps=1', '--rounds=1',
                      f'--output_dir={tmp_path}'],
                     capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
                     check=False)
  assert p.returncode == 0, p.stderr[-2000:]
  r = json.loads((tmp_path / 'mixing_bert_throughput.json').read_text())
  for m in ('attention', 'average', 'bilinear', 'sepconv'):
    key = f'ours {m} (JAX/Flax)'
    assert r['tokens_per_s'][key] > 0 and r['params'][key] > 0
    assert r['achieved_gflops'][key] == pytest.approx(
        r['train_flops_per_token'][key] * r['tokens_per_s'][key] / 1e9)
  assert r['peak_matmul_gflops'] > 0
  assert 'tokens/s' in (tmp_path / 'benchmarks.md').read_text()


@pytest.mark.parametrize('arg, fragment', [
    ('--mixers=attention,conv', '--mixers must be a non-empty subset'),
    ('--pipeline_mixers=conv', '--pipeline_mixers must be a non-empty subset'),
    ('--max_segments=0', '--max_segments must be >= 1'),
    ('--pipeline_steps=30', '--pipeline_steps must be a multiple of lcm'),
])
def test_throughput_benchmark_bad_flags(arg, fragment, tmp_path):
  line = _refusal('bert_throughput.py', arg, f'--output_dir={tmp_path / "out"}')
  assert fragment in line, line
  assert os.listdir(tmp_path) == []


def test_train_flops_per_token_by_hand():
  """The module-doc formulas at d = 2, n = 3, r = 5, V = 7, P = 1, L = 1."""
  sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))
  import bert_throughput as bt
  heads = (1 / 3) * (2 * 4 + 2 * 2 * 7)           # (P/n)(2 d^2 + 2 d V) = 12
  ff = 4 * 2 * 5                                  # 4 d r = 40
  mixer = {'attention': 8 * 4 + 4 * 3 * 2, 'average': 2 * 4 + 2 * 2,
           'bilinear': 2 * 4 + 2 * 3 * 2, 'sepconv': 6 * 4 + 2 * 3 * 2}
  for m, f in mixer.items():
    assert bt.train_flops_per_token(m, d=2, n=3, r=5, V=7, P=1, L=1) == pytest.approx(
        3 * (f + ff + heads))
  packed = {'attention': 8 * 4 + 4 * 3 * 2, 'average': 2 * 4 + 2 * 3 * 2,     # S = 4
            'bilinear': 2 * 4 + 2 * 3 * 2, 'sepconv': 6 * 4 + 2 * 4 * 3 * 2}
  for m, f in packed.items():
    assert bt.train_flops_per_token(m, d=2, n=3, r=5, V=7, P=1, L=1,
                                    segments=4) == pytest.approx(3 * (f + ff + heads))


def test_stock_encoder_md_table_is_the_committed_json_with_the_worst_centres():
  """results/imports/stock_encoder: the md's table is certify_stock_encoder.markdown of the
  JSON beside it, row for row, and shows worst_centre_max_sq_error_ort."""
  sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))
  import certify_stock_encoder as cse
  folder = os.path.join(ROOT, 'results', 'imports', 'stock_encoder')
  with open(os.path.join(folder, cse.JSON_NAME)) as fh:
    result = json.load(fh)
  with open(os.path.join(folder, cse.MD_NAME)) as fh:
    committed = fh.read()

  def table(text):
    return [ln for ln in text.splitlines() if ln.startswith('|')]
  rebuilt = cse.markdown(result, asked=len(result['rows']))
  assert table(committed) == table(rebuilt)
  assert 'worst centres' in table(rebuilt)[0]
  for row, line in zip(result['rows'], table(rebuilt)[2:]):
    assert line.endswith(f'| {row["worst_centre_max_sq_error_ort"]:.4g} |')
