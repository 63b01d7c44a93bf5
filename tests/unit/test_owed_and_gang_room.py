"""Shares that lumpy or small jobs must not tip (issue 15): quota owed to a waiting queue ahead
in the fair order is not borrowed (``core/cycle_owed.py``); victims for a gang of whole nodes
are sought node by node when the cheapest-first order finds none (``preemption.by_node``); a
gang that would borrow is reserved room beside its queue's own (``cycle_reserve.reserve``)."""

from __future__ import annotations

from gpupool.core import JobId
from gpupool.core.scheduler import Scheduler
from tests.builders import job, node, queue_config, whole


def test_a_borrower_does_not_take_quota_a_waiting_queue_ahead_of_it_is_owed() -> None:
    """a (nominal 2) waits with a 2-GPU job while one GPU is free: b, already borrowing, may
    not take that GPU with a 1-GPU job (it would, one GPU at a time, for as long as a's job is
    larger than what frees). When one of b's jobs ends, a's job starts."""
    s = Scheduler([node("n0", gpu=4)], queue_config({"a": 2, "b": 2}, min_runtime_s=3600.0))
    for i in range(3):
        s.submit(job(f"b{i}", gpu=whole(1), queue="b", duration=7200.0), 0.0)
    assert len(s.cycle(0.0).binds) == 3  # b borrows one of a's GPUs
    s.submit(job("a-pair", gpu=whole(2), queue="a", submit=10.0, duration=3600.0), 10.0)
    r = s.cycle(10.0)  # no victim yet (b's jobs are younger than the minimum runtime)
    assert not r.binds and not r.evicts
    s.submit(job("b3", gpu=whole(1), queue="b", submit=20.0, duration=7200.0), 20.0)
    r = s.cycle(20.0)
    assert not r.binds
    why = next(p.status.message for p in r.parks if p.job == "b3")
    assert "would borrow quota owed to a" in why
    s.finished(JobId("b0"), 30.0)
    r = s.cycle(30.0)
    assert [b.job for b in r.binds] == ["a-pair"]


def test_a_gang_of_whole_nodes_reclaims_by_emptying_nodes() -> None:
    """d's gang of two 4-GPU tasks, within d's nominal quota, reclaims: taken cheapest first
    (most recently started) across the cluster, the victims a and b may give back (three
    each) run out before two nodes are empty; taken node by node, n2 and one more node are
    emptied with six victims."""
    from gpupool.core.model import Node, NodeName

    nodes = [
        Node(NodeName(n), 64_000, 512_000, node(n, gpu=4).gpus, labels={"host": n})
        for n in ("n0", "n1", "n2")
    ]
    s = Scheduler(nodes, queue_config({"a": 2, "b": 2, "d": 8}))

    def on(name: str, q: str, n: str, t: float) -> None:
        s.submit(
            job(name, gpu=whole(1), queue=q, submit=t, duration=9000.0, selector={"host": n}),
            t,
        )
        s.cycle(t)

    on("a-n2", "a", "n2", 0.0)
    on("b-n2", "b", "n2", 0.0)
    for i in range(2):
        on(f"a-n0-{i}", "a", "n0", 0.0)
        on(f"b-n1-{i}", "b", "n1", 0.0)
        on(f"b-n0-{i}", "b", "n0", 100.0)
        on(f"a-n1-{i}", "a", "n1", 100.0)
    assert len(s._ctx.running) == 10
    s.submit(job("d-gang", tasks=2, gpu=whole(4), queue="d", submit=200.0), 200.0)
    r = s.cycle(200.0)
    assert r.evicts, "a victim set that empties two nodes exists"
    assert all(e.reason.startswith("reclaim") for e in r.evicts)
    victims = {str(e.job) for e in r.evicts}
    assert {"a-n2", "b-n2"} <= victims and len(victims) == 6
    assert s._ctx.tree.usage("a").get(("gpu", _milli()), 0) >= 2000  # nominal kept
    assert s._ctx.tree.usage("b").get(("gpu", _milli()), 0) >= 2000


def _milli():  # type: ignore[no-untyped-def]
    from gpupool.core.quota import Resource

    return Resource.GPU_MILLI


def test_a_gang_that_would_borrow_is_reserved_room_beside_its_queues_own() -> None:
    """d (nominal 12 of 16) runs an 8-GPU gang on one node that ends at t=1000; a's jobs on
    the other end at t=2000. d's second gang would borrow: reserved on d's own node (the
    earliest to free) it would only replace the first, so it is reserved on a's node (once it
    is d's turn to borrow: d, owed nothing when the gang arrives, is owed enough after five
    minutes below its share, the gang holding d above it only until t=1000)."""
    s = Scheduler([node("n0", gpu=8), node("n1", gpu=8)], queue_config({"a": 4, "d": 12}))
    s.submit(job("d-gang1", gpu=whole(8), queue="d", duration=1000.0), 0.0)
    for i in range(8):
        s.submit(job(f"a{i}", gpu=whole(1), queue="a", duration=2000.0), 0.0)
    r = s.cycle(0.0)
    assert len(r.binds) == 9
    own = next(b.placements[0].node for b in r.binds if b.job == "d-gang1")
    s.submit(job("d-gang2", gpu=whole(8), queue="d", submit=10.0, duration=1000.0), 10.0)
    r = s.cycle(10.0)
    assert not r.holds
    assert "waiting for queue d's turn to borrow" in r.parks[0].status.message
    r = s.cycle(400.0)
    assert r.holds and r.holds[0].job == "d-gang2"
    assert r.holds[0].nodes == (({"n0", "n1"} - {own}).pop(),)
    assert r.holds[0].start_s == 2000.0


def test_the_wait_estimate_does_not_lend_quota_owed_to_a_waiting_queue() -> None:
    """The forecast applies the owed-quota rule as the cycle does: with a's 2-GPU job waiting
    within a's nominal quota, b's borrowing 1-GPU job is not forecast to start on the one free
    GPU now (the cycle parks it there), and it starts no sooner than a's job."""
    s = Scheduler([node("n0", gpu=4)], queue_config({"a": 2, "b": 2}, min_runtime_s=3600.0))
    for i in range(3):
        s.submit(job(f"b{i}", gpu=whole(1), queue="b", duration=7200.0), 0.0)
    s.cycle(0.0)
    s.submit(job("a-pair", gpu=whole(2), queue="a", submit=10.0, duration=3600.0), 10.0)
    s.cycle(10.0)
    s.submit(job("b3", gpu=whole(1), queue="b", submit=20.0, duration=7200.0), 20.0)
    assert not s.cycle(20.0).binds
    est = s.estimates(20.0)
    b3, pair = est[JobId("b3")][1], est[JobId("a-pair")][1]
    assert b3 is not None and pair is not None
    assert b3 > 20.0
    assert b3 >= pair
