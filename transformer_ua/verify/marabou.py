r"""A second opinion from Marabou (Wu et al., CAV 2024) on a realized g over one box.

The project encloses g on a box B (``exact.ball``: exact params, arb balls) as
[lo_ji, hi_ji] per output entry. Marabou, a verifier the field uses, reads g from
the ONNX file ``export_onnx`` writes (float64 params: the exact rationals rounded) and
answers four queries per entry y = g(X)_ji, X in B, with a slack tau for its floating
tolerances:

    upper end:  y >= hi + tau            must be UNSAT  (g <= hi + tau on B)
                y >= c_lo - tau          must be SAT    (c_lo <= g(centre of B) <= max g)
    lower end:  y <= lo - tau            must be UNSAT
                y <= c_hi + tau          must be SAT    (min g <= g(centre) <= c_hi)

where [c_lo, c_hi] encloses g at B's centre, so each SAT threshold is within
tau + (hi - c_lo) (resp. tau + (c_hi - lo)) of the true extreme. Each SAT point X* (clipped
into B) is evaluated again by the project (``apply_certified``) and by the independent
mpmath oracle (``transformer_ua.oracle``): both must meet [lo, hi].

What Marabou 2.0.0's ONNX parser cannot read of ``export_onnx``'s graph, in order
(``parser_diagnosis`` reproduces each failure and names the operator):

    1. ``Scan`` (one node per segment, its layers stacked): not implemented;
    2. with the Scans unrolled (``unroll_scan``): ``Reshape`` to [0, 0, h, m] (0 = copy
       the input's dimension, ONNX semantics) is passed to numpy, which reads 0 as a
       length;
    3. with those dimensions written out (``explicit_reshapes``): the head-batched
       ``MatMul`` [1, h, n, m] x [1, h, m, n] drops the leading 1, so the next
       ``Transpose`` (perm [0, 2, 1, 3]) meets a 3-d tensor.

The flat layout (``flat_onnx``, ``export_onnx(layout='flat')``) is that 2-d form: its
``form='single'`` file (X [n, d], no Pad or Slice) is what Marabou reads, and
``check_flat`` below checks a certified network's VNN-LIB property on it. For the Scan
files of the deep realizations Marabou gets ``marabou_form``: the same layers, weights and
operations written per head in 2-d (X [n, d]; q_i = X Wq[:, i] + bq[i], s_i = q_i k_i^T, Softmax over keys,
A_i v_i Wo[i], then the ReLU feed-forward), with ``Softmax`` and the bilinear
``MatMul``s kept (Marabou 2.0 has both constraints). ``same_function`` checks it against
the exported file with onnxruntime at sample points.

Soundness: Marabou's answers are about the float64 network and hold up to its own
floating-point tolerances, hence tau; the project's enclosure is of the exact network.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import ctypes
import json
import math
import os
import shlex
import sys
import tempfile
import time
import warnings
from fractions import Fraction

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from transformer_ua import oracle, outputs, provenance
from transformer_ua.exact import ball
from transformer_ua.networks import flat_onnx, project_import
from transformer_ua.networks.export_onnx import export_onnx
from transformer_ua.yun import build_approximator
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.realization import plan

#: The Marabou release this module was written against (``pip install maraboupy``).
MARABOU_VERSION = '2.0.0'


def _marabou():
  try:
    from maraboupy import Marabou  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ValueError('maraboupy is not installed; pip install "transformer_ua[verify]" '
                     f'(maraboupy=={MARABOU_VERSION}) to run the Marabou check ({e}).') from None
  return Marabou


# ---------------------------------------------------------------------------
# What the parser reads: diagnosis and rewrites (same function, other operators).
# ---------------------------------------------------------------------------


def unroll_scan(model: onnx.ModelProto) -> onnx.ModelProto:
  """Each ``Scan`` (one state, stacked weights [L, ...]) as L copies of its body."""
  g = model.graph
  inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
  scanned = {i for n in g.node if n.op_type == 'Scan' for i in n.input}
  nodes, new = [], [t for t in g.initializer if t.name not in scanned]
  for node in g.node:
    if node.op_type != 'Scan':
      nodes.append(node)
      continue
    body = next(a.g for a in node.attribute if a.name == 'body')
    k = next(a.i for a in node.attribute if a.name == 'num_scan_inputs')
    state, weights = node.input[0], node.input[len(node.input) - k:]
    if len(node.input) - k != 1 or len(node.output) != 1:
      raise ValueError(f'Scan {node.name} has {len(node.input) - k} states and '
                       f'{len(node.output)} outputs; unroll_scan takes one state.')
    cur = state
    for layer in range(inits[weights[0]].shape[0]):
      pre = f'{node.name}/layer_{layer}/'
      ren = {body.input[0].name: cur}
      for b_in, w in zip(body.input[1:], weights):
        ren[b_in.name] = pre + b_in.name
        new.append(numpy_helper.from_array(inits[w][layer], pre + b_in.name))
      for t in body.initializer:
        ren[t.name] = pre + t.name
        new.append(numpy_helper.from_array(numpy_helper.to_array(t), pre + t.name))
      for b_node in body.node:
        c = copy.deepcopy(b_node)
        c.input[:] = [ren.get(i, pre + i) for i in b_node.input]
        c.output[:] = [pre + o for o in b_node.output]
        c.name = pre + (b_node.name or b_node.output[0])
        nodes.append(c)
      cur = pre + body.output[0].name
    nodes.append(helper.make_node('Identity', [cur], [node.output[0]]))
  out = helper.make_model(helper.make_graph(nodes, g.name, list(g.input), list(g.output), new),
                          opset_imports=list(model.opset_import), ir_version=model.ir_version)
  onnx.checker.check_model(out, full_check=True)
  return out


def explicit_reshapes(model: onnx.ModelProto) -> onnx.ModelProto:
  """Every ``Reshape`` target's 0 (copy) entries replaced by the input's inferred dims."""
  model = copy.deepcopy(model)
  inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph
  dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
          for v in list(inferred.value_info) + list(inferred.input)}
  inits = {t.name: t for t in model.graph.initializer}
  for node in model.graph.node:
    if node.op_type == 'Reshape':
      t = inits[node.input[1]]
      v = numpy_helper.to_array(t).copy()
      for i in np.flatnonzero(v == 0):
        v[i] = dims[node.input[0]][i]
      t.CopyFrom(numpy_helper.from_array(v, t.name))
  return model


def _failing_node(exc) -> str:
  """'<op_type> <output name>' of the innermost parser frame holding an ONNX node."""
  tb, found = exc.__traceback__, 'unknown node'
  while tb is not None:
    node = tb.tb_frame.f_locals.get('node')
    if isinstance(node, onnx.NodeProto):
      found = f'{node.op_type} {node.output[0]}'
    tb = tb.tb_next
  return found


def parser_diagnosis(path: str) -> list[dict]:
  """Marabou's ONNX reader on the exported file and on each rewrite: rows {'graph',
  'parsed', 'operator' (failing op and output), 'error'}."""
  Marabou = _marabou()  # pylint: disable=invalid-name
  model = onnx.load(path)
  steps = [('export_onnx file', model)]
  steps.append(('Scan unrolled', unroll_scan(model)))
  steps.append(('Scan unrolled, Reshape dims explicit', explicit_reshapes(steps[-1][1])))
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for name, m in steps:
      f = os.path.join(tmp, 'g.onnx')
      onnx.save(m, f)
      try:
        Marabou.read_onnx(f)
        rows.append({'graph': name, 'parsed': True, 'operator': None, 'error': None})
      except Exception as e:  # pylint: disable=broad-except
        rows.append({'graph': name, 'parsed': False, 'operator': _failing_node(e),
                     'error': f'{type(e).__name__}: {e}'.strip()})
  return rows


def marabou_form(model: onnx.ModelProto) -> onnx.ModelProto:
  """The exported g (batch 1) rewritten per head in 2-d: X [n, d] -> Y [n, d] (module doc).

  Reads the weights of each ``Scan`` (segment) of ``export_onnx``'s graph, layer by layer.
  """
  g = model.graph
  inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
  shape = [d.dim_value for d in g.input[0].type.tensor_type.shape.dim]
  if len(shape) != 3 or shape[0] != 1:
    raise ValueError(f'marabou_form needs an export with batch=1, got input shape {shape}.')
  n, d = shape[1], shape[2]
  nodes, consts = [], []

  def const(name, v):
    consts.append(numpy_helper.from_array(np.asarray(v, np.float64), name))
    return name

  def op(kind, ins, out, **attrs):
    nodes.append(helper.make_node(kind, ins, [out], **attrs))
    return out

  cur = 'X'
  for node in g.node:
    if node.op_type == 'Add' and list(node.input) == ['X', 'E']:
      cur = op('Add', [cur, const('E', inits['E'])], 'X_plus_E')
      continue
    if node.op_type != 'Scan':
      raise ValueError(f'marabou_form reads export_onnx graphs; unexpected {node.op_type}.')
    body = next(a.g for a in node.attribute if a.name == 'body')
    body_consts = {t.name: numpy_helper.to_array(t) for t in body.initializer}
    heads, head_m = (int(v) for v in body_consts['split_heads'][2:])
    lam = float(body_consts['lam']) if 'lam' in body_consts else 1.0
    w = {name.split('/')[-1]: inits[name] for name in node.input[1:]}
    for layer in range(w['Wq'].shape[0]):
      p = f'{node.name}/layer_{layer}/'
      updates = []
      for i in range(heads):
        cols = slice(i * head_m, (i + 1) * head_m)
        q = op('Add', [op('MatMul', [cur, const(p + f'Wq{i}', w['Wq'][layer][:, cols])],
                          p + f'xwq{i}'), const(p + f'bq{i}', w['bq'][layer][cols])], p + f'q{i}')
        if lam != 1.0:
          q = op('Mul', [q, const(p + f'lam{i}', lam)], p + f'lam_q{i}')
        k = op('MatMul', [cur, const(p + f'Wk{i}', w['Wk'][layer][:, cols])], p + f'k{i}')
        v = op('MatMul', [cur, const(p + f'Wv{i}', w['Wv'][layer][:, cols])], p + f'v{i}')
        s = op('MatMul', [q, op('Transpose', [k], p + f'k_t{i}', perm=[1, 0])], p + f's{i}')
        a = op('Softmax', [s], p + f'a{i}', axis=-1)
        mixed = op('MatMul', [a, v], p + f'mixed{i}')
        updates.append(op('MatMul', [mixed, const(p + f'Wo{i}', w['Wo'][layer][cols, :])],
                          p + f'o{i}'))
      for i, u in enumerate(updates):
        cur = op('Add', [cur, u], p + f'x_att{i}')
      pre = op('Add', [op('MatMul', [cur, const(p + 'W1', w['W1'][layer])], p + 'pre'),
                       const(p + 'b1', w['b1'][layer])], p + 'pre_b')
      ff = op('Add', [op('MatMul', [op('Relu', [pre], p + 'hidden'),
                                    const(p + 'W2', w['W2'][layer])], p + 'ff_w2'),
                      const(p + 'b2', w['b2'][layer])], p + 'ff')
      cur = op('Add', [cur, ff], p + 'x_out')
  nodes.append(helper.make_node('Identity', [cur], ['Y']))
  graph = helper.make_graph(
      nodes, 'realized_transformer_2d',
      [helper.make_tensor_value_info('X', TensorProto.DOUBLE, [n, d])],
      [helper.make_tensor_value_info('Y', TensorProto.DOUBLE, [n, d])], initializer=consts)
  out = helper.make_model(graph, opset_imports=list(model.opset_import),
                          ir_version=model.ir_version)
  onnx.checker.check_model(out, full_check=True)
  return out


def same_function(export_path: str, form: onnx.ModelProto, x) -> float:
  """max |exported(X) - form(X)| over points X [batch, n, d], both run by onnxruntime."""
  import onnxruntime as ort  # pylint: disable=import-outside-toplevel
  a = ort.InferenceSession(export_path)
  b = ort.InferenceSession(form.SerializeToString())
  return max(float(np.max(np.abs(a.run(None, {'X': xb[None]})[0][0]
                                 - b.run(None, {'X': xb})[0]))) for xb in np.asarray(x))


# ---------------------------------------------------------------------------
# The queries.
# ---------------------------------------------------------------------------


def cube_box(cells, resolution: int, margin) -> list:
  """The cube interior of grid cells K [n, d] shrunk by margin delta per side:
  [n][d] of exact (lo, hi) = ((k + m) / N, (k + 1 - m) / N)."""
  m = Fraction(margin)
  return [[(Fraction(int(k)) + m) / resolution for k in row] for row in np.asarray(cells)], \
      [[(Fraction(int(k)) + 1 - m) / resolution for k in row] for row in np.asarray(cells)]


def _float_inside(lo, hi) -> tuple[np.ndarray, np.ndarray]:
  """Float bounds inside the exact box [lo, hi] (rounded inward)."""
  def inward(v, up):
    f = float(v)
    if (Fraction(f) < v) if up else (Fraction(f) > v):
      f = float(np.nextafter(f, np.inf if up else -np.inf))
    return f
  return (np.asarray([[inward(v, True) for v in row] for row in lo]),
          np.asarray([[inward(v, False) for v in row] for row in hi]))


def _solve(form_path: str, lo, hi, entry, side: str, threshold: float, timeout: int) -> dict:
  """One query: exists X in [lo, hi] with g(X)[entry] >= threshold (side 'ge') or <= it."""
  Marabou = _marabou()  # pylint: disable=invalid-name
  net = Marabou.read_onnx(form_path)
  xv, yv = net.inputVars[0], net.outputVars[0]
  for idx in np.ndindex(lo.shape):
    net.setLowerBound(int(xv[idx]), float(lo[idx]))
    net.setUpperBound(int(xv[idx]), float(hi[idx]))
  y = int(yv[entry])
  (net.setLowerBound if side == 'ge' else net.setUpperBound)(y, float(threshold))
  status, vals, message, seconds = _solve_quietly(Marabou, net, timeout)
  out = {'status': status, 'seconds': seconds, 'point': None, 'value': None,
         'message': message}
  if status == 'sat':
    out['point'] = np.asarray([[vals[int(xv[j, i])] for i in range(lo.shape[1])]
                               for j in range(lo.shape[0])])
    out['value'] = float(vals[y])
  return out


def check_box(g_exact, export_path: str, box, *, tau: float = 1e-6, timeout: int = 300,
              bits: int | None = None, oracle_prec: int | None = None) -> dict:
  """The four queries for every output entry of g on the box (module doc).

  Args:
    g_exact: the realization with exact params (segments, params, positional,
      ``ball_network``, ``apply_certified``, ``planned_bits``).
    export_path: the ONNX file of the same g in float64 (``export_onnx(..., batch=1)``).
    box: (lo, hi), each [n][d] exact rationals.
    tau: Marabou's slack (module doc).
    timeout: seconds per query.
    bits: ball precision (default the plan's); oracle_prec: mpmath bits (2 x bits).
  Returns:
    {'enclosure' [n, d, 2], 'centre_enclosure' [n, d, 2], 'queries': rows {'entry',
    'end', 'query', 'expected', 'status', 'agrees', 'threshold', 'seconds', and for SAT:
    'point', 'marabou_value', 'point_enclosure', 'oracle_value', 'point_in_enclosure'}],
    'agrees' (every query as expected and every SAT point inside), 'same_function'.}
  """
  if not isinstance(tau, (int, float)) or not tau > 0 or not math.isfinite(tau):
    raise ValueError(f'tau={tau!r}; the slack must be a positive finite float.')
  lo_q, hi_q = box
  bits = g_exact.planned_bits() if bits is None else ball.check_bits(bits)
  oracle_prec = 2 * bits if oracle_prec is None else oracle.check_prec(oracle_prec)
  n, d = len(lo_q), len(lo_q[0])
  with ball.precision(bits):
    mid, rad = ball.mid_rad(g_exact.ball_network(bits).forward(
        [[ball.interval(lo_q[j][i], hi_q[j][i]) for i in range(d)] for j in range(n)]))
  # [mid - rad, mid + rad] rounded outward: a float interval containing the ball
  enc = np.stack([np.nextafter(mid - rad, -np.inf), np.nextafter(mid + rad, np.inf)], -1)
  lo, hi = _float_inside(lo_q, hi_q)
  centre = (lo + hi) / 2
  c_mid, c_rad = g_exact.apply_certified(centre[None])
  c_lo, c_hi = c_mid[0] - c_rad[0], c_mid[0] + c_rad[0]
  mp = oracle.MpNetwork(g_exact.segments, g_exact.params, g_exact.positional, oracle_prec)
  form = marabou_form(onnx.load(export_path))
  rng = np.random.default_rng(0)
  same = same_function(export_path, form, lo + (hi - lo) * rng.random((8, n, d)))
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    form_path = os.path.join(tmp, 'g_2d.onnx')
    onnx.save(form, form_path)
    for j, i in np.ndindex(n, d):
      a, b = enc[j, i]
      for end, query, side, thr, expected in (
          ('upper', 'y >= hi + tau', 'ge', b + tau, 'unsat'),
          ('upper', 'y >= g(centre)_lo - tau', 'ge', c_lo[j, i] - tau, 'sat'),
          ('lower', 'y <= lo - tau', 'le', a - tau, 'unsat'),
          ('lower', 'y <= g(centre)_hi + tau', 'le', c_hi[j, i] + tau, 'sat')):
        r = _solve(form_path, lo, hi, (j, i), side, thr, timeout)
        row = {'entry': [j, i], 'end': end, 'query': query, 'expected': expected,
               'status': r['status'], 'threshold': float(thr), 'seconds': r['seconds'],
               'message': r['message']}
        ok = r['status'] == expected
        if r['status'] == 'sat':
          x = np.clip(r['point'], lo, hi)
          mid, rad = g_exact.apply_certified(x[None])
          val = float(mp(x)[j][i])
          inside = bool(mid[0, j, i] + rad[0, j, i] >= a and mid[0, j, i] - rad[0, j, i] <= b
                        and a <= val <= b)
          row.update(point=x.tolist(), marabou_value=r['value'],
                     point_enclosure=[float(mid[0, j, i]), float(rad[0, j, i])],
                     oracle_value=val, point_in_enclosure=inside)
          ok = ok and inside
        row['agrees'] = ok
        rows.append(row)
  return {'enclosure': enc.tolist(), 'centre_enclosure': np.stack([c_lo, c_hi], -1).tolist(),
          'box': [lo.tolist(), hi.tolist()], 'tau': tau, 'bits': bits,
          'same_function': same, 'queries': rows, 'agrees': all(r['agrees'] for r in rows)}


# ---------------------------------------------------------------------------
# The flat file and a VNN-LIB property of a float-certified network.
# ---------------------------------------------------------------------------


def vnnlib_property(lo, hi, out_lo, out_hi) -> str:
  """VNN-LIB text of 'X in [lo, hi] and some output Y_i >= out_hi_i or Y_i <= out_lo_i'
  (X_i, Y_i: the flattened [n, d] entries). UNSAT proves out_lo <= g(X) <= out_hi on the box."""
  lo, hi, out_lo, out_hi = (np.asarray(a, np.float64).ravel() for a in (lo, hi, out_lo, out_hi))
  lines = [f'(declare-const X_{i} Real)' for i in range(lo.size)]
  lines += [f'(declare-const Y_{i} Real)' for i in range(out_lo.size)]
  for i, (a, b) in enumerate(zip(lo, hi)):
    lines += [f'(assert (>= X_{i} {float(a)!r}))', f'(assert (<= X_{i} {float(b)!r}))']
  lines.append('(assert (or ' + ' '.join(
      f'(and (>= Y_{i} {float(b)!r})) (and (<= Y_{i} {float(a)!r}))'
      for i, (a, b) in enumerate(zip(out_lo, out_hi))) + '))')
  return '\n'.join(lines) + '\n'


def _solve_quietly(Marabou, net, timeout: int, **solve_args):  # noqa: N803
  """(status, values, message, seconds) of ``net.solve``. Marabou's engine prints its
  errors on the C stdout and saves a failed query in the working directory: both are kept
  in a temporary directory, and the message (its last 40 words) is returned for a status
  other than sat or unsat."""
  options = Marabou.createOptions(verbosity=0, timeoutInSeconds=int(timeout))
  t0 = time.perf_counter()
  with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
    sys.stdout.flush()
    saved = os.dup(1)
    with open('marabou.log', 'w+b') as log:
      os.dup2(log.fileno(), 1)
      try:
        status, vals, _ = net.solve(options=options, verbose=False, **solve_args)
      finally:
        ctypes.CDLL(None).fflush(None)    # the C library's buffer, into the log
        os.dup2(saved, 1)
        os.close(saved)
      log.seek(0)
      message = log.read().decode(errors='replace').strip()
  message = ' '.join(message.split()[-40:]) if status not in ('sat', 'unsat') else ''
  return status, vals, message, time.perf_counter() - t0


def _solve_property(onnx_path: str, property_path: str, timeout: int) -> dict:
  """Marabou on the flat file with a VNN-LIB property: status, seconds, message."""
  Marabou = _marabou()  # pylint: disable=invalid-name
  net = Marabou.read_onnx(onnx_path)
  status, _, message, seconds = _solve_quietly(Marabou, net, timeout,
                                               propertyFilename=property_path)
  return {'status': status, 'seconds': seconds, 'message': message,
          'variables': int(net.numVars)}


def check_flat(net, g, cert, out_dir: str, *, cells=None, tau: float = 1e-6,
               timeout: int = 300, overwrite: bool = False) -> dict:
  """Marabou on the flat file of a certified network, with the bound its certificate
  implies on one cube interior.

  Args:
    net, g, cert: the approximator, its realized g and g's ``yun.certify_lp`` certificate
      (``yun.approximate``'s ``net``, ``g``, ``certificate``).
    out_dir: where g_flat.onnx (``flat_onnx``, form 'single', float64: g's params rounded to
      nearest) and the two properties are written.
    cells: the cube [n, d] (default ``run``'s); tau: Marabou's slack.
  Writes property.vnnlib: X in the cube interior of ``cells`` (shrunk by the certificate's
  margin, rounded inward) and some |g(X) - g_bar(cell)| > interior_sup + tau
  (``vnnlib_property``): certified, so Marabou must answer UNSAT. And sat.vnnlib: the
  same box and Y_0 >= g_bar_0 - tau alone, which g's value g_bar_0 there satisfies, so
  Marabou must answer SAT: an encoding Marabou finds infeasible shows up here rather than
  as a vacuous UNSAT. Returns {'unsat', 'sat' (``_solve_property`` rows), 'box', 'bound',
  'blocks', 'weights', 'variables', 'agrees'}.
  """
  if not isinstance(tau, (int, float)) or not tau > 0 or not math.isfinite(tau):
    raise ValueError(f'tau={tau!r}; the slack must be a positive finite float.')
  n, d, N = net.n, net.d, cert.resolution  # pylint: disable=invalid-name
  if not os.path.isdir(out_dir):
    raise ValueError(f'directory {out_dir!r} does not exist.')
  paths = {k: os.path.join(out_dir, k) for k in ('g_flat.onnx', 'property.vnnlib',
                                                   'sat.vnnlib')}
  for path in paths.values():
    outputs.check_new(path, overwrite=overwrite, what=f'path {path!r}')
  cells = (np.arange(n * d).reshape(n, d) % N) if cells is None else np.asarray(cells)
  lo, hi = _float_inside(*cube_box(cells, N, Fraction(cert.margin)))
  g_bar = np.asarray(net.apply(((cells + 0.5) / N)[None])[0], np.float64)
  slack = float(cert.interior_sup) + tau
  out_lo, out_hi = g_bar - slack, g_bar + slack
  flat_onnx.write(project_import.from_realized(g), paths['g_flat.onnx'], form='single',
                  overwrite=True)
  with outputs.atomic_open(paths['property.vnnlib']) as f:
    f.write(vnnlib_property(lo, hi, out_lo, out_hi))
  sat = vnnlib_property(lo, hi, out_lo, out_hi).rsplit('(assert (or', 1)[0]
  with outputs.atomic_open(paths['sat.vnnlib']) as f:
    f.write(sat + f'(assert (>= Y_0 {float(g_bar.flat[0] - tau)!r}))\n')
  unsat_run = _solve_property(paths['g_flat.onnx'], paths['property.vnnlib'], timeout)
  sat_run = _solve_property(paths['g_flat.onnx'], paths['sat.vnnlib'], timeout)
  return {'unsat': unsat_run, 'sat': sat_run, 'cells': cells.tolist(),
          'box': [lo.tolist(), hi.tolist()], 'bound': [out_lo.tolist(), out_hi.tolist()],
          'g_bar': g_bar.tolist(), 'tau': tau, 'interior_sup': float(cert.interior_sup),
          'blocks': g.depth(), 'weights': g.num_params(), 'resolution': N,
          'variables': unsat_run['variables'],
          'agrees': unsat_run['status'] == 'unsat' and sat_run['status'] == 'sat'}


# ---------------------------------------------------------------------------
# The recorded run.
# ---------------------------------------------------------------------------


def window_box(cells, resolution: int, margin) -> tuple:
  """``cube_box`` with entry [0, 0] spanning the window around the upper edge of its cell
  instead ((k + 1 -+ m) / N): a box where g crosses a quantization ramp."""
  lo, hi = cube_box(cells, resolution, margin)
  k, m = int(np.asarray(cells)[0, 0]), Fraction(margin)
  lo[0][0], hi[0][0] = (k + 1 - m) / resolution, (k + 1 + m) / resolution
  return lo, hi


def run(*, target: str = 'token_times_mean', grid: Grid = Grid(1, 2, 2), cells=None,
        margin=Fraction(1, 64), taus=(1e-6,), timeout: int = 300, export_path: str) -> dict:
  """Builds the planned g on ``grid`` (a ``yun.grid.Grid``; exact and float64, output
  clamp), exports it, diagnoses the parser, and runs ``check_box`` on the cube interior
  of ``cells`` for each tau (the check) and on ``window_box`` at the first tau (reported,
  not required: inside a ramp the float LP meets coefficients from lam and 1/epsilon at
  once)."""
  d, n, resolution = grid.d, grid.n, grid.N
  net = build_approximator(target, d=d, n=n, resolution=resolution, ties='complete')
  p = plan.plan_realization(net, tolerance=1e-6, margin=float(margin))
  g = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact', clamp=True)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    g64 = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='float64', clamp=True)
  export_onnx(g64, export_path, layout='scan', batch=1, overwrite=True)
  cells = np.arange(n * d).reshape(n, d) % resolution if cells is None else np.asarray(cells)
  if int(cells[0, 0]) + 1 >= resolution:
    raise ValueError(f'cells[0, 0] = {int(cells[0, 0])}: the window box needs a cell below '
                     f'the last ({resolution - 1}).')
  checks = [check_box(g, export_path, cube_box(cells, resolution, margin), tau=t,
                      timeout=timeout) for t in taus]
  window = check_box(g, export_path, window_box(cells, resolution, margin), tau=taus[0],
                     timeout=timeout)
  return {'config': {'target': target, 'd': d, 'n': n, 'resolution': resolution,
                     'cells': cells.tolist(), 'margin': str(Fraction(margin)),
                     'lam': str(p.lam), 'epsilon': str(p.epsilon),
                     'layers': int(sum(s.depth for s in g.segments)),
                     'g_bar_at_cells': net.apply(((cells + 0.5) / resolution)[None])[0].tolist()},
          'marabou_version': MARABOU_VERSION, 'parser': parser_diagnosis(export_path),
          'checks': checks, 'window': window, 'agrees': all(c['agrees'] for c in checks)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--output_dir', required=True)
  parser.add_argument('--taus', type=float, nargs='+', default=[1e-6, 1e-9])
  parser.add_argument('--timeout', type=int, default=300)
  parser.add_argument('--overwrite', action='store_true')
  args = parser.parse_args(argv)
  prov = provenance.record('python -m transformer_ua.verify.marabou ' + ' '.join(
      shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)))
  os.makedirs(args.output_dir, exist_ok=True)
  path = os.path.join(args.output_dir, 'marabou.json')
  outputs.check_new(path, overwrite=args.overwrite, what=f'path {path!r}')
  with tempfile.TemporaryDirectory() as tmp:
    t0 = time.perf_counter()
    result = run(taus=tuple(args.taus), timeout=args.timeout,
                 export_path=os.path.join(tmp, 'g.onnx'))
  result.update(seconds=time.perf_counter() - t0, provenance=prov)
  with outputs.atomic_open(path, 'w') as f:
    json.dump(result, f, indent=1)
  print(json.dumps({'agrees': result['agrees'], 'parser': result['parser'],
                    'seconds': result['seconds']}, indent=1))
  return 0 if result['agrees'] else 1


if __name__ == '__main__':
  sys.exit(main())
