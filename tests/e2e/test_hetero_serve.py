"""``gpupool serve`` on a mixed NVIDIA / Ascend / DCU cluster: jobs with alternatives fall back
to another vendor's cards, the API says which form runs, and the cards keep their vendor and
division rule across a restart."""

from __future__ import annotations

from pathlib import Path

from gpupool.config import load_cluster, load_documents
from gpupool.control import Clock, ControlPlane
from gpupool.store import Store
from gpupool.virtual import VirtualCluster
from tests.e2e.serve_kit import ADMIN, Wall, auth, client, job_doc

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "examples" / "cluster-heterogeneous.yaml"
QUEUES = REPO / "examples" / "queues-heterogeneous.yaml"


def plane(state: Path, wall: Wall) -> ControlPlane:
    store = Store(state, wall=wall)
    new = store.meta("created") is None
    return ControlPlane(store, VirtualCluster(), Clock(1.0, wall=wall),
                        nodes=load_cluster(CLUSTER) if new else [],
                        queue_docs=load_documents(QUEUES) if new else [])


def fallback_job(name: str) -> dict[str, object]:
    return job_doc(name, namespace="t1", queue="jobs", gpus=8, models=["H100-80GB"],
                   duration="1h", alternatives=[
                       {"name": "ascend", "gpu": {"count": 8, "models": ["Ascend910B3"]},
                        "image": "train:cann8", "env": {"ASCEND_RT_VISIBLE_DEVICES": "auto"}},
                       {"name": "dcu", "gpu": {"count": 8, "models": ["K100"]},
                        "image": "train:dtk24"}])


def test_jobs_fall_back_across_vendors_and_cards_keep_their_vendor(tmp_path: Path) -> None:
    wall = Wall()
    state = tmp_path / "state.db"
    p = plane(state, wall)
    http = client(p)
    for i in range(6):  # 4 H100 nodes: two jobs must run as alternatives
        r = http.post("/api/v1/jobs", json=fallback_job(f"j{i}"), headers=auth(ADMIN))
        assert r.status_code == 201, r.text
    p.tick()
    status = {f"j{i}": http.get(f"/api/v1/jobs/t1/j{i}", headers=auth(ADMIN)).json()["status"]
              for i in range(6)}
    assert all(s["phase"] == "Running" for s in status.values()), status
    forms = sorted((s["flavor"], s.get("alternative", "")) for s in status.values())
    assert forms == [("ascend", "ascend")] * 2 + [("h100", "")] * 4
    view = http.get("/api/v1/nodes/ascend-0", headers=auth(ADMIN)).json()
    assert {g["vendor"] for g in view["gpus"]} == {"ascend"}
    assert {g["division"] for g in view["gpus"]} == {"templates"}
    assert all(g["holders"] for g in view["gpus"])
    p.store.close()
    again = plane(state, wall)  # a restart: the state file alone rebuilds the cluster
    view = client(again).get("/api/v1/nodes/dcu-0", headers=auth(ADMIN)).json()
    assert {(g["vendor"], g["division"], g["relativeCapacity"]) for g in view["gpus"]} == {
        ("hygon", "free", 0.5)}
    assert again.scheduler.node_table().plain is False
    again.store.close()
