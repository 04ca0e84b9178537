"""Scale-out with JAX's own sharding: one data axis over all devices (and hosts).

Nothing here invents a parallel runtime: a 1-D ``jax.sharding.Mesh`` named ``'data'``
spans every device; inputs are placed with ``NamedSharding(mesh, P('data'))`` along
their leading axis and ``jax.jit`` partitions the computation (GSPMD), inserting the
all-reduces that sums over the sharded axis need. Params and optimizer state are
replicated (``P()``).

* Grid verification: a chunk of linear grid indices ``[chunk]`` is sharded over the
  mesh; per-point checks run where the indices live; violation counts are summed
  across devices by the jitted reduction. Results equal the single-device run
  exactly (integer counts).
* Data-parallel training: the batch is sharded, the state replicated; the mean loss
  and its gradient are global, so the loss curve equals the single-device one up to
  floating-point reduction order.

Multi-host: call ``initialize_distributed`` (driven by the experiment's
``--coordinator_address --num_processes --process_id`` flags) before anything else
touches JAX; ``jax.devices()`` then lists every host's devices and the same mesh
spans them. Each process must feed the same global program; ``shard_batch`` builds the
global array from each process's slice with ``jax.make_array_from_process_local_data``.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA_AXIS = 'data'


def initialize_distributed(coordinator_address: str | None, num_processes: int | None,
                           process_id: int | None) -> bool:
  """Starts multi-host JAX when a coordinator is given; returns True if it did.

  Raises:
    ValueError: a coordinator without a process count/id, or an id out of range.
  """
  if not coordinator_address:
    if num_processes not in (None, 1) or process_id not in (None, 0):
      raise ValueError('--num_processes/--process_id need --coordinator_address '
                       '(host:port of process 0).')
    return False
  if num_processes is None or process_id is None or num_processes < 1:
    raise ValueError('multi-host runs need --coordinator_address, --num_processes >= 1 '
                     'and --process_id.')
  if not 0 <= process_id < num_processes:
    raise ValueError(f'--process_id must be in [0, {num_processes - 1}], got {process_id}.')
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes, process_id=process_id)
  return True


def make_mesh(num_devices: int | None = None) -> Mesh:
  """A 1-D mesh over the first ``num_devices`` devices (default: all, every host)."""
  devices = jax.devices()
  if num_devices is not None:
    if not 1 <= num_devices <= len(devices):
      raise ValueError(f'num_devices must be in [1, {len(devices)}], got {num_devices}.')
    devices = devices[:num_devices]
  return Mesh(np.asarray(devices), (DATA_AXIS,))


def data_sharding(mesh: Mesh, axis: int = 0) -> NamedSharding:
  """Axis ``axis`` (default: the leading one) split across the mesh."""
  return NamedSharding(mesh, P(*([None] * axis), DATA_AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def replicate(tree: Any, mesh: Mesh) -> Any:
  """Places every leaf of ``tree`` on all devices of the mesh."""
  return jax.device_put(tree, replicated(mesh))


def shard_batch(batch: Any, mesh: Mesh, axis: int = 0) -> Any:
  """Shards every leaf of ``batch`` along axis ``axis`` (default: the leading one; 1 for
  a stack of batches ``[steps, batch, ...]``) over the mesh.

  On one host this is ``device_put`` with ``P('data')``; with several processes each
  passes its local slice and the global array is assembled across hosts.

  Raises:
    ValueError: a leading dimension not divisible by the number of devices.
  """
  sharding = data_sharding(mesh, axis)
  local_devices = len(mesh.local_devices)

  def put(x):
    x = np.asarray(x) if not isinstance(x, jax.Array) else x
    if x.shape[axis] % local_devices:
      raise ValueError(f'batch dimension {x.shape[axis]} is not divisible by the '
                       f'{local_devices} local devices of the mesh; choose a batch size '
                       'that is a multiple of the device count.')
    if jax.process_count() == 1:
      return jax.device_put(x, sharding)
    return jax.make_array_from_process_local_data(sharding, np.asarray(x))

  return jax.tree_util.tree_map(put, batch)


def to_host(x) -> np.ndarray:
  """The whole global array as NumPy on this process (gathered across hosts if needed)."""
  if not isinstance(x, jax.Array) or x.is_fully_addressable or x.is_fully_replicated:
    return np.asarray(x)
  from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
  return np.asarray(multihost_utils.process_allgather(x, tiled=True))
