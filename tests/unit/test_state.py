"""ClusterState, NodeTable and Snapshot: assume / confirm / forget, trials, sync."""

from __future__ import annotations

import pytest

from gpupool.core import ClusterState, ConflictError, GpuShare, NodeName, NotFoundError, Placement
from gpupool.core.model import JobId, TaskId
from tests.builders import node


def placement(
    task: str,
    node_name: str,
    cards: tuple[tuple[int, int, int], ...] = (),
    cpu: int = 1000,
    mem: int = 1024,
) -> Placement:
    return Placement(
        TaskId(task),
        JobId(task.split("/")[0]),
        NodeName(node_name),
        cpu,
        mem,
        tuple(GpuShare(i, m, b) for i, m, b in cards),
    )


def test_assume_takes_and_forget_gives_back_exactly() -> None:
    state = ClusterState([node("a", gpu=2), node("b", gpu=2)])
    before = state.fingerprint()
    p = placement("j/0", "a", ((1, 300, 1000),))
    state.assume(p)
    t = state.table
    assert t.used_milli[0, 1] == 300 and t.free_milli[0, 1] == 700
    assert t.free_whole[0] == 1
    assert t.cpu_free[0] == 64_000 - 1000
    state.forget(p.task)
    assert state.fingerprint() == before


def test_assume_refuses_overcommit_and_changes_nothing() -> None:
    state = ClusterState([node("a", gpu=1)])
    state.assume(placement("j/0", "a", ((0, 800, 0),)))
    before = state.fingerprint()
    with pytest.raises(ConflictError, match="GPU 0 has 200 milli"):
        state.assume(placement("k/0", "a", ((0, 300, 0),)))
    with pytest.raises(ConflictError, match="milli-CPU"):
        state.assume(placement("k/0", "a", cpu=10**9))
    assert state.fingerprint() == before


def test_same_task_cannot_be_assumed_twice_and_unknown_forget_is_not_found() -> None:
    state = ClusterState([node("a")])
    state.assume(placement("j/0", "a"))
    with pytest.raises(ConflictError, match="already placed"):
        state.assume(placement("j/0", "a"))
    with pytest.raises(NotFoundError):
        state.forget(TaskId("nope/0"))


def test_confirm_marks_bound() -> None:
    state = ClusterState([node("a")])
    state.assume(placement("j/0", "a"))
    assert not state.is_confirmed(TaskId("j/0"))
    state.confirm(TaskId("j/0"))
    assert state.is_confirmed(TaskId("j/0"))


def test_snapshot_syncs_only_changed_rows_and_trial_undoes() -> None:
    state = ClusterState([node("a", gpu=2), node("b", gpu=2)])
    snap = state.snapshot()
    gen_b = int(snap.table.gen[1])
    state.assume(placement("j/0", "a", ((0, 1000, 40960),)))
    snap = state.snapshot()
    assert snap.table.free_whole[0] == 1
    assert int(snap.table.gen[1]) == gen_b, "an unchanged row keeps its generation"
    with snap.trial():
        snap.assume(placement("k/0", "b", ((0, 500, 0),)))
        assert snap.table.free_milli[1, 0] == 500
    assert snap.table.free_milli[1, 0] == 1000
    assert state.table.free_milli[1, 0] == 1000


def test_rows_changed_in_the_snapshot_are_restored_at_next_sync() -> None:
    state = ClusterState([node("a", gpu=2)])
    snap = state.snapshot()
    snap.assume(placement("k/0", "a", ((0, 500, 0),)))
    snap = state.snapshot()
    assert snap.table.free_milli[0, 0] == 1000


def test_remove_node_returns_what_ran_there() -> None:
    state = ClusterState([node("a"), node("b")])
    state.assume(placement("j/0", "a"))
    lost = state.remove_node(NodeName("a"))
    assert [p.task for p in lost] == ["j/0"]
    assert state.placement(TaskId("j/0")) is None
    assert [n.name for n in state.nodes()] == ["b"]


def test_unhealthy_and_cordoned_are_reflected() -> None:
    state = ClusterState([node("a", gpu=4, unhealthy=[2])])
    t = state.table
    assert t.free_whole[0] == 3 and t.free_milli[0, 2] == -1
    state.update_node(node("a", gpu=4, unhealthy=[2], schedulable=False))
    assert not t.schedulable[0]


def test_table_grows_past_its_first_capacity_and_width() -> None:
    state = ClusterState([node(f"n{i}", gpu=2) for i in range(40)], gpu_width=2)
    state.add_node(node("wide", gpu=16))
    t = state.table
    assert t.n == 41 and t.width == 16 and t.free_whole[40] == 16 and t.free_whole[3] == 2
