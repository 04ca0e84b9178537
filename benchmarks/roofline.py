r"""What the machine can do, and what a compiled program asks of it: a roofline.

Shared by the benchmarks (imported as ``roofline``: a benchmark runs with benchmarks/ on
``sys.path``). Not a binary.

    peak_gflops()     P = 2 n^3 / t   float32 n x n @ n x n matmul in XLA, best of reps
    bandwidth_gbps()  W = 2 S / t     jitted x <- a x + b in place over S bytes of
                                      float32 (S read + S written), best of reps
    program_cost(f, *args) -> {'flops': F, 'bytes': M}
                      XLA's own cost model (``compiled.cost_analysis()``: 'flops',
                      'bytes accessed') of jit(f)(*args), loops counted per iteration
    nominal_fma_gflops()  cores x nominal clock x 32 float32 FLOPs/cycle (2 AVX2 FMA
                      units): the hardware's compute ceiling, if the clock is the nominal one
    bound_seconds(F, M, P, W) = max(F / P, M / W)   (F in FLOPs, M in bytes, P in
                      GFLOP/s, W in GB/s): the roofline time of the program

Loops. XLA's cost analysis (jax 0.10.2, CPU) counts the body of a while loop ONCE,
whatever its trip count: a ``lax.scan`` of 10 matmuls reports the FLOPs of one. So
``program_cost`` walks the program's jaxpr and, for every ``scan`` of length L with body
b reached without entering another loop,

    cost(J) = xla(J) + sum_s ( L_s cost(b_s) - xla(b_s) )

with xla(.) the cost analysis of a jaxpr compiled on its own (b_s compiled alone is
the one iteration XLA counted inside J; cost(b_s) recurses into b_s's own loops). A
``while`` (unknown trip count) or a loop inside a ``cond`` is refused.

What the bound means. 'bytes accessed' is XLA's sum over the (fused) operations of
their operand and result bytes, as if nothing stayed in cache between operations;
with W the bandwidth of a stream through DRAM (``mib`` well above the last-level
cache), M / W is the memory time of the program's traffic if none of it were served
from cache (bandwidth_gbps with ``mib`` inside the cache gives the cache-resident rate:
the optimistic case). F / P is the compute time at the speed of XLA's large square
matmul: other shapes can run faster; nominal_fma_gflops is the hardware's ceiling. A
program whose time is close to bound_seconds runs as fast as XLA's model of it allows;
one far above it loses time elsewhere (small kernels, dispatch, host work, page faults,
synchronization).
"""

from __future__ import annotations

import os
import time

import jax
from jax.extend import core as jex_core
import jax.numpy as jnp


def _best_seconds(call, reps):
  """Best wall time of ``call()`` (which blocks on its result) over ``reps`` calls,
  after one call to compile."""
  call()
  best = float('inf')
  for _ in range(reps):
    t = time.perf_counter()
    call()
    best = min(best, time.perf_counter() - t)
  return best


def peak_gflops(size=2048, reps=5):
  """GFLOP/s of a float32 size^3 matmul in XLA (best of ``reps``)."""
  a = jax.random.normal(jax.random.PRNGKey(0), (size, size), jnp.float32)
  mm = jax.jit(lambda x: x @ x)
  return 2 * size ** 3 / _best_seconds(lambda: mm(a).block_until_ready(), reps) / 1e9


def bandwidth_gbps(mib=256, reps=5):
  """GB/s of a jitted x <- 0.5 x + 1 over ``mib`` MiB of float32 (one read, one write of
  the array: 2 x its bytes), best of ``reps``. In place (the input is donated): a
  fresh output buffer would time the kernel's first-touch page faults (10x slower on
  the 2-core CPU), not the memory stream. ``mib`` well above the last-level cache."""
  state = [jnp.ones((int(mib * 2 ** 20) // 4,), jnp.float32)]
  nbytes = state[0].nbytes
  axpy = jax.jit(lambda v: 0.5 * v + 1.0, donate_argnums=0)

  def call():
    state[0] = axpy(state[0]).block_until_ready()

  return 2 * nbytes / _best_seconds(call, reps) / 1e9


def nominal_fma_gflops():
  """cores x nominal MHz x 32 float32 FLOPs per cycle per core (two 256-bit FMA units:
  2 units x 8 lanes x 2 FLOPs, as on AVX2 AMD Zen 2/3), from /proc/cpuinfo; None unless
  the CPU reports avx2 and fma and a clock. Turbo above the nominal clock exceeds it."""
  try:
    with open('/proc/cpuinfo') as f:
      text = f.read()
  except OSError:
    return None
  flags = next((l.split(':', 1)[1].split() for l in text.splitlines()
                if l.startswith('flags')), [])
  mhz = [float(l.split(':', 1)[1]) for l in text.splitlines() if l.startswith('cpu MHz')]
  if 'avx2' not in flags or 'fma' not in flags or not mhz:
    return None
  return len(os.sched_getaffinity(0)) * max(mhz) * 1e6 * 32 / 1e9


def bound_seconds(flops, nbytes, peak_gflops_, bandwidth_gbps_):
  """Roofline time max(flops / peak, bytes / bandwidth), seconds."""
  return max(flops / (peak_gflops_ * 1e9), nbytes / (bandwidth_gbps_ * 1e9))


def xla_cost(closed_jaxpr) -> dict:
  """{'flops', 'bytes'} of XLA's cost analysis of ``closed_jaxpr`` compiled alone
  (loop bodies counted once: see the module doc)."""
  args = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype)
          for v in closed_jaxpr.jaxpr.invars]
  ca = jax.jit(jex_core.jaxpr_as_fun(closed_jaxpr)).lower(*args).compile().cost_analysis()
  if isinstance(ca, (list, tuple)):               # older JAX: one dict per program
    ca = ca[0]
  return {'flops': float(ca.get('flops', 0.0)), 'bytes': float(ca.get('bytes accessed', 0.0))}


def _sub_jaxprs(eqn):
  for v in eqn.params.values():
    for u in (v if isinstance(v, (tuple, list)) else (v,)):
      if isinstance(u, jex_core.ClosedJaxpr):
        yield u
      elif isinstance(u, jex_core.Jaxpr):
        yield jex_core.ClosedJaxpr(u, ())


def _has_loop(jaxpr) -> bool:
  return any(e.primitive.name in ('scan', 'while') or
             any(_has_loop(s.jaxpr) for s in _sub_jaxprs(e)) for e in jaxpr.eqns)


def _top_scans(jaxpr):
  """The scan equations of ``jaxpr`` reached through calls (jit, custom_jvp, ...) but
  not through another loop."""
  for e in jaxpr.eqns:
    name = e.primitive.name
    if name == 'scan':
      yield e
    elif name == 'while':
      raise ValueError('program_cost: a while loop has no trip count XLA can count; '
                       'only lax.scan loops are allowed')
    elif name == 'cond':
      if any(_has_loop(s.jaxpr) for s in _sub_jaxprs(e)):
        raise ValueError('program_cost: a loop inside a cond branch cannot be counted')
    else:
      for s in _sub_jaxprs(e):
        yield from _top_scans(s.jaxpr)


def jaxpr_cost(closed_jaxpr) -> dict:
  """{'flops', 'bytes'} of ``closed_jaxpr`` with every scan counted per iteration."""
  total = xla_cost(closed_jaxpr)
  for e in _top_scans(closed_jaxpr.jaxpr):
    body = e.params['jaxpr']
    inner, once = jaxpr_cost(body), xla_cost(body)
    for k in total:
      total[k] += e.params['length'] * inner[k] - once[k]
  return total


def program_cost(fn, *args) -> dict:
  """{'flops', 'bytes'} of jit(fn)(*args), loops counted per iteration (module doc);
  ``args`` may be arrays or jax.ShapeDtypeStruct trees."""
  return jaxpr_cost(jax.make_jaxpr(fn)(*args))
