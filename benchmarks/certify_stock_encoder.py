r"""Stock torch encoder layers, trained briefly, certified from their torch.onnx.export files.

What it measures (issue 69 item 6): a Linear(d, 8) embedding, one stock
``nn.TransformerEncoderLayer(8, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)``
and a Linear(8, d) readout, in four variants (post-LN / pre-LN x relu / gelu), each trained
with Adam (lr 3e-3, batches of 256 uniform points, seed fixed) on token_times_mean (d=1,
n=3) for at most --steps steps and --train_minutes minutes, exported with
``torch.onnx.export(dynamo=False)``, and then

    s   = onnxruntime's float32 d_2 on the file over --points uniform points
          (and the torch float32 module's d_2 on the same points),
    eps = max(3 s, 0.05),
    certify_network('token_times_mean', file, d=1, n=3, p=2, arithmetic='float32',
                    epsilon=eps, max_minutes=--max_minutes)

and afterwards onnxruntime's d_2 contribution at the certificate's worst boxes' centres
(the largest |f - fl(g)|^2 there, a check that the bound is above what a run shows). Each
row: params, s (onnxruntime, torch), the certified total, reached, boxes, seconds, the
certificate's line.

    python benchmarks/certify_stock_encoder.py --output_dir=results/imports/stock_encoder

Writes certify_stock_encoder.json and certify_stock_encoder.md into --output_dir (refused
if they exist, unless --overwrite), with the command, revision and /proc/loadavg at start
and end. Timings are wall-clock on a shared machine. ``markdown(result)`` is the md of the
JSON's dict alone (the md can be rebuilt from a committed JSON without a run).
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import json
import math
import os
import tempfile
import time

import numpy as np
from absl import flags

from transformer_ua import outputs, provenance
from transformer_ua.decimal_text import bound_text

JSON_NAME = 'certify_stock_encoder.json'
MD_NAME = 'certify_stock_encoder.md'
VARIANTS = ('post_relu', 'post_gelu', 'pre_relu', 'pre_gelu')

FLAGS = flags.FLAGS
flags.DEFINE_list('variants', list(VARIANTS), f'which of {VARIANTS}')
flags.DEFINE_integer('steps', 600, 'Adam steps at most')
flags.DEFINE_float('train_minutes', 2.0, 'training wall-clock limit per variant')
flags.DEFINE_integer('points', 20000, 'uniform points for the sampled d_2')
flags.DEFINE_float('max_minutes', 5.0, "the certifier's budget per variant")
flags.DEFINE_integer('seed', 0, 'torch and NumPy seed')
cli.define_output_dir('runs/certify_stock_encoder', f'Directory of {JSON_NAME} and {MD_NAME}.')
cli.define_overwrite()

D_MODEL, N, D = 8, 3, 1


def _train(variant: str):
  import torch  # noqa: PLC0415 -- torch only here
  norm, act = variant.split('_')

  class Encoder(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.embed = torch.nn.Linear(D, D_MODEL)
      self.layer = torch.nn.TransformerEncoderLayer(
          D_MODEL, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True,
          norm_first=norm == 'pre', activation=act)
      self.readout = torch.nn.Linear(D_MODEL, D)

    def forward(self, x):
      return self.readout(self.layer(self.embed(x)))

  torch.manual_seed(FLAGS.seed)
  model = Encoder()
  opt = torch.optim.Adam(model.parameters(), lr=3e-3)
  start = time.time()
  steps = 0
  while steps < FLAGS.steps and time.time() - start < 60 * FLAGS.train_minutes:
    x = torch.rand(256, N, D)
    loss = ((model(x) - x * x.mean(dim=1, keepdim=True)) ** 2).sum(dim=(1, 2)).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    steps += 1
  model.eval()
  return model, steps, time.time() - start, math.sqrt(float(loss))


def _d2(ys, xs) -> float:
  err = ys.astype(np.float64) - xs.astype(np.float64) * xs.astype(np.float64).mean(
      axis=1, keepdims=True)
  return math.sqrt(float(np.mean(np.sum(err ** 2, axis=(1, 2)))))


def _ort_run(path, xs):
  import onnxruntime as ort  # noqa: PLC0415
  session = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
  name = session.get_inputs()[0].name
  return np.concatenate([session.run(None, {name: xs[i:i + 1]})[0] for i in range(len(xs))])


def _one(variant: str, workdir: str) -> dict:
  import torch  # noqa: PLC0415
  from transformer_ua import certify  # noqa: PLC0415
  model, steps, train_s, last = _train(variant)
  path = os.path.join(workdir, f'{variant}.onnx')
  torch.onnx.export(model, (torch.rand(1, N, D),), path, dynamo=False)
  xs = np.random.default_rng(FLAGS.seed).random((FLAGS.points, N, D)).astype(np.float32)
  s_ort = _d2(_ort_run(path, xs), xs)
  with torch.no_grad():
    s_torch = _d2(model(torch.from_numpy(xs)).numpy(), xs)
  eps = max(3 * s_ort, 0.05)
  start = time.time()
  try:
    cert = certify.certify_network('token_times_mean', path, d=D, n=N, p=2,
                                   arithmetic='float32', epsilon=eps,
                                   max_minutes=FLAGS.max_minutes, progress=False)
  except ValueError as e:
    return {'variant': variant, 'steps': steps, 'train_seconds': round(train_s, 1),
            's_onnxruntime': s_ort, 's_torch': s_torch, 'epsilon': eps,
            'refused': str(e), 'seconds': round(time.time() - start, 1)}
  worst = np.asarray(cert.worst_centres, np.float32).reshape(-1, N, D)
  worst_sq = 0.0
  if len(worst):
    err = _ort_run(path, worst).astype(np.float64) - worst * worst.mean(axis=1, keepdims=True)
    worst_sq = float(np.max(np.sum(err ** 2, axis=(1, 2))))
  return {'variant': variant, 'params': cert.params, 'steps': steps,
          'train_seconds': round(train_s, 1), 'last_batch_d2': last,
          's_onnxruntime': s_ort, 's_torch': s_torch, 'epsilon': eps,
          'total': float(cert.total), 'total_text': bound_text(cert.total, 4),
          'reached': bool(cert.reached), 'boxes': cert.boxes,
          'rounds': cert.rounds, 'seconds': round(cert.seconds, 1),
          'float_sup': cert.float_sup, 'worst_centre_max_sq_error_ort': worst_sq,
          'line': cert.line()}


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  bad = [v for v in FLAGS.variants if v not in VARIANTS]
  if bad:
    raise cli.BadInput(f'--variants: {bad} not among {VARIANTS}')
  out_dir = cli.output_dir(FLAGS.output_dir, writes=(JSON_NAME, MD_NAME))
  prov = provenance.record()
  load_start = provenance.loadavg_text()
  rows = []
  with tempfile.TemporaryDirectory(prefix='stock_encoder_') as workdir:
    for v in FLAGS.variants:
      row = _one(v, workdir)
      rows.append(row)
      print(json.dumps({k: row[k] for k in row if k != 'line'}), flush=True)
      _write(out_dir, prov, load_start, rows)     # after each variant: a partial record
  print(_write(out_dir, prov, load_start, rows))


def _write(out_dir, prov, load_start, rows) -> str:
  result = {'provenance': prov, 'loadavg_start': load_start, 'loadavg_end': provenance.loadavg_text(),
            'complete': len(rows) == len(FLAGS.variants), 'rows': rows}
  outputs.atomic_json(os.path.join(out_dir, JSON_NAME), result, indent=1, default=str)
  text = markdown(result, asked=len(FLAGS.variants))
  with outputs.atomic_open(os.path.join(out_dir, MD_NAME)) as fh:
    fh.write(text)
  return text


def markdown(result: dict, *, asked: int, regenerated: str = '') -> str:
  """The md of a result (the JSON's dict): the command, revision, loads, the table and the
  lines; ``regenerated``: a line saying how the md was rebuilt from the JSON, if it was."""
  prov, rows = result['provenance'], result['rows']
  lines = ['# Stock torch encoder layers certified from their ONNX files (float32, p=2)', '',
           f'command: `{prov["command"]}`  ', f'revision: {prov["git_revision"]}  ',
           f'/proc/loadavg at start: {result["loadavg_start"]}; at the last row: '
           f'{result["loadavg_end"]} (2 shared cores, other work running: timings are under '
           'load)' + ('' if result['complete'] else f'  \npartial: {len(rows)} of {asked} '
                      'variants') + (f'  \n{regenerated}' if regenerated else ''), '',
           '| variant | params | steps (s) | s onnxruntime | s torch | epsilon | certified '
           'total | reached | boxes | seconds | worst centres: max sum (f - fl(g))^2, '
           'onnxruntime |', '|' + '---|' * 11]
  for r in rows:
    if 'refused' in r:
      lines.append(f'| {r["variant"]} | | {r["steps"]} ({r["train_seconds"]}) | '
                   f'{r["s_onnxruntime"]:.4g} | {r["s_torch"]:.4g} | {r["epsilon"]:.4g} | '
                   f'refused | | | {r["seconds"]} | |')
      continue
    lines.append(f'| {r["variant"]} | {r["params"]} | {r["steps"]} ({r["train_seconds"]}) | '
                 f'{r["s_onnxruntime"]:.4g} | {r["s_torch"]:.4g} | {r["epsilon"]:.4g} | '
                 f'{r["total_text"]} | {r["reached"]} | {r["boxes"]:,} | {r["seconds"]} | '
                 f'{r["worst_centre_max_sq_error_ort"]:.4g} |')
  lines += ['', 'Lines:', '']
  lines += [f'* {r["variant"]}: {r.get("line", r.get("refused"))}' for r in rows]
  return '\n'.join(lines) + '\n'


if __name__ == '__main__':
  cli.run(main)
