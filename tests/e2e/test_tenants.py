"""Tenant isolation: a tenant token sees, submits to and cancels in its own namespaces only.

Another tenant's jobs do not exist for it (404, the same answer as for a name nobody used, so
names do not leak); submitting into another namespace is 403; cards held by other tenants show
how much is held but not by whom; admin routes are 403; and with no token every route but
``/healthz`` is 401.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupool.api.app import create_app
from gpupool.api.auth import Principal, Tokens
from gpupool.control import ControlPlane
from tests.e2e.serve_kit import (
    ADMIN,
    NOTEBOOKS,
    RESEARCH,
    SERVING,
    TestClient,
    Wall,
    auth,
    client,
    dump,
    job_doc,
    make_plane,
)

HIDDEN = "(another tenant)"


@pytest.fixture
def wall() -> Wall:
    return Wall()


@pytest.fixture
def plane(tmp_path: Path, wall: Wall) -> Iterator[ControlPlane]:
    p = make_plane(tmp_path / "state.db", wall)
    yield p
    p.store.close()


@pytest.fixture
def http(plane: ControlPlane, wall: Wall) -> TestClient:
    """Research runs a whole-GPU job and a slice, serving a slice on the same kind of card,
    notebooks a MIG instance; research also has one waiting and one ended."""
    c = client(plane)
    for token, doc in (
        (RESEARCH, job_doc("train", gpus=2, duration="1h")),
        (
            RESEARCH,
            job_doc(
                "r-slice",
                "research",
                "vision",
                milli=300,
                gpu_memory="4Gi",
                models=["A100-80GB"],
                duration="1h",
            ),
        ),
        (
            SERVING,
            job_doc("infer", "serving", "serving", milli=400, gpu_memory="4Gi", duration="1h"),
        ),
        (NOTEBOOKS, job_doc("nb", "notebooks", "notebooks", mig="1g.5gb", duration="1h")),
        (RESEARCH, job_doc("done", gpus=1, duration="1m")),
    ):
        r = c.post("/api/v1/jobs", json=doc, headers=auth(token))
        assert r.status_code == 201, r.text
    plane.tick()
    wall.advance(120)
    plane.tick()
    r = c.post(
        "/api/v1/jobs",
        json=job_doc("wait", gpus=8, count=2, models=["H100-80GB"]),
        headers=auth(RESEARCH),
    )
    assert r.status_code == 201, r.text
    assert {k: v.phase for k, v in plane.jobs.items()} == {
        "research/train": "Running",
        "research/r-slice": "Running",
        "serving/infer": "Running",
        "notebooks/nb": "Running",
        "research/done": "Succeeded",
        "research/wait": "Pending",
    }
    return c


def get(http: TestClient, path: str, token: str, code: int = 200, **params: Any) -> Any:
    r = http.get(path, headers=auth(token), params=params)
    assert r.status_code == code, r.text
    return r.json()


# -- jobs --------------------------------------------------------------------------------------


def test_a_tenant_lists_only_its_own_jobs(http: TestClient) -> None:
    def keys(token: str, **params: Any) -> list[str]:
        return [
            f"{j['metadata']['namespace']}/{j['metadata']['name']}"
            for j in get(http, "/api/v1/jobs", token, **params)["items"]
        ]

    assert keys(RESEARCH) == [
        "research/train",
        "research/r-slice",
        "research/done",
        "research/wait",
    ]
    assert keys(SERVING) == ["serving/infer"]
    assert keys(NOTEBOOKS) == ["notebooks/nb"]
    assert len(keys(ADMIN)) == 6
    assert keys(RESEARCH, namespace="serving") == []
    assert keys(RESEARCH, queue="serving") == []
    assert keys(SERVING, phase="Pending,Succeeded") == []


def test_another_tenants_job_is_not_found_exactly_like_a_missing_one(
    http: TestClient, plane: ControlPlane
) -> None:
    other = http.get("/api/v1/jobs/serving/infer", headers=auth(RESEARCH))
    missing = http.get("/api/v1/jobs/serving/nothing", headers=auth(RESEARCH))
    assert other.status_code == missing.status_code == 404
    assert other.json()["message"].replace("infer", "X") == missing.json()["message"].replace(
        "nothing", "X"
    )
    assert "infer" not in str(other.headers)
    assert get(http, "/api/v1/jobs/serving/infer", SERVING)["status"]["phase"] == "Running"


def test_a_tenant_cannot_cancel_another_tenants_job(
    http: TestClient, plane: ControlPlane, tmp_path: Path
) -> None:
    before = dump(tmp_path / "state.db")
    for token, key in (
        (RESEARCH, "serving/infer"),
        (SERVING, "research/train"),
        (NOTEBOOKS, "research/done"),
    ):  # a running one, and an ended one
        r = http.delete(f"/api/v1/jobs/{key}", headers=auth(token))
        assert r.status_code == 404, r.text
    assert dump(tmp_path / "state.db") == before
    assert plane.jobs["serving/infer"].phase == "Running"
    assert plane.jobs["research/done"].phase == "Succeeded"
    r = http.delete("/api/v1/jobs/research/train", headers=auth(RESEARCH))  # its own: fine
    assert r.status_code == 200 and r.json()["status"]["phase"] == "Cancelled"


def test_a_tenant_cannot_submit_into_another_namespace(http: TestClient, tmp_path: Path) -> None:
    before = dump(tmp_path / "state.db")
    r = http.post(
        "/api/v1/jobs", json=job_doc("sneak", "serving", "serving"), headers=auth(RESEARCH)
    )
    assert r.status_code == 403 and r.json()["error"] == "Forbidden"
    assert "serving" in r.json()["message"]
    # nor through a queue of another namespace from its own
    r = http.post(
        "/api/v1/jobs", json=job_doc("sneak", queue="serving/serving"), headers=auth(RESEARCH)
    )
    assert r.status_code == 422 and r.json()["details"]["field"] == "spec.queue"
    assert dump(tmp_path / "state.db") == before
    # without a namespace, a one-namespace token's own is used
    doc = job_doc("mine", "serving", "serving")
    del doc["metadata"]["namespace"]
    r = http.post("/api/v1/jobs", json=doc, headers=auth(SERVING))
    assert r.status_code == 201 and r.json()["metadata"]["namespace"] == "serving"


def test_a_token_of_two_namespaces_must_name_one(plane: ControlPlane) -> None:
    both = "two-namespaces-token-012345"
    c = TestClient(
        create_app(
            plane, Tokens([(both, Principal("team", "tenant", frozenset({"research", "serving"})))])
        ),
        raise_server_exceptions=False,
    )
    doc = job_doc("x", "serving", "serving")
    del doc["metadata"]["namespace"]
    r = c.post("/api/v1/jobs", json=doc, headers=auth(both))
    assert r.status_code == 422 and r.json()["details"]["field"] == "metadata.namespace"
    assert (
        c.post(
            "/api/v1/jobs", json=job_doc("y", "serving", "serving"), headers=auth(both)
        ).status_code
        == 201
    )
    assert c.post("/api/v1/jobs", json=job_doc("z"), headers=auth(both)).status_code == 201
    assert (
        c.post(
            "/api/v1/jobs", json=job_doc("w", "notebooks", "notebooks"), headers=auth(both)
        ).status_code
        == 403
    )
    names = [
        j["metadata"]["namespace"]
        for j in c.get("/api/v1/jobs", headers=auth(both)).json()["items"]
    ]
    assert set(names) == {"research", "serving"}


# -- nodes, events, queues ---------------------------------------------------------------------


def holders(http: TestClient, token: str) -> list[dict[str, Any]]:
    return [
        h
        for n in get(http, "/api/v1/nodes", token)["items"]
        for g in n["gpus"]
        for h in g["holders"]
    ]


def test_cards_held_by_other_tenants_show_how_much_but_not_whom(http: TestClient) -> None:
    everyone = holders(http, ADMIN)
    assert {h["namespace"] for h in everyone} == {"research", "serving", "notebooks"}
    for token, ns in ((RESEARCH, "research"), (SERVING, "serving"), (NOTEBOOKS, "notebooks")):
        seen = holders(http, token)
        assert len(seen) == len(everyone)
        assert sorted((h["gpuMilli"], h["memoryMib"]) for h in seen) == sorted(
            (h["gpuMilli"], h["memoryMib"]) for h in everyone
        )
        for h in seen:
            if h["namespace"] == ns:
                assert h["job"].startswith(f"{ns}/") and h["task"].startswith(f"{ns}/")
            else:
                assert (h["job"], h["namespace"], h["task"]) == (HIDDEN, "", "")
        text = str(get(http, "/api/v1/nodes", token))
        for other in {"research/", "serving/", "notebooks/"} - {f"{ns}/"}:
            assert other not in text
    # and node by node
    for n in get(http, "/api/v1/nodes", ADMIN)["items"]:
        one = get(http, f"/api/v1/nodes/{n['name']}", SERVING)
        for g in one["gpus"]:
            for h in g["holders"]:
                assert h["namespace"] in ("serving", "")


def test_a_tenant_sees_its_own_and_the_clusters_events_only(http: TestClient) -> None:
    items = get(http, "/api/v1/events", RESEARCH)["items"]
    assert items and {e["namespace"] for e in items} <= {"research", ""}
    assert any(e["namespace"] == "research" for e in items)
    assert not any("serving/" in e["object"] or "serving/" in e["message"] for e in items)
    assert get(http, "/api/v1/events", RESEARCH, namespace="serving")["items"] == []
    first = items[0]["seq"]
    paged = get(http, "/api/v1/events", RESEARCH, since=first, limit=1000)["items"]
    assert {e["namespace"] for e in paged} <= {"research", ""}
    admin = get(http, "/api/v1/events", ADMIN, namespace="serving")["items"]
    assert {e["namespace"] for e in admin} == {"serving", ""}  # the cluster's are everyone's


def test_a_tenant_sees_its_own_local_queues(http: TestClient) -> None:
    mine = get(http, "/api/v1/localqueues", RESEARCH)["items"]
    assert {q["metadata"]["namespace"] for q in mine} == {"research"}
    get(http, "/api/v1/localqueues/serving/serving", RESEARCH, code=404)
    assert get(http, "/api/v1/localqueues/serving/serving", SERVING)["status"]["runningJobs"] == 1


# -- roles and tokens --------------------------------------------------------------------------

ADMIN_ONLY = [
    ("POST", "/api/v1/nodes", {"name": "x", "cpu": 1, "memory": "1Gi"}),
    ("PATCH", "/api/v1/nodes/t4-0", {"unschedulable": True}),
    ("DELETE", "/api/v1/nodes/t4-0", None),
    *[
        (m, f"/api/v1/{kind}{suffix}", body)
        for kind, name in (("flavors", "h100"), ("clusterqueues", "llm"), ("cohorts", "org"))
        for m, suffix, body in (
            ("POST", "", {"metadata": {"name": "new"}}),
            ("PUT", f"/{name}", {"metadata": {"name": name}}),
            ("DELETE", f"/{name}", None),
        )
    ],
    ("POST", "/api/v1/localqueues", {"metadata": {"name": "q", "namespace": "research"}}),
    ("PUT", "/api/v1/localqueues/research/llm", {"metadata": {"name": "llm"}}),
    ("DELETE", "/api/v1/localqueues/research/llm", None),
]


@pytest.mark.parametrize(
    ("method", "path", "body"), ADMIN_ONLY, ids=[f"{m} {p}" for m, p, _ in ADMIN_ONLY]
)
def test_admin_routes_are_403_for_every_tenant(
    http: TestClient, tmp_path: Path, method: str, path: str, body: Any
) -> None:
    before = dump(tmp_path / "state.db")
    for token in (RESEARCH, SERVING, NOTEBOOKS):
        r = http.request(method, path, json=body, headers=auth(token))
        assert r.status_code == 403, r.text
        assert r.json()["error"] == "Forbidden"
    assert dump(tmp_path / "state.db") == before


def every_operation(http: TestClient) -> list[tuple[str, str]]:
    spec = http.get("/openapi.json", headers=auth(ADMIN)).json()
    ops = []
    for path, item in spec["paths"].items():
        concrete = re.sub(r"\{namespace\}", "research", path)
        concrete = re.sub(r"\{name\}", "llm", concrete)
        ops += [(method.upper(), concrete) for method in item]
    return ops


def test_without_a_token_every_route_but_healthz_is_401(http: TestClient, tmp_path: Path) -> None:
    ops = every_operation(http)
    assert len(ops) > 25
    before = dump(tmp_path / "state.db")
    for bad in ({}, {"Authorization": "Bearer nobody-knows-this-token"}):
        for method, path in ops:
            r = http.request(method, path, headers=bad, json={})
            if path == "/healthz":
                assert r.status_code == 200
            else:
                assert r.status_code == 401, f"{method} {path}: {r.status_code} {r.text}"
                assert r.json()["error"] == "Unauthorized"
    assert dump(tmp_path / "state.db") == before


def test_a_preemptor_of_another_namespace_is_not_named_to_its_victim(
    plane: ControlPlane, wall: Wall
) -> None:
    """serving gets a LocalQueue on research's ClusterQueue llm; its production job preempts
    research's batch job. Research learns that it was preempted, not by whom; a preemptor of
    its own namespace it does see named."""
    c = client(plane)
    lq = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": "shared", "namespace": "serving"},
        "spec": {"clusterQueue": "llm"},
    }
    assert c.post("/api/v1/localqueues", json=lq, headers=auth(ADMIN)).status_code == 201
    h100 = {"gpus": 8, "models": ["H100-80GB"], "duration": "2h"}
    for name in ("low-a", "low-b"):
        assert (
            c.post(
                "/api/v1/jobs",
                json=job_doc(name, priorityClassName="batch", **h100),
                headers=auth(RESEARCH),
            ).status_code
            == 201
        )
    plane.tick()
    wall.advance(600)  # past the minimum runtime before preemption
    plane.tick()
    assert (
        c.post(
            "/api/v1/jobs",
            json=job_doc(
                "secret-launch", "serving", "shared", priorityClassName="production", **h100
            ),
            headers=auth(SERVING),
        ).status_code
        == 201
    )
    for _ in range(3):
        wall.advance(60)
        plane.tick()
    assert (
        get(http=c, path="/api/v1/jobs/serving/secret-launch", token=SERVING)["status"]["phase"]
        == "Running"
    )
    victims = [j for j in get(c, "/api/v1/jobs", RESEARCH)["items"] if j["status"]["preemptions"]]
    assert len(victims) == 1
    seen = str(victims[0]) + str(get(c, "/api/v1/events", RESEARCH, limit=1000))
    assert "preempted by a job of another namespace" in seen
    assert "secret-launch" not in seen and "serving/" not in seen
    # within one namespace the preemptor is named
    assert (
        c.post(
            "/api/v1/jobs",
            json=job_doc("urgent", priorityClassName="production", **h100),
            headers=auth(RESEARCH),
        ).status_code
        == 201
    )
    for _ in range(3):
        wall.advance(60)
        plane.tick()
    events = [
        e["message"]
        for e in get(c, "/api/v1/events", RESEARCH, limit=1000)["items"]
        if e["reason"] == "Preempted"
    ]
    assert any("preempted by research/urgent" in m for m in events), events
