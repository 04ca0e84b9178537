r"""Build + compile + first-run time of constructed networks vs depth (10^2 .. 10^6 layers).

    python benchmarks/build_compile_vs_depth.py \
        [--depths=100,1000,10000,100000,1000000] [--networks=quantization,contextual] \
        [--reference_cap_s=60] [--output_dir=runs/benchmarks]

Networks (d = 1, n = 2, paper-valued float64 params, batch of 8 inputs [8, n, d]):

* ``quantization`` -- g_q of Lemma 7 (``yun.stages.quantize.quantization_params``,
  resolution N = depth - 1: N + 1 token-wise feed-forward layers with Phi units);
* ``contextual``   -- g_c of Lemma 8 (``contextual_params.contextual_mapping_params``,
  resolution N = depth - 1: N selective-shift sweep attention layers + 1 global
  shift).

Methods, on the *same* params (``layers.apply_layer`` is the one layer function):

* ``scan`` (ours) -- ``modules.Network``: each segment's stacked ``[depth, ...]`` params
  applied by ``lax.scan``; one compiled loop body whatever the depth;
* ``unrolled_jit`` (reference) -- one ``jax.jit`` of a Python loop over the layers:
  the program, its trace and its compile grow with depth;
* ``per_layer_loop`` (reference) -- one jitted layer (compiled once per segment,
  layer params selected by a traced index) called ``depth`` times from Python.

Each (network, method, depth) runs in a fresh subprocess (no compile cache shared
between measurements); times are taken inside it, after imports: ``build`` (params
generated and on device), ``compile`` (trace + lower + XLA compile), ``first_run``
(one call on the batch, blocked until ready) and ``total``. A reference measurement
is killed after ``--reference_cap_s`` seconds; it and every larger depth are reported
as 'skipped: > X s'. Writes ``build_compile_vs_depth.json`` and the figure
``build_compile_vs_depth.png`` into ``--output_dir`` (default runs/benchmarks), and
appends one line to ``benchmarks.md`` there (command, revision, machine);
``--output_dir=results/benchmarks`` updates the record (an existing JSON or figure is
refused before the work unless --overwrite).
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import json
import os
import subprocess
import sys
import time

from absl import flags

from transformer_ua import provenance  # standard library only: light in the children
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import contextual_params

FLAGS = flags.FLAGS
flags.DEFINE_list('depths', ['100', '1000', '10000', '100000', '1000000'], 'Layer counts.')
flags.DEFINE_list('networks', ['quantization', 'contextual'], 'Constructed networks.')
flags.DEFINE_list('methods', ['scan', 'unrolled_jit', 'per_layer_loop'], 'Methods run.')
flags.DEFINE_float('reference_cap_s', 60.0, 'Kill a reference measurement after this long.')
flags.DEFINE_float('ours_cap_s', 600.0, 'Kill a scan measurement after this long.')
JSON_NAME = 'build_compile_vs_depth.json'
PNG_NAME = 'build_compile_vs_depth.png'
LOG_NAME = provenance.BENCHMARK_LOG   # the log every benchmark appends to
_OUT = cli.define_output_dir('runs/benchmarks', f'Directory of {JSON_NAME}, {PNG_NAME} and '
                             f'the log {LOG_NAME} (appended; --output_dir=results/benchmarks: '
                             'the record).')
cli.define_overwrite()
flags.DEFINE_string('child', '', 'internal: network,method,depth to measure.')

NETWORKS = ('quantization', 'contextual')
METHODS = ('scan', 'unrolled_jit', 'per_layer_loop')
REFERENCES = ('unrolled_jit', 'per_layer_loop')
BATCH = 8
N_TOKENS = 2


# ---------------------------------------------------------------------------
# One measurement (child process).
# ---------------------------------------------------------------------------


def build(network: str, depth: int):
  """(segments, params, x [BATCH, n, 1]) of a constructed network with ``depth`` layers."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from transformer_ua.yun.stages import quantize  # pylint: disable=import-outside-toplevel
  N = depth - 1
  rng = np.random.default_rng(0)
  if network == 'quantization':
    segments, params = quantize.quantization_params(Grid(1, N_TOKENS, N))
    x = rng.uniform(0, 1, size=(BATCH, N_TOKENS, 1))
  else:
    segments, params = contextual_params.contextual_mapping_params(Grid(1, N_TOKENS, N))
    x = rng.integers(0, N, size=(BATCH, N_TOKENS, 1)) / N
  return segments, params, x


def measure(network: str, method: str, depth: int) -> dict:
  import jax  # pylint: disable=import-outside-toplevel
  jax.config.update('jax_enable_x64', True)
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from transformer_ua import layers, modules  # pylint: disable=import-outside-toplevel

  t0 = time.perf_counter()
  segments, params, x = build(network, depth)
  params = jax.block_until_ready(jax.device_put(params))
  x = jax.device_put(jnp.asarray(x))
  build_s = time.perf_counter() - t0
  assert sum(s.depth for s in segments) == depth, (segments, depth)

  if method == 'scan':
    net = modules.Network(tuple(segments))
    t0 = time.perf_counter()
    run = jax.jit(lambda p, z: net.apply({'params': p}, z)).lower(params, x).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    y = jax.block_until_ready(run(params, x))
  elif method == 'unrolled_jit':
    def unrolled(p, z):
      for i, seg in enumerate(segments):
        for l in range(seg.depth):
          z, _ = layers.apply_layer(seg, jax.tree_util.tree_map(lambda a, l=l: a[l],
                                                                p[f'segment_{i}']), z)
      return z
    t0 = time.perf_counter()
    run = jax.jit(unrolled).lower(params, x).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    y = jax.block_until_ready(run(params, x))
  elif method == 'per_layer_loop':
    def one(seg):
      def f(sp, l, z):
        p = jax.tree_util.tree_map(lambda a: jax.lax.dynamic_index_in_dim(a, l, 0, False), sp)
        return layers.apply_layer(seg, p, z)[0]
      return f
    t0 = time.perf_counter()
    fns = [jax.jit(one(seg)).lower(params[f'segment_{i}'], np.int64(0), x).compile()
           for i, seg in enumerate(segments)]
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    z = x
    for i, seg in enumerate(segments):
      sp = params[f'segment_{i}']
      for l in range(seg.depth):
        z = fns[i](sp, np.int64(l), z)
    y = jax.block_until_ready(z)
  else:
    raise ValueError(f'method={method!r}; allowed: {METHODS}.')
  first_run_s = time.perf_counter() - t0
  y = np.asarray(y)
  return {'network': network, 'method': method, 'depth': depth, 'build_s': build_s,
          'compile_s': compile_s, 'first_run_s': first_run_s,
          'total_s': build_s + compile_s + first_run_s,
          'output_finite': bool(np.all(np.isfinite(y))),
          'output_checksum': float(np.sum(np.where(np.isfinite(y), y, 0.0)))}


# ---------------------------------------------------------------------------
# Driver.
# ---------------------------------------------------------------------------


def run_child(network, method, depth, cap):
  cmd = [sys.executable, os.path.abspath(__file__), f'--child={network},{method},{depth}']
  t0 = time.perf_counter()
  try:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=cap, check=False)
  except subprocess.TimeoutExpired:
    return {'network': network, 'method': method, 'depth': depth,
            'skipped': f'> {cap:g} s (killed at the cap)'}
  if out.returncode:
    raise RuntimeError(f'{network} {method} {depth} failed:\n{out.stderr[-3000:]}')
  r = json.loads(out.stdout.strip().splitlines()[-1])
  r['process_wall_s'] = time.perf_counter() - t0
  return r


def figure(rows, path, cap):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, axes = plt.subplots(1, len(FLAGS.networks), figsize=(6 * len(FLAGS.networks), 4.2),
                           squeeze=False)
  style = {'scan': ('o-', 'scan (ours)'), 'unrolled_jit': ('s--', 'unrolled jit (ref.)'),
           'per_layer_loop': ('^:', 'per-layer jitted loop (ref.)')}
  for ax, network in zip(axes[0], FLAGS.networks):
    for method in FLAGS.methods:
      pts = [(r['depth'], r['total_s']) for r in rows
             if r['network'] == network and r['method'] == method and 'total_s' in r]
      if pts:
        ax.plot(*zip(*pts), style[method][0], label=style[method][1])
    ax.axhline(cap, color='grey', lw=0.8)
    ax.text(min(int(d) for d in FLAGS.depths), cap * 1.1,
            f'reference cap {cap:g} s', fontsize=8, color='grey')
    ax.axhline(10, color='red', lw=0.8, ls='--')
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_xlabel('layers')
    ax.set_ylabel('build + compile + first run (s)')
    ax.set_title(f'{network} (d=1, n=2, float64)')
    ax.legend(fontsize=8)
  fig.tight_layout()
  from transformer_ua import outputs  # pylint: disable=import-outside-toplevel
  outputs.atomic_savefig(fig, path, dpi=120)


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  if FLAGS.child:
    network, method, depth = FLAGS.child.split(',')
    print(json.dumps(measure(network, method, int(depth))))
    return
  try:
    depths = sorted(int(d) for d in FLAGS.depths)
  except ValueError:
    raise cli.BadInput(f'--depths must be integers, got {FLAGS.depths}.') from None
  if not depths or depths[0] < 3:
    raise cli.BadInput('--depths: each depth must be >= 3 (resolution N = depth - 1 >= 2).')
  for name, allowed in (('networks', NETWORKS), ('methods', METHODS)):
    bad = [v for v in getattr(FLAGS, name) if v not in allowed]
    if bad:
      raise cli.BadInput(f'--{name}: unknown {bad}; allowed: {allowed}.')
  if 'scan' not in FLAGS.methods:
    raise cli.BadInput('--methods must include scan (ours).')
  from transformer_ua import outputs  # pylint: disable=import-outside-toplevel
  cli.output_dir(_OUT.value, writes=(JSON_NAME, PNG_NAME))
  prov = provenance.record()
  cap = FLAGS.reference_cap_s
  rows = []
  for network in FLAGS.networks:
    for method in FLAGS.methods:
      over = None
      for depth in depths:
        if over is not None:
          r = {'network': network, 'method': method, 'depth': depth,
               'skipped': f'> {cap:g} s (depth {over} already exceeded the cap)'}
        else:
          r = run_child(network, method, depth,
                        FLAGS.ours_cap_s if method == 'scan' else cap)
          if 'skipped' in r:
            over = depth
        rows.append(r)
        print(json.dumps(r), flush=True)
  # The references compute the same function: their outputs' checksum must match ours.
  for r in rows:
    ours = next(o for o in rows if o['method'] == 'scan' and o['network'] == r['network']
                and o['depth'] == r['depth'])
    if 'total_s' in r and 'total_s' in ours:
      r['output_matches_scan'] = abs(r['output_checksum'] - ours['output_checksum']) <= \
          1e-9 * max(1.0, abs(ours['output_checksum']))
  agree = all(r.get('output_matches_scan', True) for r in rows)
  result = {'benchmark': 'build + compile + first run vs depth', 'rows': rows,
            'outputs_agree': agree,
            'reference_cap_s': cap, 'batch': BATCH, 'n': N_TOKENS, 'd': 1,
            'dtype': 'float64', 'provenance': prov}
  outputs.atomic_json(os.path.join(_OUT.value, JSON_NAME), result, indent=1)
  figure(rows, os.path.join(_OUT.value, PNG_NAME), cap)

  def cell(network, method, depth):
    r = next(r for r in rows if (r['network'], r['method'], r['depth']) == (network, method,
                                                                            depth))
    return f"{r['total_s']:.3g}" if 'total_s' in r else f"skipped: {r['skipped'].split(' (')[0]}"

  parts = []
  for network in FLAGS.networks:
    ours = [r for r in rows if r['network'] == network and r['method'] == 'scan']
    refs = '; '.join(
        f"{m.replace('_', ' ')} " + ', '.join(f'{d:.0e}: {cell(network, m, d)}' for d in depths)
        for m in FLAGS.methods if m != 'scan')
    parts.append(f"{network}: scan (ours) " +
                 ', '.join(f"{r['depth']:.0e}: {r['total_s']:.3g}" for r in ours) +
                 (f" vs {refs}" if refs else ''))
  summary = ('Build + jit-compile + first run (s) of constructed networks vs depth '
             '(d=1, n=2, float64, batch 8, fresh process each): ' + ' | '.join(parts) +
             f'; reference outputs equal ours: {agree}')
  line = provenance.append_benchmark_line(os.path.join(_OUT.value, LOG_NAME), summary, prov)
  print(line, end='')


if __name__ == '__main__':
  cli.run(main)
