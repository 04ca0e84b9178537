r"""Any network a user hands over, as a checked ``network_dict.Net``, compared with its source.

``read_network(g, d=, n=, arithmetic=)`` is the one door the certifier reads g through:

    g                                    read by                     compared with
    network_dict.Net or dict             network_dict.check          nothing (no source)
    (modules.Network, params)            project_import.from_network   nothing (read directly)
    path of a flat-layout .onnx          flat_onnx.read              nothing (node for node,
                                                                     its params_hash checked)
    path of any other .onnx              onnx_import.read            onnxruntime on the file
    torch.nn.Module                      torch_import.read           the module in torch
    (flax.linen.Module, variables)       flax_import.read            module.apply

The comparison runs the import (``network_apply.apply``) and the source on POINTS = 1024
points of the cube [0,1]^{n x d} (seeded uniform, plus the all-0 and all-1 corners), both in
the same dtype, and refuses in one line giving the largest difference when, at some point
and entry,

    float64:  |source - import| > 1e-9 (1 + |source|)                (absolute + relative)
    float32:  |source - import| > min(2 D(X), 1e-4 (1 + |source|))

where D(X) >= |fl(g)(X) - g(X)| is the certifier's float32 deviation bound at the point
(``network_enclosure.enclose`` on the degenerate box X, rounding.MATMUL_MODELS['float32']):
both runs are float32 runs of the same real network, so each is within D of it, and a
difference above 2 D proves the two are different networks. D is a worst-case bound and can
be far above the float noise (first-order propagation through deep untrained blocks gives D
of order 1 where the runs differ by 1e-7), so the refusal also comes above 1e-4 (1 +
|source|), which no float32 run of the same network reaches on these networks; the line says
which of the two was passed. Where the enclosure does not give a finite D, only 1e-4 (1 +
|source|) applies.

The dtype: float64 when the arithmetic is 'exact' or 'float64' and the source can run in
float64 (a torch module is copied to float64 and exported so; a Flax apply runs in float64
under x64), else float32 (an ONNX file runs in the dtype it was written in; tf32 and bfloat16
sources are compared in float32).
"""

from __future__ import annotations

import os

import numpy as np

from transformer_ua.networks import network_apply, network_dict, project_import

#: Points of the cube the import is compared with its source on.
POINTS = 1024
#: The float64 tolerance (absolute + relative).
TOL64 = 1e-9
#: The float32 fallback (relative + absolute) where the certifier's D is not finite.
TOL32_FALLBACK = 1e-4


def points(n: int, d: int) -> np.ndarray:
  """POINTS points of [0,1]^{n x d}: seeded uniform, and the two corners 0 and 1."""
  x = np.random.default_rng(20260201).random((POINTS, n, d))
  x[0], x[1] = 0.0, 1.0
  return x


def _float_bound(net: network_dict.Net, x: np.ndarray) -> np.ndarray | None:
  """D(X) of the certifier in float32 at each point, or None."""
  try:
    from transformer_ua import rounding                     # noqa: PLC0415 -- networks/ does
    from transformer_ua.certify import intervals as iv      # noqa: PLC0415 -- not import
    from transformer_ua.certify import network_enclosure    # noqa: PLC0415 -- certify/ at top
    run = network_apply.cast(net, np.float32)
    _, dev = network_enclosure.enclose(run, iv.point(x), rounding.MATMUL_MODELS['float32'])
  except Exception:  # noqa: BLE001 -- any failure falls back to the documented tolerance
    return None
  dev = np.asarray(dev, np.float64)
  return dev if dev.shape == x.shape[:1] + (x.shape[1], net.d) and np.all(np.isfinite(dev)) \
      else None


def compare(net: network_dict.Net, source, *, dtype: str, what: str) -> str:
  """ValueError in one line unless ``source(x [B, n, d]) -> [B, n, d]`` (run in ``dtype``)
  matches ``network_apply.apply(net, x, dtype)`` within the tolerance (module docstring);
  returns the text for the certificate's line."""
  x = points(net.n, net.d)
  want = np.asarray(source(x.astype(dtype)), np.float64)
  got = np.asarray(network_apply.apply(net, x, np.dtype(dtype)), np.float64)
  if want.shape != got.shape:
    raise ValueError(f'{what} gives outputs of shape {list(want.shape[1:])}; the import gives '
                     f'{list(got.shape[1:])}.')
  diff = np.abs(want - got)
  if dtype == 'float64':
    tol, how = TOL64 * (1 + np.abs(want)), f'{TOL64:g} (1 + |source|)'
  else:
    dev = _float_bound(net, x)
    noise = TOL32_FALLBACK * (1 + np.abs(want))
    if dev is None:
      tol, how = noise, f'{TOL32_FALLBACK:g} (1 + |source|)'
    else:
      tol = np.minimum(2 * dev, noise)
      how = (f"min(2 D(X), {TOL32_FALLBACK:g} (1 + |source|)), D the certifier's float32 "
             'deviation bound')
      if np.any(diff > 2 * dev):
        how += '; above 2 D(X), so proven a different network'
  if not np.all(np.isfinite(want)):
    raise ValueError(f'{what} gives non-finite outputs on the cube.')
  bad = diff > tol
  worst = int(np.argmax(diff.reshape(len(x), -1).max(axis=1)))
  if bad.any():
    raise ValueError(f'the import differs from {what} by up to {diff.max():.3g} on '
                     f'{int(bad.any(axis=(1, 2)).sum())} of {len(x)} points of the cube (in '
                     f'{dtype}; tolerance {how}): it is not the same network; certify the '
                     'source as it runs, or fix the import.')
  return (f'checked against {what} on {len(x)} points in {dtype} (largest difference '
          f'{diff.max():.2g}, at point {worst}; tolerance {how})')


def read_network(g, *, d: int, n: int, arithmetic: str | None = 'float64'):
  """(Net, source_text) for any g the certifier takes (module docstring); ValueError in one
  line otherwise."""
  wide = arithmetic in (None, 'exact', 'float64')
  if isinstance(g, (dict, network_dict.Net)):
    net = network_dict.check(g, d=d, n=n, arithmetic=arithmetic)
    return net, 'given as a network dict (no source to compare with: certified as given)'
  if isinstance(g, (str, os.PathLike)):
    return _read_file(os.fspath(g), d=d, n=n, arithmetic=arithmetic)
  if isinstance(g, tuple) and len(g) == 2 and hasattr(g[0], 'segments'):
    net = network_dict.check(project_import.from_network(g[0], g[1], d=d), d=d, n=n,
                             arithmetic=arithmetic)
    return net, ("given as the project's modules.Network with its params (read by "
                 'project_import.from_network; no source comparison)')
  if _is_torch_module(g):
    from transformer_ua.networks import torch_import   # noqa: PLC0415 -- torch on demand
    dtype = 'float64' if wide else 'float32'
    module = _torch_copy(g, dtype, arithmetic)
    raw, text = torch_import.read(module, d=d, n=n)
    net = network_dict.check(raw, d=d, n=n, arithmetic=arithmetic)
    run = torch_import.runnable(module, torch_import.check_module(module))
    check = compare(net, lambda x: _torch_run(run, x), dtype=dtype,
                    what=f'the torch module {type(g).__name__}')
    return net, f'{text}; {check}'
  if isinstance(g, tuple) and len(g) == 2 and _is_flax_module(g[0]):
    from transformer_ua.networks import flax_import    # noqa: PLC0415 -- flax on demand
    _flax_bfloat16(g[1], arithmetic)
    raw, text, source, dtype = flax_import.read(g[0], g[1], d=d, n=n, wide=wide)
    net = network_dict.check(raw, d=d, n=n, arithmetic=arithmetic)
    check = compare(net, source, dtype=dtype, what=f'the Flax apply of {type(g[0]).__name__}')
    return net, f'{text}; {check}'
  raise ValueError(f'g is a {type(g).__name__}; give a network dict (network_dict.py), a '
                   '(modules.Network, params) pair, an ONNX file, a torch.nn.Module or a '
                   '(flax.linen.Module, variables) pair.')


def _read_file(path: str, *, d, n, arithmetic):
  if not os.path.isfile(path):
    raise ValueError(f'g={path!r} is not a file; give a network dict, a (Network, params) '
                     'pair, an ONNX file, a torch.nn.Module or a (flax Module, variables) pair.')
  import onnx   # noqa: PLC0415 -- onnx only for files
  try:
    meta = {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
  except Exception:  # noqa: BLE001 -- onnx_import says why in one line
    meta = {}
  if 'layout' in meta:                     # the project's own files (flat; scan is refused)
    from transformer_ua.networks import flat_onnx   # noqa: PLC0415
    net = network_dict.check(flat_onnx.read(path), d=d, n=n, arithmetic=arithmetic)
    return net, (f'read from the flat ONNX file {os.path.basename(path)} (node for node, its '
                 'params_hash checked)')
  from transformer_ua.networks import onnx_import   # noqa: PLC0415
  raw, text = onnx_import.read(path, d=d, n=n)
  net = network_dict.check(raw, d=d, n=n, arithmetic=arithmetic)
  session, name, dtype = _session(path)
  check = compare(net, lambda x: np.concatenate(
      [session.run(None, {name: x[i:i + 1].astype(dtype)})[0] for i in range(len(x))]),
                  dtype=dtype, what=f'onnxruntime on {os.path.basename(path)}')
  return net, f'read from the {text}; {check}'


def _session(path):
  import onnxruntime   # noqa: PLC0415
  opts = onnxruntime.SessionOptions()
  opts.intra_op_num_threads = 1
  opts.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
  session = onnxruntime.InferenceSession(path, opts, providers=['CPUExecutionProvider'])
  inp = session.get_inputs()[0]
  dtype = {'tensor(float)': 'float32', 'tensor(double)': 'float64'}.get(inp.type)
  if dtype is None:
    raise ValueError(f'the ONNX file {path!r} takes {inp.type}; float32 or float64 is needed.')
  return session, inp.name, dtype


def _is_torch_module(g) -> bool:
  mod = type(g).__module__
  if not (mod.startswith('torch') or any(c.__module__.startswith('torch.nn')
                                         for c in type(g).__mro__)):
    return False
  import torch   # noqa: PLC0415
  return isinstance(g, torch.nn.Module)


def _is_flax_module(m) -> bool:
  return any(c.__module__.startswith('flax.linen') for c in type(m).__mro__)


def _flax_bfloat16(variables, arithmetic):
  """ValueError in one line, naming the leaf, for bfloat16 variables unless ``arithmetic`` is
  'bfloat16' (network_dict's rule; flax_import would read them upcast)."""
  import jax   # noqa: PLC0415
  for path, leaf in jax.tree_util.tree_flatten_with_path(variables)[0]:
    if np.asarray(leaf).dtype.name == 'bfloat16' and arithmetic != 'bfloat16':
      raise ValueError(f'the Flax variables hold bfloat16 weights ({jax.tree_util.keystr(path)}'
                       f"); bfloat16 weights are accepted only with arithmetic='bfloat16' (got "
                       f'{arithmetic!r}).')


def _torch_copy(module, dtype, arithmetic):
  """The module copied to ``dtype``; ValueError in one line, naming the tensor, for float16
  weights, and for bfloat16 ones unless ``arithmetic`` is 'bfloat16' (network_dict's rule)."""
  import copy   # noqa: PLC0415
  import torch   # noqa: PLC0415
  for name, t in list(module.named_parameters()) + list(module.named_buffers()):
    if t.dtype == torch.float16:
      raise ValueError(f'the torch module holds float16 weights ({name!r}); float16 weights are '
                       'refused (they would be certified as another network): use float32 or '
                       'float64.')
    if t.dtype == torch.bfloat16 and arithmetic != 'bfloat16':
      raise ValueError(f'the torch module holds bfloat16 weights ({name!r}); bfloat16 weights '
                       f"are accepted only with arithmetic='bfloat16' (got {arithmetic!r}).")
  out = copy.deepcopy(module)
  return out.double() if dtype == 'float64' else out.float()


def _torch_run(run, x):
  import torch   # noqa: PLC0415
  dtype = torch.float64 if x.dtype == np.float64 else torch.float32
  run.eval()
  fast = torch.backends.mha.get_fastpath_enabled()
  torch.backends.mha.set_fastpath_enabled(False)
  try:
    with torch.no_grad():
      return run(torch.tensor(x, dtype=dtype)).numpy()
  finally:
    torch.backends.mha.set_fastpath_enabled(fast)
