"""What a checkpoint and a restart cost, from the bytes each device holds.

Every device writes its own shard at once (torch.distributed.checkpoint and Megatron's
distributed checkpoints save one file set per rank), so a checkpoint lasts as long as the
device with the most bytes: its parameters and optimizer state (:mod:`simdist.memory.accounting`;
gradients are not saved) over the storage bandwidth each device gets.

* ``sync``: training stops for the whole write, δ = bytes / storage bandwidth.
* ``async`` (``torch.distributed.checkpoint.async_save``, Megatron's ``--async-save``):
  training stops only while the state is copied to host memory, bytes / host-copy bandwidth;
  the write to storage goes on in the background for bytes / storage bandwidth, and the
  checkpoint counts (a restart can load it) only when that write has ended. A checkpoint due
  while the previous one is still being written waits for it.

A restart costs the stated time (rescheduling, process start, NCCL set-up) plus reading the
checkpoint back, bytes / read bandwidth (the storage bandwidth unless given).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CheckpointCost"]


@dataclass(frozen=True)
class CheckpointCost:
    """One device's checkpoint bytes and the bandwidths they move at (bytes/s)."""

    nbytes: float
    storage_Bps: float
    mode: str = "sync"
    host_copy_Bps: float = 25e9
    read_Bps: float | None = None

    @property
    def blocking_s(self) -> float:
        """Seconds training stops for each checkpoint."""
        if self.mode == "async":
            return self.nbytes / self.host_copy_Bps
        return self.nbytes / self.storage_Bps

    @property
    def background_s(self) -> float:
        """Seconds the write goes on after training resumed (0 when synchronous)."""
        return self.nbytes / self.storage_Bps if self.mode == "async" else 0.0

    @property
    def save_s(self) -> float:
        """Seconds of a synchronous save (a planned stop writes one before stopping)."""
        return self.nbytes / self.storage_Bps

    def reload_s(self) -> float:
        """Seconds to read the checkpoint back at a restart."""
        return self.nbytes / (self.read_Bps or self.storage_Bps)
