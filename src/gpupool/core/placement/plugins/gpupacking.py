"""GpuPacking: fill partly used cards first, then used nodes, then empty nodes.

The FGD paper's baseline, in its integer arithmetic. With F the node's fully free cards and
the cards the pod would take chosen by ascending milli left among those that fit:

- every card of the node free: ``max(33 - F, F)`` (an empty node, least preferred);
- some chosen card fully free (u of them): ``max(50 - u, 33)`` (a used node, fresh card);
- only partly used cards chosen: ``max(100 - s // 10, 50)`` with s the sum over them of
  ``left * 100 // 1000`` (a partly used card, the fuller the better).

A pod without GPUs scores 0 everywhere, so the tie order alone places it. Cards:
``best-fit-cards``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.model import WHOLE_GPU_MILLI, GpuKind, Task
from gpupool.core.placement.framework import CycleState, Rows, Scores


@dataclass(frozen=True, slots=True)
class GpuPackingScore:
    name: ClassVar[str] = "gpupacking"

    def score(self, cs: CycleState, task: Task, rows: Rows) -> Scores:
        req = task.request
        kind = req.kind
        if kind is GpuKind.NONE:
            return np.zeros(rows.size, np.float64)
        t = cs.table
        g = t.free_milli[rows]
        full = np.count_nonzero(g == WHOLE_GPU_MILLI, axis=1)
        empty_node = full == t.gpu_count[rows]
        empty_score = np.maximum(33 - full, full)
        if kind is GpuKind.WHOLE:
            # the chosen cards are k fully free ones: u = k
            used = np.full(rows.size, max(50 - req.count, 33))
        else:
            fits = g >= req.gpu_milli
            best = np.where(fits, g, WHOLE_GPU_MILLI + 1).min(axis=1)
            used = np.where(
                best == WHOLE_GPU_MILLI,
                max(50 - 1, 33),
                np.maximum(100 - (best * 100 // 1000) // 10, 50),
            )
        return np.where(empty_node, empty_score, used).astype(np.float64)
