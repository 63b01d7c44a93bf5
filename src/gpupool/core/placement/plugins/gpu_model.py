from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core import said
from gpupool.core.model import GpuKind, Task
from gpupool.core.placement.framework import CycleState, Mask, Rows
from gpupool.core.placement.plugins.eligible import card_mask


@dataclass(frozen=True, slots=True)
class GpuModel:
    """Keeps nodes with at least one card of an allowed model (and memory, for whole GPUs)."""

    name: ClassVar[str] = "gpu-model"
    resolvable: ClassVar[bool] = False

    def filter(self, cs: CycleState, task: Task, rows: Rows) -> Mask:
        req = task.request
        if req.kind is GpuKind.NONE:
            return np.ones(rows.size, np.bool_)
        mask = card_mask(cs, req)
        if mask is None:
            return np.ones(rows.size, np.bool_)
        key = ("inventory", "model-nodes", req.models, req.memory_mib, cs.table.version)
        nodes = cs.cache.get(key)
        if nodes is None:
            nodes = cs.cache[key] = np.asarray(mask.any(axis=1), np.bool_)
        result: Mask = nodes[rows]
        return result

    def reason(self, task: Task) -> str:
        req = task.request
        models = "|".join(sorted(req.models)) if req.models else "any model"
        if req.kind is GpuKind.WHOLE and req.memory_mib:
            return f"no {models} GPU with {said.mib(req.memory_mib)}"
        return f"no {models} GPU"
