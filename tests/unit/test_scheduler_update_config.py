"""A new queue configuration applied in place: running jobs, usage and pending jobs kept."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.core import ConfigError, ConflictError, JobId
from gpupool.core.quota import LocalQueue, QueueConfig, Resource
from gpupool.core.scheduler import Scheduler
from tests.builders import job, node, queue_config, whole

G = ("gpu", Resource.GPU_MILLI)


def used(s: Scheduler, q: str) -> int:
    return s.usage(q).get(G, 0) // 1000


def test_a_quota_raise_admits_pending_jobs_without_a_rebuild() -> None:
    s = Scheduler([node("n0", gpu=8)], queue_config({"a": 2, "b": 2}, cohort=None))
    for i in range(4):
        s.submit(job(f"a{i}", gpu=whole(1), queue="a"), 0)
    assert len(s.cycle(0).binds) == 2
    state, ledger = s._state, s.ledger
    before = ledger.value("a", "default", 1)
    dropped = s.update_config(queue_config({"a": 4, "b": 2}, cohort=None))
    assert dropped == []
    # the same cluster state and ledger: nothing rebuilt, usage kept
    assert s._state is state and s.ledger is ledger
    assert ledger.value("a", "default", 1) == before
    assert used(s, "a") == 2  # the running jobs are charged to the new tree
    assert {str(r.job.id) for r in s.running()} == {"a0", "a1"}
    r = s.cycle(1)
    assert sorted(str(b.job) for b in r.binds) == ["a2", "a3"]
    assert used(s, "a") == 4
    s.finished(JobId("a0"), 2)  # a job admitted before the change is released from the new tree
    assert used(s, "a") == 3


def test_a_quota_cut_keeps_running_jobs_and_stops_new_admissions() -> None:
    s = Scheduler([node("n0", gpu=8)], queue_config({"a": 4}, cohort=None))
    for i in range(5):
        s.submit(job(f"a{i}", gpu=whole(1), queue="a"), 0)
    assert len(s.cycle(0).binds) == 4
    s.update_config(queue_config({"a": 1}, cohort=None))
    r = s.cycle(1)
    assert not r.binds and not r.evicts  # over the new quota: nothing evicted for that
    assert used(s, "a") == 4
    assert [str(p.job.id) for p in s.pending()] == ["a4"]


def test_pending_jobs_keep_their_order_and_move_with_their_local_queue() -> None:
    base = queue_config({"a": 1, "b": 1}, cohort=None)
    config = dataclasses.replace(base, local_queues=(LocalQueue("team", "a", "ns"),))
    s = Scheduler([node("n0", gpu=8)], config)
    for i in range(3):
        s.submit(job(f"j{i}", gpu=whole(1), queue="ns/team", submit=float(i)), 0)
    s.cycle(0)
    moved = dataclasses.replace(base, local_queues=(LocalQueue("team", "b", "ns"),))
    assert s.update_config(moved) == []
    assert {p.queue for p in s.pending()} == {"b"}
    r = s.cycle(1)
    assert [str(b.job) for b in r.binds] == ["j1"]  # the oldest pending job first


def test_pending_jobs_of_a_removed_queue_are_returned() -> None:
    s = Scheduler([node("n0", gpu=8)], queue_config({"a": 1, "b": 1}, cohort=None))
    s.submit(job("x", gpu=whole(1), queue="a"), 0)  # pending: no cycle has run
    dropped = s.update_config(queue_config({"b": 1}, cohort=None))
    assert [str(p.job.id) for p in dropped] == ["x"]
    assert s.pending() == []


def test_a_queue_holding_running_jobs_cannot_disappear() -> None:
    s = Scheduler([node("n0", gpu=8)], queue_config({"a": 2, "b": 1}, cohort=None))
    s.submit(job("x", gpu=whole(1), queue="a"), 0)
    s.cycle(0)
    tree = s.tree
    with pytest.raises(ConflictError, match=r"ClusterQueue a .* still holds quota for 1 job"):
        s.update_config(queue_config({"b": 1}, cohort=None))
    assert s.tree is tree and used(s, "a") == 1  # nothing changed


def test_an_invalid_configuration_changes_nothing() -> None:
    s = Scheduler([node("n0", gpu=8)], queue_config({"a": 2}, cohort=None))
    config = s.config
    bad = QueueConfig(cluster_queues=config.cluster_queues)  # its flavor is gone
    with pytest.raises(ConfigError, match="is not a ResourceFlavor"):
        s.update_config(bad)
    with pytest.raises(ConfigError) as info:
        s.update_config(queue_config({"a": 2}, cohort=None, usage_half_life_s=60.0))
    assert info.value.field == "settings.usage_half_life_s"
    assert s.config is config
