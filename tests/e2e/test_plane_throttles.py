"""The control plane's throttles read the clock it is given (``Clock.monotonic``), not the
process's: a test moves them by hand. The dashboard's history is sampled once a second, wait
estimates are refreshed at most once a second, and pending Elastic GPU claims are tried again
every two seconds when nothing ended; cluster time (``--speed``) does not speed them up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpupool.config import load_cluster, load_documents
from gpupool.control import history
from gpupool.control.clock import Clock
from gpupool.control.elastic import RECONCILE_EVERY_S, ElasticService
from gpupool.control.plane import ControlPlane
from gpupool.control.records import ESTIMATE_EVERY_S, HISTORY_EVERY_S
from gpupool.core.model import JobId
from gpupool.store.sqlite import Store
from gpupool.virtual.cluster import VirtualCluster
from tests.e2e.serve_kit import CLUSTER, QUEUES, Wall, job_doc


def plane_on(tmp_path: Path, wall: Wall, ticks: Wall, speed: float = 60.0) -> ControlPlane:
    return ControlPlane(
        Store(tmp_path / "state.db", wall=wall),
        VirtualCluster(),
        Clock(speed, wall=wall, monotonic=ticks),
        nodes=load_cluster(CLUSTER),
        queue_docs=load_documents(QUEUES),
    )


def test_history_is_sampled_by_the_injected_clock_not_by_cluster_time(tmp_path: Path) -> None:
    wall, ticks = Wall(), Wall(start=0.0)  # the throttle's source may start anywhere
    plane = plane_on(tmp_path, wall, ticks)
    plane.tick()
    assert len(plane.history) == 1  # the first tick samples, whatever the source reads
    wall.advance(30)  # 30 wall seconds are 30 minutes of cluster time at --speed 60 ...
    plane.tick()
    assert len(plane.history) == 1  # ... but the throttle's own seconds have not moved
    ticks.advance(HISTORY_EVERY_S)
    plane.tick()
    assert [s["time_s"] for s in plane.history] == [0.0, 1800.0]


def test_estimates_are_refreshed_once_the_injected_clock_moves(tmp_path: Path) -> None:
    wall, ticks = Wall(), Wall(start=5.0)
    plane = plane_on(tmp_path, wall, ticks)
    assert history.estimates(plane) == {}
    plane.submit(job_doc("waits", gpus=8, models=["H100-80GB"]))
    assert history.estimates(plane) == {}  # within the second: the last answer
    ticks.advance(ESTIMATE_EVERY_S)
    assert JobId("research/waits") in history.estimates(plane)


def _h100_claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "elasticgpu.io/v1alpha1",
        "kind": "ElasticGPUClaim",
        "metadata": {"name": name, "namespace": "research"},
        "spec": {"className": "cards", "requests": {"cards": 8}},
    }


def test_pending_claims_are_tried_again_by_the_injected_clock(tmp_path: Path) -> None:
    wall, ticks = Wall(), Wall(start=0.0)
    plane = plane_on(tmp_path, wall, ticks)
    service = ElasticService.of(plane)
    service.put_class(
        {
            "apiVersion": "elasticgpu.io/v1alpha1",
            "kind": "ElasticGPUClass",
            "metadata": {"name": "cards"},
            "provisioner": "physical",
            "parameters": {"models": "H100-80GB"},
        },
        create=True,
    )
    bound = [service.submit(_h100_claim(f"c{i}")) for i in range(3)]
    assert [c.phase.value for c in bound] == ["Bound", "Bound", "Pending"]  # two H100 nodes
    plane.tick()  # the first tick tries the pending claim: still no room
    h100 = {
        "name": "h100-more",
        "count": 1,
        "cpu": 192,
        "memory": "2Ti",
        "labels": {"gpupool.io/flavor": "h100"},
        "gpus": {"model": "H100-80GB", "count": 8, "memory": "80Gi"},
    }
    plane.add_nodes(h100)  # room now, but no job ended: only the throttle tries again
    wall.advance(60)
    plane.tick()
    assert service.claim("research/c2").phase.value == "Pending"
    ticks.advance(RECONCILE_EVERY_S)
    plane.tick()
    claim = service.claim("research/c2")
    assert claim.phase.value == "Bound" and claim.node == "h100-more-0"
