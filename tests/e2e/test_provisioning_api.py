"""Queued provisioning in ``gpupool serve --cloud``: a gang of the example queue ``burst`` waits
for its ProvisioningRequest, starts all at once on the nodes the simulated cloud made, is
stopped at the booking's run limit, and the nodes go once idle; all of it survives restarts of
the control plane (in-process, on a clock the test moves)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpupool.cloud.spec import load_cloud
from gpupool.config import load_cluster, load_documents
from gpupool.control.clock import Clock
from gpupool.control.plane import ControlPlane
from gpupool.store.sqlite import Store
from gpupool.virtual.cluster import VirtualCluster
from tests.e2e.serve_kit import (
    ADMIN,
    CLUSTER,
    NOTEBOOKS,
    QUEUES,
    RESEARCH,
    Wall,
    auth,
    client,
    holders_ok,
    job_doc,
)

A, R, N = auth(ADMIN), auth(RESEARCH), auth(NOTEBOOKS)
REQS = "/api/v1/provisioningrequests"
CLOUD = """\
apiVersion: gpupool.io/v1alpha1
kind: Cloud
metadata: {name: test-region}
spec:
  gpuQuota: 32
  provisioningDelay: 5m
  queueTimeout: 1h
  scaleDownAfter: 5m
  nodePools:
  - name: h100-cloud
    zones: [a, b]
    maxNodesPerZone: 4
    cpu: 192
    memory: 2Ti
    labels: {gpupool.io/flavor: h100-cloud}
    gpus: {model: H100-80GB, count: 8, memory: 80Gi}
"""


class Serve:
    """A control plane on one state file, started again at will, and its API client."""

    def __init__(self, tmp: Path) -> None:
        self.wall = Wall()
        self.state = tmp / "state.db"
        self.cloud = tmp / "cloud.yaml"
        self.cloud.write_text(CLOUD)
        self.start()

    def start(self) -> None:
        store = Store(self.state, wall=self.wall)
        new = store.meta("created") is None
        self.plane = ControlPlane(
            store,
            VirtualCluster(),
            Clock(1.0, wall=self.wall),
            nodes=load_cluster(CLUSTER) if new else [],
            queue_docs=load_documents(QUEUES) if new else [],
            cloud=load_cloud(str(self.cloud)),
            cloud_seed=3,
        )
        self.c = client(self.plane)

    def restart(self) -> None:
        self.plane.store.close()
        self.start()

    def tick(self, seconds: float = 0.0) -> None:
        self.wall.advance(seconds)
        self.plane.tick()

    def get(self, path: str, token: dict[str, str] = A) -> Any:
        r = self.c.get(path, headers=token)
        assert r.status_code == 200, r.text
        return r.json()

    def job(self, name: str) -> dict[str, Any]:
        return self.get(f"/api/v1/jobs/research/{name}", R)

    def requests(self) -> dict[str, dict[str, Any]]:
        items = self.get(REQS, R)["items"]
        return {f"{i['metadata']['namespace']}/{i['metadata']['name']}": i for i in items}

    def cloud_nodes(self) -> list[str]:
        nodes = self.get("/api/v1/nodes")["items"]
        assert holders_ok(nodes) == []  # no card over-committed, ever
        return sorted(n["name"] for n in nodes if n["name"].startswith("h100-cloud-"))


@pytest.fixture
def serve(tmp_path: Path) -> Serve:
    return Serve(tmp_path)


def gang(name: str, duration: str = "1h") -> dict[str, Any]:
    return job_doc(name, queue="burst", gpus=8, count=2, cpu=16, memory="64Gi", duration=duration)


def test_a_gang_waits_for_its_nodes_then_starts_whole_and_they_go_when_idle(serve: Serve) -> None:
    r = serve.c.post("/api/v1/jobs", json=gang("pretrain"), headers=R)
    assert r.status_code == 201, r.text
    serve.tick()
    (key,) = serve.requests()
    req = serve.requests()[key]
    assert req["job"] == "research/pretrain" and req["queue"] == "burst"
    assert req["spec"]["podSets"][0]["count"] == 2
    assert req["spec"]["parameters"] == {"maxRunDurationSeconds": "7200"}
    assert req["status"]["phase"] == "Accepted"
    job = serve.job("pretrain")
    assert job["status"]["phase"] == "Pending"
    assert "admission check dws Pending" in job["status"]["pendingReason"]
    assert serve.cloud_nodes() == []

    serve.restart()  # while the cloud makes the nodes
    serve.tick(240.0)
    assert serve.cloud_nodes() == [] and serve.job("pretrain")["status"]["phase"] == "Pending"
    serve.tick(61.0)  # past the 5-minute provisioning delay: both nodes at once, one zone
    nodes = serve.cloud_nodes()
    assert len(nodes) == 2 and len({n.split("-")[2] for n in nodes}) == 1
    assert list(serve.requests()) == [key]  # the same request, not a second one
    job = serve.job("pretrain")
    assert job["status"]["phase"] == "Running"
    assert sorted({p["node"] for p in job["status"]["placements"]}) == nodes
    assert serve.requests()[key]["status"]["consumeTimeSeconds"] is not None

    serve.restart()  # while it runs on its booking
    assert serve.job("pretrain")["status"]["phase"] == "Running"
    assert serve.cloud_nodes() == nodes
    serve.tick(3600.0)  # it ends; its request is deleted; its nodes idle
    assert serve.job("pretrain")["status"]["phase"] == "Succeeded"
    serve.tick(1.0)
    assert serve.requests() == {}
    assert serve.cloud_nodes() == nodes
    serve.tick(301.0)  # idle for scaleDownAfter: taken back
    assert serve.cloud_nodes() == []
    cloud = serve.get("/api/v1/cloud")
    (rec,) = cloud["requests"]
    assert rec["outcome"] == "consumed" and rec["nodes"] == 2 and cloud["gpusHeld"] == 0
    reasons = [e["reason"] for e in serve.get("/api/v1/events?limit=500")["items"]]
    for reason in (
        "Created",
        "Provisioned",
        "NodeProvisioned",
        "Admitted",
        "Completed",
        "NodeDeprovisioned",
    ):
        assert reason in reasons


def test_the_run_limit_stops_a_job_on_its_booking_and_survives_a_restart(serve: Serve) -> None:
    assert serve.c.post("/api/v1/jobs", json=gang("long", "3h"), headers=R).status_code == 201
    serve.tick()
    serve.tick(301.0)
    assert serve.job("long")["status"]["phase"] == "Running"
    serve.restart()
    serve.tick(7200.0 - 2.0)
    assert serve.job("long")["status"]["phase"] == "Running"
    serve.tick(3.0)
    job = serve.job("long")
    assert job["status"]["phase"] == "Failed" and "run limit" in job["status"]["message"]


def test_deleting_a_request_cancels_it_and_the_job_retries_under_a_new_name(serve: Serve) -> None:
    assert serve.c.post("/api/v1/jobs", json=gang("retry"), headers=R).status_code == 201
    serve.tick()
    (key,) = serve.requests()
    ns, name = key.split("/")
    assert serve.c.get(f"{REQS}/{ns}/{name}", headers=N).status_code == 404  # not theirs
    assert serve.c.delete(f"{REQS}/{ns}/{name}", headers=N).status_code == 404
    assert serve.get(REQS, N)["items"] == []
    assert serve.c.delete(f"{REQS}/{ns}/{name}", headers=R).status_code == 200
    assert serve.c.get(f"{REQS}/{ns}/{name}", headers=R).status_code == 404
    serve.tick()
    job = serve.job("retry")
    assert job["status"]["phase"] == "Pending" and "retry 1 of 3" in job["status"]["pendingReason"]
    serve.restart()  # the backoff is remembered
    serve.tick(59.0)
    assert serve.requests() == {}
    serve.tick(2.0)
    (again,) = serve.requests()
    assert again == key.removesuffix("-1") + "-2"
    serve.tick(301.0)
    assert serve.job("retry")["status"]["phase"] == "Running"
    assert [r["outcome"] for r in serve.get("/api/v1/cloud")["requests"]] == [
        "cancelled",
        "consumed",
    ]


def test_a_cancelled_job_leaves_no_request_and_no_node(serve: Serve) -> None:
    assert serve.c.post("/api/v1/jobs", json=gang("gone"), headers=R).status_code == 201
    serve.tick()
    assert len(serve.requests()) == 1
    assert serve.c.delete("/api/v1/jobs/research/gone", headers=R).status_code == 200
    serve.restart()
    serve.tick(400.0)
    assert serve.requests() == {} and serve.cloud_nodes() == []
    assert serve.get("/api/v1/cloud")["gpusHeld"] == 0


def test_a_queue_change_right_after_a_cancel_still_lets_the_nodes_go(serve: Serve) -> None:
    assert serve.c.post("/api/v1/jobs", json=gang("brief", "10m"), headers=R).status_code == 201
    serve.tick()
    serve.tick(301.0)
    assert serve.job("brief")["status"]["phase"] == "Running"
    assert len(serve.cloud_nodes()) == 2
    # cancelled: its request's deletion waits for the next cycle to reach the cloud
    assert serve.c.delete("/api/v1/jobs/research/brief", headers=R).status_code == 200
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "spare"},
    }
    r = serve.c.post("/api/v1/flavors", json=flavor, headers=A)  # rebuilds the scheduler
    assert r.status_code == 201, r.text
    serve.tick(1.0)
    serve.tick(301.0)
    assert serve.requests() == {} and serve.cloud_nodes() == []


def test_a_provisioned_nodes_request_label_names_nobody_to_other_tenants(serve: Serve) -> None:
    assert serve.c.post("/api/v1/jobs", json=gang("secret-plan"), headers=R).status_code == 201
    serve.tick()
    serve.tick(301.0)
    assert serve.job("secret-plan")["status"]["phase"] == "Running"
    assert serve.cloud_nodes()

    def cloud_nodes(token: dict[str, str]) -> list[dict[str, Any]]:
        return [
            n
            for n in serve.get("/api/v1/nodes", token)["items"]
            if n["name"].startswith("h100-cloud-")
        ]

    for n in cloud_nodes(A) + cloud_nodes(R):  # the admin and the owner see the request
        assert n["labels"]["gpupool.io/provisioning-request"].startswith("research.")
        assert any(t["value"].startswith("research.") for t in n["taints"])
    for n in cloud_nodes(N):  # another tenant does not learn the namespace or the job
        text = repr(n) + repr(serve.get(f"/api/v1/nodes/{n['name']}", N))
        assert "research" not in text and "secret-plan" not in text, text
        assert n["labels"]["gpupool.io/provisioning-request"] == "another-tenant"
