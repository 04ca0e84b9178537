"""The main job's certified headline beside its report: g.onnx (flat layout) with its
onnxruntime and PyTorch checks, g.npz (saved with its certificate), and the report's lines.

Oracles: the files read back (``flat_onnx.read``, ``saved_network.load``), the one-line
commands run in a fresh Python process, and the headline's own JAX run.
"""

import json
import subprocess
import sys
import types

import numpy as np
import onnx
import pytest

from transformer_ua.networks import flat_onnx, network_dict, saved_network
from transformer_ua.reports import approximate as report
from transformer_ua.studies import approximation, approximation_certificates as certs


def _config(arithmetic='float64'):
  return types.SimpleNamespace(target='token_times_mean', d=1, n=2, p=2.0, seed=0,
                               certify_epsilon=0.2, certify_arithmetic=arithmetic)


@pytest.fixture(scope='module')
def headline(tmp_path_factory):
  out = tmp_path_factory.mktemp('job')
  lines = []
  with pytest.MonkeyPatch.context() as mp:   # fewer points than the job's, same code
    mp.setattr(certs, 'ONNX_CHECK_POINTS', 2000)
    mp.setattr(certs, 'PYTORCH_CHECK_POINTS', 1000)
    head = certs.run_headline(_config(), False, lines.append, str(out), workers=1)
    certs.publish_pending(str(out))     # what approximation.run does after its report
  return out, head, '\n'.join(lines)


def test_the_headline_files_are_flat_and_saved(headline):
  out, head, text = headline
  assert {'g.onnx', 'g.npz'} <= {p.name for p in out.iterdir()}
  assert set(approximation.OUTPUT_FILES) >= {certs.ONNX_NAME, certs.SAVED_NAME}
  ops = {n.op_type for n in onnx.load(str(out / 'g.onnx')).graph.node}
  assert 'Scan' not in ops and head['onnx']['layout'] == 'flat'
  net = flat_onnx.read(out / 'g.onnx')
  loaded = saved_network.load(out / 'g.npz')
  assert network_dict.params_hash(net) == loaded.params_hash == head['saved']['params_hash']
  assert loaded.certificate.total == head['certificate']['total']
  assert head['onnx']['max_abs_onnx_minus_jax'] == 0.0       # integer ids: bit-identical
  pt = head['onnx']['pytorch']
  assert 'skipped' in pt or (pt['bit_identical_to_jax'] and pt['max_abs_pytorch_minus_jax'] == 0)
  assert 'ONNX: ' in text and 'flat layout' in text and 'saved: ' in text
  assert ('PyTorch: skipped' in text) == ('skipped' in pt)


@pytest.mark.slow   # two fresh Python processes importing JAX (~35 s on the 2-core machine)
def test_the_one_line_commands_run(headline):
  out, head, _ = headline
  for command, want in ((head['onnx']['command'], 'sampled d_2(f, g) ='),
                        (head['saved']['command'], head['saved']['params_hash'])):
    assert command.startswith('python -c "') and command.endswith('"')
    done = subprocess.run([sys.executable, '-c', command[len('python -c "'):-1]],
                          capture_output=True, text=True, timeout=300, check=True)
    assert want in done.stdout, done.stdout
    if want.startswith('sampled'):
      assert float(done.stdout.split('=')[-1]) <= head['certificate']['total']


def test_the_report_names_the_files_and_the_checks(headline):
  _, head, _ = headline
  lines = '\n'.join(report._certificate_lines(  # pylint: disable=protected-access
      {'headline': json.loads(json.dumps(head, default=float)), 'main_resolution': []}))
  assert 'as `g.onnx` (float64, flat layout)' in lines
  assert head['onnx']['command'] in lines and head['saved']['command'] in lines
  assert head['onnx']['pytorch']['command'] in lines
  assert 'saved beside this report as `g.npz`' in lines


def test_network_files_wait_for_the_report(tmp_path):
  """g.npz and g.onnx are written under PENDING_DIR and moved beside the report only when it
  is written: a run stopped before that leaves neither in --output_dir (so its rerun is not
  refused for them, and no network is newer than its report)."""
  from transformer_ua.studies import approximation_certificates as ac
  pending = tmp_path / ac.PENDING_DIR
  pending.mkdir()
  (pending / ac.ONNX_NAME).write_bytes(b'onnx')
  (pending / ac.SAVED_NAME).write_bytes(b'npz')
  assert not (tmp_path / ac.ONNX_NAME).exists()        # the state a stopped run leaves
  ac.publish_pending(str(tmp_path))
  assert (tmp_path / ac.ONNX_NAME).read_bytes() == b'onnx'
  assert (tmp_path / ac.SAVED_NAME).read_bytes() == b'npz'
  assert not pending.exists()
