from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gpupool.core.model import Task
from gpupool.core.placement.framework import CycleState, Mask, Rows


@dataclass(frozen=True, slots=True)
class NodeSchedulable:
    """Keeps nodes that are ready and not cordoned."""

    name: ClassVar[str] = "node-schedulable"
    resolvable: ClassVar[bool] = False

    def filter(self, cs: CycleState, task: Task, rows: Rows) -> Mask:
        return cs.table.schedulable[rows]

    def reason(self, task: Task) -> str:
        return "cordoned or not ready"
