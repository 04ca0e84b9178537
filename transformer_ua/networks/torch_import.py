r"""A ``torch.nn.Module`` as a v2 network dict: exported by ``torch.onnx.export``, read back.

    module --(eval mode, no_grad, X = [1, n, d] in the module's dtype)--> torch.onnx.export
           --(a temporary file, external data beside it)--> onnx_import.read --> v2 dict

The module is exported exactly as a user would export it (the default dynamo exporter, or
``dynamo=False`` for the TorchScript one), so what is certified is what the export file holds;
``source_check`` then compares the dict with the module itself on points of the cube. The
MHA fast path is turned off while exporting (torch.backends.mha.set_fastpath_enabled(False):
nn.TransformerEncoder's fused eval kernel has no ONNX export in the TorchScript exporter),
then restored; the module's train/eval mode is restored too.

Layouts. X is batch-first, [1, n, d]. A module whose top level is an
``nn.TransformerEncoderLayer``, ``nn.TransformerEncoder`` or ``nn.MultiheadAttention`` with
``batch_first=False`` is transposed: it is wrapped as X -> module(X^T)^T with X^T [n, 1, d]
(the transposes are plumbing the reader folds; the line says so). A custom module holding
such a layer inside is refused (its input layout cannot be told from outside).

Modules. Containers of any class are fine; a leaf of ``torch.nn`` outside
{Linear, LayerNorm, ReLU, GELU, Dropout, Identity, MultiheadAttention, TransformerEncoderLayer,
TransformerEncoder} (Conv*, Tanh, Sigmoid, Embedding, recurrent layers, ...) is refused in one
line naming its path; custom leaves are exported and their graph is read op by op.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
import warnings

from transformer_ua.networks import onnx_import

#: torch.nn classes a module may be made of (by name; subclasses count).
SUPPORTED = ('Linear', 'LayerNorm', 'ReLU', 'GELU', 'Dropout', 'Identity', 'MultiheadAttention',
             'TransformerEncoderLayer', 'TransformerEncoder', 'Sequential', 'ModuleList',
             'ModuleDict')
_TOP_LAYOUT = ('TransformerEncoderLayer', 'TransformerEncoder', 'MultiheadAttention')


def _nn_bases(module):
  import torch  # noqa: PLC0415 -- torch is imported only when a module is given
  return [c.__name__ for c in type(module).__mro__
          if c.__module__.startswith('torch.nn') and issubclass(c, torch.nn.Module)]


def check_module(module) -> bool:
  """Whether ``module`` must be transposed (batch_first=False at its top level); ValueError
  in one line for a module outside the supported layers."""
  import torch  # noqa: PLC0415
  if not isinstance(module, torch.nn.Module):
    raise ValueError(f'torch_import: a torch.nn.Module is needed, got {type(module).__name__}.')
  for path, sub in module.named_modules():
    bases = _nn_bases(sub)
    own = type(sub).__module__.startswith('torch.nn')
    if own and not any(b in SUPPORTED for b in bases) and bases[0] != 'Module':
      raise ValueError(f'torch_import: module {path or "<top>"!r} is a '
                       f'{type(sub).__name__}, not one of the supported layers '
                       f'({", ".join(SUPPORTED)}).')
  top = next((b for b in _nn_bases(module) if b in _TOP_LAYOUT), None)
  first = _batch_first(module)
  if top is not None:
    return first is False
  for path, sub in module.named_modules():
    if path and _batch_first(sub) is False:
      raise ValueError(f'torch_import: module {path!r} ({type(sub).__name__}) has '
                       'batch_first=False inside a custom module; its input layout cannot be '
                       'told: build it with batch_first=True or pass it as the top module.')
  return False


def _batch_first(module):
  if hasattr(module, 'batch_first'):
    return bool(module.batch_first)
  if hasattr(module, 'layers') and len(module.layers) and hasattr(module.layers[0], 'self_attn'):
    return bool(module.layers[0].self_attn.batch_first)
  if hasattr(module, 'self_attn'):
    return bool(module.self_attn.batch_first)
  return None


def runnable(module, transpose: bool):
  """X [B, n, d] -> Y [B, n, d]: the module (wrapped when ``transpose``)."""
  import torch  # noqa: PLC0415

  class _Wrapped(torch.nn.Module):
    def __init__(self, inner):
      super().__init__()
      self.inner = inner

    def forward(self, x):
      y = self.inner(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1),
                     need_weights=False)[0] if _is_mha(self.inner) else self.inner(
                         x.transpose(0, 1))
      return y.transpose(0, 1)

  class _Mha(torch.nn.Module):
    def __init__(self, inner):
      super().__init__()
      self.inner = inner

    def forward(self, x):
      return self.inner(x, x, x, need_weights=False)[0]

  if transpose:
    return _Wrapped(module)
  return _Mha(module) if _is_mha(module) else module


def _is_mha(module):
  return 'MultiheadAttention' in _nn_bases(module)


def export(module, path, *, d: int, n: int, dynamo: bool = True, opset: int | None = None):
  """Writes ``module`` on X [1, n, d] to ``path`` with torch.onnx.export; returns the text
  naming exporter and layout."""
  import torch  # noqa: PLC0415
  transpose = check_module(module)
  params = list(module.parameters())
  dtype = params[0].dtype if params else torch.float32
  if any(p.dtype == torch.float16 for p in params):
    raise ValueError('torch_import: the module holds float16 weights; float16 weights are '
                     'refused (export in float32 or float64).')
  run = runnable(module, transpose)
  was = module.training
  module.eval()
  x = torch.rand(1, n, d, dtype=dtype)
  kwargs = {'dynamo': bool(dynamo)}
  if opset is not None:
    kwargs['opset_version'] = int(opset)
  try:
    with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
        contextlib.redirect_stderr(io.StringIO()):
      warnings.simplefilter('ignore')
      level = logging.root.manager.disable
      logging.disable(logging.WARNING)
      fast = torch.backends.mha.get_fastpath_enabled()
      torch.backends.mha.set_fastpath_enabled(False)   # the fused encoder kernel has no
      try:                                              # ONNX export (TorchScript exporter)
        torch.onnx.export(run, (x,), path, **kwargs)
      finally:
        torch.backends.mha.set_fastpath_enabled(fast)
        logging.disable(level)
  except Exception as e:  # noqa: BLE001 -- the exporter's failure in one line
    raise ValueError(f'torch_import: torch.onnx.export (dynamo={bool(dynamo)}) failed: '
                     f'{type(e).__name__}: {str(e).splitlines()[0][:160]}') from None
  finally:
    module.train(was)
  layout = ', batch_first=False transposed' if transpose else ''
  return (f'torch module {type(module).__name__} exported by torch.onnx.export ('
          f'{"dynamo" if dynamo else "TorchScript, dynamo=False"}) {torch.__version__} on X '
          f'[1, {n}, {d}] {str(dtype).replace("torch.", "")}, eval mode{layout}')


def read(module, *, d: int, n: int, dynamo: bool = True, opset: int | None = None):
  """(v2 dict, text) of ``module`` (module docstring); ValueError in one line else."""
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'module.onnx')
    text = export(module, path, d=d, n=n, dynamo=dynamo, opset=opset)
    net, read_text = onnx_import.read(path, d=d, n=n)
  return net, f'{text}; {read_text}'
