"""Random: a uniformly random feasible node, and a random card that fits.

The FGD paper's lower baseline. One feasible node, drawn uniformly, scores 100 and the rest
0 (with a single feasible node nothing is drawn: it wins unscored). A slice goes to a card
drawn uniformly among those that fit; whole cards take the lowest-index fully free ones.
The generator is the plugin's own, seeded by ``seed``, so a run is reproducible.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from gpupool.core.model import GpuKind, GpuShare, Task
from gpupool.core.placement.framework import CycleState, Rows, Scores
from gpupool.core.placement.plugins.cards import BestFitCards, fitting_cards
from gpupool.core.placement.plugins.fgd import exclusive_cards


class RandomFit:
    name: ClassVar[str] = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def score(self, cs: CycleState, task: Task, rows: Rows) -> Scores:
        out = np.zeros(rows.size, np.float64)
        if rows.size:
            out[int(self._rng.integers(rows.size))] = 100.0
        return out

    def choose_cards(self, cs: CycleState, task: Task, row: int) -> tuple[GpuShare, ...] | None:
        req = task.request
        if req.kind is not GpuKind.SLICE:
            return exclusive_cards(cs, task, row)
        if req.cards != 1 or req.memory_percent:
            return BestFitCards().choose_cards(cs, task, row)
        cands = fitting_cards(cs, task, row)
        if not cands:
            return None
        g = cands[int(self._rng.integers(len(cands)))]
        return (GpuShare(g, req.gpu_milli, req.memory_mib),)
