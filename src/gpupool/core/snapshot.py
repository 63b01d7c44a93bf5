"""Snapshot: one cycle's view of the cluster, with what-if trials that undo themselves.

A snapshot is a NodeTable copy brought up to date from the ClusterState incrementally: only
rows whose generation moved are copied (kube-scheduler's ``UpdateSnapshot``), so a cycle at
10,000 nodes does not pay for a full copy. Rows the snapshot changed itself (assumed
placements, room held for preemptors, trials) are copied back from the state at the next sync.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpupool.core.model import JobId, Placement
from gpupool.core.podindex import PodIndex
from gpupool.core.table import NodeTable
from gpupool.core.usage import CardLoad


class Snapshot:
    def __init__(self, table: NodeTable) -> None:
        self.table = table.copy()
        self._src_gen = table.gen.copy()
        self._src_version = table.version
        self._trial_log: list[list[Placement | _Released]] = []
        self.cache: dict[Hashable, Any] = {}
        """Per-snapshot memo for plugins: values that depend on rows hold row generations."""
        self.now_s = 0.0
        self.reservation: Reservation | None = None
        self.pods = PodIndex()
        """The pods on each node that pod affinity and topology spread count."""
        self._pods_seen = (-1, -1)  # (source version, own version) when last copied
        self.load: CardLoad | None = None
        """Each card's measured load for this cycle, set by the cycle from the scheduler's
        load model (``core.usage``); None places by requests alone."""

    def sync(self, src: NodeTable) -> None:
        """Bring every row up to ``src``; a no-op for rows that did not change."""
        if self._trial_log:
            raise RuntimeError("cannot sync a snapshot inside a trial")
        if (
            src.version != self._src_version
            or src.cap_rows != self.table.cap_rows
            or src.width != self.table.width
        ):
            keep = self.table._counter
            self.table = src.copy()
            # Generations must only grow within one snapshot, or caches could match stale rows.
            self.table.gen[: self.table.n] += keep
            self.table._counter += keep
            self._src_gen = src.gen.copy()
            self._src_version = src.version
            self.cache = {k: v for k, v in self.cache.items() if not _inventory_bound(k)}
            self.load = None  # aligned with the old table's cells
            return
        n = src.n
        moved = np.flatnonzero(self._src_gen[:n] != src.gen[:n])
        if moved.size:
            self.table.copy_rows(src, moved)
            self._src_gen[moved] = src.gen[moved]

    def sync_pods(self, src: PodIndex) -> None:
        """Take ``src``'s pods, unless neither it nor this snapshot's copy changed since."""
        if self._trial_log:
            raise RuntimeError("cannot sync a snapshot inside a trial")
        if self._pods_seen != (src.version, self.pods.version):
            self.pods = src.copy()
            self._pods_seen = (src.version, self.pods.version)

    # -- changes inside a cycle ------------------------------------------------------------

    def assume(self, p: Placement) -> None:
        """Take ``p``'s resources in this snapshot (room now taken for the rest of the cycle)."""
        i = self.table.apply(p, +1)
        self._src_gen[i] = -1
        self.pods.add(p)
        if self._trial_log:
            self._trial_log[-1].append(p)

    def forget(self, p: Placement) -> None:
        """Give back ``p``'s resources in this snapshot (a victim leaving, in a what-if), as
        ``ClusterState.forget`` does in the state."""
        i = self.table.apply(p, -1)
        self._src_gen[i] = -1
        self.pods.remove(p)
        if self._trial_log:
            self._trial_log[-1].append(_Released(p))

    release = forget
    """The former name, for callers not moved yet (``preemption``, ``estimate``)."""

    @contextmanager
    def trial(self) -> Iterator[Snapshot]:
        """What-if: every assume/forget inside the block is undone when it ends."""
        self._trial_log.append([])
        try:
            yield self
        finally:
            for p in reversed(self._trial_log.pop()):
                if isinstance(p, _Released):
                    self.table.apply(p.placement, +1)
                    self.pods.add(p.placement)
                else:
                    self.table.apply(p, -1)
                    self.pods.remove(p)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held for a blocked gang from ``start_s`` on (backfill): other tasks may use them
    only when their declared run limit ends before then."""

    job: JobId
    rows: npt.NDArray[np.int64]
    start_s: float
    queue: str = ""
    holds_quota: bool = False
    """The gang was short of its own queue's quota: the queue's other jobs wait behind it
    (unless they backfill), or they would take the quota as it frees and starve it."""

    def admits(self, job: JobId, run_limit_s: float | None, now_s: float) -> bool:
        return job == self.job or (run_limit_s is not None and now_s + run_limit_s <= self.start_s)


class _Released:
    __slots__ = ("placement",)

    def __init__(self, placement: Placement) -> None:
        self.placement = placement


def _inventory_bound(key: Hashable) -> bool:
    """Cache keys starting with "inventory" hold masks of node properties, not usage."""
    return isinstance(key, tuple) and bool(key) and key[0] == "inventory"
