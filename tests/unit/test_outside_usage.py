"""CPU and memory held by work another scheduler placed: off the node's free room, not off
its capacity."""

from __future__ import annotations

from gpupool.core import NodeName
from gpupool.core.scheduler import Scheduler
from tests.builders import job, node, queue_config, whole


def test_outside_usage_blocks_a_node_until_it_ends_without_rejecting_the_job() -> None:
    s = Scheduler([node("n0", gpu=2, cpu=10_000)], queue_config({"a": 8}))
    s.set_outside(NodeName("n0"), 9_000, 1_024)  # 90 % of the CPUs
    s.submit(job("j", queue="a", gpu=whole(1), cpu=2_000), 0.0)  # not "larger than any node"
    assert s.cycle(1.0).binds == []
    (parked,) = s.pending()
    assert parked.job.id == "j" and parked.reason is not None
    assert "milli-CPU" in parked.reason.message or "CPU" in parked.reason.message
    s.set_outside(NodeName("n0"), 0, 0)  # those pods ended
    (bind,) = s.cycle(2.0).binds
    assert bind.placements[0].node == "n0"


def test_outside_usage_is_absolute_and_adds_to_what_the_core_placed() -> None:
    s = Scheduler([node("n0", gpu=2, cpu=10_000)], queue_config({"a": 8}))
    s.submit(job("a1", queue="a", gpu=whole(1), cpu=5_000), 0.0)
    assert len(s.cycle(1.0).binds) == 1
    s.set_outside(NodeName("n0"), 4_000, 0)
    s.set_outside(NodeName("n0"), 4_000, 0)  # the same again changes nothing
    s.submit(job("a2", queue="a", gpu=whole(1), cpu=2_000), 0.0)
    assert s.cycle(2.0).binds == []  # 5 000 + 4 000 of 10 000 taken: 1 000 free
    s.set_outside(NodeName("n0"), 3_000, 0)
    assert len(s.cycle(3.0).binds) == 1
