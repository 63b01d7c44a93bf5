from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.model import TaintEffect, Task
from gpupool.core.placement.framework import CycleState, Mask, Rows


@dataclass(frozen=True, slots=True)
class TaintToleration:
    """Keeps nodes whose NoSchedule and NoExecute taints the task tolerates."""

    name: ClassVar[str] = "taint-toleration"
    resolvable: ClassVar[bool] = False

    def filter(self, cs: CycleState, task: Task, rows: Rows) -> Mask:
        t = cs.table
        tolerations = task.pod_set.tolerations
        key = ("inventory", "taints", tolerations, t.version)
        mask = cs.cache.get(key)
        if mask is None:
            mask = np.fromiter(
                (
                    all(
                        taint.effect is TaintEffect.PREFER_NO_SCHEDULE
                        or any(tol.tolerates(taint) for tol in tolerations)
                        for taint in node.taints
                    )
                    for node in t.nodes
                ),
                np.bool_,
                count=t.n,
            )
            cs.cache[key] = mask
        result: Mask = mask[rows]
        return result

    def reason(self, task: Task) -> str:
        return "a taint the task does not tolerate"
