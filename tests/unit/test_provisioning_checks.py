"""The provisioning check's state is private: it changes only through its verbs (reserve,
start_booked, fail, cancel), and what it hands out cannot change it behind its back."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.core import JobId
from gpupool.core.provisioning import AdmissionChecks, CheckState, RetryStrategy
from gpupool.core.scheduler import Scheduler
from tests.builders import node
from tests.unit.test_provisioning import cloud_nodes, config, gang


def test_records_handed_out_are_frozen_copies() -> None:
    s = Scheduler([node("a0", gpu=8)], config())
    s.submit(gang("g"), 0.0)
    s.cycle(0.0)
    ac = s.checks
    assert ac is not None
    rec = ac.record(JobId("g"))
    assert rec is not None and rec.state is CheckState.PENDING and rec.attempts == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.state = CheckState.READY  # type: ignore[misc]
    state = ac.export()
    state.bookings[JobId("x")] = "ml/x-1"  # type: ignore[index]
    assert ac.booking_of(JobId("x")) is None
    assert not any(k for k in vars(ac) if not k.startswith("_"))


def test_fail_gives_back_the_quota_and_backs_off_then_rejects() -> None:
    s = Scheduler([node("a0", gpu=8)], config(retry=RetryStrategy(1, 60.0, 60.0)))
    s.submit(gang("g"), 0.0)
    (r,) = s.cycle(0.0).provision
    ac = s.checks
    assert ac is not None
    failure = ac.fail(JobId("g"), "stock-out", 10.0)
    assert failure.deleted == r.key and failure.released and ac.request(r.key) is None
    assert failure.record.state is CheckState.RETRY and failure.record.retry_at_s == 70.0
    assert failure.record.demand == {}
    (again,) = ac.due(70.0)
    assert again.state is CheckState.PENDING
    ac.reserve(JobId("g"), "h100", dict(failure.released), r.pod_sets, 70.0)
    assert ac.made(JobId("g")) == 2
    assert ac.fail(JobId("g"), "stock-out", 80.0).record.state is CheckState.REJECTED


def test_start_booked_holds_the_booking_until_the_job_ends() -> None:
    s = Scheduler([node("a0", gpu=8)], config())
    s.submit(gang("g"), 0.0)
    (r,) = s.cycle(0.0).provision
    s.provisioning_provisioned(r.key, cloud_nodes(s, r), 100.0)
    (bind,) = s.cycle(100.0).binds
    ac = s.checks
    assert isinstance(ac, AdmissionChecks)
    assert ac.booking_of(bind.job) == r.key and ac.record(bind.job) is None
    assert ac.export().submitted[bind.job].run_limit_s is None  # as submitted, uncut
    s.finished(bind.job, 200.0)
    assert ac.booking_of(bind.job) is None and ac.request(r.key) is None
    assert r.key in s.cycle(200.0).deprovision
