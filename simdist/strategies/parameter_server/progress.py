"""What a parameter-server run has done so far: the loops count it, the strategy reports it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Progress:
    """The counts of one run, updated by the loop that drives it (:mod:`.async_loop`,
    :mod:`.sync_backup`, :mod:`.recovery`) and read by ``summary.json``."""

    applied: int = 0  # gradients applied on every PS: global steps (a restore sets it back)
    dropped: int = 0  # late gradients of backup workers
    lost_gradients: int = 0  # in flight when their worker failed
    staleness: list[int] = field(default_factory=list)  # per update a PS applied
