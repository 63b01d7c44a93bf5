"""What a provisioning class's requests show of the cloud (``core.provisioning.history``) and
the wait estimates built on it (``core.estimate_provisioning``): making time from room,
scale-down lag, concurrent capacity, the queue in order of first asking."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.core import GpuRequest, JobId, PodSet
from gpupool.core.model import Job
from gpupool.core.provisioning import DEFAULT_CLASS, RequestLedger, RetryStrategy
from gpupool.core.runtimes import Runtimes
from gpupool.core.scheduler import Scheduler
from tests.builders import job, whole
from tests.unit.test_provisioning import cloud_nodes, config, gang, req

CLS = "queued"
PS2 = PodSet("main", 2, 1000, 1024, GpuRequest(count=8))


def _req(name: str, **kw: object) -> object:
    return req(name, provisioning_class_name=CLS, pod_sets=(PS2,), **kw)


def _provision(ledger: RequestLedger, name: str, made_s: float, at_s: float) -> list[str]:
    r = ledger.create(_req(name), made_s)  # type: ignore[arg-type]
    nodes = [f"{name}-0", f"{name}-1"]
    ledger.provisioned(r.key, nodes, at_s)
    return nodes


# -- the history -------------------------------------------------------------------------------


def test_making_time_counts_from_the_room_a_request_waited_for_and_the_lag_is_learned() -> None:
    ledger = RequestLedger()
    a_nodes = _provision(ledger, "a", 0.0, 600.0)
    b = ledger.create(_req("b"), 1000.0)  # type: ignore[arg-type]
    ledger.delete("team/a", 2400.0)  # a's job is done with its nodes
    for n in a_nodes:
        ledger.node_left(n, 3000.0)  # they go 600 s later
    ledger.provisioned(b.key, ["b-0", "b-1"], 3300.0)
    cap = ledger.capacity(CLS)
    # b waited 2300 s, but the cloud made it in 300 s once a's nodes had left
    assert cap.delays == (600.0, 300.0)
    assert cap.lag_s == 600.0
    # it waited longer than making ever took, and got room when nodes left: the class holds
    # at most what it held then
    assert (cap.capacity_nodes, cap.contended, cap.held_nodes) == (2, 1, 2)
    assert [h.key for h in cap.holders] == ["team/b"]
    assert ledger.capacity("other").delays == ()  # classes learn apart


def test_a_request_that_fails_after_waiting_shows_the_capacity_and_one_failing_at_once_not() -> (
    None
):
    ledger = RequestLedger()
    _provision(ledger, "a", 0.0, 600.0)
    quick = ledger.create(_req("quick"), 700.0)  # type: ignore[arg-type]
    ledger.fail(quick.key, "no pool holds it", 701.0)
    assert ledger.capacity(CLS).capacity_nodes is None
    slow = ledger.create(_req("slow"), 1000.0)  # type: ignore[arg-type]
    ledger.fail(slow.key, "not provisioned within 3600s", 4600.0)
    cap = ledger.capacity(CLS)
    assert (cap.capacity_nodes, cap.contended) == (2, 1)


def test_no_lag_is_learned_from_nodes_taken_back_at_the_run_end() -> None:
    ledger = RequestLedger()
    r = ledger.create(_req("a", max_run_duration_s=3600.0), 0.0)  # type: ignore[arg-type]
    ledger.provisioned(r.key, ["a-0", "a-1"], 600.0)
    ledger.delete(r.key, 4200.0)  # its job stopped at the limit the run end set
    for n in ("a-0", "a-1"):
        ledger.node_left(n, 4200.0)
    r2 = ledger.create(_req("b", max_run_duration_s=3600.0), 0.0)  # type: ignore[arg-type]
    ledger.provisioned(r2.key, ["b-0", "b-1"], 600.0)
    ledger.revoke(r2.key, "maxRunDurationSeconds reached", 4200.0)
    for n in ("b-0", "b-1"):
        ledger.node_left(n, 4200.0)
    cap = ledger.capacity(CLS)
    assert cap.lag_s is None and cap.held_nodes == 0 and cap.holders == ()
    assert cap.left_s == 4200.0


def test_a_request_made_again_keeps_its_jobs_first_asking_until_the_job_starts() -> None:
    ledger = RequestLedger()
    first = ledger.create(_req("g-1", job="g"), 100.0)  # type: ignore[arg-type]
    ledger.fail(first.key, "timed out", 3700.0)
    ledger.delete(first.key, 3700.0)
    again = ledger.create(_req("g-2", job="g"), 3800.0)  # type: ignore[arg-type]
    assert ledger.first_made_s(again.key) == 100.0
    other = ledger.create(_req("h-1", job="h"), 3900.0)  # type: ignore[arg-type]
    assert ledger.first_made_s(other.key) == 3900.0
    ledger.provisioned(again.key, ["n0", "n1"], 4000.0)
    ledger.consume(again.key, 4000.0)
    later = ledger.create(_req("g-3", job="g"), 9000.0)  # type: ignore[arg-type]
    assert ledger.first_made_s(later.key) == 9000.0  # a new wait


# -- the estimates -----------------------------------------------------------------------------


def _run_one(s: Scheduler, name: str, made_s: float, took_s: float, tasks: int = 2) -> list[str]:
    """Submit ``name``, provision it ``took_s`` after, start it; returns its nodes."""
    s.submit(gang(name, tasks=tasks, at=made_s), made_s)
    (r,) = s.cycle(made_s).provision
    nodes = cloud_nodes(s, r)
    s.provisioning_provisioned(r.key, nodes, made_s + took_s)
    assert s.cycle(made_s + took_s).binds
    return nodes


def test_without_any_wait_for_room_a_request_is_made_from_its_creation() -> None:
    s = Scheduler([], config(quota_gpus=64))
    _run_one(s, "g1", 0.0, 600.0)
    s.submit(gang("g2", at=1000.0), 1000.0)
    s.cycle(1000.0)
    e = s.estimate_details(1100.0)[JobId("g2")]
    assert e.start_s == 1600.0 and "has waited for room" in e.basis


@pytest.mark.parametrize(
    ("duration_s", "expected_s"),
    [
        (1800.0, 2100.0 + 1800.0 + 500.0 + 600.0),  # ends before its run end: + the lag
        (7200.0, 2100.0 + 3600.0 + 600.0),  # runs to its run end: taken back then, no lag
    ],
)
def test_a_request_waiting_for_room_starts_when_the_booking_ahead_is_left_and_made(
    duration_s: float, expected_s: float
) -> None:
    s = Scheduler([], config(quota_gpus=64, max_run="3600"))
    g0 = _run_one(s, "g0", 0.0, 600.0)
    s.finished(JobId("g0"), 1000.0)
    for n in g0:
        s.remove_node(n, 1500.0)  # the scale-down lag: 500 s
    s.submit(
        job("g1", tasks=2, gpu=whole(8, models=["H100"]), queue="ml/jobs", duration=duration_s),
        1500.0,
    )
    (r1,) = s.cycle(1500.0).provision
    s.provisioning_provisioned(r1.key, cloud_nodes(s, r1), 2100.0)
    assert s.cycle(2100.0).binds
    s.submit(gang("g2", at=2200.0), 2200.0)
    s.cycle(2200.0)
    # g2 waited 700 s, longer than making ever took (600 s), while g1 held its 2 nodes
    e = s.estimate_details(2900.0)[JobId("g2")]
    assert e.start_s == pytest.approx(expected_s)
    assert "held at most 2 nodes" in e.basis and "~10 min" in e.basis


def test_a_request_made_again_after_a_failure_keeps_its_place_in_the_queue() -> None:
    s = Scheduler([], config(quota_gpus=64, retry=RetryStrategy(3, 60.0, 60.0)))
    _run_one(s, "g1", 0.0, 600.0)  # runs 600..4200 s
    s.submit(gang("ga", at=700.0), 700.0)
    (ra,) = s.cycle(700.0).provision
    s.submit(gang("gb", at=1500.0), 1500.0)
    (rb,) = s.cycle(1500.0).provision
    s.provisioning_failed(ra.key, "not provisioned within 1300s", 2000.0)  # waited for room
    s.cycle(2000.0)
    (ra2,) = s.cycle(2060.0).provision  # ga asks again, after gb
    assert ra2.created_s > rb.created_s
    est = s.estimate_details(2100.0)
    # ga first: g1's room at 4200 s, made by 4800 s; gb after ga's run (3600 s) ends
    assert est[JobId("ga")].start_s == pytest.approx(4800.0)
    assert est[JobId("gb")].start_s == pytest.approx(4800.0 + 3600.0 + 600.0)
    assert "first asked at t=700s" in est[JobId("ga")].basis
    assert f"1 {DEFAULT_CLASS} request(s) ahead" in est[JobId("gb")].basis


def test_a_request_in_the_making_past_every_making_time_gets_no_start() -> None:
    s = Scheduler([], config(quota_gpus=64))
    g1 = _run_one(s, "g1", 0.0, 600.0)
    s.finished(JobId("g1"), 900.0)
    for n in g1:
        s.remove_node(n, 900.0)
    s.submit(gang("g2", at=1000.0), 1000.0)
    s.cycle(1000.0)
    # nothing of the class holds nodes: not waiting for room, only slow
    e = s.estimate_details(2000.0)[JobId("g2")]
    assert e.start_s is None and "longer than any of the last 1 " in e.basis


def test_a_request_made_by_hand_ahead_in_the_queue_holds_its_nodes_for_its_booking() -> None:
    s = Scheduler([], config(quota_gpus=64))
    _run_one(s, "g1", 0.0, 600.0)  # runs 600..4200 s and holds 2 nodes
    hand = s.create_provisioning_request(req("hand", ns="ops", pod_sets=(PS2,)), 650.0)
    s.provisioning_accepted(hand.key, 650.0)
    s.submit(gang("g2", at=700.0), 700.0)
    s.cycle(700.0)
    # both waited longer than making ever took (600 s): the class holds at most 2 nodes; the
    # hand-made request is first, gets g1's room at 4200 s, made by 4800 s, and holds it for
    # its booking (600 s): g2's room at 5400 s, made by 6000 s
    e = s.estimate_details(1400.0)[JobId("g2")]
    assert e.start_s == pytest.approx(6000.0)
    assert f"1 {DEFAULT_CLASS} request(s) ahead" in e.basis


# -- the runtimes of the jobs ahead ------------------------------------------------------------


def _learned(name: str, at: float = 0.0) -> Job:
    """A gang with nothing declared: its runtime is learned."""
    return job(name, tasks=2, gpu=whole(8, models=["H100"]), queue="ml/jobs", submit=at)


def _start(s: Scheduler, g: Job, made_s: float, took_s: float) -> list[str]:
    s.submit(g, made_s)
    (r,) = s.cycle(made_s).provision
    nodes = cloud_nodes(s, r)
    s.provisioning_provisioned(r.key, nodes, made_s + took_s)
    assert s.cycle(made_s + took_s).binds
    return nodes


def _one_end_then_waiting(s: Scheduler, g1_made_s: float) -> None:
    """g0 runs 5400 s (600..6000: the one end seen); g1 runs from ``g1_made_s + 600``; g2,
    made at 6100 s, waits longer than making ever took (600 s) while g1 holds the class's
    2 nodes."""
    g0 = _start(s, _learned("g0"), 0.0, 600.0)
    _start(s, _learned("g1", g1_made_s), g1_made_s, 600.0)
    s.finished(JobId("g0"), 6000.0)
    for n in g0:
        s.remove_node(n, 6000.0)  # no scale-down lag
    s.submit(_learned("g2", 6100.0), 6100.0)
    s.cycle(6100.0)


def test_a_run_that_outlived_every_end_is_expected_to_its_run_limit() -> None:
    s = Scheduler([], config(quota_gpus=64, max_run="10800"))
    _one_end_then_waiting(s, 0.0)
    # at 6800 s g1 has run 6200 s, longer than the one end (5400 s): what is left of the
    # runtimes past it is the run limit's, so its nodes go at its run end (600 + 10800 s),
    # not ~3500 s on (the learned mean, leaning on the limit as 3 jobs, less its age)
    e = s.estimate_details(6800.0)[JobId("g2")]
    assert e.start_s == pytest.approx(600.0 + 10800.0 + 600.0)


def test_a_run_younger_than_the_ends_seen_counts_the_run_limit_as_one_run() -> None:
    s = Scheduler([], config(quota_gpus=64, max_run="10800"))
    _one_end_then_waiting(s, 3000.0)
    # at 6800 s g1 (from 3600 s) has run 3200 s: the runtimes are the one end (5400 s) and the
    # run limit (what g1 may run: 10800 s) half and half, so 0.5 * 2200 + 0.5 * 7600 s are
    # left; the learned mean ((5400 + 3 * 10800) / 4 = 9450 s) would leave 6250 s
    e = s.estimate_details(6800.0)[JobId("g2")]
    assert e.start_s == pytest.approx(6800.0 + 0.5 * 2200.0 + 0.5 * 7600.0 + 600.0)


# -- jobs still waiting for their queue's quota ------------------------------------------------


def test_a_job_waiting_for_quota_is_made_when_its_queue_frees_it_and_the_next_after_that() -> None:
    s = Scheduler([], config(quota_gpus=16))  # one gang of 2 x 8 at a time
    _run_one(s, "g1", 0.0, 600.0)  # runs 600..4200 s (declared 3600 s)
    s.submit(gang("g2", at=700.0), 700.0)
    s.submit(gang("g3", at=800.0), 800.0)
    assert s.cycle(800.0).provision == []  # both wait for quota: no request yet
    est = s.estimate_details(900.0)
    # g2: the quota frees at g1's end (4200 s), its request is made then and takes the
    # class's making time (600 s); g3: when g2's run (3600 s) ends, the same
    assert est[JobId("g2")].start_s == pytest.approx(4800.0)
    assert est[JobId("g3")].start_s == pytest.approx(4800.0 + 3600.0 + 600.0)
    assert "waits for queue train's quota, expected free at t=4200s" in est[JobId("g2")].basis


def test_a_job_waiting_for_quota_nothing_frees_gets_no_start_and_says_why() -> None:
    s = Scheduler([], config(quota_gpus=16))
    s.submit(gang("g1"), 0.0)
    assert len(s.cycle(0.0).provision) == 1  # g1's request never provisioned: its quota held
    s.submit(gang("g2", at=100.0), 100.0)
    s.cycle(100.0)
    e = s.estimate_details(200.0)[JobId("g2")]
    assert e.start_s is None and "quota" in e.basis


def test_runtimes_from_the_first_end_count_the_run_limit_as_one_run() -> None:
    rt = Runtimes(default_runtime_s=3600.0)
    g = replace(_learned("g"), run_limit_s=10800.0)
    assert rt.from_first_end(g, 0.0) is None  # nothing ended: the forecast's own rule
    assert rt.from_first_end(gang("declared"), 0.0) is None  # a declared duration is known
    rt.started(_learned("a"), 0.0)
    rt.observe(_learned("a"), 5400.0)
    rt.stopped(_learned("a"), 0.0)
    got = rt.from_first_end(g, 6000.0)
    assert got is not None and _flat(got) == pytest.approx([5400.0, 0.5, 10800.0, 0.5])
    # a booking's maxRunDurationSeconds is the bound when the job has no run limit yet
    got = rt.from_first_end(_learned("c"), 6000.0, limit_s=7200.0)
    assert got is not None and _flat(got) == pytest.approx([5400.0, 0.5, 7200.0, 0.5])
    rt.started(_learned("b"), 0.0)  # still going at 6000 s, past the end: at least that long
    got = rt.from_first_end(g, 6000.0)
    assert got is not None and _flat(got) == pytest.approx([5400.0, 1 / 3, 10800.0, 2 / 3])


def _flat(d: list[tuple[float, float]]) -> list[float]:
    return [x for pt in d for x in pt]
