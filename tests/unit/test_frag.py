"""The FGD fragmentation measure: typical pods, F_n(M) against hand-computed cases, and the
incremental and hypothetical paths against recomputation."""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.core import ClusterState, GpuShare, NodeName, Placement, TaskId
from gpupool.core.model import JobId
from gpupool.core.placement.plugins.frag import (
    PodShape,
    TypicalPods,
    frag_after_slice,
    frag_after_take,
    node_frag,
    row_terms,
    typical_pods,
)
from tests.builders import node


def place(
    state: ClusterState,
    name: str,
    host: str,
    cpu: int = 0,
    shares: tuple[tuple[int, int], ...] = (),
) -> None:
    state.assume(
        Placement(
            TaskId(name),
            JobId(name),
            NodeName(host),
            cpu,
            0,
            tuple(GpuShare(i, m, 0) for i, m in shares),
        )
    )


A = PodShape(4000, 500, 1)
B = PodShape(2000, 1000, 1)
C = PodShape(1000)
D = PodShape(500)


def test_groups_sorted_by_count_then_shape_and_crossing_group_kept() -> None:
    pods = [A] * 5 + [B] * 3 + [C] + [D]
    tp = typical_pods(pods, threshold_pct=80)
    assert tp.shapes == (A, B) and tp.counts == (5, 3) and tp.kept == 8 and tp.total == 10
    tp = typical_pods(pods, threshold_pct=85)
    # C and D tie on count: the larger shape (more CPU) comes first
    assert tp.shapes == (A, B, C) and tp.kept == 9
    assert np.allclose(tp.popularity, [5 / 9, 3 / 9, 1 / 9])


def test_memory_means_per_group() -> None:
    tp = typical_pods([A, A, B], threshold_pct=100, memory_mib=[100, 201, 50])
    assert tp.memory_mib == (150, 50)  # 150.5 rounds to even
    assert tp.mem.tolist() == [150, 50]
    with pytest.raises(ValueError, match="memory figures"):
        typical_pods([A, B], memory_mib=[1])


def frag_of(tp: TypicalPods, state: ClusterState) -> list[float]:
    t = state.table
    rows = t.live()
    return (node_frag(tp, t, rows, {}) / tp.kept).tolist()


TP = TypicalPods((A, B, C), (1, 1, 2), 4)


def test_hand_computed_fragment() -> None:
    state = ClusterState(
        [node("n0", gpu=2, cpu=8000), node("n1", gpu=2, cpu=8000), node("n2", gpu=1, cpu=8000)]
    )
    place(state, "p0", "n0", shares=((1, 700),))  # n0: cards [1000, 300], cpu 8000
    place(state, "p1", "n1", cpu=5000, shares=((1, 700),))  # n1: same cards, cpu 3000
    place(state, "p2", "n2", shares=((0, 1000),))  # n2: no idle GPU
    # n0: A fits (card 0) -> 300 too small; B fits -> 300; C (no GPU) -> all 1300, twice
    # n1: A lacks CPU -> all 1300; B fits -> 300; C -> 1300 twice
    assert frag_of(TP, state) == [(300 + 300 + 2 * 1300) / 4, (1300 + 300 + 2 * 1300) / 4, 0.0]


def test_model_constraint_counts_all_idle_as_fragment() -> None:
    bound = PodShape(4000, 500, 1, frozenset({"T4"}))
    tp = TypicalPods((bound,), (1,), 1)
    state = ClusterState([node("a", gpu=2, model="A100"), node("t", gpu=2, model="T4")])
    place(state, "p", "a", shares=((0, 300),))
    place(state, "q", "t", shares=((0, 300),))
    assert frag_of(tp, state) == [1700.0, 0.0]


def test_whole_card_typical_pods_need_k_free_cards() -> None:
    two = PodShape(1000, 1000, 2)
    tp = TypicalPods((two,), (1,), 1)
    state = ClusterState([node("n", gpu=4)])
    assert frag_of(tp, state) == [0.0]
    place(state, "p", "n", shares=((0, 1000), (1, 1000), (2, 500)))
    # one full card and a half: the pod needs two full cards -> every idle milli is fragment
    assert frag_of(tp, state) == [1500.0]


def random_state(seed: int) -> ClusterState:
    rng = np.random.default_rng(seed)
    nodes = [
        node(
            f"n{i}",
            gpu=int(rng.choice([1, 2, 4, 8])),
            cpu=int(rng.integers(4, 64)) * 1000,
            model=str(rng.choice(["T4", "A100"])),
        )
        for i in range(12)
    ]
    state = ClusterState(nodes)
    for i, n in enumerate(nodes):
        used = [(g, int(rng.choice([0, 0, 200, 470, 810, 1000]))) for g in range(n.gpu_count)]
        shares = tuple((g, m) for g, m in used if m)
        place(
            state,
            f"p{i}",
            n.name,
            cpu=int(rng.integers(0, n.cpu_milli // 1000)) * 1000,
            shares=shares,
        )
    return state


RANDOM_TP = TypicalPods(
    (
        PodShape(3000, 810, 1),
        PodShape(11000, 1000, 1),
        PodShape(4000, 470, 1, frozenset({"T4"})),
        PodShape(20000, 1000, 2),
        PodShape(12000),
    ),
    (10, 8, 5, 2, 3),
    30,
)


@pytest.mark.parametrize("seed", range(5))
def test_hypothetical_slice_matches_recomputation(seed: int) -> None:
    state = random_state(seed)
    t = state.table
    rows = t.live()
    cache: dict[object, object] = {}
    base = row_terms(RANDOM_TP, t, rows, cache)
    after = frag_after_slice(RANDOM_TP, t, rows, base, 2000, 300, cache)
    for r in rows.tolist():
        for g in range(int(t.gpu_count[r])):
            if t.free_milli[r, g] < 300 or t.cpu_free[r] < 2000:
                continue
            snap = state.snapshot()
            with snap.trial():
                snap.assume(
                    Placement(
                        TaskId("x"), JobId("x"), t.nodes[r].name, 2000, 0, (GpuShare(g, 300, 0),)
                    )
                )
                fresh = node_frag(RANDOM_TP, snap.table, np.asarray([r]), {})[0]
            assert after[rows.tolist().index(r), g] == fresh


@pytest.mark.parametrize("seed", range(5))
def test_hypothetical_take_matches_recomputation(seed: int) -> None:
    state = random_state(seed)
    t = state.table
    rows = t.live()
    cache: dict[object, object] = {}
    base = row_terms(RANDOM_TP, t, rows, cache)
    take = np.where(t.free_milli[rows] == 1000, 1000, 0)
    take[np.cumsum(take > 0, axis=1) > 1] = 0  # the first fully free card only
    after = frag_after_take(RANDOM_TP, t, rows, base, 1000, take, cache)
    for i, r in enumerate(rows.tolist()):
        cards = np.flatnonzero(take[i])
        if t.cpu_free[r] < 1000:
            continue
        snap = state.snapshot()
        with snap.trial():
            snap.assume(
                Placement(
                    TaskId("x"),
                    JobId("x"),
                    t.nodes[r].name,
                    1000,
                    0,
                    tuple(GpuShare(int(g), 1000, 0) for g in cards),
                )
            )
            fresh = node_frag(RANDOM_TP, snap.table, np.asarray([r]), {})[0]
        assert after[i] == fresh


def test_row_terms_recompute_only_changed_rows() -> None:
    state = random_state(7)
    snap = state.snapshot()
    cache: dict[object, object] = {}
    rows = snap.table.live()
    first = row_terms(RANDOM_TP, snap.table, rows, cache).frag.copy()
    t = state.table
    r = int(np.flatnonzero(t.free_milli[: t.n].max(axis=1) >= 200)[0])
    g = int(np.argmax(t.free_milli[r]))
    place(state, "late", t.nodes[r].name, shares=((g, 200),))
    snap = state.snapshot()
    again = row_terms(RANDOM_TP, snap.table, rows, cache).frag
    fresh = node_frag(RANDOM_TP, snap.table, rows, {})
    assert (again == fresh).all()
    changed = np.flatnonzero(again != first)
    assert set(changed.tolist()) <= {r}
