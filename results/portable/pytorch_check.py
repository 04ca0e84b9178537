"""The recorded PyTorch run of the flat ONNX file (results/portable/README.md).

    PYTHONPATH=$PWD python results/portable/pytorch_check.py [--points 10000] [--overwrite]

For the main job's certified network (``yun.approximate('token_times_mean', 0.05, d=1,
n=3, arithmetic='float64')``, the integer-id construction) and its float32 sibling (at
0.2): writes the flat file (``export_onnx(layout='flat')``), converts it with onnx2torch,
runs it in PyTorch (1 and 2 threads, batches of 7 and of all points) on uniform points and
as many grid-line points, and compares with JAX (``g.apply``) and onnxruntime bit for bit.
Writes results/portable/pytorch.json (refuses to replace it without --overwrite).

onnx2torch imports torchvision at import time for its NMS and RoIAlign converters. The
PyPI torchvision wheels are CUDA builds whose C++ ops do not load beside the CPU torch
wheel, and torchvision's import then fails; where ``import torchvision`` fails this script
puts a module in its place whose ``ops.nms`` and ``ops.roi_align`` raise when called
(the flat graph has neither operator, so nothing calls them), and records that it did.
"""

import argparse
import json
import os
import sys
import time
import types
import warnings

import numpy as np

from transformer_ua import outputs, provenance, yun
from transformer_ua.networks.export_onnx import export_onnx

HERE = os.path.dirname(os.path.abspath(__file__))


def _onnx2torch():
  shim = False
  try:
    import torchvision  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel
  except Exception:  # pylint: disable=broad-except -- ImportError or its RuntimeError
    def refuse(*a, **k):
      raise NotImplementedError('torchvision is not available in this environment.')
    tv = types.ModuleType('torchvision')
    tv.ops = types.ModuleType('torchvision.ops')
    tv.ops.nms = tv.ops.roi_align = tv.ops.box_convert = refuse
    sys.modules['torchvision'], sys.modules['torchvision.ops'] = tv, tv.ops
    shim = True
  import onnx2torch  # pylint: disable=import-outside-toplevel
  return onnx2torch, shim


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--points', type=int, default=10000)
  parser.add_argument('--overwrite', action='store_true')
  args = parser.parse_args()
  out_json = os.path.join(HERE, 'pytorch.json')
  outputs.check_new(out_json, overwrite=args.overwrite)
  prov = provenance.record()
  import onnx  # pylint: disable=import-outside-toplevel
  import onnxruntime as ort  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  onnx2torch, shim = _onnx2torch()
  rows = []
  for arithmetic, epsilon in (('float64', 0.05), ('float32', 0.2)):
    t0 = time.time()
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      found = yun.approximate('token_times_mean', epsilon, d=1, n=3, arithmetic=arithmetic)
    g, cert = found.g, found.certificate
    path = os.path.join(HERE, f'g_{arithmetic}.onnx')
    export_onnx(g, path, layout='flat', overwrite=True)
    rng = np.random.default_rng(0)
    N = cert.resolution
    x = np.concatenate([rng.random((args.points, 3, 1)),
                        rng.integers(0, N, size=(args.points, 3, 1)) / N]).astype(arithmetic)
    jax_y = g.apply(x)
    ort_y = ort.InferenceSession(path).run(None, {'X': x})[0].astype(np.float64)
    module = onnx2torch.convert(onnx.load(path))
    torch_runs = {}
    for threads in (1, 2):
      torch.set_num_threads(threads)
      for batch in (7, len(x)):
        with torch.no_grad():
          y = np.concatenate([module(torch.from_numpy(x[i:i + batch])).numpy()
                              for i in range(0, len(x), batch)])
        assert y.dtype == np.dtype(arithmetic)
        torch_y = y.astype(np.float64)
        torch_runs[f'threads={threads}, batch={batch}'] = {
            'bit_identical_to_jax': bool(np.array_equal(y.astype(np.float64), jax_y)),
            'max_abs_minus_jax': float(np.max(np.abs(y.astype(np.float64) - jax_y)))}
    f = found.net.target(x[:args.points].astype(np.float64))
    rows.append({
        'arithmetic': arithmetic, 'epsilon': epsilon, 'construction': found.construction,
        'blocks': g.depth(), 'weights': g.num_params(), 'resolution': N,
        'certified_total': float(cert.total), 'file': os.path.basename(path),
        'points': {'uniform': args.points, 'grid_line': args.points},
        'onnxruntime_bit_identical_to_jax': bool(np.array_equal(ort_y, jax_y)),
        'pytorch': torch_runs,
        'sampled_dp_pytorch_uniform': float(np.mean(np.sum(
            np.abs(torch_y[:args.points] - f) ** 2, axis=(1, 2))) ** 0.5),
        'seconds': round(time.time() - t0, 1)})
    print(json.dumps(rows[-1]))
  result = {'provenance': prov, 'torch': torch.__version__,
            'onnx2torch': __import__('importlib.metadata').metadata.version('onnx2torch'),
            'onnxruntime': ort.__version__, 'torchvision_shim': shim, 'rows': rows}
  outputs.atomic_json(out_json, result, indent=1)
  ok = all(r['onnxruntime_bit_identical_to_jax'] and all(
      v['bit_identical_to_jax'] for v in r['pytorch'].values()) for r in rows)
  print('all bit-identical:', ok)
  return 0 if ok else 1


if __name__ == '__main__':
  sys.exit(main())
