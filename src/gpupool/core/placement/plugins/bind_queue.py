"""Binds in flight as a score: where a node binds its GPU pods one at a time (HAMi's node
lock: one pod being allocated devices per node, released by the device plugin after the
kubelet's ``Allocate``), every pod placed behind others on that node waits for their turns.
Packing a burst onto a few nodes makes those queues, and a pod's wait, as deep as the most
pods a node takes; nodes whose queue is short take the next pod sooner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.errors import ConfigError
from gpupool.core.model import GpuKind, Task
from gpupool.core.placement.framework import CycleState, Rows, Scores


@dataclass(frozen=True, slots=True)
class BindQueue:
    """``100 - per_bind × (GPU binds in flight on the node)``, at least 0, for a task with
    GPUs that is its pod set's only replica; 0 everywhere for others (a gang's replicas are
    kept together as the packing scores put them, locality being worth more to them than
    bind latency; a pod without GPUs takes no lock), and everywhere when no node has a bind
    in flight.

    The count is what the adapter last said (``Scheduler.set_binds_in_flight``) plus the GPU
    placements taken since, this cycle's included. Against ``binpack`` at the same weight a
    fuller node keeps winning until its queue is about ``(difference in fullness) /
    per_bind`` deeper than an emptier node's, so an idle cluster packs as before and a burst
    spreads over nodes whose queues are short."""

    name: ClassVar[str] = "bind-queue"
    per_bind: float = 20.0

    def __post_init__(self) -> None:
        if not 0 < self.per_bind <= 100:
            raise ConfigError(
                f"plugin bind-queue: per_bind={self.per_bind!r} must be above 0 and at most 100",
                field="per_bind",
                value=self.per_bind,
                rule="above 0 and at most 100",
            )

    def neutral(self, cs: CycleState, task: Task) -> bool:
        """0 everywhere: no GPUs, a gang's replica, or no bind in flight on any node (with
        one somewhere, a node's score depends on whether another candidate has one)."""
        return (
            task.request.kind is GpuKind.NONE
            or task.pod_set.count > 1
            or not cs.table.binds_in_flight.any()
        )

    def score(self, cs: CycleState, task: Task, rows: Rows) -> Scores:
        if task.request.kind is GpuKind.NONE or task.pod_set.count > 1:
            return np.zeros(rows.size, np.float64)
        queued = cs.table.binds_in_flight[rows]
        if not queued.any():
            return np.zeros(rows.size, np.float64)
        return np.asarray(np.maximum(0.0, 100.0 - self.per_bind * queued), np.float64)
