from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.model import Task
from gpupool.core.placement.framework import CycleState, Rows, Scores


def utilisation_after(cs: CycleState, task: Task, rows: Rows) -> Scores:
    """Share of each node's resources in use once the task is placed, 0..1.

    GPU tasks are judged by the node's GPU compute alone (the scarce resource); tasks without
    GPUs by the mean of CPU and memory, so they pack onto nodes whose CPU is already busy.
    """
    t = cs.table
    gpu_milli = task.request.total_milli
    if gpu_milli:
        total = np.maximum(t.milli_total[rows], 1)
        return np.asarray(1.0 - (t.milli_free[rows] - gpu_milli) / total, np.float64)
    cpu = 1.0 - (t.cpu_free[rows] - task.cpu_milli) / np.maximum(t.cpu_cap[rows], 1)
    mem = 1.0 - (t.mem_free[rows] - task.memory_mib) / np.maximum(t.mem_cap[rows], 1)
    return np.asarray((cpu + mem) / 2.0, np.float64)


@dataclass(frozen=True, slots=True)
class BinPack:
    """Prefers the fullest node that fits, leaving whole nodes free for large gangs."""

    name: ClassVar[str] = "binpack"

    def score(self, cs: CycleState, task: Task, rows: Rows) -> Scores:
        return np.floor(100.0 * utilisation_after(cs, task, rows))


@dataclass(frozen=True, slots=True)
class Spread:
    """Prefers the emptiest node that fits, spreading load and failure risk."""

    name: ClassVar[str] = "spread"

    def score(self, cs: CycleState, task: Task, rows: Rows) -> Scores:
        return np.floor(100.0 * (1.0 - utilisation_after(cs, task, rows)))
