"""Bad input to the API: each gets a 4xx in the one error shape, naming the field and the rule
where there is one; the server goes on serving; the state file is unchanged (every table,
row for row).

Most cases run in-process (the service on the example cluster, a few jobs already running
and waiting, so that "unchanged" means something); the transport-level ones (bodies that are
too large, with and without a Content-Length, broken JSON) also run through a real server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpupool.control import ControlPlane
from tests.e2e.serve_kit import (
    ADMIN,
    RESEARCH,
    TestClient,
    Wall,
    auth,
    client,
    dump,
    job_doc,
    make_plane,
    serving,
    with_changes,
)

LIMIT = 64 * 1024


@dataclass
class Svc:
    state: Path
    plane: ControlPlane
    http: TestClient

    def refused(
        self,
        method: str,
        path: str,
        status: int,
        *,
        body: Any = None,
        raw: bytes | str | None = None,
        headers: dict[str, str] | None = None,
        token: str | None = ADMIN,
        field: str | None = None,
        says: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """Send a bad request; check the answer, that nothing was written, that the server
        still answers."""
        before = dump(self.state)
        hdrs = {**(auth(token) if token else {}), **(headers or {})}
        if raw is None and body is not None:  # (json.dumps writes Infinity and NaN too)
            raw, hdrs = json.dumps(body), {"Content-Type": "application/json", **hdrs}
        r = self.http.request(method, path, content=raw, headers=hdrs)
        assert r.status_code == status, r.text
        err: dict[str, Any] = r.json()
        assert set(err) == {"error", "message", "details"} and err["message"], err
        if field is not None:
            assert err["details"].get("field") == field, err
            assert err["details"].get("rule"), err
        text = f"{err['message']} {err['details'].get('rule', '')}"
        for s in says:
            assert s in text, err
        assert dump(self.state) == before
        assert self.http.get("/healthz").status_code == 200
        return err


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Svc]:
    wall = Wall()
    state = tmp_path / "state.db"
    plane = make_plane(state, wall)
    http = client(plane, max_body_bytes=LIMIT)
    for doc in (
        job_doc("running", gpus=2, duration="1h"),
        job_doc("slice", "serving", "serving", milli=300, gpu_memory="4Gi"),
    ):
        assert http.post("/api/v1/jobs", json=doc, headers=auth(ADMIN)).status_code == 201
    plane.tick()
    assert (
        http.post(
            "/api/v1/jobs",
            json=job_doc("waiting", gpus=8, count=2, models=["H100-80GB"]),
            headers=auth(ADMIN),
        ).status_code
        == 201
    )
    yield Svc(state, plane, http)
    # and after all that, it still takes good work
    ok = http.post("/api/v1/jobs", json=job_doc("still-fine"), headers=auth(ADMIN))
    assert ok.status_code == 201, ok.text
    plane.store.close()


GOOD = job_doc("good", gpus=1)
JOBS = "/api/v1/jobs"


# -- bodies that cannot be read ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "ctype", "says"),
    [
        ('{"metadata": {"name": "x"', "application/json", "malformed JSON"),
        ("{'single': 'quotes'}", "application/json", "malformed JSON"),
        (b"\xff\xfe\x00garbage", "application/json", "malformed JSON"),
        ("metadata: {name: x\nspec: [", "application/yaml", "malformed YAML"),
        ("a: b: c", "application/yaml", "malformed YAML"),
        ("key: [1, 2\n", "text/yaml", "malformed YAML"),
        ("", "application/json", "no body"),
        ("   \n", "application/yaml", "no body"),
    ],
)
def test_a_body_that_cannot_be_read_is_400(
    svc: Svc, raw: str | bytes, ctype: str, says: str
) -> None:
    err = svc.refused("POST", JOBS, 400, raw=raw, headers={"Content-Type": ctype}, says=(says,))
    assert err["error"] == "BadRequest"


LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join(['*' + a] * 10)}]\n"
    for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    ("raw", "ctype"),
    [
        ("[" * 30_000 + "]" * 30_000, "application/json"),
        ('{"a": ' * 70 + "1" + "}" * 70, "application/json"),
        ("[" * 30_000 + "]" * 30_000, "application/yaml"),
        (LAUGHS, "application/yaml"),  # a billion values in 400 bytes
    ],
)
def test_a_body_nested_too_deep_or_expanding_too_far_is_400(svc: Svc, raw: str, ctype: str) -> None:
    t0 = time.monotonic()
    svc.refused(
        "POST", JOBS, 400, raw=raw, headers={"Content-Type": ctype}, says=("nested more than 64",)
    )
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize(
    "raw",
    [
        "metadata: {name: x}\nspec: {data: !!binary aGVsbG8=}\n",
        "metadata: {name: x}\nspec: !!set {a, b}\n",
        "? [a, b]\n: c\n",
    ],
)
def test_yaml_with_no_json_form_is_400(svc: Svc, raw: str) -> None:
    svc.refused("POST", JOBS, 400, raw=raw, headers={"Content-Type": "application/yaml"})


@pytest.mark.parametrize(
    ("raw", "ctype"),
    [
        ("[1, 2, 3]", "application/json"),
        ("null", "application/json"),
        ('"a job"', "application/json"),
        ("42", "application/json"),
        ("- a\n- b\n", "application/yaml"),
        ("just a string", "application/yaml"),
    ],
)
def test_a_body_that_is_not_an_object_is_422(svc: Svc, raw: str, ctype: str) -> None:
    svc.refused(
        "POST", JOBS, 422, raw=raw, headers={"Content-Type": ctype}, says=("must be a JSON object",)
    )


@pytest.mark.parametrize(
    "ctype",
    ["text/plain", "application/xml", "multipart/form-data", "application/x-www-form-urlencoded"],
)
def test_a_body_of_another_type_is_415(svc: Svc, ctype: str) -> None:
    err = svc.refused(
        "POST",
        JOBS,
        415,
        raw=json.dumps(GOOD),
        headers={"Content-Type": ctype},
        says=(ctype, "application/json"),
    )
    assert err["error"] == "UnsupportedMediaType"


def test_a_body_over_the_limit_is_413_with_or_without_a_length(svc: Svc) -> None:
    big = with_changes(GOOD, "metadata.labels", {f"k{i}": "v" * 60 for i in range(2000)})
    raw = json.dumps(big).encode()
    assert len(raw) > LIMIT
    err = svc.refused(
        "POST", JOBS, 413, raw=raw, headers={"Content-Type": "application/json"}, says=(str(LIMIT),)
    )
    assert err["error"] == "PayloadTooLarge"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is applied as it streams
        for i in range(0, len(raw), 4096):
            yield raw[i : i + 4096]

    before = dump(svc.state)
    r = svc.http.post(
        JOBS, content=chunks(), headers={**auth(ADMIN), "Content-Type": "application/json"}
    )
    assert r.status_code == 413 and r.json()["error"] == "PayloadTooLarge"
    assert dump(svc.state) == before
    svc.refused(
        "POST", "/api/v1/clusterqueues", 413, raw=raw, headers={"Content-Type": "application/json"}
    )


# -- tokens ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic YWRtaW46YWRtaW4=",
        "Bearer not-a-known-token-at-all",
        f"Token {ADMIN}",
        f"Bearer {ADMIN}x",
    ],
)
def test_no_token_or_an_unknown_one_is_401(svc: Svc, header: str | None) -> None:
    hdrs = {} if header is None else {"Authorization": header}
    before = dump(svc.state)
    r = svc.http.post(JOBS, json=GOOD, headers=hdrs)
    assert r.status_code == 401 and r.json()["error"] == "Unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"
    assert dump(svc.state) == before


# -- job documents -----------------------------------------------------------------------------

#: (where, value, field named, words in the message or rule)
BAD_JOBS: list[tuple[str, Any, str, tuple[str, ...]]] = [
    # unknown fields
    ("extra", 1, "extra", ("unknown field",)),
    ("spec.bogus", True, "spec.bogus", ("unknown field", "podSets")),
    ("spec.podSets.0.gpus", 1, "spec.podSets[0].gpus", ("unknown field", "gpu")),
    (
        "spec.podSets.0.gpu",
        {"count": 1, "vram": "1Gi"},
        "spec.podSets[0].gpu.vram",
        ("unknown field",),
    ),
    ("metadata.owner", "me", "metadata.owner", ("unknown field",)),
    # wrong types
    ("spec.podSets.0.count", "three", "spec.podSets[0].count", ("integer",)),
    ("spec.podSets.0.count", 2.5, "spec.podSets[0].count", ("integer",)),
    ("spec.podSets.0.count", True, "spec.podSets[0].count", ("integer",)),
    ("spec.podSets", "all of them", "spec.podSets", ("list",)),
    ("spec.podSets", {"name": "main"}, "spec.podSets", ("list",)),
    ("metadata.name", 7, "metadata.name", ("string",)),
    ("metadata", "x", "metadata", ()),
    ("spec.podSets.0.cpu", [4], "spec.podSets[0].cpu", ("quantity",)),
    ("spec.podSets.0.cpu", True, "spec.podSets[0].cpu", ("quantity",)),
    ("spec.duration", {"minutes": 5}, "spec.duration", ("duration",)),
    ("spec.podSets.0.nodeSelector", {"zone": 1}, "spec.podSets[0].nodeSelector.zone", ("string",)),
    ("spec.priority", "high", "spec.priority", ("integer",)),
    # missing
    ("spec", {"queue": "llm", "podSets": [{"name": "main"}]}, "spec.duration", ("required",)),
    # negative or absurd quantities
    ("spec.podSets.0.cpu", -1, "spec.podSets[0].cpu", ("zero or more",)),
    ("spec.podSets.0.cpu", "-500m", "spec.podSets[0].cpu", ()),
    ("spec.podSets.0.cpu", "1e30", "spec.podSets[0].cpu", ("more than any node",)),
    ("spec.podSets.0.cpu", float("inf"), "spec.podSets[0].cpu", ()),
    ("spec.podSets.0.cpu", float("nan"), "spec.podSets[0].cpu", ()),
    ("spec.podSets.0.memory", float("-inf"), "spec.podSets[0].memory", ()),
    (
        "spec.podSets.0.gpu",
        {"milli": 100, "memory": float("inf")},
        "spec.podSets[0].gpu.memory",
        (),
    ),
    ("spec.duration", float("inf"), "spec.duration", ()),
    ("spec.runLimit", float("nan"), "spec.runLimit", ()),
    ("spec.podSets.0.memory", "-1Gi", "spec.podSets[0].memory", ()),
    ("spec.podSets.0.memory", "5Ei", "spec.podSets[0].memory", ("more than any node",)),
    ("spec.podSets.0.memory", "lots", "spec.podSets[0].memory", ("quantity",)),
    ("spec.podSets.0.count", 0, "spec.podSets[0].count", ("greater than or equal to 1",)),
    ("spec.podSets.0.count", 10**6, "spec.podSets[0].count", ("10000",)),
    ("spec.podSets.0.gpu", {"count": -1}, "spec.podSets[0].gpu.count", ()),
    ("spec.podSets.0.gpu", {"count": 65}, "spec.podSets[0].gpu.count", ("64",)),
    ("spec.podSets.0.gpu", {"milli": 0, "memory": "1Gi"}, "spec.podSets[0].gpu.milli", ()),
    ("spec.podSets.0.gpu", {"milli": 1000, "memory": "1Gi"}, "spec.podSets[0].gpu.milli", ("999",)),
    ("spec.podSets.0.gpu", {"milli": 500, "memory": "-1Gi"}, "spec.podSets[0].gpu.memory", ()),
    ("spec.podSets.0.gpu", {}, "spec.podSets[0].gpu", ("asks for no GPU",)),
    ("spec.podSets.0.gpu", {"count": 1, "milli": 500}, "spec.podSets[0].gpu.milli", ("slice",)),
    ("spec.podSets.0.gpu", {"mig": "1g.5gb", "count": 1}, "spec.podSets[0].gpu.mig", ()),
    ("spec.duration", "-5m", "spec.duration", ()),
    ("spec.duration", "0s", "spec.duration", ("more than zero",)),
    ("spec.duration", "400d", "spec.duration", ("366 days",)),
    ("spec.duration", "soon", "spec.duration", ("duration",)),
    ("spec.runLimit", "0s", "spec.runLimit", ("more than zero",)),
    ("spec.minMember", 0, "spec.minMember", ()),
    ("spec.minMember", 5, "spec.minMember", ("replica",)),
    ("spec.priority", 10**12, "spec.priority", ()),
    ("spec.podSets", [], "spec.podSets", ("at least 1",)),
    ("spec.podSets", [{"name": f"p{i}"} for i in range(9)], "spec.podSets", ("at most 8",)),
    ("spec.podSets", [{"name": "a"}, {"name": "a"}], "spec.podSets[1].name", ("another",)),
    # names
    ("metadata.name", "Bad_Name", "metadata.name", ("RFC 1123",)),
    ("metadata.name", "x" * 64, "metadata.name", ("63",)),
    ("metadata.name", "", "metadata.name", ()),
    ("spec.podSets.0.name", "-lead", "spec.podSets[0].name", ("RFC 1123",)),
    ("apiVersion", "batch/v1", "apiVersion", ("gpupool.io/v1alpha1",)),
    ("kind", "Pod", "kind", ("Job",)),
    # queues and classes
    ("spec.queue", "nope", "spec.queue", ("LocalQueue", "llm", "vision")),
    ("spec.queue", "serving", "spec.queue", ("namespace research",)),
    ("spec.queue", "serving/serving", "spec.queue", ()),
    ("spec.queue", "", "spec.queue", ("required",)),
    ("spec.priorityClassName", "gold", "spec.priorityClassName", ("gold",)),
    # tolerations
    (
        "spec.podSets.0.tolerations",
        [{"key": "a", "operator": "Maybe"}],
        "spec.podSets[0].tolerations[0].operator",
        ("Equal or Exists",),
    ),
    (
        "spec.podSets.0.tolerations",
        [{"key": "a", "effect": "Never"}],
        "spec.podSets[0].tolerations[0].effect",
        ("NoSchedule",),
    ),
    # requests no node could ever hold
    (
        "spec.podSets.0.gpu",
        {"count": 9},
        "spec.podSets[0].gpu.count",
        ("more GPUs than any node", "8"),
    ),
    (
        "spec.podSets.0.gpu",
        {"milli": 500, "memory": "100Gi"},
        "spec.podSets[0].gpu.memory",
        ("more than any single GPU", "80Gi"),
    ),
    (
        "spec.podSets.0.cpu",
        500,
        "spec.podSets[0].cpu",  # over any node (and llm's quota)
        ("larger than any node",),
    ),
    (
        "spec.podSets.0",
        {"name": "main", "count": 3, "gpu": {"count": 8}},
        "spec.podSets",
        ("never be admitted", "24 asked"),
    ),  # 24 GPUs: more than llm's quota plus borrowing
    ("spec.podSets.0.memory", "3Ti", "spec.podSets[0].memory", ("larger than any node",)),
    (
        "spec.podSets.0.gpu",
        {"count": 1, "models": ["V100"]},
        "spec.podSets[0].gpu.models",
        ("V100", "H100-80GB"),
    ),
    ("spec.podSets.0.gpu", {"count": 5, "models": ["T4"]}, "spec.podSets[0].gpu.count", ()),
    ("spec.podSets.0.gpu", {"mig": "7g.40gb"}, "spec.podSets[0].gpu.mig", ("1g.5gb",)),
    ("spec.podSets.0.nodeSelector", {"zone": "mars"}, "spec.podSets[0].nodeSelector", ("labels",)),
]


@pytest.mark.parametrize(
    ("where", "value", "field", "says"),
    BAD_JOBS,
    ids=[f"{w}={json.dumps(v)[:30]}" for w, v, _, _ in BAD_JOBS],
)
def test_a_bad_job_document_is_422_naming_the_field(
    svc: Svc, where: str, value: Any, field: str, says: tuple[str, ...]
) -> None:
    err = svc.refused(
        "POST", JOBS, 422, body=with_changes(GOOD, where, value), field=field, says=says
    )
    assert err["error"] in ("InvalidJobError", "InvalidRequest")


def test_more_cpu_than_any_node_has_is_422_naming_the_field(svc: Svc) -> None:
    # serving's quota does not count CPUs: the node check is the one that refuses
    svc.refused(
        "POST",
        JOBS,
        422,
        body=job_doc("x", "serving", "serving", cpu=500),
        field="spec.podSets[0].cpu",
        says=("larger than any node", "192 CPUs"),
    )


def test_a_bad_job_in_yaml_names_the_field_too(svc: Svc) -> None:
    doc = with_changes(GOOD, "spec.podSets.0.gpu", {"count": 9})
    svc.refused(
        "POST",
        JOBS,
        422,
        raw=yaml.safe_dump(doc),
        headers={"Content-Type": "application/yaml"},
        field="spec.podSets[0].gpu.count",
    )


def test_a_tenant_naming_another_namespace_in_the_document_is_refused(svc: Svc) -> None:
    svc.refused(
        "POST",
        JOBS,
        403,
        body=job_doc("x", "serving", "serving"),
        token=RESEARCH,
        says=("serving",),
    )


def test_a_duplicate_job_is_409_and_the_first_is_untouched(svc: Svc) -> None:
    err = svc.refused("POST", JOBS, 409, body=job_doc("running", gpus=1), says=("exists",))
    assert err["error"] == "ConflictError"
    assert svc.plane.jobs["research/running"].phase == "Running"


# -- queue objects -----------------------------------------------------------------------------

CQ = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "ClusterQueue",
    "metadata": {"name": "extra"},
    "spec": {
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [
                    {"name": "t4", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}]}
                ],
            }
        ]
    },
}


@pytest.mark.parametrize(
    ("where", "value", "says"),
    [
        (
            "spec.resourceGroups.0.flavors.0.name",
            "gold",
            ("flavors[0].name", "gold", "not a ResourceFlavor"),
        ),
        ("spec.resourceGroups.0.flavors.0.resources.0.nominalQuota", -2, ("nominalQuota",)),
        ("spec.resourceGroups.0.flavors.0.resources.0.nominalQuota", "lots", ("nominalQuota",)),
        ("spec.resourceGroups.0.flavors.0.resources.0.name", "nvidia.com/tpu", ("tpu",)),
        ("spec.bogus", 1, ("spec.bogus", "unknown field")),
        ("metadata", {}, ("name",)),
        ("metadata.name", "Not Valid", ("metadata.name",)),
        ("kind", "LocalQueue", ("kind", "ClusterQueue")),
        ("apiVersion", "v1", ("apiVersion",)),
    ],
)
def test_a_bad_cluster_queue_is_422_naming_the_field(
    svc: Svc, where: str, value: Any, says: tuple[str, ...]
) -> None:
    svc.refused(
        "POST", "/api/v1/clusterqueues", 422, body=with_changes(CQ, where, value), says=says
    )
    assert svc.http.get("/api/v1/clusterqueues/extra", headers=auth(ADMIN)).status_code == 404


def test_other_bad_queue_objects(svc: Svc) -> None:
    lq = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": "x", "namespace": "research"},
        "spec": {"clusterQueue": "nope"},
    }
    svc.refused("POST", "/api/v1/localqueues", 422, body=lq, says=("clusterQueue", "nope"))
    svc.refused(
        "POST",
        "/api/v1/localqueues",
        409,
        body=with_changes(lq, "metadata.name", "llm"),
        says=("exists",),
    )
    svc.refused(
        "POST",
        "/api/v1/clusterqueues",
        409,
        body=with_changes(CQ, "metadata.name", "llm"),
        says=("exists",),
    )
    svc.refused(
        "POST",
        "/api/v1/flavors",
        409,
        body={
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "h100"},
        },
        says=("exists",),
    )
    svc.refused(
        "POST",
        "/api/v1/cohorts",
        409,
        body={
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Cohort",
            "metadata": {"name": "org"},
        },
        says=("exists",),
    )
    svc.refused(
        "PUT", "/api/v1/clusterqueues/nope", 404, body=with_changes(CQ, "metadata.name", "nope")
    )
    svc.refused(
        "PUT",
        "/api/v1/clusterqueues/llm",
        422,
        body=CQ,
        field="metadata.name",
        says=("extra", "llm"),
    )
    svc.refused(
        "PUT",
        "/api/v1/localqueues/research/llm",
        422,
        body=with_changes(lq, "metadata.name", "llm"),
        says=("clusterQueue", "nope"),
    )
    svc.refused(
        "PUT",
        "/api/v1/localqueues/research/llm",
        422,
        body=with_changes(
            with_changes(lq, "metadata.namespace", "serving"), "metadata.name", "llm"
        ),
        field="metadata.namespace",
    )
    svc.refused("DELETE", "/api/v1/flavors/nope", 404)
    # a change that would leave queued jobs without their queue is a conflict
    svc.refused("DELETE", "/api/v1/localqueues/research/llm", 409, says=("research/",))
    svc.refused("DELETE", "/api/v1/clusterqueues/llm", 409, says=("research/",))


# -- nodes -------------------------------------------------------------------------------------

POOL = {
    "name": "l4",
    "count": 1,
    "cpu": 32,
    "memory": "128Gi",
    "gpus": {"model": "L4", "count": 2, "memory": "24Gi"},
}


@pytest.mark.parametrize(
    ("where", "value", "says"),
    [
        ("count", -1, ("count",)),
        ("count", 10**7, ("count", "1,000")),
        ("cpu", "-4", ("cpu",)),
        (
            "gpus",
            {"model": "L4", "count": 10**6, "memory": "1Gi", "nvlink": "mesh"},
            ("gpus.count", "64"),
        ),
        ("memory", "lots", ("memory",)),
        ("gpus", {"model": "L4", "count": -2}, ("count",)),
        ("gpus", {"model": "L4", "count": 2, "memory": "-1Gi"}, ("memory",)),
        ("name", "Bad_Name", ("name",)),
        ("colour", "red", ("colour", "unknown field")),
        ("taints", [{"key": "a", "effect": "Sometimes"}], ("effect",)),
    ],
)
def test_a_bad_node_pool_is_422_naming_the_field(
    svc: Svc, where: str, value: Any, says: tuple[str, ...]
) -> None:
    svc.refused("POST", "/api/v1/nodes", 422, body=with_changes(POOL, where, value), says=says)


def test_a_node_pool_whose_names_exist_is_409(svc: Svc) -> None:
    svc.refused(
        "POST", "/api/v1/nodes", 409, body=with_changes(POOL, "name", "h100"), says=("h100-0",)
    )


def test_node_patches_and_paths_that_do_not_fit(svc: Svc) -> None:
    svc.refused("PATCH", "/api/v1/nodes/t4-0", 422, body={"failed": 1}, field="failed")
    svc.refused("PATCH", "/api/v1/nodes/t4-0", 422, body={"drained": True}, field="drained")
    svc.refused("PATCH", "/api/v1/nodes/t4-0", 422, body=[True])
    svc.refused("PATCH", "/api/v1/nodes/none", 404, body={"failed": True})
    svc.refused("DELETE", "/api/v1/nodes/none", 404)
    svc.refused("GET", "/api/v1/nodes/none", 404)


# -- query parameters and unknown routes -------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/jobs?limit=abc", "query.limit"),
        ("/api/v1/jobs?limit=-1", "query.limit"),
        ("/api/v1/jobs?limit=100000", "query.limit"),
        ("/api/v1/jobs?after=-5", "query.after"),
        ("/api/v1/jobs?phase=Done", "query.phase"),
        ("/api/v1/jobs?phase=Pending,", "query.phase"),
        ("/api/v1/jobs?namespace=" + "n" * 100, "query.namespace"),
        ("/api/v1/events?since=x", "query.since"),
        ("/api/v1/events?limit=0", "query.limit"),
    ],
)
def test_bad_query_parameters_are_422_naming_them(svc: Svc, path: str, field: str) -> None:
    svc.refused("GET", path, 422, field=field)


def test_unknown_routes_and_methods(svc: Svc) -> None:
    svc.refused("GET", "/api/v1/widgets", 404)
    svc.refused("GET", "/api/v1/jobs/research/nope", 404, says=("research/nope",))
    svc.refused("GET", "/api/v1/jobs/../../etc/passwd", 404)
    svc.refused("PUT", "/api/v1/jobs", 405, body=GOOD)
    svc.refused("PATCH", "/api/v1/jobs/research/running", 405, body={})


# -- the same through a real server ------------------------------------------------------------


def test_a_real_server_refuses_bad_bodies_and_keeps_serving(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    with serving(state, interval=3600.0) as server, server.client() as c:
        before = dump(state)
        r = c.post(JOBS, content=b'{"metadata": ', headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "malformed JSON" in r.json()["message"]
        huge = b'{"pad": "' + b"x" * (2 << 20) + b'"}'  # over the default 1 MiB
        r = c.post(JOBS, content=huge, headers={"Content-Type": "application/json"})
        assert r.status_code == 413

        def stream() -> Iterator[bytes]:
            for _ in range(40):
                yield b"x" * 65536

        r = c.post(JOBS, content=stream(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413
        r = c.post(JOBS, json=with_changes(GOOD, "spec.podSets.0.gpu", {"count": 9}))
        assert r.status_code == 422
        assert r.json()["details"]["field"] == "spec.podSets[0].gpu.count"
        r = httpx.post(f"{server.url}{JOBS}", json=GOOD)
        assert r.status_code == 401
        assert dump(state) == before
        assert c.post(JOBS, json=GOOD).status_code == 201
