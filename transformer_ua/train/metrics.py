"""Per-step metrics: JSON lines (always), TensorBoard event files (if tensorboardX is
installed), and PNG curves. One writer per run directory.

    writer = MetricsWriter(workdir)
    writer.write(step, {'loss': 0.3, 'accuracy': 0.8})
    writer.plot('curves.png')          # every scalar against step
"""

from __future__ import annotations

import json
import math
import os
from typing import Mapping


class MetricsWriter:
  """Appends ``{'step': s, **scalars}`` to ``metrics.jsonl``; mirrors to TensorBoard."""

  def __init__(self, workdir: str | os.PathLike, tensorboard: bool = True):
    self.workdir = os.fspath(workdir)
    os.makedirs(self.workdir, exist_ok=True)
    self.path = os.path.join(self.workdir, 'metrics.jsonl')
    self._tb = None
    if tensorboard:
      try:
        from tensorboardX import SummaryWriter
        self._tb = SummaryWriter(os.path.join(self.workdir, 'tensorboard'))
      except ImportError:
        self._tb = None

  def write(self, step: int, scalars: Mapping[str, float]) -> None:
    row = {'step': int(step), **{k: float(v) for k, v in scalars.items()}}
    with open(self.path, 'a') as f:
      f.write(json.dumps(row) + '\n')
    if self._tb is not None:
      for k, v in scalars.items():
        self._tb.add_scalar(k, float(v), int(step))

  def read(self) -> list[dict]:
    """All rows written so far (also those of an interrupted earlier run)."""
    if not os.path.exists(self.path):
      return []
    with open(self.path) as f:
      return [json.loads(l) for l in f if l.strip()]

  def truncate_after(self, step: int) -> None:
    """Drops rows past ``step`` (a resumed run rewrites them)."""
    rows = [r for r in self.read() if r['step'] <= step]
    with open(self.path, 'w') as f:
      for r in rows:
        f.write(json.dumps(r) + '\n')

  def plot(self, filename: str = 'curves.png', keys=None, logy: bool = False) -> str:
    """Plots every scalar (or ``keys``) against step into ``workdir/filename``."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    rows = self.read()
    keys = keys or sorted({k for r in rows for k in r if k != 'step'})
    fig, axes = plt.subplots(len(keys), 1, figsize=(7, 2.4 * max(1, len(keys))),
                             squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
      pts = [(r['step'], r[key]) for r in rows if key in r and math.isfinite(r[key])]
      if pts:
        ax.plot(*zip(*pts))
      ax.set_ylabel(key)
      if logy:
        ax.set_yscale('log')
    axes[-1, 0].set_xlabel('step')
    fig.tight_layout()
    out = os.path.join(self.workdir, filename)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()
