"""GpuClustering: keep pods of one kind together on a node.

The FGD paper's baseline. A pod's tag is its GPU kind: a slice of one card, or k whole
cards (one tag per k). A node's tags are those of the GPU pods on it. With
``base = 25 * (8000 - idle) // 8000`` (idle GPU milli, against a fixed 8-card node):

- the node holds only pods of this tag: 75 + base;
- it holds this tag among others: 50 + base;
- it holds no GPU pod yet: 25 + base;
- it holds only other tags: base.

A pod without GPUs scores 0 everywhere (the tie order places it). Cards: ``best-fit-cards``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.model import GpuKind, Task
from gpupool.core.placement.framework import CycleState, Rows, Scores
from gpupool.core.placement.plugins.bestfit import MAX_SPEC_GPU_MILLI, gpu_idle


@dataclass(frozen=True, slots=True)
class GpuClusteringScore:
    name: ClassVar[str] = "gpuclustering"

    def score(self, cs: CycleState, task: Task, rows: Rows) -> Scores:
        req = task.request
        kind = req.kind
        if kind is GpuKind.NONE:
            return np.zeros(rows.size, np.float64)
        t = cs.table
        # tasks_by_kind: column 1 slices (and MIG), column 1 + k pods of k whole cards
        tag = 1 + req.count if kind is GpuKind.WHOLE else 1
        kinds = t.tasks_by_kind[rows, 1:] > 0
        n_tags = np.count_nonzero(kinds, axis=1)
        has = kinds[:, tag - 1]
        base = 25 * (MAX_SPEC_GPU_MILLI - gpu_idle(cs, rows)) // MAX_SPEC_GPU_MILLI
        bonus = np.where(has, np.where(n_tags == 1, 75, 50), np.where(n_tags == 0, 25, 0))
        return (bonus + base).astype(np.float64)
