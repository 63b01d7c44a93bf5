"""``gpupool serve`` on a mixed NVIDIA / Ascend / DCU cluster: jobs with alternatives fall back
to another vendor's cards, the API says which form runs, and the cards keep their vendor and
division rule, and running jobs the form they run as, across a restart and a ``kill -9``."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from gpupool.config import load_cluster, load_documents
from gpupool.control import Clock, ControlPlane
from gpupool.core.model import JobId
from gpupool.store import Store
from gpupool.virtual import VirtualCluster
from tests.e2e.serve_kit import ADMIN, Server, Wall, auth, client, job_doc, serving

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "examples" / "cluster-heterogeneous.yaml"
QUEUES = REPO / "examples" / "queues-heterogeneous.yaml"


def plane(state: Path, wall: Wall) -> ControlPlane:
    store = Store(state, wall=wall)
    new = store.meta("created") is None
    return ControlPlane(
        store,
        VirtualCluster(),
        Clock(1.0, wall=wall),
        nodes=load_cluster(CLUSTER) if new else [],
        queue_docs=load_documents(QUEUES) if new else [],
    )


def fallback_job(name: str) -> dict[str, object]:
    return job_doc(
        name,
        namespace="t1",
        queue="jobs",
        gpus=8,
        models=["H100-80GB"],
        duration="1h",
        alternatives=[
            {
                "name": "ascend",
                "gpu": {"count": 8, "models": ["Ascend910B3"]},
                "image": "train:cann8",
                "env": {"ASCEND_RT_VISIBLE_DEVICES": "auto"},
            },
            {"name": "dcu", "gpu": {"count": 8, "models": ["K100"]}, "image": "train:dtk24"},
        ],
    )


def test_jobs_fall_back_across_vendors_and_cards_keep_their_vendor(tmp_path: Path) -> None:
    wall = Wall()
    state = tmp_path / "state.db"
    p = plane(state, wall)
    http = client(p)
    for i in range(6):  # 4 H100 nodes: two jobs must run as alternatives
        r = http.post("/api/v1/jobs", json=fallback_job(f"j{i}"), headers=auth(ADMIN))
        assert r.status_code == 201, r.text
    p.tick()
    status = {
        f"j{i}": http.get(f"/api/v1/jobs/t1/j{i}", headers=auth(ADMIN)).json()["status"]
        for i in range(6)
    }
    assert all(s["phase"] == "Running" for s in status.values()), status
    forms = sorted((s["flavor"], s.get("alternative", "")) for s in status.values())
    assert forms == [("ascend", "ascend")] * 2 + [("h100", "")] * 4
    view = http.get("/api/v1/nodes/ascend-0", headers=auth(ADMIN)).json()
    assert {g["vendor"] for g in view["gpus"]} == {"ascend"}
    assert {g["division"] for g in view["gpus"]} == {"templates"}
    assert all(g["holders"] for g in view["gpus"])
    p.store.close()
    again = plane(state, wall)  # a restart: the state file alone rebuilds the cluster
    for i in range(6):  # each running job runs on in the form it was admitted in
        after = client(again).get(f"/api/v1/jobs/t1/j{i}", headers=auth(ADMIN)).json()
        assert after["status"].get("alternative", "") == status[f"j{i}"].get("alternative", "")
        running = again.scheduler.running_job(JobId(f"t1/j{i}"))
        assert running is not None
        assert running.alternative == status[f"j{i}"].get("alternative", "")
    view = client(again).get("/api/v1/nodes/dcu-0", headers=auth(ADMIN)).json()
    assert {(g["vendor"], g["division"], g["relativeCapacity"]) for g in view["gpus"]} == {
        ("hygon", "free", 0.5)
    }
    assert again.scheduler.node_table().plain is False
    again.store.close()


def forms_of(c: Any) -> dict[str, tuple[str, str, str]]:
    """Each job's (phase, flavor, alternative) as the API serves it."""
    out = {}
    for i in range(6):
        st = c.get(f"/api/v1/jobs/t1/j{i}").json()["status"]
        out[f"j{i}"] = (st["phase"], st["flavor"], st.get("alternative", ""))
    return out


def test_kill_9_keeps_the_form_each_running_job_runs_as(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    het = ("--cluster", str(CLUSTER), "--queues", str(QUEUES))
    server = Server(state, interval=0.05, extra=het)
    try:
        server.wait_ready()
        with server.client() as c:
            for i in range(6):
                r = c.post("/api/v1/jobs", json=fallback_job(f"j{i}"))
                assert r.status_code == 201, r.text
            deadline = time.monotonic() + 30
            while any(ph != "Running" for ph, _, _ in forms_of(c).values()):
                assert time.monotonic() < deadline, forms_of(c)
                time.sleep(0.1)
            before = forms_of(c)
        server.kill9()
    finally:
        server.stop()
    assert (
        sorted(before.values())
        == [("Running", "ascend", "ascend")] * 2 + [("Running", "h100", "")] * 4
    )
    db = sqlite3.connect(state)
    try:  # on disk as the killed process left it
        on_disk = dict(db.execute("SELECT key, alternative FROM jobs").fetchall())
    finally:
        db.close()
    assert on_disk == {f"t1/{k}": alt for k, (_, _, alt) in before.items()}
    with serving(state, interval=3600.0, extra=het) as again, again.client() as c:
        assert forms_of(c) == before  # read back, no cycle run
