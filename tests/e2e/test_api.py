"""The REST API of ``gpupool serve``, end to end.

In-process: the app over a control plane on a temporary state file, the example cluster and
queues, and a wall clock the test moves; ``tick()`` is the scheduling loop, called by the test,
so every step is deterministic. What a 201 promises is checked in the file itself, through a
second connection. Then one smoke test through a real ``gpupool serve`` process.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpupool.control import ControlPlane
from gpupool.control import history as history_module
from gpupool.core.errors import AdapterError
from gpupool.store import Store
from tests.e2e.serve_kit import (
    ADMIN,
    RESEARCH,
    SERVING,
    TestClient,
    Wall,
    auth,
    client,
    dump,
    holders_ok,
    job_doc,
    job_row,
    make_plane,
    pretty,
    serving,
)


@dataclass
class Svc:
    state: Path
    wall: Wall
    plane: ControlPlane
    http: TestClient

    def submit(self, doc: dict[str, Any], token: str = ADMIN, code: int = 201) -> dict[str, Any]:
        r = self.http.post("/api/v1/jobs", json=doc, headers=auth(token))
        assert r.status_code == code, r.text
        out: dict[str, Any] = r.json()
        return out

    def get(self, path: str, token: str = ADMIN, code: int = 200, **params: Any) -> Any:
        r = self.http.get(path, headers=auth(token), params=params)
        assert r.status_code == code, r.text
        return r.json()

    def send(
        self, method: str, path: str, body: Any = None, token: str = ADMIN, code: int = 200
    ) -> Any:
        r = self.http.request(method, path, json=body, headers=auth(token))
        assert r.status_code == code, r.text
        return r.json()

    def status(self, key: str) -> dict[str, Any]:
        out: dict[str, Any] = self.get(f"/api/v1/jobs/{key}")["status"]
        return out

    def tick(self, minutes: float = 0.0) -> None:
        self.wall.advance(minutes * 60)
        self.plane.tick()

    def reopen(self) -> Svc:
        """The same state file opened again, as after a restart."""
        self.plane.store.close()
        plane = make_plane(self.state, self.wall)
        return Svc(self.state, self.wall, plane, client(plane))


@pytest.fixture
def svc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Svc]:
    monkeypatch.setattr(history_module, "ESTIMATE_EVERY_S", 0.0)  # estimates on every read
    wall = Wall()
    state = tmp_path / "state.db"
    plane = make_plane(state, wall)
    yield Svc(state, wall, plane, client(plane))
    plane.store.close()


def cards(svc: Svc, node: str) -> dict[int, list[str]]:
    """Card index -> the jobs holding it."""
    view = svc.get(f"/api/v1/nodes/{node}")
    return {g["index"]: [h["job"] for h in g["holders"]] for g in view["gpus"]}


def busy_nodes(svc: Svc) -> set[str]:
    return {
        n["name"] for n in svc.get("/api/v1/nodes")["items"] if any(g["holders"] for g in n["gpus"])
    }


# -- service routes ----------------------------------------------------------------------------


def test_health_needs_no_token_and_whoami_names_the_caller(svc: Svc) -> None:
    assert svc.http.get("/healthz").json()["status"] == "ok"
    assert svc.get("/api/v1/whoami") == {"name": "admin", "role": "admin", "namespaces": None}
    assert svc.get("/api/v1/whoami", RESEARCH) == {
        "name": "research",
        "role": "tenant",
        "namespaces": ["research"],
    }


def test_the_spec_and_the_dashboard_are_served(svc: Svc) -> None:
    assert svc.http.get("/openapi.json").status_code == 401  # the spec needs a token too
    spec = svc.get("/openapi.json", RESEARCH)
    assert {"/api/v1/jobs", "/api/v1/nodes/{name}", "/api/v1/events"} <= set(spec["paths"])
    assert "/api/v1/jobs/{namespace}/{name}/cancel" in spec["paths"]
    page = svc.http.get("/")
    assert page.status_code == 200 and "<html" in page.text.lower()


def test_the_dashboard_and_the_api_carry_security_headers(svc: Svc) -> None:
    for path, token in (
        ("/", None),
        ("/static/app.js", None),
        ("/api/v1/cluster", ADMIN),
        ("/api/v1/nope", ADMIN),
    ):
        r = svc.http.get(path, headers=auth(token) if token else {})
        csp = dict(
            part.strip().split(" ", 1) for part in r.headers["content-security-policy"].split(";")
        )
        assert csp["script-src"] == "'self'" and csp["default-src"] == "'none'", path
        assert csp["frame-ancestors"] == "'none'" and csp["connect-src"] == "'self'"
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"


# -- submit ------------------------------------------------------------------------------------


def test_submit_answers_201_only_once_the_job_is_on_disk(svc: Svc) -> None:
    view = svc.submit(job_doc("train", gpus=2))
    assert view["metadata"]["name"] == "train" and view["metadata"]["uid"] == 1
    assert view["status"]["phase"] == "Pending"
    assert view["status"]["clusterQueue"] == "llm"
    row = job_row(svc.state, "research/train")
    assert row is not None
    assert (row["phase"], row["queue"], row["namespace"], row["uid"]) == (
        "Pending",
        "research/llm",
        "research",
        1,
    )
    assert '"count": 2' in row["document"]
    events = dump(svc.state)["events"]
    assert any(e[4] == "Submitted" and e[6] == "research/train" for e in events)
    again = Store(svc.state)  # a second store reads the same
    assert [j.key for j in again.jobs()] == ["research/train"]
    again.close()


def test_submit_accepts_yaml_and_fills_the_namespace_from_a_tenant_token(svc: Svc) -> None:
    doc = job_doc("from-yaml", gpus=1)
    del doc["metadata"]["namespace"]
    r = svc.http.post(
        "/api/v1/jobs",
        content=yaml.safe_dump(doc),
        headers={**auth(RESEARCH), "Content-Type": "application/yaml"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["metadata"]["namespace"] == "research"


def test_a_queue_label_names_the_queue_and_priority_classes_apply(svc: Svc) -> None:
    doc = job_doc("labelled", gpus=1, priorityClassName="production")
    del doc["spec"]["queue"]
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "vision"}
    view = svc.submit(doc)
    assert view["status"]["clusterQueue"] == "vision"
    assert svc.plane.jobs["research/labelled"].job.priority == 1000


# -- get: status, placement, reasons, positions, estimates -------------------------------------


def test_a_bound_job_shows_its_placement_and_expected_end(svc: Svc) -> None:
    svc.submit(job_doc("one", gpus=2, duration="30m"))
    svc.tick()
    st = svc.status("research/one")
    assert st["phase"] == "Running" and st["flavor"] == "h100"
    assert st["startTimeSeconds"] == 0.0 and st["expectedEndTimeSeconds"] == 1800.0
    assert st["waitSeconds"] == 0.0
    (p,) = st["placements"]
    assert p["task"] == "research/one/main-0" and p["cpuMilli"] == 4000
    assert p["memoryMib"] == 16384
    assert [(g["gpuMilli"], g["migProfile"]) for g in p["gpus"]] == [(1000, None)] * 2
    held = cards(svc, p["node"])
    assert sorted(i for i, jobs in held.items() if jobs == ["research/one"]) == sorted(
        g["index"] for g in p["gpus"]
    )
    row = job_row(svc.state, "research/one")
    assert row is not None and row["phase"] == "Running" and row["flavor"] == "h100"


def test_a_job_over_its_queues_quota_waits_and_says_so_with_numbers(svc: Svc) -> None:
    # serving: 8 T4s with 64Gi of card memory, 4 A6000s; it never borrows
    svc.submit(
        job_doc(
            "a",
            "serving",
            "serving",
            gpus=4,
            duration="1h",  # all T4 memory
            runLimit="10m",
        )
    )
    svc.submit(
        job_doc(
            "b",
            "serving",
            "serving",
            gpus=4,
            duration="1h",  # all A6000s
            runLimit="20m",
        )
    )
    svc.tick()
    assert svc.status("serving/a")["flavor"] == "t4"
    assert svc.status("serving/b")["flavor"] == "a6000"
    svc.submit(job_doc("c", "serving", "serving", gpus=1))
    svc.submit(job_doc("d", "serving", "serving", gpus=1))
    svc.tick(1)
    c, d = svc.status("serving/c"), svc.status("serving/d")
    assert c["phase"] == d["phase"] == "Pending"
    reason = c["pendingReason"]
    assert "serving" in reason and "quota" in reason
    # in the user's units: GiB of card memory, not MiB under the core's own name
    assert "t4 GPU memory (64Gi/64Gi used, 16Gi asked" in reason, reason
    assert "4/4 GPUs used" in reason and "_mib" not in reason, reason
    assert (c["queuePosition"], d["queuePosition"]) == (0, 1)
    # a ends at 10m: room for 4
    assert c["estimatedStartTimeSeconds"] == d["estimatedStartTimeSeconds"] == 600.0
    assert c["estimatedStartInSeconds"] == 540.0
    assert c["waitSeconds"] == 60.0
    cq = svc.get("/api/v1/clusterqueues/serving")["status"]
    assert (cq["pendingJobs"], cq["runningJobs"]) == (2, 2)
    svc.tick(9)  # a ends at its run limit; c and d take its place
    assert svc.status("serving/a")["phase"] == "Failed"
    assert svc.status("serving/a")["message"] == "stopped at its run limit (600 s)"
    assert svc.status("serving/c")["phase"] == svc.status("serving/d")["phase"] == "Running"
    assert svc.status("serving/c")["startTimeSeconds"] == 600.0


def test_jobs_end_after_their_duration_and_free_their_cards(svc: Svc) -> None:
    svc.submit(job_doc("short", gpus=8, duration="5m"))
    svc.tick()
    node = svc.status("research/short")["placements"][0]["node"]
    svc.tick(4)
    assert svc.status("research/short")["phase"] == "Running"
    svc.tick(1)
    st = svc.status("research/short")
    assert st["phase"] == "Succeeded" and st["finishTimeSeconds"] == 300.0
    assert not any(cards(svc, node).values())
    row = job_row(svc.state, "research/short")
    assert row is not None and (row["phase"], row["finished_s"]) == ("Succeeded", 300.0)


# -- list --------------------------------------------------------------------------------------


def test_list_filters_by_namespace_queue_and_phase_and_pages(svc: Svc) -> None:
    for i in range(3):
        svc.submit(job_doc(f"llm-{i}", gpus=1))
    svc.submit(job_doc("vis", queue="vision", gpus=1))
    svc.submit(job_doc("srv", "serving", "serving", milli=200, gpu_memory="2Gi"))
    svc.submit(job_doc("nb", "notebooks", "notebooks", mig="1g.5gb"))
    svc.tick()
    svc.submit(job_doc("late", gpus=1))

    def names(**params: Any) -> list[str]:
        return [j["metadata"]["name"] for j in svc.get("/api/v1/jobs", **params)["items"]]

    assert names() == ["llm-0", "llm-1", "llm-2", "vis", "srv", "nb", "late"]
    assert names(namespace="research") == ["llm-0", "llm-1", "llm-2", "vis", "late"]
    assert names(queue="llm") == ["llm-0", "llm-1", "llm-2", "late"]
    assert names(queue="research/vision") == ["vis"]
    assert names(queue="serving", namespace="serving") == ["srv"]
    assert names(phase="Pending") == ["late"]
    assert names(phase="Pending,Running", namespace="notebooks") == ["nb"]
    assert names(phase="Succeeded") == []
    seen: list[str] = []
    after = 0
    while True:
        page = svc.get("/api/v1/jobs", limit=3, after=after)
        seen += [j["metadata"]["name"] for j in page["items"]]
        assert len(page["items"]) <= 3
        if page["continue"] is None:
            break
        after = page["continue"]
    assert seen == names()
    assert svc.get("/api/v1/jobs", code=422, phase="Sleeping")["details"]["field"] == "query.phase"
    assert svc.get("/api/v1/jobs", code=422, limit=0)["details"]["field"] == "query.limit"


# -- cancel ------------------------------------------------------------------------------------


def test_cancel_a_pending_and_a_running_job_then_delete_the_record(svc: Svc) -> None:
    svc.submit(job_doc("big", gpus=8, count=2, duration="1h"))  # both H100 nodes
    svc.tick()
    nodes = {p["node"] for p in svc.status("research/big")["placements"]}
    assert len(nodes) == 2
    svc.submit(job_doc("waits", gpus=8, count=2, models=["H100-80GB"]))
    svc.tick()
    assert svc.status("research/waits")["phase"] == "Pending"

    gone = svc.send("POST", "/api/v1/jobs/research/waits/cancel")
    assert gone["status"]["phase"] == "Cancelled"
    assert job_row(svc.state, "research/waits")["phase"] == "Cancelled"  # type: ignore[index]
    cancelled = svc.send("POST", "/api/v1/jobs/research/big/cancel")
    assert cancelled["status"]["phase"] == "Cancelled"
    for n in nodes:  # its cards are free at once, before any cycle
        assert not any(cards(svc, n).values())
    svc.tick()
    assert svc.status("research/waits")["phase"] == "Cancelled"  # it stays cancelled

    # a second cancel is answered with the job as it is: the record stays
    before = dump(svc.state)
    again = svc.send("POST", "/api/v1/jobs/research/big/cancel")
    assert again["status"]["phase"] == "Cancelled"
    assert dump(svc.state) == before
    svc.get("/api/v1/jobs/research/big")

    deleted = svc.send("DELETE", "/api/v1/jobs/research/big")  # delete: its record goes
    assert deleted["status"]["phase"] == "Cancelled"
    svc.get("/api/v1/jobs/research/big", code=404)
    assert job_row(svc.state, "research/big") is None
    svc.submit(job_doc("big", gpus=1))  # and its name may be used again
    svc.send("DELETE", "/api/v1/jobs/research/nothing", code=404)
    svc.send("POST", "/api/v1/jobs/research/nothing/cancel", code=404)


def test_delete_stops_a_running_job_and_frees_its_cards(svc: Svc) -> None:
    svc.submit(job_doc("runs", gpus=8, duration="1h", models=["H100-80GB"]))
    svc.tick()
    (node,) = {p["node"] for p in svc.status("research/runs")["placements"]}
    deleted = svc.send("DELETE", "/api/v1/jobs/research/runs")
    assert deleted["status"]["phase"] == "Cancelled"
    assert not any(cards(svc, node).values())
    assert job_row(svc.state, "research/runs") is None
    reasons = [
        e["reason"]
        for e in svc.get("/api/v1/events?limit=50")["items"]
        if e["object"] == "research/runs"
    ]
    assert reasons[-2:] == ["Cancelled", "Deleted"]


def test_a_duplicate_job_name_is_a_conflict_while_the_job_exists(svc: Svc) -> None:
    svc.submit(job_doc("twice"))
    err = svc.submit(job_doc("twice", gpus=2), code=409)
    assert err["error"] == "ConflictError" and "research/twice" in err["message"]
    assert len(dump(svc.state)["jobs"]) == 1


# -- queue objects -----------------------------------------------------------------------------

CQ = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "ClusterQueue",
    "metadata": {"name": "batch"},
    "spec": {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [
                    {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]}
                ],
            }
        ],
    },
}
LQ = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "LocalQueue",
    "metadata": {"name": "batch", "namespace": "research"},
    "spec": {"clusterQueue": "batch"},
}


def test_queue_objects_are_created_updated_and_deleted_by_the_admin(svc: Svc) -> None:
    assert svc.send("POST", "/api/v1/clusterqueues", CQ, code=201)["metadata"]["name"] == "batch"
    svc.send("POST", "/api/v1/localqueues", LQ, code=201)
    cq = svc.get("/api/v1/clusterqueues/batch")
    assert cq["status"]["nominal"] == {"a100": {"gpuMilli": 4000}}
    assert [q["metadata"]["name"] for q in svc.get("/api/v1/clusterqueues")["items"]] == [
        "llm",
        "vision",
        "serving",
        "notebooks",
        "burst",
        "batch",
    ]
    lq = svc.get("/api/v1/localqueues/research/batch")
    assert lq["spec"]["clusterQueue"] == "batch" and lq["status"]["pendingJobs"] == 0

    svc.submit(job_doc("in-batch", queue="batch", gpus=4))
    svc.tick()
    assert svc.status("research/in-batch")["flavor"] == "a100"
    more = {
        **CQ,
        "spec": {
            **CQ["spec"],
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 6}],
                        }
                    ],
                }
            ],
        },
    }
    svc.send("PUT", "/api/v1/clusterqueues/batch", more)
    st = svc.get("/api/v1/clusterqueues/batch")["status"]
    assert st["nominal"]["a100"]["gpuMilli"] == 6000 and st["runningJobs"] == 1
    assert svc.status("research/in-batch")["phase"] == "Running"  # the change kept it

    err = svc.send("DELETE", "/api/v1/clusterqueues/batch", code=409)
    assert err["error"] == "ConflictError" and "research/in-batch" in err["message"]
    svc.send("DELETE", "/api/v1/localqueues/research/batch", code=409)
    svc.send("DELETE", "/api/v1/jobs/research/in-batch")
    svc.send("DELETE", "/api/v1/localqueues/research/batch")
    svc.send("DELETE", "/api/v1/clusterqueues/batch")
    svc.get("/api/v1/clusterqueues/batch", code=404)
    assert not [
        o
        for o in dump(svc.state)["objects"]
        if o[:2] in (("ClusterQueue", "batch"), ("LocalQueue", "research/batch"))
    ]
    kinds = [e[4] for e in dump(svc.state)["events"] if e[5] == "Queue"]
    assert kinds == ["QueuesChanged"] * 5


def test_yaml_timestamps_stay_strings_as_kubernetes_reads_them(svc: Svc) -> None:
    doc = yaml.safe_dump({**CQ, "metadata": {"name": "dated"}}).replace(
        "name: dated", "name: dated\n  creationTimestamp: 2024-01-01T00:00:00Z"
    )
    r = svc.http.post(
        "/api/v1/clusterqueues",
        content=doc,
        headers={**auth(ADMIN), "Content-Type": "application/yaml"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["metadata"]["creationTimestamp"] == "2024-01-01T00:00:00Z"
    assert svc.reopen().get("/api/v1/clusterqueues/dated")["metadata"]["name"] == "dated"


def test_queue_objects_survive_a_restart(svc: Svc) -> None:
    svc.send("POST", "/api/v1/clusterqueues", CQ, code=201)
    svc.send("POST", "/api/v1/localqueues", LQ, code=201)
    svc.send(
        "POST",
        "/api/v1/flavors",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "new"},
            "spec": {"nodeLabels": {"pool": "new"}},
        },
        code=201,
    )
    svc.send(
        "POST",
        "/api/v1/cohorts",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Cohort",
            "metadata": {"name": "extra"},
            "spec": {"parent": "org"},
        },
        code=201,
    )
    again = svc.reopen()
    assert again.get("/api/v1/clusterqueues/batch")["spec"] == CQ["spec"]
    assert again.get("/api/v1/localqueues/research/batch")["spec"] == LQ["spec"]
    assert again.get("/api/v1/flavors/new")["status"] == {"nodes": 0, "gpus": 0}
    assert "extra" in again.get("/api/v1/cohorts/org")["status"]["cohorts"]
    again.submit(job_doc("after", queue="batch", gpus=1))


def test_tenants_may_read_queues_but_not_change_them(svc: Svc) -> None:
    assert svc.get("/api/v1/clusterqueues", RESEARCH)["items"]
    mine = svc.get("/api/v1/localqueues", RESEARCH)["items"]
    assert [(q["metadata"]["namespace"], q["metadata"]["name"]) for q in mine] == [
        ("research", "llm"),
        ("research", "vision"),
        ("research", "burst"),
    ]
    before = dump(svc.state)
    for method, path, body in (
        ("POST", "/api/v1/clusterqueues", CQ),
        ("PUT", "/api/v1/clusterqueues/llm", CQ),
        ("DELETE", "/api/v1/clusterqueues/llm", None),
        ("POST", "/api/v1/localqueues", LQ),
        ("PUT", "/api/v1/localqueues/research/llm", LQ),
        ("DELETE", "/api/v1/localqueues/research/llm", None),
        ("POST", "/api/v1/flavors", {}),
        ("DELETE", "/api/v1/flavors/h100", None),
        ("POST", "/api/v1/cohorts", {}),
        ("DELETE", "/api/v1/cohorts/org", None),
    ):
        err = svc.send(method, path, body, RESEARCH, code=403)
        assert err["error"] == "Forbidden" and "admin" in err["message"]
    assert dump(svc.state) == before


# -- nodes -------------------------------------------------------------------------------------

POOL = {
    "name": "l4",
    "count": 2,
    "cpu": 32,
    "memory": "128Gi",
    "labels": {"gpupool.io/flavor": "a6000"},
    "gpus": {"model": "L4", "count": 2, "memory": "24Gi"},
}


def test_nodes_show_every_card_and_who_holds_how_much(svc: Svc) -> None:
    svc.submit(job_doc("slice", "serving", "serving", milli=300, gpu_memory="4Gi"))
    svc.tick()
    (p,) = svc.status("serving/slice")["placements"]
    node = svc.get(f"/api/v1/nodes/{p['node']}")
    assert node["state"] == "ready" and node["flavor"] in ("t4", "a6000")
    card = node["gpus"][p["gpus"][0]["index"]]
    assert card["usedMilli"] == 300 and card["usedMib"] == 4096
    assert card["holders"] == [
        {
            "job": "serving/slice",
            "namespace": "serving",
            "task": "serving/slice/main-0",
            "gpuMilli": 300,
            "memoryMib": 4096,
            "migProfile": None,
        }
    ]
    assert node["cpuMilli"]["used"] == 4000
    svc.get("/api/v1/nodes/nowhere", code=404)
    items = svc.get("/api/v1/nodes")["items"]
    assert len(items) == 12 and holders_ok(items) == []
    mig = svc.get("/api/v1/nodes/a100-mig-0")["gpus"][0]["mig"]
    assert mig[0]["profile"] == "1g.5gb" and mig[0]["count"] == mig[0]["free"] == 7


def test_nodes_are_added_and_take_jobs(svc: Svc) -> None:
    added = svc.send("POST", "/api/v1/nodes", POOL, code=201)["items"]
    assert [n["name"] for n in added] == ["l4-0", "l4-1"]
    assert [g["model"] for g in added[0]["gpus"]] == ["L4", "L4"]
    assert svc.get("/api/v1/cluster")["nodes"]["total"] == 14
    svc.submit(job_doc("on-l4", "notebooks", "notebooks", gpus=2, models=["L4"]))
    svc.tick()
    assert svc.status("notebooks/on-l4")["placements"][0]["node"] in ("l4-0", "l4-1")
    err = svc.send("POST", "/api/v1/nodes", POOL, code=409)
    assert "l4-0" in err["message"]
    names = {o[1] for o in dump(svc.state)["objects"] if o[0] == "Node"}
    assert {"l4-0", "l4-1"} <= names


def test_a_cordoned_node_takes_no_new_job_and_keeps_its_own(svc: Svc) -> None:
    svc.submit(job_doc("first", "notebooks", "notebooks", mig="1g.5gb", duration="1h"))
    svc.tick()
    view = svc.send("PATCH", "/api/v1/nodes/a100-mig-0", {"unschedulable": True})
    assert view["state"] == "cordoned" and view["unschedulable"] is True
    svc.submit(job_doc("second", "notebooks", "notebooks", mig="1g.5gb"))
    svc.tick(1)
    assert svc.status("notebooks/first")["phase"] == "Running"
    assert svc.status("notebooks/second")["phase"] == "Pending"
    svc.send("PATCH", "/api/v1/nodes/a100-mig-0", {"unschedulable": False})
    svc.tick()
    assert svc.status("notebooks/second")["placements"][0]["node"] == "a100-mig-0"
    reasons = [e[4] for e in dump(svc.state)["events"] if e[5] == "Node"]
    assert reasons == ["Cordoned", "Uncordoned"]


def test_a_failed_node_sends_its_jobs_back_whole_and_recovers(svc: Svc) -> None:
    svc.submit(job_doc("gang", gpus=8, count=2, duration="1h", models=["H100-80GB"]))
    svc.tick()
    assert busy_nodes(svc) == {"h100-0", "h100-1"}
    view = svc.send("PATCH", "/api/v1/nodes/h100-1", {"failed": True})
    assert view["state"] == "failed" and all(not g["holders"] for g in view["gpus"])
    st = svc.status("research/gang")
    assert st["phase"] == "Pending" and st["placements"] == [] and st["flavor"] == ""
    assert "h100-1 failed" in st["pendingReason"]
    assert not any(cards(svc, "h100-0").values())  # the gang's other half is freed too
    row = job_row(svc.state, "research/gang")
    assert row is not None and (row["phase"], row["placements"], row["flavor"]) == (
        "Pending",
        "[]",
        "",
    )
    svc.tick()
    assert svc.status("research/gang")["phase"] == "Pending"  # one H100 node: not enough
    assert svc.get("/api/v1/cluster")["nodes"]["failed"] == 1
    svc.send("PATCH", "/api/v1/nodes/h100-1", {"failed": False})
    svc.tick()
    st = svc.status("research/gang")
    assert st["phase"] == "Running"
    assert {p["node"] for p in st["placements"]} == {"h100-0", "h100-1"}


def test_a_node_is_deleted_with_its_jobs_requeued(svc: Svc) -> None:
    svc.submit(job_doc("on-t4", "serving", "serving", gpus=4))
    svc.tick()
    node = svc.status("serving/on-t4")["placements"][0]["node"]
    svc.send("DELETE", f"/api/v1/nodes/{node}")
    svc.get(f"/api/v1/nodes/{node}", code=404)
    assert svc.status("serving/on-t4")["phase"] == "Pending"
    assert not [o for o in dump(svc.state)["objects"] if o[:2] == ("Node", node)]
    svc.send("DELETE", f"/api/v1/nodes/{node}", code=404)


def test_node_patch_refuses_unknown_fields_and_non_booleans(svc: Svc) -> None:
    before = dump(svc.state)
    err = svc.send("PATCH", "/api/v1/nodes/t4-0", {"drain": True}, code=422)
    assert err["details"]["field"] == "drain"
    err = svc.send("PATCH", "/api/v1/nodes/t4-0", {"failed": "yes"}, code=422)
    assert (err["details"]["field"], err["details"]["value"]) == ("failed", "yes")
    assert "boolean" in err["details"]["rule"], err
    svc.send("PATCH", "/api/v1/nodes/nowhere", {"failed": True}, code=404)
    assert dump(svc.state) == before


# -- cluster, events, metrics ------------------------------------------------------------------


def test_cluster_totals_allocation_and_history(svc: Svc) -> None:
    svc.submit(job_doc("whole", gpus=2))
    svc.submit(job_doc("part", "serving", "serving", milli=500, gpu_memory="4Gi"))
    svc.tick()
    view = svc.get("/api/v1/cluster")
    # the headline counts every card, the 4 MIG-partitioned ones too, as the flavors do
    assert view["gpus"]["total"] == 60 and view["gpus"]["migPartitioned"] == 4
    assert sum(f["gpus"] for f in view["flavors"]) == 60
    assert view["gpus"]["allocated"] == 2.5
    assert view["gpuMilli"]["used"] == 2500  # (compute of the cards not partitioned)
    svc.submit(job_doc("mig", "notebooks", "notebooks", mig="1g.5gb"))
    svc.tick()
    view = svc.get("/api/v1/cluster")
    used = sum(f["gpuMilliUsed"] for f in view["flavors"])
    assert used > 2500 and view["gpus"]["allocated"] == round(used / 1000, 3)
    assert view["gpus"]["allocatedPct"] == round(100 * used / 60_000, 2)
    assert view["jobs"]["Running"] == 3 and view["nodes"]["ready"] == 12
    frag = view["fragmentation"]
    assert frag["fragmentedGpuMilli"] == 500 and 0 < frag["ratio"] < 1
    assert {f["name"] for f in view["flavors"]} >= {"h100", "t4", "a6000"}
    samples = svc.get("/api/v1/cluster/history")["samples"]
    assert samples and samples[-1]["queues"]["llm"]["gpuMilli"] == 2000


def test_a_page_of_jobs_says_how_many_more_there_are(svc: Svc) -> None:
    for i in range(5):
        svc.submit(job_doc(f"many-{i}", gpus=8, count=2, models=["H100-80GB"]))
    svc.tick()  # one runs, four wait
    page = svc.get("/api/v1/jobs", phase="Pending", limit=2)
    assert len(page["items"]) == 2 and page["remainingItemCount"] == 2
    assert svc.get("/api/v1/jobs", phase="Pending", limit=10)["remainingItemCount"] == 0
    rest = svc.get("/api/v1/jobs", phase="Pending", limit=2, after=page["continue"])
    assert rest["remainingItemCount"] == 0 and len(rest["items"]) == 2


def test_events_follow_a_job_and_page_by_sequence(svc: Svc) -> None:
    svc.submit(job_doc("ev", gpus=1, duration="1m"))
    svc.tick()
    svc.tick(1)
    items = svc.get("/api/v1/events")["items"]
    mine = [e["reason"] for e in items if e["object"] == "research/ev"]
    assert mine == ["Submitted", "Admitted", "Completed"]
    assert [e["seq"] for e in items] == sorted(e["seq"] for e in items)
    first = items[0]["seq"]
    assert [e["seq"] for e in svc.get("/api/v1/events", since=first, limit=2)["items"]] == [
        first + 1,
        first + 2,
    ]
    assert [e["object"] for e in svc.get("/api/v1/events", namespace="serving")["items"]] == [
        ""
    ] * len(svc.get("/api/v1/events", namespace="serving")["items"])
    svc.get("/api/v1/events", code=422, limit=0)


def test_metrics_are_prometheus_text_with_the_gpupool_prefix(svc: Svc) -> None:
    svc.submit(job_doc("m", gpus=1))
    svc.tick()
    r = svc.http.get("/metrics", headers=auth(ADMIN))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert 'gpupool_jobs_submitted_total{queue="llm"} 1.0' in r.text
    assert "gpupool_admission_wait_seconds_bucket" in r.text
    assert svc.http.get("/metrics").status_code == 401


def test_a_cohort_may_name_a_parent_that_is_not_defined(svc: Svc) -> None:
    # Kueue makes such a parent implicitly: deleting org leaves research and product under an
    # implicit org; a new cohort may name a parent nobody defined
    svc.send("DELETE", "/api/v1/cohorts/org")
    svc.send(
        "POST",
        "/api/v1/cohorts",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Cohort",
            "metadata": {"name": "kid"},
            "spec": {"parent": "ghost"},
        },
        code=201,
    )
    svc.submit(job_doc("still-runs", gpus=1))
    svc.tick()
    assert svc.status("research/still-runs")["phase"] == "Running"


# -- a state file that cannot be written -------------------------------------------------------


def test_a_change_the_state_file_cannot_take_is_not_made(
    svc: Svc, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc.submit(job_doc("runs", gpus=1, duration="1h"))
    svc.submit(job_doc("waits", gpus=8, count=2, models=["H100-80GB"]))
    svc.tick()
    before = dump(svc.state)
    views_before = {k: svc.status(k) for k in ("research/runs", "research/waits")}
    queues_before = svc.get("/api/v1/clusterqueues")

    def full(*_: Any, **__: Any) -> Any:
        raise AdapterError(f"{svc.state}: disk full")

    monkeypatch.setattr(svc.plane.store, "transaction", full)
    bigger = {**CQ, "metadata": {"name": "llm"}}
    for method, path, body in (
        ("POST", "/api/v1/clusterqueues", CQ),
        ("PUT", "/api/v1/clusterqueues/llm", bigger),
        ("DELETE", "/api/v1/cohorts/research", None),
        ("DELETE", "/api/v1/jobs/research/runs", None),
        ("DELETE", "/api/v1/jobs/research/waits", None),
        ("POST", "/api/v1/jobs", job_doc("new")),
        ("POST", "/api/v1/nodes", POOL),
    ):
        err = svc.send(method, path, body, code=503)
        assert err["error"] == "AdapterError" and "disk full" in err["message"]
    monkeypatch.undo()
    assert dump(svc.state) == before
    assert svc.get("/api/v1/clusterqueues") == queues_before  # nothing half-made in memory
    assert {k: svc.status(k) for k in views_before} == views_before
    svc.get("/api/v1/clusterqueues/batch", code=404)
    svc.get("/api/v1/jobs/research/new", code=404)
    svc.tick(1)
    assert svc.status("research/runs")["phase"] == "Running"  # not cancelled behind the 503
    assert svc.status("research/waits")["phase"] == "Pending"  # still queued
    svc.send("DELETE", "/api/v1/jobs/research/runs")
    svc.tick()


# -- restart in-process ------------------------------------------------------------------------


def test_a_restart_puts_running_jobs_back_on_their_cards(svc: Svc) -> None:
    svc.submit(job_doc("run", gpus=3, duration="1h"))
    svc.submit(job_doc("slice", "serving", "serving", milli=400, gpu_memory="8Gi", duration="1h"))
    svc.submit(job_doc("mig", "notebooks", "notebooks", mig="1g.5gb", duration="1h"))
    svc.tick()
    svc.submit(job_doc("waiting", gpus=8, count=2, models=["H100-80GB"]))
    before = {k: svc.status(k) for k in ("research/run", "serving/slice", "notebooks/mig")}
    nodes_before = svc.get("/api/v1/nodes")["items"]
    svc.wall.advance(600)  # ten minutes down
    again = svc.reopen()
    for key, st in before.items():
        now = again.status(key)
        assert now["phase"] == "Running" and now["placements"] == st["placements"], pretty(now)
        assert now["startTimeSeconds"] == st["startTimeSeconds"]
    assert again.get("/api/v1/nodes")["items"] == nodes_before
    assert again.status("research/waiting")["phase"] == "Pending"
    assert again.get("/api/v1/cluster")["timeSeconds"] == 600.0  # the clock counted the downtime
    again.tick(50)  # an hour after the start, the hour-long jobs end
    assert again.status("research/run")["phase"] == "Succeeded"
    assert again.status("research/run")["finishTimeSeconds"] == 3600.0
    assert again.status("research/waiting")["phase"] == "Running"


# -- through a real server ---------------------------------------------------------------------


def test_smoke_through_a_real_gpupool_serve(tmp_path: Path) -> None:
    with (
        serving(tmp_path / "state.db", speed=600.0, interval=0.05) as server,
        server.client() as admin,
        server.client(SERVING) as tenant,
    ):
        assert httpx.get(f"{server.url}/healthz").status_code == 200
        r = tenant.post(
            "/api/v1/jobs", json=job_doc("smoke", "serving", "serving", gpus=1, duration="10m")
        )
        assert r.status_code == 201, r.text
        deadline = time.monotonic() + 20
        while tenant.get("/api/v1/jobs/serving/smoke").json()["status"]["phase"] == "Pending":
            assert time.monotonic() < deadline, "not admitted"
            time.sleep(0.05)
        job = tenant.get("/api/v1/jobs/serving/smoke").json()
        assert job["status"]["phase"] in ("Running", "Succeeded")
        node = job["status"]["placements"][0]["node"]
        assert node.startswith(("t4", "a6000"))
        while (
            tenant.get("/api/v1/jobs/serving/smoke").json()["status"]["phase"] != "Succeeded"
        ):  # 10 minutes at x600: one second
            assert time.monotonic() < deadline, "did not end"
            time.sleep(0.05)
        assert [j["metadata"]["name"] for j in tenant.get("/api/v1/jobs").json()["items"]] == [
            "smoke"
        ]
        reasons = [
            e["reason"]
            for e in admin.get("/api/v1/events").json()["items"]
            if e["object"] == "serving/smoke"
        ]
        assert reasons == ["Submitted", "Admitted", "Completed"]
        assert admin.get("/metrics").text.count("gpupool_") > 10
        assert tenant.post("/api/v1/nodes", json=POOL).status_code == 403
        assert httpx.get(f"{server.url}/api/v1/cluster").status_code == 401
        assert admin.get("/").status_code == 200


def test_concurrent_clients_never_get_a_server_error(tmp_path: Path) -> None:
    """Six clients at once against a real server: submissions, cancels, nodes failed,
    recovered, added and deleted, queues replaced, and reads of everything, for a few
    seconds. No 5xx, no dropped connection, no card over-held at the end."""
    import random
    import threading

    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "spare"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {"name": "t4", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 1}]}
                    ],
                }
            ]
        },
    }
    failures: list[str] = []
    counts: dict[int, int] = {}
    with serving(tmp_path / "state.db", speed=120.0, interval=0.02) as server:
        stop = time.monotonic() + 5.0

        def worker(seed: int) -> None:
            rnd = random.Random(seed)
            with server.client() as c:
                n = 0
                while time.monotonic() < stop:
                    n += 1
                    op = rnd.randrange(10)
                    try:
                        if op < 3:
                            ns, q = rnd.choice(
                                [
                                    ("research", "llm"),
                                    ("serving", "serving"),
                                    ("notebooks", "notebooks"),
                                ]
                            )
                            r = c.post(
                                "/api/v1/jobs",
                                json=job_doc(
                                    f"w{seed}-{n}",
                                    ns,
                                    q,
                                    gpus=rnd.choice([1, 2]),
                                    duration=rnd.choice(["1m", "5m"]),
                                ),
                            )
                        elif op == 3:
                            items = c.get("/api/v1/jobs", params={"limit": 20}).json()["items"]
                            if not items:
                                continue
                            m = rnd.choice(items)["metadata"]
                            r = c.delete(f"/api/v1/jobs/{m['namespace']}/{m['name']}")
                        elif op == 4:
                            node = rnd.choice(["t4-0", "t4-1", "a6000-0", "h100-1", "a100-2"])
                            r = c.patch(
                                f"/api/v1/nodes/{node}",
                                json={rnd.choice(["failed", "unschedulable"]): rnd.random() < 0.5},
                            )
                        elif op == 5:
                            r = c.post(
                                "/api/v1/nodes",
                                json={
                                    "name": f"p{seed}x{n}",
                                    "cpu": 8,
                                    "memory": "32Gi",
                                    "labels": {"gpupool.io/flavor": "t4"},
                                    "gpus": {"model": "T4", "count": 2, "memory": "16Gi"},
                                },
                            )
                            if r.status_code == 201:
                                r = c.delete(f"/api/v1/nodes/p{seed}x{n}-0")
                        elif op == 6:
                            r = c.post("/api/v1/clusterqueues", json=cq)
                            if r.status_code in (201, 409):
                                r = c.delete("/api/v1/clusterqueues/spare")
                        else:
                            r = c.get(
                                rnd.choice(
                                    [
                                        "/api/v1/nodes",
                                        "/api/v1/cluster",
                                        "/api/v1/events",
                                        "/api/v1/clusterqueues",
                                        "/api/v1/localqueues",
                                        "/metrics",
                                    ]
                                )
                            )
                    except httpx.HTTPError as exc:
                        failures.append(f"op {op}: {exc!r}")
                        continue
                    counts[r.status_code] = counts.get(r.status_code, 0) + 1
                    if r.status_code >= 500 or (op >= 7 and r.status_code != 200):
                        failures.append(f"op {op}: {r.status_code} {r.text[:300]}")

        threads = [threading.Thread(target=worker, args=(s,)) for s in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with server.client() as c:
            assert holders_ok(c.get("/api/v1/nodes").json()["items"]) == []
        assert "Traceback" not in server.log.read_text()
    assert not failures, failures[:10]
    assert counts.get(201, 0) > 20 and counts.get(200, 0) > 50
