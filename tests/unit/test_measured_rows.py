"""The measured plugins' per-node answers kept across decisions
(core/placement/plugins/measured_rows.py): every answer a decision reads must be the one the
node's cards give now, after placements in and out, within a cycle, inside a gang's trial and
after it is undone, and after the view is patched or rebuilt; and placements must be the ones
the per-candidate computation gives."""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.bench import placement as bench
from gpupool.core import ClusterState, NodeName, place_job, place_task
from gpupool.core.model import GpuKind, Placement, Task
from gpupool.core.placement.framework import CycleState, Rows
from gpupool.core.placement.plugins import measured, measured_rows
from gpupool.core.placement.registry import MEASURED_SCORES, measured_profile
from gpupool.core.usage import CardSample, LoadModel, LoadSettings
from gpupool.core.usage_view import CardLoad
from tests.builders import job, node, share


def _fresh(
    cs: CycleState, load: CardLoad, req: object, rows: Rows
) -> tuple[list[int], list[float]]:
    """Count and coolest fitting load of ``rows``, computed from their cards now."""
    fits = measured_rows.slice_cells(cs, load, req, rows)  # type: ignore[arg-type]
    loads = load.load(cs.table, rows)
    counts = np.count_nonzero(fits, axis=1).tolist()
    coolest = [
        min((x for x, ok in zip(ls, fs, strict=True) if ok), default=np.inf)
        for ls, fs in zip(loads.tolist(), fits.tolist(), strict=True)
    ]
    return counts, coolest


def _assert_current(cs: CycleState, load: CardLoad, rows: Rows) -> int:
    """Every answer kept for ``rows`` that is marked current equals a fresh one; returns how
    many were checked."""
    checked = 0
    for key, got in list(load.memos.items()):
        assert isinstance(got, measured_rows.RowAnswers)
        got.stale(cs, load, rows)  # take the rows changed since, as a decision would
        current = rows[got.valid[rows]]
        counts, coolest = _fresh(cs, load, key[1], current)  # type: ignore[index]
        assert got.columns[0][current].tolist() == counts, key
        assert got.columns[1][current].tolist() == coolest, key
        checked += int(current.size)
    return checked


@pytest.mark.parametrize(("seed", "cycle_pods"), [(1, 1), (2, 4), (3, 9)])
def test_kept_answers_equal_the_cards_decision_after_decision(
    seed: int, cycle_pods: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = [0, 0]
    filt = measured.MeasuredMemory.filter

    def checking(self: measured.MeasuredMemory, cs: CycleState, task: Task, rows: Rows) -> object:
        if cs.load is not None and task.request.kind is GpuKind.SLICE:
            # before the decision: what earlier decisions left must read as the cards now
            checked[0] += _assert_current(cs, cs.load, cs.table.live())
            checked[1] += 1
        return filt(self, cs, task, rows)

    monkeypatch.setattr(measured.MeasuredMemory, "filter", checking)
    profile = measured_profile(scores={"binpack": 1.0, **MEASURED_SCORES})
    bench.run(
        30,
        8,
        300,
        seed=seed,
        profile=profile,
        measured=True,
        scrape_every=40,
        cycle_pods=cycle_pods,
    )
    assert checked[1] > 60 and checked[0] > 1000


def _cluster() -> tuple[ClusterState, LoadModel]:
    names = [NodeName(f"n{i}") for i in range(4)]
    state = ClusterState([node(n, gpu=4) for n in names])
    model = LoadModel(LoadSettings(stale_after_s=600.0))
    rng = np.random.default_rng(7)
    model.add(
        [
            CardSample(n, g, 0.0, float(rng.uniform(0, 90)), int(rng.integers(0, 30000)))
            for n in names
            for g in range(4)
        ],
        now_s=0.0,
    )
    return state, model


def test_a_gangs_trial_and_its_undo_leave_no_stale_answer() -> None:
    state, model = _cluster()
    profile = measured_profile()
    snap = state.snapshot()
    snap.load = model.view(snap.table, 1.0)
    small = job("small", gpu=share(300, 20000))
    p, _ = place_task(next(small.tasks()), snap, profile)  # answers kept for the shape
    assert p is not None
    gang = job("gang", tasks=6, gpu=share(300, 20000))
    placed, _ = place_job(gang, snap, profile)  # each task sees those before it, then undone
    assert len(placed) == 6
    # the next decision recomputes the nodes the trial changed, and reads them as they are
    after, _ = place_task(next(small.tasks()), snap, profile)
    cs = CycleState(snap.table, snap.cache, pods=snap.pods, load=snap.load)
    assert _assert_current(cs, snap.load, snap.table.live()) == 4
    # ... so it places exactly as on a snapshot that never held the trial
    clean = ClusterState([node(NodeName(f"n{i}"), gpu=4) for i in range(4)])
    csnap = clean.snapshot()
    csnap.load = model.view(csnap.table, 1.0)
    expect, _ = place_task(next(small.tasks()), csnap, profile)
    assert after is not None and expect is not None
    assert (after.node, after.shares) == (expect.node, expect.shares)


def _placements(monkeypatch: pytest.MonkeyPatch, kept: bool, cycle_pods: int) -> list[object]:
    if not kept:  # every decision computes every candidate from its cards, as before

        def direct(
            cs: CycleState, load: CardLoad, req: object, rows: Rows
        ) -> tuple[np.ndarray, np.ndarray]:
            counts, coolest = _fresh(cs, load, req, rows)
            return np.asarray(counts, np.int64), np.asarray(coolest, np.float64)

        monkeypatch.setattr(measured, "slice_answers", direct)
    got: list[object] = []
    assume = ClusterState.assume

    def record(self: ClusterState, p: Placement) -> None:
        got.append((p.task, p.node, p.shares))
        assume(self, p)

    monkeypatch.setattr(ClusterState, "assume", record)
    profile = measured_profile(scores={"binpack": 1.0, **MEASURED_SCORES})
    bench.run(
        40, 8, 500, seed=5, profile=profile, measured=True, scrape_every=60, cycle_pods=cycle_pods
    )
    monkeypatch.undo()
    return got


@pytest.mark.parametrize("cycle_pods", [1, 6])
def test_placements_equal_those_computed_per_candidate(
    cycle_pods: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_kept = _placements(monkeypatch, True, cycle_pods)
    direct = _placements(monkeypatch, False, cycle_pods)
    assert len(with_kept) > 500  # the warm-up's and the stream's
    assert with_kept == direct


def test_the_answers_kept_per_view_are_bounded() -> None:
    state, model = _cluster()
    profile = measured_profile()
    snap = state.snapshot()
    snap.load = model.view(snap.table, 1.0)
    for mib in range(1, measured_rows.MEMOS_KEPT + 20):
        place_task(next(job(f"j{mib}", gpu=share(100, mib)).tasks()), snap, profile)
    assert len(snap.load.memos) == measured_rows.MEMOS_KEPT
    last = share(100, measured_rows.MEMOS_KEPT + 19)
    assert ("slice", last) in snap.load.memos  # the most recently asked are kept
