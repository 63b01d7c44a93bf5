"""The ``bind-queue`` score: GPU placements prefer nodes with fewer binds in flight (under
HAMi's node lock a node binds one GPU pod at a time), packing as before when none is."""

from __future__ import annotations

import pytest

from gpupool.core import ClusterState, ConfigError, default_profile, place_task
from gpupool.core.model import NodeName, Task
from gpupool.core.placement.framework import Profile
from gpupool.core.placement.plugins.bind_queue import BindQueue
from gpupool.core.placement.registry import DEFAULT_SCORES, builtin_registry
from tests.builders import job, node, queue_config, share


def profile(weight: float = 1.0) -> Profile:
    return default_profile(scores={**DEFAULT_SCORES, "bind-queue": weight})


def half(name: str) -> Task:
    return next(job(name, gpu=share(500, 16_000)).tasks())


def test_without_binds_in_flight_it_packs() -> None:
    state = ClusterState([node("a"), node("b")])
    first, _ = place_task(half("p0"), state.snapshot(), profile())
    assert first is not None
    state.assume(first)
    state.set_binds_in_flight(first.node, 0)  # bound and allocated: nothing in flight
    second, _ = place_task(half("p1"), state.snapshot(), profile())
    assert second is not None and second.node == first.node


def test_a_node_with_binds_in_flight_is_passed_over() -> None:
    state = ClusterState([node("a"), node("b")])
    first, _ = place_task(half("p0"), state.snapshot(), profile())
    assert first is not None
    state.assume(first)  # its bind is in flight (counted since the placement)
    second, _ = place_task(half("p1"), state.snapshot(), profile())
    assert second is not None and second.node != first.node
    # binpack alone would have stacked it
    packed, _ = place_task(half("p1"), state.snapshot(), default_profile())
    assert packed is not None and packed.node == first.node


def test_a_cycles_placements_count_before_the_adapter_reports() -> None:
    """Placements taken in one snapshot, one after another (as a cycle takes them), spread
    over both nodes instead of filling one."""
    state = ClusterState([node("a"), node("b")])
    snap = state.snapshot()
    nodes = []
    for i in range(8):
        p, _ = place_task(half(f"p{i}"), snap, profile())
        assert p is not None
        snap.assume(p)
        nodes.append(p.node)
    assert set(nodes) == {"a", "b"}
    assert max(nodes.count("a"), nodes.count("b")) <= 5


def test_the_scheduler_counts_placements_until_the_adapter_says_otherwise() -> None:
    from gpupool.core.scheduler import Scheduler

    sched = Scheduler([node("a"), node("b")], queue_config({"default": 16}), profile=profile())
    for i in range(6):
        sched.submit(job(f"p{i}", gpu=share(500, 16_000)), 0.0)
    result = sched.cycle(0.0)
    assert len(result.binds) == 6
    counted = sched.binds_in_flight()
    assert sum(counted.values()) == 6 and set(counted) == {"a", "b"}
    sched.set_binds_in_flight(NodeName("a"), 0)  # the adapter: a's binds all went through
    sched.set_binds_in_flight(NodeName("b"), 1)
    assert sched.binds_in_flight() == {"b": 1}
    sched.set_binds_in_flight(NodeName("b"), -2)  # never below 0
    assert sched.binds_in_flight() == {}


def test_pods_without_gpus_are_not_scored() -> None:
    """A CPU-only pod takes no node lock: it packs onto the busier node even though that
    node has GPU binds in flight."""
    state = ClusterState([node("a"), node("b")])
    state.set_outside(NodeName("a"), 32_000, 0)
    state.set_binds_in_flight(NodeName("a"), 3)
    p, _ = place_task(next(job("c").tasks()), state.snapshot(), profile())
    assert p is not None and p.node == "a"
    gpu, _ = place_task(half("g"), state.snapshot(), profile())
    assert gpu is not None and gpu.node == "b"


def test_a_gangs_replicas_stay_together() -> None:
    """Eight half-card replicas of one pod set pack onto one node as binpack puts them."""
    state = ClusterState([node("a"), node("b")])
    snap = state.snapshot()
    used = set()
    for task in job("g", tasks=8, gpu=share(500, 16_000)).tasks():
        p, _ = place_task(task, snap, profile())
        assert p is not None
        snap.assume(p)
        used.add(p.node)
    assert len(used) == 1


@pytest.mark.parametrize("per_bind", [0, -1, 101])
def test_bad_per_bind_is_named(per_bind: float) -> None:
    with pytest.raises(ConfigError, match=f"per_bind={per_bind!r}"):
        builtin_registry().create("bind-queue", {"per_bind": per_bind})
    assert BindQueue().per_bind == 20.0
