"""Per-card limits a device plugin imposes: split count, percentages of the chosen card,
slices over several cards, card UUIDs allowed or excluded, and compute sold out."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.core import ClusterState, ConflictError, GpuRequest, default_profile, place_task
from gpupool.core.model import GpuShare, Node, NodeName, Placement, TaskId
from tests.builders import gpus, job, node, share


def first_task(j):  # type: ignore[no-untyped-def]
    return next(j.tasks())


def capped(name: str, split: int, count: int = 1) -> Node:
    cards = tuple(dataclasses.replace(g, max_holders=split) for g in gpus(count))
    return node(name, cards=cards)


def test_a_card_takes_no_more_slices_than_its_split_count() -> None:
    state = ClusterState([capped("a", split=3)])
    prof = default_profile()
    placed = []
    for i in range(5):
        p, status = place_task(first_task(job(f"j{i}", gpu=share(10, 100))), state.snapshot(), prof)
        if p is None:
            assert "no GPU with 1% of a card and 100Mi free" in status.message
            break
        state.assume(p)
        placed.append(p)
    assert len(placed) == 3  # 30 milli and 300 MiB of 1000 and 40960 used: only the count stops it
    i = state.table.row(NodeName("a"))
    assert state.table.holders[i, 0] == 3
    state.forget(placed[0].task)
    p, _ = place_task(first_task(job("again", gpu=share(10, 100))), state.snapshot(), prof)
    assert p is not None


def test_the_table_refuses_a_placement_over_the_split_count() -> None:
    state = ClusterState([capped("a", split=1)])
    one = Placement(TaskId("t1"), job("t1").id, NodeName("a"), 0, 0, (GpuShare(0, 100, 10),))
    state.table.apply(one)
    with pytest.raises(ConflictError, match="split count"):
        state.table.apply(dataclasses.replace(one, task=TaskId("t2")))


def test_no_split_count_means_no_limit() -> None:
    state = ClusterState([node("a", gpu=1)])
    prof = default_profile()
    for i in range(20):
        p, _ = place_task(first_task(job(f"j{i}", gpu=share(10, 10))), state.snapshot(), prof)
        assert p is not None
        state.assume(p)


def test_memory_percentage_is_of_the_card_chosen() -> None:
    small = node("small", cards=gpus(1, memory_mib=16384))
    big = node("big", cards=gpus(1, memory_mib=81920, model="H100"))
    state = ClusterState([small, big])
    req = GpuRequest(gpu_milli=200, memory_percent=50, models=frozenset({"H100"}))
    p, _ = place_task(first_task(job("x", gpu=req)), state.snapshot(), default_profile())
    assert p is not None and p.node == "big"
    assert p.shares == (GpuShare(0, 200, 40960),)
    req = GpuRequest(gpu_milli=200, memory_percent=50, models=frozenset({"A100"}))
    p, _ = place_task(first_task(job("y", gpu=req)), state.snapshot(), default_profile())
    assert p is not None and p.shares == (GpuShare(0, 200, 8192),)


def test_a_slice_over_several_cards_takes_distinct_cards() -> None:
    state = ClusterState([node("a", gpu=4)])
    req = GpuRequest(gpu_milli=300, memory_mib=1000, cards=3)
    p, _ = place_task(first_task(job("x", gpu=req)), state.snapshot(), default_profile())
    assert p is not None
    assert sorted(s.index for s in p.shares) == [0, 1, 2]
    assert all(s.gpu_milli == 300 and s.memory_mib == 1000 for s in p.shares)
    req = GpuRequest(gpu_milli=300, cards=5)
    p, status = place_task(first_task(job("y", gpu=req)), state.snapshot(), default_profile())
    assert p is None and "fewer than 5 GPUs with 30% of a card free" in status.message


def test_card_uuids_allowed_and_excluded() -> None:
    state = ClusterState([node("a", gpu=4)])
    prof = default_profile()
    req = GpuRequest(gpu_milli=100, uuids=frozenset({"GPU-A100-2"}))
    p, _ = place_task(first_task(job("x", gpu=req)), state.snapshot(), prof)
    assert p is not None and p.shares[0].index == 2
    req = GpuRequest(count=2, excluded_uuids=frozenset({"GPU-A100-0", "GPU-A100-1"}))
    p, _ = place_task(first_task(job("y", gpu=req)), state.snapshot(), prof)
    assert p is not None and sorted(s.index for s in p.shares) == [2, 3]
    req = GpuRequest(gpu_milli=100, uuids=frozenset({"GPU-nowhere"}))
    p, _ = place_task(first_task(job("z", gpu=req)), state.snapshot(), prof)
    assert p is None


def test_a_memory_only_slice_needs_some_compute_left_on_the_card() -> None:
    state = ClusterState([node("a", gpu=1)])
    prof = default_profile()
    p, _ = place_task(first_task(job("x", gpu=share(999, 100))), state.snapshot(), prof)
    assert p is not None
    state.assume(p)
    p, _ = place_task(first_task(job("y", gpu=share(1, 100))), state.snapshot(), prof)
    assert p is not None
    state.assume(p)
    p, _ = place_task(first_task(job("z", gpu=share(0, 100))), state.snapshot(), prof)
    assert p is None
