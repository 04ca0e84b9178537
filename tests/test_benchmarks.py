"""benchmarks/build_compile_vs_depth.py end to end at tiny depths; the shared line writer."""

import json
import os
import subprocess
import sys

from transformer_ua import provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'benchmarks', 'build_compile_vs_depth.py')


def test_build_compile_vs_depth_runs_and_references_agree(tmp_path):
  md = tmp_path / 'b.md'
  out = tmp_path / 'r.json'
  proc = subprocess.run([sys.executable, SCRIPT, '--depths=3,6', '--networks=contextual',
                         '--methods=scan,per_layer_loop', f'--out={out}',
                         f'--figure={tmp_path / "f.png"}', f'--markdown={md}'],
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
  assert (tmp_path / 'f.png').stat().st_size > 0


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
