from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gpupool.core import said
from gpupool.core.model import Task
from gpupool.core.placement.framework import CycleState, Mask, Rows


@dataclass(frozen=True, slots=True)
class NodeResources:
    """Keeps nodes with the task's CPU and memory free."""

    name: ClassVar[str] = "node-resources"
    resolvable: ClassVar[bool] = True

    def filter(self, cs: CycleState, task: Task, rows: Rows) -> Mask:
        t = cs.table
        return (t.cpu_free[rows] >= task.cpu_milli) & (t.mem_free[rows] >= task.memory_mib)

    def reason(self, task: Task) -> str:
        return f"less than {said.cpus(task.cpu_milli)} and {said.mib(task.memory_mib)} memory free"
