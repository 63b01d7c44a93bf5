"""Elastic GPU objects through ``gpupool serve``'s REST API: classes, claims and ElasticGPUs,
in-process on the example cluster with a clock the test moves; and a real server killed with
SIGKILL and started again on the same state file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.serve_kit import (
    ADMIN,
    NOTEBOOKS,
    REPO,
    RESEARCH,
    Wall,
    auth,
    client,
    dump,
    holders_ok,
    job_doc,
    make_plane,
    pretty,
    serving,
)

A, R, N = auth(ADMIN), auth(RESEARCH), auth(NOTEBOOKS)
CLASSES = "/api/v1/elasticgpuclasses"
CLAIMS = "/api/v1/elasticgpuclaims"
GPUS = "/api/v1/elasticgpus"
ELASTIC = REPO / "examples" / "elastic.yaml"


def klass(name: str, provisioner: str, policy: str = "Delete", **params: str) -> dict[str, Any]:
    return {
        "apiVersion": "elasticgpu.io/v1alpha1",
        "kind": "ElasticGPUClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "parameters": params,
        "reclaimPolicy": policy,
    }


def claim(
    name: str, namespace: str = "research", class_name: str = "", **requests: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {"requests": requests}
    if class_name:
        spec["className"] = class_name
    return {
        "apiVersion": "elasticgpu.io/v1alpha1",
        "kind": "ElasticGPUClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


@pytest.fixture
def setup(tmp_path: Path) -> Any:
    wall = Wall()
    plane = make_plane(tmp_path / "state.db", wall)
    c = client(plane)
    for body in (
        klass("cards", "physical", models="H100-80GB"),
        klass("kept", "physical", "Retain", models="A100-80GB"),
        klass("shared", "hami-core", models="T4"),
        klass("mig", "mig", models="A100-40GB"),
    ):
        r = c.post(CLASSES, json=body, headers=A)
        assert r.status_code == 201, r.text
    return plane, c, wall, tmp_path / "state.db"


def holders(c: Any, token: dict[str, str] = A) -> dict[tuple[str, int], list[dict[str, Any]]]:
    nodes = c.get("/api/v1/nodes", headers=token).json()["items"]
    assert holders_ok(nodes) == []
    return {(n["name"], g["index"]): g["holders"] for n in nodes for g in n["gpus"]}


def test_claim_binds_and_its_gpus_are_listed_with_node_and_card(setup: Any) -> None:
    plane, c, _, _ = setup
    r = c.post(CLAIMS, json=claim("train", class_name="cards", cards=2), headers=R)
    assert r.status_code == 201, r.text
    view = r.json()
    assert view["phase"] == "Bound" and view["namespace"] == "research"
    assert len(view["elasticGPUs"]) == 2 and view["node"].startswith("h100-")

    items = {g["name"]: g for g in c.get(GPUS, headers=R).json()["items"]}
    assert set(items) == set(view["elasticGPUs"])
    cards = set()
    for g in items.values():
        assert g["phase"] == "Bound" and g["source"] == "physical"
        assert g["node"] == view["node"] and g["model"] == "H100-80GB"
        assert g["claimRef"] == {"namespace": "research", "name": "train"}
        assert g["capacity"]["gpuMilli"] == 1000
        cards.add(g["card"])
    assert len(cards) == 2
    assert c.get(f"{GPUS}/{view['elasticGPUs'][0]}", headers=R).json()["card"] in cards
    assert c.get(f"{CLAIMS}/research/train", headers=R).json()["phase"] == "Bound"

    # The node view shows each card held by the claim, in the claim's namespace.
    held = holders(c)
    for card in cards:
        (h,) = held[(view["node"], card)]
        assert h["namespace"] == "research" and h["job"] == "elasticgpu/research/train"
        assert h["task"].startswith("elasticgpu/egpu.research.train.")
        assert h["gpuMilli"] == 1000
    # Another tenant sees the cards held, not by whom.
    (h,) = holders(c, N)[(view["node"], min(cards))]
    assert h["job"] == "(another tenant)" and h["namespace"] == ""

    # A job placed afterwards never lands on the claim's cards.
    r = c.post("/api/v1/jobs", json=job_doc("j", gpus=8, models=["H100-80GB"]), headers=R)
    assert r.status_code == 201, r.text
    plane.tick()
    job = c.get("/api/v1/jobs/research/j", headers=R).json()["status"]
    assert job["phase"] == "Running", pretty(job)
    assert job["placements"][0]["node"] != view["node"]
    holders(c)


def test_slice_and_mig_claims(setup: Any) -> None:
    _, c, _, _ = setup
    r = c.post(
        CLAIMS, json=claim("nb", class_name="shared", gpuMilli=250, memoryMib=4096), headers=R
    )
    assert r.status_code == 201 and r.json()["phase"] == "Bound", r.text
    (name,) = r.json()["elasticGPUs"]
    g = c.get(f"{GPUS}/{name}", headers=R).json()
    assert g["source"] == "slice" and g["capacity"]["gpuMilli"] == 250
    assert g["capacity"]["memoryMib"] == 4096 and g["model"] == "T4"

    r = c.post(CLAIMS, json=claim("m", class_name="mig", gpuMilli=100), headers=R)
    assert r.status_code == 201 and r.json()["phase"] == "Bound", r.text
    (name,) = r.json()["elasticGPUs"]
    g = c.get(f"{GPUS}/{name}", headers=R).json()
    assert g["source"] == "mig" and g["migProfile"] == "1g.5gb" and g["node"] == "a100-mig-0"
    held = holders(c)[("a100-mig-0", g["card"])]
    assert [h["migProfile"] for h in held] == ["1g.5gb"]

    # TFLOPS on a slice class: the model that serves it is named.
    r = c.post(CLAIMS, json=claim("tf", class_name="shared", tflops=20.0), headers=R)
    assert r.status_code == 201 and r.json()["phase"] == "Bound", r.text
    assert [m["model"] for m in r.json()["servingModels"]] == ["T4"]


def test_delete_releases_by_the_reclaim_policy(setup: Any) -> None:
    _, c, _, _ = setup
    a = c.post(CLAIMS, json=claim("a", class_name="cards", cards=8), headers=R).json()
    b = c.post(CLAIMS, json=claim("b", class_name="cards", cards=8), headers=R).json()
    assert a["phase"] == b["phase"] == "Bound"
    waiting = c.post(CLAIMS, json=claim("c", class_name="cards", cards=8), headers=R).json()
    assert waiting["phase"] == "Pending" and waiting["message"], pretty(waiting)

    # Delete: the ElasticGPUs go, their cards are free, and the waiting claim takes them.
    r = c.delete(f"{CLAIMS}/research/a", headers=R)
    assert r.status_code == 200, r.text
    assert sorted(r.json()["elasticGPUs"]["deleted"]) == sorted(a["elasticGPUs"])
    assert c.get(f"{CLAIMS}/research/a", headers=R).status_code == 404
    assert all(c.get(f"{GPUS}/{n}", headers=A).status_code == 404 for n in a["elasticGPUs"])
    now = c.get(f"{CLAIMS}/research/c", headers=R).json()
    assert now["phase"] == "Bound" and now["node"] == a["node"], pretty(now)
    assert {h[0]["job"] for (node, _), h in holders(c).items() if node == a["node"]} == {
        "elasticgpu/research/c"
    }

    # Retain: kept Released, still holding the card, until made Available or deleted.
    kept = c.post(CLAIMS, json=claim("k", class_name="kept", cards=1), headers=R).json()
    assert kept["phase"] == "Bound"
    (name,) = kept["elasticGPUs"]
    r = c.delete(f"{CLAIMS}/research/k", headers=R)
    assert r.json()["elasticGPUs"] == {"deleted": [], "retained": [name]}
    g = c.get(f"{GPUS}/{name}", headers=A).json()
    assert g["phase"] == "Released"
    assert holders(c)[(g["node"], g["card"])], "a Released ElasticGPU keeps its card"
    assert c.delete(f"{GPUS}/{name}", headers=R).status_code == 403
    r = c.patch(f"{GPUS}/{name}", json={"phase": "Available"}, headers=A)
    assert r.status_code == 200 and r.json()["phase"] == "Available", r.text
    # Bound again by the next claim of its class, and shown as that claim's.
    again = c.post(CLAIMS, json=claim("k2", class_name="kept", cards=1), headers=R).json()
    assert again["elasticGPUs"] == [name]
    (h,) = holders(c)[(g["node"], g["card"])]
    assert h["job"] == "elasticgpu/research/k2"
    assert c.delete(f"{GPUS}/{name}", headers=A).status_code == 409  # bound
    c.delete(f"{CLAIMS}/research/k2", headers=R)
    assert c.delete(f"{GPUS}/{name}", headers=A).status_code == 200
    assert holders(c)[(g["node"], g["card"])] == []


def test_tenants_see_and_touch_their_namespaces_only(setup: Any) -> None:
    _, c, _, _ = setup
    mine = c.post(CLAIMS, json=claim("x", "notebooks", "shared", gpuMilli=100), headers=N)
    assert mine.status_code == 201, mine.text
    gpu = mine.json()["elasticGPUs"][0]
    # research does not see it, cannot read or delete it (404, as a job of another namespace)
    assert c.get(f"{CLAIMS}/notebooks/x", headers=R).status_code == 404
    assert c.delete(f"{CLAIMS}/notebooks/x", headers=R).status_code == 404
    assert c.get(CLAIMS, headers=R).json()["items"] == []
    assert c.get(GPUS, headers=R).json()["items"] == []
    assert c.get(f"{GPUS}/{gpu}", headers=R).status_code == 404
    # ... nor make one there
    r = c.post(CLAIMS, json=claim("y", "notebooks", "shared", gpuMilli=100), headers=R)
    assert r.status_code == 403, r.text
    # its own namespace is the default for a one-namespace token
    body = claim("z", class_name="shared", gpuMilli=100)
    del body["metadata"]["namespace"]
    r = c.post(CLAIMS, json=body, headers=N)
    assert r.status_code == 201 and r.json()["namespace"] == "notebooks", r.text
    # the owner and the admin see it
    assert [x["name"] for x in c.get(CLAIMS, headers=N).json()["items"]] == ["x", "z"]
    assert len(c.get(f"{CLAIMS}?namespace=notebooks", headers=A).json()["items"]) == 2
    assert c.get(f"{GPUS}/{gpu}", headers=N).status_code == 200
    # classes: everyone reads, only the admin writes
    assert len(c.get(CLASSES, headers=R).json()["items"]) == 4
    assert c.post(CLASSES, json=klass("t", "physical"), headers=R).status_code == 403
    assert c.delete(f"{CLASSES}/cards", headers=R).status_code == 403
    assert c.post(GPUS, json={"name": "g"}, headers=R).status_code == 403
    # a class in use is not deleted; an unused one is
    assert c.delete(f"{CLASSES}/shared", headers=A).status_code == 409
    assert c.delete(f"{CLASSES}/cards", headers=A).status_code == 200
    assert c.get(f"{CLASSES}/cards", headers=A).status_code == 404


BAD_CLAIMS = [
    # a claim no class can serve
    (claim("b1", class_name="shared", cards=2), "requests.cards"),
    (claim("b2", class_name="cards", gpuMilli=300), "requests.gpu_milli"),
    (claim("b3", class_name="nope", cards=1), "class_name"),
    (claim("b4", cards=1, models=["B200"]), "class_name"),
    (claim("b5", class_name="cards", cards=9), "requests.cards"),
    # TFLOPS for a model with no published peak
    (claim("b6", tflops=100.0, models=["A10G"]), "requests.models"),
    # forms mixed, out of range, wrong types, unknown fields
    (claim("b7", class_name="cards", cards=1, tflops=10.0), "requests.tflops"),
    (claim("b8", class_name="cards", cards=100), "requests.cards"),
    (claim("b9", class_name="shared", gpuMilli="a lot"), "requests.gpuMilli"),
    (claim("b10", class_name="shared", gpuMilli=100, flops=3), "requests.flops"),
    (claim("B_11", class_name="cards", cards=1), "metadata.name"),
    (claim("b12"), "requests"),
]

BAD_CLASSES = [
    (klass("k1", "nvidia"), "provisioner"),
    (klass("k2", "physical", profiles="1g.5gb"), "parameters.profiles"),
    (klass("k3", "remote", pool="p"), "parameters.model"),
    (klass("k4", "physical", "Keep"), "reclaimPolicy"),
    ({**klass("k5", "physical"), "bindingMode": "Later"}, "bindingMode"),
    ({**klass("k6", "physical"), "size": 3}, "size"),
]


@pytest.mark.parametrize(
    ("body", "field"), BAD_CLAIMS, ids=[b["metadata"]["name"] for b, _ in BAD_CLAIMS]
)
def test_bad_claims_are_422_naming_the_field_and_nothing_is_stored(
    setup: Any, body: dict[str, Any], field: str
) -> None:
    _, c, _, state = setup
    before = dump(state)
    r = c.post(CLAIMS, json=body, headers=R)
    assert r.status_code == 422, r.text
    err = r.json()
    assert err["details"]["field"] == field, pretty(err)
    assert err["details"]["rule"]
    assert dump(state) == before
    assert c.get(CLAIMS, headers=A).json()["items"] == []
    assert c.get(GPUS, headers=A).json()["items"] == []


@pytest.mark.parametrize(
    ("body", "field"), BAD_CLASSES, ids=[b["metadata"]["name"] for b, _ in BAD_CLASSES]
)
def test_bad_classes_are_422_naming_the_field_and_nothing_is_stored(
    setup: Any, body: dict[str, Any], field: str
) -> None:
    _, c, _, state = setup
    before = dump(state)
    r = c.post(CLASSES, json=body, headers=A)
    assert r.status_code == 422, r.text
    err = r.json()
    assert err["error"] == "ConfigError"
    assert err["details"]["field"] == field, pretty(err)
    assert err["details"]["rule"]
    assert dump(state) == before
    assert len(c.get(CLASSES, headers=A).json()["items"]) == 4


def test_a_bad_class_says_its_field_value_and_rule_as_given(setup: Any) -> None:
    _, c, _, _ = setup
    # a value with ": " in it, which a reading of the message's text would cut there
    r = c.post(CLASSES, json=klass("k7", "physical", profiles="1g.5gb: 7"), headers=A)
    assert r.status_code == 422, r.text
    details = r.json()["details"]
    assert details["field"] == "parameters.profiles"
    assert details["value"] == "1g.5gb: 7"
    assert details["rule"].startswith("is not a parameter of provisioner physical"), details
    r = c.put(f"{CLASSES}/cards", json=klass("other", "physical"), headers=A)
    assert r.status_code == 422
    assert r.json()["details"] == {
        "field": "metadata.name",
        "value": "other",
        "rule": "must match the path (cards)",
    }, r.text


def test_conflicts_and_unknowns(setup: Any) -> None:
    _, c, _, _ = setup
    assert c.post(CLASSES, json=klass("cards", "physical"), headers=A).status_code == 409
    assert c.put(f"{CLASSES}/none", json=klass("none", "physical"), headers=A).status_code == 404
    r = c.put(f"{CLASSES}/cards", json=klass("cards", "physical", "Retain"), headers=A)
    assert r.status_code == 200 and r.json()["reclaimPolicy"] == "Retain", r.text
    assert c.put(f"{CLASSES}/cards", json=klass("other", "physical"), headers=A).status_code == 422
    body = claim("a", class_name="cards", cards=1)
    assert c.post(CLAIMS, json=body, headers=R).status_code == 201
    assert c.post(CLAIMS, json=body, headers=R).status_code == 409
    assert len(c.get(GPUS, headers=A).json()["items"]) == 1  # bound once
    assert c.get(f"{CLAIMS}/research/none", headers=R).status_code == 404
    assert c.delete(f"{GPUS}/none", headers=A).status_code == 404


def test_operator_gpu_by_hand(setup: Any) -> None:
    _, c, _, _ = setup
    body = {
        "name": "static-t4",
        "source": "slice",
        "model": "T4",
        "node": "t4-1",
        "card": 3,
        "capacity": {"gpuMilli": 500, "memoryMib": 8192},
        "className": "shared",
    }
    r = c.post(GPUS, json=body, headers=A)
    assert r.status_code == 201 and r.json()["phase"] == "Available", r.text
    (h,) = holders(c, R)[("t4-1", 3)]
    assert h["job"] == "elasticgpu/static" and h["gpuMilli"] == 500
    # the card is taken: a second one over it is refused
    over = {**body, "name": "static-t4b", "capacity": {"gpuMilli": 600, "memoryMib": 1}}
    assert c.post(GPUS, json=over, headers=A).status_code == 409
    bad = {**body, "name": "x", "node": "nowhere"}
    assert c.post(GPUS, json=bad, headers=A).status_code == 404
    r = c.post(GPUS, json={**body, "name": "y", "source": "tpu"}, headers=A)
    assert r.status_code == 422 and r.json()["details"]["field"] == "source", r.text
    # a claim of its class takes it (the smallest that serves)
    r = c.post(CLAIMS, json=claim("s", class_name="shared", gpuMilli=400), headers=R)
    assert r.json()["elasticGPUs"] == ["static-t4"], r.text
    (h,) = holders(c, R)[("t4-1", 3)]
    assert h["job"] == "elasticgpu/research/s" and h["namespace"] == "research"


def test_node_failure_and_queue_change(setup: Any) -> None:
    _, c, _, _ = setup
    a = c.post(CLAIMS, json=claim("a", class_name="shared", gpuMilli=200), headers=R).json()
    node = a["node"]
    # a queue change rebuilds the scheduler: the ElasticGPU keeps its card in the new one
    lq = c.get("/api/v1/localqueues/research/llm", headers=A).json()
    lq.pop("status")
    assert c.put("/api/v1/localqueues/research/llm", json=lq, headers=A).status_code == 200
    assert any(h for (n, _), h in holders(c).items() if n == node)
    # the node fails: its ElasticGPUs fail, the claim is Lost
    assert c.patch(f"/api/v1/nodes/{node}", json={"failed": True}, headers=A).status_code == 200
    assert c.get(f"{CLAIMS}/research/a", headers=R).json()["phase"] == "Lost"
    assert c.get(f"{GPUS}/{a['elasticGPUs'][0]}", headers=R).json()["phase"] == "Failed"
    # back: the card is free; the claim stays Lost until deleted
    c.patch(f"/api/v1/nodes/{node}", json={"failed": False}, headers=A)
    assert all(h == [] for (n, _), h in holders(c).items() if n == node)
    assert c.delete(f"{CLAIMS}/research/a", headers=R).status_code == 200


def _bindings(c: Any) -> dict[str, Any]:
    claims = {
        x["name"]: (x["phase"], x["node"], x["elasticGPUs"])
        for x in c.get(CLAIMS, headers=A).json()["items"]
    }
    gpus = {
        g["name"]: (g["phase"], g["node"], g["card"], g["claimRef"])
        for g in c.get(GPUS, headers=A).json()["items"]
    }
    return {"claims": claims, "gpus": gpus}


def _cards_once(c: Any) -> None:
    """Every card held at most once: ElasticGPUs and jobs on different cards."""
    owners: dict[tuple[str, int], set[str]] = {}
    for (node, index), hs in holders(c).items():
        for h in hs:
            if h["gpuMilli"] == 1000:
                owners.setdefault((node, index), set()).add(h["task"])
    assert all(len(v) == 1 for v in owners.values()), owners


def test_restart_keeps_every_binding_and_no_card_twice(setup: Any) -> None:
    plane, c, wall, state = setup
    for body in (
        claim("a", class_name="cards", cards=4),
        claim("b", class_name="kept", cards=2),
        claim("s", class_name="shared", gpuMilli=300),
        claim("m", class_name="mig", gpuMilli=100),
    ):
        assert c.post(CLAIMS, json=body, headers=R).json()["phase"] == "Bound"
    c.delete(f"{CLAIMS}/research/b", headers=R)  # Retained: Released, card held
    r = c.post(
        "/api/v1/jobs", json=job_doc("j", gpus=4, models=["H100-80GB"], duration="10h"), headers=R
    )
    assert r.status_code == 201
    plane.tick()
    assert c.get("/api/v1/jobs/research/j", headers=R).json()["status"]["phase"] == "Running"
    before, cards = _bindings(c), holders(c)
    _cards_once(c)
    plane.store.close()

    wall.advance(5)
    plane2 = make_plane(state, wall)
    c2 = client(plane2)
    assert _bindings(c2) == before
    assert holders(c2) == cards
    _cards_once(c2)
    assert c2.get("/api/v1/jobs/research/j", headers=R).json()["status"]["phase"] == "Running"
    # and the binder works on the restored state: a new claim takes no held card
    r = c2.post(CLAIMS, json=claim("c", class_name="cards", cards=4), headers=R)
    assert r.json()["phase"] == "Bound", r.text
    plane2.tick()
    _cards_once(c2)


def test_kill9_keeps_every_binding(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    extra = ("--elastic", str(ELASTIC))
    with serving(state, extra=extra) as server:
        with server.client(RESEARCH) as c:
            assert len(c.get(CLASSES).json()["items"]) == 3  # the seed file's
            for body in (
                claim("a", class_name="cards", cards=8),
                claim("s", class_name="shared", gpuMilli=250, memoryMib=2048),
                claim("m", class_name="mig", gpuMilli=100),
            ):
                r = c.post(CLAIMS, json=body)
                assert r.status_code == 201 and r.json()["phase"] == "Bound", r.text
            r = c.post(
                "/api/v1/jobs", json=job_doc("j", gpus=8, models=["H100-80GB"], duration="10h")
            )
            assert r.status_code == 201
            for _ in range(100):
                if c.get("/api/v1/jobs/research/j").json()["status"]["phase"] == "Running":
                    break
                time.sleep(0.05)
            before = _bindings(server.client(ADMIN))
            cards = holders(server.client(ADMIN))
        server.kill9()
    with serving(state, extra=extra) as server, server.client(ADMIN) as c:
        assert _bindings(c) == before
        assert holders(c) == cards
        _cards_once(c)
        assert len(c.get(CLASSES).json()["items"]) == 3


def test_a_deleted_claim_wakes_the_jobs_waiting_for_its_cards(setup: Any) -> None:
    plane, c, _, _ = setup
    a = c.post(CLAIMS, json=claim("a", class_name="cards", cards=8), headers=R).json()
    b = c.post(CLAIMS, json=claim("b", class_name="cards", cards=8), headers=R).json()
    assert a["phase"] == b["phase"] == "Bound"
    doc = job_doc("needs-h100", gpus=8, models=["H100-80GB"])
    assert c.post("/api/v1/jobs", json=doc, headers=R).status_code == 201
    plane.tick()
    plane.tick()  # parked: every H100 is held by a claim; nothing ends to wake it
    job = c.get("/api/v1/jobs/research/needs-h100", headers=R).json()
    assert job["status"]["phase"] == "Pending", pretty(job)
    assert c.delete(f"{CLAIMS}/research/a", headers=R).status_code == 200
    plane.tick()
    job = c.get("/api/v1/jobs/research/needs-h100", headers=R).json()
    assert job["status"]["phase"] == "Running", pretty(job)
    assert {p["node"] for p in job["status"]["placements"]} == {a["node"]}
