"""BestFit: the node left with the least CPU and GPU once the pod is placed.

The FGD paper's baseline: ``floor(100 * (1 - (0.5 * cpu_left / 128000 + 0.5 * gpu_left /
8000)))`` with the leftovers measured after the pod, against fixed "largest node" constants
(128 cores, 8 GPUs) rather than each node's own capacity, then min-max normalised over the
feasible nodes in integer arithmetic as the reference's NormalizeScore does (which keeps the
winner and may merge lower scores). Cards: the fitting card with the least left
(``best-fit-cards``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from gpupool.core.model import Task
from gpupool.core.placement.framework import CycleState, Rows, Scores

MAX_SPEC_CPU_MILLI = 128_000
"""CPU of the largest node the score is scaled against."""
MAX_SPEC_GPU_MILLI = 8_000
"""GPU compute of the largest node the score is scaled against (8 cards)."""


def gpu_idle(cs: CycleState, rows: Rows) -> npt.NDArray[np.int64]:
    """Idle GPU milli per row, summed over usable cards."""
    return cs.table.milli_free[rows]


def min_max_normalise(raw: npt.NDArray[np.int64]) -> Scores:
    """(s - lo) * 100 // (hi - lo) over the rows, or all 0 when every score is equal."""
    lo = int(raw.min())
    hi = int(raw.max())
    if hi == lo:
        return np.zeros(raw.size, np.float64)
    return ((raw - lo) * 100 // (hi - lo)).astype(np.float64)


@dataclass(frozen=True, slots=True)
class BestFitScore:
    name: ClassVar[str] = "bestfit"

    def score(self, cs: CycleState, task: Task, rows: Rows) -> Scores:
        t = cs.table
        cpu_left = (t.cpu_free[rows] - task.cpu_milli) / MAX_SPEC_CPU_MILLI * 0.5
        gpu_left = (gpu_idle(cs, rows) - task.request.total_milli) / MAX_SPEC_GPU_MILLI * 0.5
        raw = np.trunc((1.0 - (cpu_left + gpu_left)) * 100.0).astype(np.int64)
        return min_max_normalise(raw)
