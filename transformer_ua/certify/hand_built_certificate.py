r"""The hand-built token_times_mean network at (d, n), certified and checked: one record.

``certify_hand_built(d, n, units, epsilon)`` builds ``hand_built.hand_built_product_network
(units, n, d)`` (a uniform head, a ReLU product layer per coordinate; its sup and d_2
errors in closed form), proves

    d_p(f, fl(g)) <= total                 (network_certificate.certify_network)

over the whole cube [0,1]^(n x d) within ``max_minutes``, and samples the same error
independently (independent_check.check: fl(g) run by JAX and onnxruntime on ``points``
uniform points plus the certificate's worst-box centres). The record holds the certified
total (rounded up to a float), boxes, rounds, seconds, reached, the cost model's projection
(cost_model.py, as the certificate's NOT-reached line prints it), the closed-form d_2 (a
lower bound of the total when g runs exactly; fl(g) moves d_p(f, .) by at most
d_p(g, fl(g)) <= (n d)^(1/p) sup |fl(g) - g|, the triangle inequality on the unit cube),
the sampled d_2 of each runtime, the 1-minute load at start and end, and the provenance.
The job of benchmarks/certify_hand_built.py.
"""

from __future__ import annotations

import contextlib

from transformer_ua import executor, provenance
from transformer_ua.decimal_text import bound_text
from transformer_ua.certify import float_deviation, hand_built, independent_check
from transformer_ua.certify import network_certificate


def certify_hand_built(d: int, n: int, units: int, epsilon: float, *,
                       max_minutes: float = 12.0, arithmetic: str = 'float32', p=2,
                       points: int = 20000, seed: int = 0, max_boxes: int | None = None,
                       dask_workers: int = 0, box_kernel: bool | None = None,
                       command: str | None = None) -> dict:
  """The record of the hand-built network certified at (d, n) against ``epsilon`` (module
  doc). Bad input (units, n, d, epsilon, p, arithmetic, max_minutes, max_boxes) is refused
  in one line by the functions it calls, before any work. ``max_boxes``: also stop there
  (``certify_network``'s max_boxes=), so that two runs can be compared at the same boxes.
  ``dask_workers`` > 0: the rounds run through the project's executor on a Dask
  ``LocalCluster`` of that many worker processes (1 thread each; remote chunks re-run as
  ``executor.Workers`` does by default), started here and closed after; 0: this process.
  ``box_kernel``: ``certify_network``'s (None: automatic; False: NumPy throughout, the path
  the workers run, for a comparison at the same boxes)."""
  if not isinstance(dask_workers, int) or isinstance(dask_workers, bool) or dask_workers < 0:
    raise ValueError(f'dask_workers={dask_workers!r}; give 0 (this process) or a number of '
                     'Dask worker processes.')
  hb = hand_built.hand_built_product_network(units, n, d)
  prov = provenance.record(command)
  with contextlib.ExitStack() as stack:
    workers, where = None, 'this process'
    if dask_workers:
      try:
        import distributed  # noqa: PLC0415 -- the cluster extra, only when asked
      except ImportError:
        raise ValueError('dask_workers needs dask.distributed: pip install '
                         "'transformer_ua[cluster]'.") from None
      cluster = stack.enter_context(distributed.LocalCluster(
          n_workers=dask_workers, threads_per_worker=1, processes=True,
          dashboard_address=None))
      client = stack.enter_context(distributed.Client(cluster))
      workers = executor.Workers(executor=client.get_executor())
      where = f'a Dask LocalCluster of {dask_workers} worker processes (1 thread each)'
    load_start = provenance.load_1min()
    cert = network_certificate.certify_network(
        'token_times_mean', hb.net, d=d, n=n, p=p, arithmetic=arithmetic, epsilon=epsilon,
        max_minutes=max_minutes, max_boxes=max_boxes, workers=workers, box_kernel=box_kernel,
        progress=False)
    load_end = provenance.load_1min()
  sampled = independent_check.check('token_times_mean', hb.net, cert, points=points,
                                    seed=seed)
  return {
      'd': d, 'n': n, 'units': hb.units, 'params': cert.params,
      'params_hash': cert.params_hash, 'arithmetic': cert.arithmetic, 'p': cert.p,
      'epsilon': float(epsilon), 'max_minutes': max_minutes, 'max_boxes': max_boxes,
      'where': where, 'box_kernel': box_kernel, 'total_exact': str(cert.total),
      'closed_form_sup': float_deviation.float_up(hb.sup_error),
      'closed_form_d2': hb.l2_error, 'total': float_deviation.float_up(cert.total),
      'reached': bool(cert.reached), 'boxes': cert.boxes,
      'rounds': cert.rounds, 'seconds': cert.seconds, 'stopped': cert.stopped,
      'projection': cert.projection, 'float_sup': cert.float_sup,
      'history': [list(h) for h in cert.history], 'line': cert.line(),
      'sampled': sampled, 'load_start': load_start, 'load_end': load_end,
      'provenance': prov}


def row_text(record: dict) -> str:
  """One Markdown table row of a record: (d, n), units, params, epsilon, certified total,
  reached, boxes, rounds, seconds (the total rounded up), closed-form d_2, JAX and ORT sampled d_2, load."""
  def sampled(name):
    row = record['sampled'].get(name, {})
    return f"{row['d_p']:.4g}" if 'd_p' in row else 'n/a'
  return (f"| ({record['d']}, {record['n']}) | {record['units']} | {record['params']} | "
          f"{record['epsilon']:g} | {bound_text(record['total'], 4)} | "
          f"{'yes' if record['reached'] else '**NOT reached**'} | {record['boxes']:,} | "
          f"{record['rounds']} | {record['seconds']:.0f} | {record['closed_form_d2']:.4g} | "
          f"{sampled('jax')} | {sampled('onnxruntime')} | "
          f"{record['load_start']} / {record['load_end']} |")
