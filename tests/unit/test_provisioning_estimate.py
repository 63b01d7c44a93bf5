"""Wait estimates for jobs waiting on a ProvisioningRequest: learned from the ledger's own
requests (creation to Provisioned, per provisioning class)."""

from __future__ import annotations

import pytest

from gpupool.core import JobId
from gpupool.core.provisioning import RequestLedger
from gpupool.core.provisioning.ledger import LEARN_LAST
from gpupool.core.scheduler import Scheduler
from tests.builders import node
from tests.unit.test_provisioning import cloud_nodes, config, gang, req


def test_the_ledger_learns_the_median_of_its_latest_requests_per_class() -> None:
    ledger = RequestLedger()
    assert ledger.learned("queued") is None
    for i in range(LEARN_LAST + 8):
        r = ledger.create(req(f"r{i}", provisioning_class_name="queued"), 1000.0 * i)
        # the first 8 took an hour, the latest LEARN_LAST took 100..100+LEARN_LAST-1 seconds
        took = 3600.0 if i < 8 else 100.0 + (i - 8)
        ledger.provisioned(r.key, ["n"], 1000.0 * i + took)
    learned = ledger.learned("queued")
    assert learned is not None and learned.samples == learned.learned_from == LEARN_LAST
    assert learned.median_s == pytest.approx(100.0 + (LEARN_LAST - 1) / 2)
    # a request that has waited 120 s already: only those that took 120 s or more count
    longer = ledger.learned("queued", 120.0)
    assert longer is not None and longer.samples == LEARN_LAST - 20
    assert longer.median_s == pytest.approx(120.0 + (LEARN_LAST - 21) / 2)
    past = ledger.learned("queued", 1e6)
    assert past is not None and past.median_s is None and past.samples == 0
    assert ledger.learned("other") is None  # another class learns nothing from these
    # provisioned again (a no-op) is not learned twice
    ledger.provisioned(f"team/r{LEARN_LAST + 7}", ["n"], 1e9)
    assert ledger.learned("queued") == learned


def test_a_restored_provisioned_request_counts_to_the_learned_time() -> None:
    old = RequestLedger()
    r = old.create(req("r"), 50.0)
    r = old.provisioned(r.key, ["n"], 350.0)
    new = RequestLedger()
    new.restore(r)
    learned = new.learned(r.provisioning_class_name)
    assert learned is not None and (learned.median_s, learned.samples) == (300.0, 1)


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
