"""Orbax checkpoints behind one small interface, so long runs resume after interruption.

    ckpt = Checkpointer(workdir / 'checkpoints', max_to_keep=2)
    restored = ckpt.restore_latest(template_state)     # None on a fresh run
    if restored is not None:
      step, state, meta = restored
    ...
    ckpt.save(step, state, meta={'epoch': epoch, 'history': history})

``state`` is any pytree of arrays (params, optimizer state, RNG keys, step counters);
``meta`` is a JSON-serializable dict (loss history, data order, config digest).
A run resumed from a checkpoint continues with the saved RNG and data order, so its
loss curve is the uninterrupted one.
"""

from __future__ import annotations

import os
from typing import Any

import orbax.checkpoint as ocp


class Checkpointer:
  """Thin wrapper over ``orbax.checkpoint.CheckpointManager``."""

  def __init__(self, directory: str | os.PathLike, max_to_keep: int = 2):
    self.directory = os.path.abspath(os.fspath(directory))
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True))

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def save(self, step: int, state: Any, meta: dict | None = None) -> None:
    """Saves ``state`` (pytree) and ``meta`` (JSON) at ``step``; blocks until written."""
    self._manager.save(int(step), args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta or {})))
    self._manager.wait_until_finished()

  def restore_latest(self, template: Any):
    """Returns ``(step, state, meta)`` of the newest checkpoint, or None if there is none.

    ``template`` is a pytree with the state's structure, shapes and dtypes.
    """
    step = self._manager.latest_step()
    if step is None:
      return None
    restored = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(template), meta=ocp.args.JsonRestore()))
    return step, restored['state'], dict(restored['meta'])

  def close(self) -> None:
    self._manager.close()
