r"""Runtimes: what runs a network's operations, for ``runtime_probe.check_runtime`` to measure.

A float certificate covers fl(g) under ``rounding``'s models; four of their premises (exp,
softmax, the matmul's operand and accumulator rounding, erf and tanh) are properties of the
runtime that runs g. A runtime is any object with three methods on NumPy arrays, each
returning a NumPy array or something np.asarray takes:

    exp(x)          elementwise,          x in float32 or float64
    softmax(s)      over the last axis:   w_j = exp(s_j - M) / sum_k exp(s_k - M), M = max_k s_k
    matmul(a, b)    2-D:                  (a b)_ij = sum_k a_ik b_kj

and optionally ``erf(x)``, ``tanh(x)`` (GELU's two library functions) and a ``name``. These
are such runtimes:
  * ``JaxRuntime``: JAX as configured (x64, default matmul precision, backend), jitted;
  * ``OnnxRuntime``: tiny Exp, Softmax, MatMul, Erf and Tanh graphs in InferenceSessions on
    the given providers and session options (those of a session, when one is given);
  * ``NumpyRuntime``: the operations of ``network_apply.apply`` (its erf is Python's
    math.erf, the C library's binary64 erf, rounded to the format).
``as_runtime`` turns a name, the onnxruntime module, an InferenceSession or such an object
into a runtime; ``runtime_name`` is what a report calls it. The tests plant faults into
subclasses of NumpyRuntime.
"""

from __future__ import annotations

import math

import numpy as np


class NumpyRuntime:
  """The operations of ``network_apply.apply``: np.exp, max subtraction and a division by
  the sum, np.matmul."""

  name = f'numpy {np.__version__}'

  def exp(self, x):
    return np.exp(x)

  def softmax(self, s):
    e = self.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)

  def matmul(self, a, b):
    return np.matmul(a, b)

  def erf(self, x):
    """Python's math.erf (the C library's binary64 erf), rounded to x's dtype, as
    ``network_apply.gelu`` computes it."""
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64)).astype(x.dtype)

  def tanh(self, x):
    return np.tanh(x)


class JaxRuntime:
  """JAX as the caller configured it (x64, ``jax_default_matmul_precision``, backend):
  jitted jnp.exp, jax.nn.softmax (what ``layers.softmax_mix`` runs), jnp.matmul,
  jax.scipy.special.erf and jnp.tanh."""

  def __init__(self):
    import jax                     # pylint: disable=import-outside-toplevel
    import jax.numpy as jnp        # pylint: disable=import-outside-toplevel
    self._exp = jax.jit(jnp.exp)
    self._softmax = jax.jit(lambda s: jax.nn.softmax(s, axis=-1))
    self._matmul = jax.jit(jnp.matmul)
    self._erf = jax.jit(jax.scipy.special.erf)
    self._tanh = jax.jit(jnp.tanh)
    device = jax.devices()[0]
    precision = jax.config.jax_default_matmul_precision
    self.x64 = bool(jax.config.jax_enable_x64)
    self.name = (f'jax {jax.__version__} {device.platform} ({device.device_kind}), x64 '
                 f'{"on" if jax.config.jax_enable_x64 else "off"}, default matmul precision '
                 f'{precision or "DEFAULT"}')

  def exp(self, x):
    return np.asarray(self._exp(x))

  def softmax(self, s):
    return np.asarray(self._softmax(s))

  def matmul(self, a, b):
    return np.asarray(self._matmul(a, b))

  def erf(self, x):
    return np.asarray(self._erf(x))

  def tanh(self, x):
    return np.asarray(self._tanh(x))


class OnnxRuntime:
  """onnxruntime on ``providers`` (default CPU; names or (name, options) pairs) with
  ``session_options`` (default None): one-node Exp, Softmax (axis -1), MatMul, Erf and Tanh
  graphs, built with onnx.helper, one InferenceSession per op and dtype; an op without a
  kernel for the dtype raises NotImplementedError (Erf in float64 on the CPU provider)."""

  def __init__(self, providers=None, session_options=None):
    import onnxruntime             # pylint: disable=import-outside-toplevel
    self._ort = onnxruntime
    self.providers = list(providers or ['CPUExecutionProvider'])
    self.session_options = session_options
    self._sessions = {}
    first = self.providers[0]
    self.name = f'onnxruntime {onnxruntime.__version__} ' + \
        (first if isinstance(first, str) else first[0])

  def _session(self, op: str, dtype):
    from onnx import TensorProto, helper   # pylint: disable=import-outside-toplevel
    dtype = np.dtype(dtype)
    key = (op, dtype.name)
    if key not in self._sessions:
      types = {'float32': TensorProto.FLOAT, 'float64': TensorProto.DOUBLE}
      if dtype.name not in types:
        raise ValueError(f'OnnxRuntime runs float32 and float64 arrays, not {dtype.name}.')
      ty = types[dtype.name]
      inputs = {'Exp': ['x'], 'Softmax': ['s'], 'MatMul': ['a', 'b'], 'Erf': ['x'],
                'Tanh': ['x']}[op]
      attrs = {'axis': -1} if op == 'Softmax' else {}
      graph = helper.make_graph(
          [helper.make_node(op, inputs, ['y'], **attrs)], f'probe_{op}',
          [helper.make_tensor_value_info(name, ty, None) for name in inputs],
          [helper.make_tensor_value_info('y', ty, None)])
      model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)],
                                ir_version=8)
      try:
        self._sessions[key] = self._ort.InferenceSession(
            model.SerializeToString(), sess_options=self.session_options,
            providers=self.providers)
      except Exception as err:  # noqa: BLE001 -- onnxruntime's own NotImplemented class
        if 'NOT_IMPLEMENTED' not in str(err):
          raise
        raise NotImplementedError(f'{self.name} has no {dtype.name} {op} kernel') from None
    return self._sessions[key]

  def exp(self, x):
    return self._session('Exp', x.dtype).run(None, {'x': x})[0]

  def softmax(self, s):
    return self._session('Softmax', s.dtype).run(None, {'s': s})[0]

  def matmul(self, a, b):
    return self._session('MatMul', a.dtype).run(None, {'a': a, 'b': b})[0]

  def erf(self, x):
    return self._session('Erf', x.dtype).run(None, {'x': x})[0]

  def tanh(self, x):
    return self._session('Tanh', x.dtype).run(None, {'x': x})[0]


def as_runtime(runtime):
  """'jax' | 'onnxruntime' | 'numpy' | the onnxruntime module | an InferenceSession (its
  providers, provider options and session options: a CUDA session's TF32 setting, a CPU
  session's fast-math GEMM) | an object with exp, softmax and matmul -> a runtime; else
  ValueError."""
  if isinstance(runtime, str):
    makers = {'jax': JaxRuntime, 'onnxruntime': OnnxRuntime, 'numpy': NumpyRuntime}
    if runtime not in makers:
      raise ValueError(f'runtime={runtime!r}; allowed: {", ".join(map(repr, makers))}, the '
                       'onnxruntime module, an onnxruntime.InferenceSession, or an object with '
                       'exp, softmax and matmul methods on NumPy arrays.')
    return makers[runtime]()
  if getattr(runtime, '__name__', None) == 'onnxruntime':
    return OnnxRuntime()
  if callable(getattr(runtime, 'get_providers', None)) and callable(getattr(runtime, 'run',
                                                                            None)):
    options = runtime.get_provider_options()
    return OnnxRuntime([(p, options.get(p, {})) for p in runtime.get_providers()],
                       runtime.get_session_options())
  missing = [m for m in ('exp', 'softmax', 'matmul') if not callable(getattr(runtime, m, None))]
  if missing:
    raise ValueError(f'runtime {type(runtime).__name__} has no {", ".join(missing)} method; '
                     "allowed: 'jax', 'onnxruntime', 'numpy', the onnxruntime module, an "
                     'InferenceSession, or an object with exp, softmax and matmul methods.')
  return runtime


def runtime_name(runtime) -> str:
  """The runtime's ``name``, else its class name (what a report calls it)."""
  return str(getattr(runtime, 'name', type(runtime).__name__))
