"""hot-card-spread (core/placement/plugins/measured.py) scores a node from arrays over all its
cards and the filter's cached cells; each node's score must be the one its cards give, card by
card, on the clusters the placement bench builds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpupool.bench import placement as bench
from gpupool.core.model import WHOLE_GPU_MILLI, GpuKind, Task
from gpupool.core.placement.framework import CycleState, Rows
from gpupool.core.placement.plugins import measured, measured_rows
from gpupool.core.placement.registry import MEASURED_SCORES, measured_profile


def _by_card(plugin: measured.HotCardSpread, cs: CycleState, task: Task, rows: Rows) -> list[float]:
    """The score's definition, one node at a time in plain Python."""
    assert cs.load is not None
    fits = measured_rows.slice_cells(cs, cs.load, task.request, rows).tolist()
    load = cs.load.load(cs.table, rows).tolist()
    add = cs.load.expected_milli(task)
    hot = plugin.hot_pct * WHOLE_GPU_MILLI / 100.0
    out = []
    for cells, loads in zip(fits, load, strict=True):
        after = sorted(x + add for x, ok in zip(loads, cells, strict=True) if ok)
        if len(after) < task.request.cards:
            out.append(0.0)
            continue
        coolest = after[task.request.cards - 1]
        over = min(max((coolest - hot) / WHOLE_GPU_MILLI, 0.0), 1.0)
        out.append(100.0 if coolest <= hot else float(math.floor(100.0 * (1.0 - over))))
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_hot_card_spread_scores_each_node_by_its_coolest_fitting_card(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    scored = []
    score = measured.HotCardSpread.score

    def checked(self: measured.HotCardSpread, cs: CycleState, task: Task, rows: Rows) -> np.ndarray:
        got = score(self, cs, task, rows)
        if cs.load is not None and task.request.kind is GpuKind.SLICE:
            # the filter asked first, over a superset of these rows
            assert got.tolist() == _by_card(self, cs, task, rows)
            scored.append(int(np.count_nonzero(got < 100)))
        return got

    monkeypatch.setattr(measured.HotCardSpread, "score", checked)
    profile = measured_profile(scores={"binpack": 1.0, **MEASURED_SCORES})
    bench.run(40, 8, 400, seed=seed, profile=profile, measured=True, scrape_every=50)
    assert len(scored) > 50
    assert sum(scored) > 0  # some nodes had no card that stayed cool
