"""Wait estimates for jobs waiting on a ProvisioningRequest: learned from the ledger's own
requests (creation to Provisioned, per provisioning class)."""

from __future__ import annotations

import pytest

from gpupool.core import JobId
from gpupool.core.provisioning import RequestLedger
from gpupool.core.provisioning.history import LEARN_LAST
from gpupool.core.scheduler import Scheduler
from tests.builders import node
from tests.unit.test_provisioning import cloud_nodes, config, gang, req


def test_the_ledger_learns_from_its_latest_requests_per_class() -> None:
    ledger = RequestLedger()
    assert ledger.capacity("queued").delays == ()
    for i in range(LEARN_LAST + 8):
        r = ledger.create(req(f"r{i}", provisioning_class_name="queued"), 1000.0 * i)
        # the first 8 took an hour, the latest LEARN_LAST took 100..100+LEARN_LAST-1 seconds
        took = 3600.0 if i < 8 else 100.0 + (i - 8)
        ledger.provisioned(r.key, [f"n{i}"], 1000.0 * i + took)
    cap = ledger.capacity("queued")
    assert cap.delays == tuple(100.0 + k for k in range(LEARN_LAST))
    assert cap.delay() == (pytest.approx(100.0 + (LEARN_LAST - 1) / 2), LEARN_LAST)
    # a request in the making 120 s already: only those that took 120 s or more count
    assert cap.delay(120.0) == (pytest.approx(120.0 + (LEARN_LAST - 21) / 2), LEARN_LAST - 20)
    assert cap.delay(1e6) == (None, 0)
    assert ledger.capacity("other").delays == ()  # another class learns nothing from these
    # provisioned again (a no-op) is not learned twice
    ledger.provisioned(f"team/r{LEARN_LAST + 7}", ["n"], 1e9)
    assert ledger.capacity("queued") == cap


def test_a_restored_provisioned_request_counts_to_the_learned_time_and_the_held_nodes() -> None:
    old = RequestLedger()
    r = old.create(req("r"), 50.0)
    r = old.provisioned(r.key, ["n0", "n1"], 350.0)
    new = RequestLedger()
    new.restore(r)
    cap = new.capacity(r.provisioning_class_name)
    assert (cap.delays, cap.held_nodes) == ((300.0,), 2)
    new.delete(r.key, 400.0)
    new.node_left("n0", 1000.0)
    new.node_left("n1", 1000.0)
    cap = new.capacity(r.provisioning_class_name)
    assert (cap.held_nodes, cap.lag_s) == (0, 600.0)


def test_a_job_waiting_on_its_request_is_expected_when_its_class_provisions_lately() -> None:
    s = Scheduler([node("a0", gpu=8)], config())
    s.submit(gang("g1"), 0.0)
    (r1,) = s.cycle(0.0).provision
    # nothing learned yet: no start foreseen
    assert s.estimates(10.0)[JobId("g1")] == (0, None)
    s.provisioning_provisioned(r1.key, cloud_nodes(s, r1), 600.0)
    assert s.cycle(600.0).binds  # g1 starts on its nodes
    s.submit(gang("g2", at=1000.0), 1000.0)
    (r2,) = s.cycle(1000.0).provision
    assert r2.created_s == 1000.0
    details = s.estimate_details(1100.0)[JobId("g2")]
    assert details.start_s == 1600.0  # made at 1000 s, provisioning took 600 s here
    assert "~10 min" in details.basis and "learned from 1 " in details.basis
    # waited longer than making capacity ever took while g1 holds its nodes: it waits for
    # room, when g1 ends (started at 600 s, declared 3600 s), then the making time
    late = s.estimate_details(2000.0)[JobId("g2")]
    assert late.start_s == 4800.0 and "held at most 2 nodes" in late.basis
    s.provisioning_provisioned(r2.key, cloud_nodes(s, r2), 2100.0)
    assert s.estimates(2100.0)[JobId("g2")] == (0, 2100.0)  # booked: the next cycle
