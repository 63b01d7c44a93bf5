"""The simulated cloud goes on after a restart exactly as if none happened: its snapshot, through
JSON, restored into a new Cloud beside a copy of the scheduler, gives the same requests, nodes and
outcomes as the original run."""

from __future__ import annotations

import copy
import json
from dataclasses import asdict
from pathlib import Path

from gpupool.cloud.region import Cloud, SchedulerHost
from gpupool.cloud.spec import CLOUD_KIND, parse_cloud
from gpupool.config.loader import read_documents
from gpupool.config.queues import queue_config_from_documents
from gpupool.core.model import JobId
from gpupool.core.scheduler import Scheduler
from tests.builders import job, whole

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "provisioning.yaml"


def _setup() -> tuple[Scheduler, Cloud]:
    docs = read_documents(EXAMPLE)
    (cloud_doc,) = [d for d in docs if d.kind == CLOUD_KIND]
    queues = [d for d in docs if d.kind not in (CLOUD_KIND, "Scenario", "Cluster")]
    sched = Scheduler([], queue_config_from_documents(queues))
    return sched, Cloud(parse_cloud(cloud_doc), SchedulerHost(sched), 7, 86_400.0)


class _Driver:
    """Ticks a scheduler and its cloud every 30 s; jobs end after their duration."""

    def __init__(self, sched: Scheduler, cloud: Cloud) -> None:
        self.sched, self.cloud = sched, cloud
        self.ends: dict[JobId, float] = {}
        self.log: list[tuple[float, str, str]] = []

    def run(self, t0: float, t1: float) -> None:
        t = t0
        while t < t1:
            for jid, end in sorted(self.ends.items(), key=lambda kv: kv[1]):
                if end <= t:
                    del self.ends[jid]
                    self.sched.finished(jid, t)
                    self.log.append((t, "finished", jid))
            for jid in self.cloud.advance(t):
                self.ends.pop(jid, None)
                self.log.append((t, "requeued", jid))
            out = self.sched.cycle(t)
            self.cloud.on_cycle(out, t)
            for b in out.binds:
                limit = self.sched.run_limit_s(b.job) or 1e12
                self.ends[b.job] = t + min(2 * 3600.0, limit)
                self.log.append((t, "bound", f"{b.job}@{sorted({p.node for p in b.placements})}"))
            t += 30.0


def test_a_restored_cloud_goes_on_as_the_original() -> None:
    sched, cloud = _setup()
    for i in range(6):
        sched.submit(
            job(
                f"g{i}",
                tasks=16,
                gpu=whole(8, models=["H100"]),
                queue="train/jobs",
                submit=i * 600.0,
                duration=7200.0,
            ),
            i * 600.0,
        )
    a = _Driver(sched, cloud)
    a.run(0.0, 2 * 3600.0)
    assert any(r.outcome == "provisioning" for r in cloud.run.requests.values()) or any(
        r.outcome in ("booked", "consumed") for r in cloud.run.requests.values()
    )
    # the restart: a copy of the scheduler (what the adapter restores), and a new cloud
    # restored from the snapshot through JSON
    snap = json.loads(json.dumps(cloud.snapshot()))
    sched2 = copy.deepcopy(sched)
    cloud2 = Cloud(cloud.spec, SchedulerHost(sched2), 7, 86_400.0)
    cloud2.restore(snap)
    b = _Driver(sched2, cloud2)
    b.ends = dict(a.ends)
    a.log.clear()
    a.run(2 * 3600.0, 12 * 3600.0)
    b.run(2 * 3600.0, 12 * 3600.0)
    assert b.log == a.log and len(a.log) >= 6
    names = [sorted(n.name for n in s.node_list()) for s in (sched, sched2)]
    assert names[0] == names[1]
    assert {k: asdict(r) for k, r in cloud2.run.requests.items()} == {
        k: asdict(r) for k, r in cloud.run.requests.items()
    }
    outcomes = {r.outcome for r in cloud.run.requests.values()}
    assert "consumed" in outcomes or "revoked" in outcomes
