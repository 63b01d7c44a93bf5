"""The control plane under any sequence of submissions, cancellations, cycles, node failures
and restarts from its state file: nothing acknowledged is lost, no card is over-committed,
running jobs keep their cards across a restart, and memory always agrees with the disk."""

from __future__ import annotations

import itertools
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpupool.config import load_cluster, load_documents
from gpupool.control import Clock, ControlPlane
from gpupool.core.errors import GpupoolError
from gpupool.store import Store
from gpupool.virtual import VirtualCluster

ROOT = Path(__file__).resolve().parents[2]
NODES = load_cluster(ROOT / "examples" / "cluster.yaml")
QUEUES = load_documents(ROOT / "examples" / "queues.yaml")
TARGETS = [
    ("research", "llm", "A100-80GB"),
    ("research", "vision", "A100-80GB"),
    ("serving", "serving", "T4"),
    ("notebooks", "notebooks", None),
]
_dirs = itertools.count()


class FakeWall:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def shape(kind: int) -> dict[str, object]:
    if kind == 0:
        return {"count": 1}
    if kind == 1:
        return {"count": 8}
    if kind == 2:
        return {"milli": 300, "memory": "4Gi"}
    return {"milli": 700, "memory": "10Gi"}


class PlaneMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.dir = Path(tempfile.mkdtemp(prefix=f"plane-{next(_dirs)}-"))
        self.path = self.dir / "state.db"
        self.wall = FakeWall()
        self.acked: set[str] = set()
        self.cancelled: set[str] = set()
        self.n = 0
        self.plane = self._open(seed=True)

    def _open(self, seed: bool = False) -> ControlPlane:
        return ControlPlane(
            Store(self.path, wall=self.wall),
            VirtualCluster(),
            Clock(60.0, wall=self.wall),
            nodes=NODES if seed else (),
            queue_docs=QUEUES if seed else (),
        )

    @rule(
        where=st.integers(0, len(TARGETS) - 1),
        kind=st.integers(0, 3),
        count=st.integers(1, 3),
        minutes=st.integers(1, 30),
    )
    def submit(self, where: int, kind: int, count: int, minutes: int) -> None:
        ns, queue, model = TARGETS[where]
        self.n += 1
        gpu = {"mig": "1g.5gb"} if model is None else shape(kind)
        doc = {
            "metadata": {"name": f"j{self.n}", "namespace": ns},
            "spec": {
                "queue": queue,
                "duration": f"{minutes}m",
                "podSets": [{"count": count, "cpu": 1, "memory": "1Gi", "gpu": gpu}],
            },
        }
        try:
            rec = self.plane.submit(doc)
        except GpupoolError:
            return
        self.acked.add(rec.key)

    @rule(seconds=st.floats(0.1, 40.0))
    def tick(self, seconds: float) -> None:
        self.wall.t += seconds
        self.plane.tick()

    @precondition(lambda self: bool(self.acked - self.cancelled))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        live = sorted(k for k in self.acked - self.cancelled if k in self.plane.jobs)
        if not live:
            return
        key = data.draw(st.sampled_from(live))
        if self.plane.jobs[key].phase in ("Pending", "Running"):
            self.plane.cancel(key)
            self.cancelled.add(key)

    @rule(node=st.sampled_from([n.name for n in NODES if n.gpus]), failed=st.booleans())
    def fail_or_recover(self, node: str, failed: bool) -> None:
        self.plane.set_node(node, failed=failed)

    @rule()
    def crash_and_restart(self) -> None:
        before = {
            k: (r.phase, tuple((p.node, p.shares) for p in r.placements))
            for k, r in self.plane.jobs.items()
        }
        self.plane = self._open()  # the old one is dropped without closing: a crash
        for key, (phase, cards) in before.items():
            rec = self.plane.jobs[key]
            assert rec.phase == phase, key
            if phase == "Running":
                assert tuple((p.node, p.shares) for p in rec.placements) == cards

    @invariant()
    def nothing_acknowledged_is_lost(self) -> None:
        assert self.acked <= set(self.plane.jobs)

    @invariant()
    def no_card_over_committed(self) -> None:
        t = self.plane.scheduler.node_table()
        live = t.live()
        assert (t.used_milli[live] <= 1000).all()
        assert (t.used_mib[live] <= t.gpu_mem_cap[live]).all()
        assert (t.cpu_free[live] >= 0).all() and (t.mem_free[live] >= 0).all()
        held: dict[tuple[str, int], int] = {}
        for rec in self.plane.jobs.values():
            if rec.phase in ("Pending", "Running"):  # ended jobs keep where they ran
                assert (rec.phase == "Running") == bool(rec.placements), rec.key
            if rec.phase != "Running":
                continue
            for p in rec.placements:
                for s in p.shares:
                    if s.mig_profile is None:
                        held[(p.node, s.index)] = held.get((p.node, s.index), 0) + s.gpu_milli
        assert all(v <= 1000 for v in held.values())

    @invariant()
    def memory_agrees_with_disk(self) -> None:
        rows = {r.key: r for r in self.plane.store.jobs()}
        assert set(rows) == set(self.plane.jobs)
        for key, rec in self.plane.jobs.items():
            assert rows[key].phase == rec.phase, key
            assert len(rows[key].placements) == len(rec.placements), key


PlaneMachine.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_control_plane_recovery = PlaneMachine.TestCase
