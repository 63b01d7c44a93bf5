"""The cycle's view of measured use (core/usage_view.py): kept current by row, it must read
exactly as a view built whole from the same model and table."""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.core import ClusterState, NodeName, place_task
from gpupool.core.model import GpuShare, JobId, Placement, TaskId
from gpupool.core.placement.registry import measured_profile
from gpupool.core.usage import CardSample, LoadModel, LoadSettings
from gpupool.core.usage_view import CardLoad
from tests.builders import job, node, share, whole


def _assert_same(kept: CardLoad, whole_view: CardLoad, state: ClusterState) -> None:
    t = state.table
    rows = t.live()
    np.testing.assert_array_equal(kept.measured[rows], whole_view.measured[rows])
    np.testing.assert_allclose(kept.load(t, rows), whole_view.load(t, rows))
    np.testing.assert_array_equal(kept.free(t, rows), whole_view.free(t, rows))
    np.testing.assert_allclose(kept.node_load(t, rows), whole_view.node_load(t, rows))
    np.testing.assert_array_equal(kept.outside[rows], whole_view.outside[rows])
    np.testing.assert_array_equal(kept.idle[rows], whole_view.idle[rows])
    np.testing.assert_allclose(kept.milli[rows], whole_view.milli[rows])
    np.testing.assert_array_equal(kept.free_mib[rows], whole_view.free_mib[rows])
    assert kept.reasons == whole_view.reasons


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_view_patched_by_row_reads_as_one_built_whole(seed: int) -> None:
    rng = np.random.default_rng(seed)
    names = [NodeName(f"n{i}") for i in range(6)]
    state = ClusterState([node(n, gpu=4) for n in names])
    model = LoadModel(LoadSettings(stale_after_s=40.0, settle_s=10.0))
    held: list[Placement] = []
    kept = None
    for step in range(120):
        now = step * 2.0
        if step % 9 == 0:  # a read: some cards, busy and holding memory beyond the requests
            t = state.table
            model.add(
                [
                    CardSample(
                        n,
                        g,
                        now,
                        float(rng.uniform(0, 100)),
                        int(t.used_mib[t.row(n), g] + rng.integers(0, 8000)),
                        None if g == 3 else int(rng.integers(0, 40960)),
                    )
                    for n in names[: 4 + step % 2]
                    for g in range(4)
                    if rng.random() < 0.9
                ],
                now_s=now,
            )
        if held and rng.random() < 0.4:
            gone = held.pop(int(rng.integers(len(held))))
            state.forget(gone.task)
            model.released(gone, now)
        n = names[int(rng.integers(len(names)))]
        g = int(rng.integers(4))
        t = state.table
        free = int(t.free_milli[t.row(n), g])
        if free > 0:
            p = Placement(
                TaskId(f"t{step}"),
                JobId(f"j{step}"),
                n,
                0,
                0,
                (
                    GpuShare(
                        g,
                        int(rng.integers(1, free + 1)),
                        int(rng.integers(0, max(1, int(t.free_mib[t.row(n), g])))),
                    ),
                ),
            )
            state.assume(p)
            model.placed(p, now)
            held.append(p)
        kept = model.view(state.table, now)
        _assert_same(kept, CardLoad(model, state.table).refresh(state.table, now), state)
    assert kept is model.view(state.table, 240.0)  # one view per table, kept


def test_a_view_is_rebuilt_when_a_card_turns_stale_between_reads() -> None:
    state = ClusterState([node("n1", gpu=2)])
    model = LoadModel(LoadSettings(stale_after_s=30.0))
    model.add([CardSample(NodeName("n1"), 0, 0.0, 70.0, 100, 40_000)], now_s=0.0)
    row = state.table.row(NodeName("n1"))
    assert model.view(state.table, 10.0).measured[row, 0]
    later = model.view(state.table, 31.0)  # no read since: the card is stale now
    assert not later.measured[row, 0]
    assert "GPU 0 stale" in later.reasons[NodeName("n1")]


def test_the_view_follows_assumptions_in_the_cycle_and_the_next_cycle_sees_them_measured() -> None:
    state = ClusterState([node("n1", gpu=2), node("n2", gpu=2)])
    model = LoadModel(LoadSettings(stale_after_s=1000.0))
    model.add(
        [CardSample(NodeName(n), g, 0.0, 10.0, 0, 40_960) for n in ("n1", "n2") for g in range(2)],
        now_s=0.0,
    )
    prof = measured_profile()
    snap = state.snapshot()
    snap.load = model.view(snap.table, 1.0)
    placed = []
    for i in range(6):  # slices of 600: no two may share a card without making it hot
        p, _ = place_task(next(job(f"j{i}", gpu=share(600, 1024)).tasks()), snap, prof)
        if p is None:
            break
        snap.assume(p)
        placed.append(p)
    cards = {(p.node, p.shares[0].index) for p in placed}
    assert len(placed) == 4 and len(cards) == 4
    for p in placed:
        state.assume(p)
        model.placed(p, 1.0)
    snap = state.snapshot()
    snap.load = model.view(snap.table, 2.0)
    t = snap.table
    # each card: 100 measured + 600 estimated, the same as the table now requests plus 100
    np.testing.assert_allclose(snap.load.load(t, t.live())[:, :2], 700.0)
    big = next(job("w", gpu=whole(1)).tasks())
    p, status = place_task(big, snap, prof)
    assert p is None, status


def test_whole_gpus_skip_a_card_still_holding_a_departed_pods_memory_decision_after_decision() -> (
    None
):
    """A pod that left keeps its memory on the card until a sample shows it gone; each new
    decision's view must say so (the first round cached that mask under the id() of a view
    that lived one decision, and Python reuses ids)."""
    state = ClusterState([node("n1", gpu=2)])
    n1 = NodeName("n1")
    model = LoadModel(LoadSettings(stale_after_s=1000.0))
    model.add([CardSample(n1, g, 0.0, 0.0, 0, 40_960) for g in range(2)], now_s=0.0)
    prof = measured_profile()
    nb = Placement(TaskId("nb"), JobId("nb"), n1, 0, 0, (GpuShare(0, 300, 8192),))
    state.assume(nb)
    model.placed(nb, 1.0)
    for step in range(3):  # views come and go; the answer must not
        snap = state.snapshot()
        snap.load = model.view(snap.table, 2.0 + step)
        if step == 0:
            state.forget(nb.task)  # it leaves; its 8192 MiB stay until the next sample
            model.released(nb, 2.0)
            continue
        p, status = place_task(next(job(f"w{step}", gpu=whole(1)).tasks()), snap, prof)
        assert p is not None and p.shares[0].index == 1, status
    # a sample settle_s (30 s) after it left shows it gone
    model.add([CardSample(n1, g, 40.0, 0.0, 0, 40_960) for g in range(2)], now_s=40.0)
    snap = state.snapshot()
    snap.load = model.view(snap.table, 41.0)
    p, _ = place_task(next(job("w9", gpu=whole(1)).tasks()), snap, prof)
    assert p is not None and p.shares[0].index == 0


def test_changed_names_the_rows_moved_in_the_table_or_patched_in_the_view_since() -> None:
    names = [NodeName(f"n{i}") for i in range(4)]
    state = ClusterState([node(n, gpu=2) for n in names])
    model = LoadModel(LoadSettings(stale_after_s=1000.0))
    model.add([CardSample(n, g, 0.0, 20.0, 0, 40_960) for n in names for g in range(2)], now_s=0)
    view = model.view(state.table, 1.0)
    rows, seen = view.changed(state.table, (-1, -1))
    assert rows.tolist() == [0, 1, 2, 3]  # everything, the first time
    assert view.changed(state.table, seen)[0].size == 0  # nothing since
    p = Placement(TaskId("t"), JobId("j"), names[2], 0, 0, (GpuShare(1, 300, 1024),))
    state.assume(p)  # the table moves; the view is not patched until its next refresh
    rows, seen = view.changed(state.table, seen)
    assert rows.tolist() == [2]
    model.placed(p, 1.0)
    model.view(state.table, 2.0)  # the view patches row 2 (the estimate moved)
    rows, seen = view.changed(state.table, seen)
    assert rows.tolist() == [2]
    model.add([CardSample(names[0], 0, 3.0, 50.0, 0, 40_960)], now_s=3.0)
    model.view(state.table, 3.0)  # a read: the view is rebuilt, every row changed
    assert view.changed(state.table, seen)[0].tolist() == [0, 1, 2, 3]
