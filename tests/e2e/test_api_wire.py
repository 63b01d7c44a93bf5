"""Every answer of the API in one convention: camelCase names, times as RFC 3339 strings with
their cluster seconds beside them (``submitTime`` and ``submitTimeSeconds``), and every route
declaring the shape it answers with in ``/openapi.json``.

The walk reads each resource with jobs pending, running and ended, ElasticGPU objects, and a
ProvisioningRequest on the simulated cloud. Maps whose keys are data (labels, annotations,
node selectors, parameters, flavors and queues by name) and the documents users wrote
(``spec``) are not names of the API and are left out.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpupool.api.models.base import SCHEMAS, name_schemas, schema_names
from gpupool.cloud.spec import load_cloud
from gpupool.config import load_cluster, load_documents
from gpupool.control import Clock, ControlPlane
from gpupool.store import Store
from gpupool.virtual import VirtualCluster
from tests.e2e.serve_kit import ADMIN, CLUSTER, QUEUES, Wall, auth, client, job_doc
from tests.e2e.test_provisioning_api import CLOUD

NAME = re.compile(r"^[a-z][a-zA-Z0-9]*$")
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
DATA_MAPS = {
    "labels",
    "annotations",
    "nodeSelector",
    "parameters",
    "spec",
    "queues",
    "usage",
    "nominal",
    "borrowed",
    "jobs",
}  # keys are data: names, phases, flavors
START = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def names(value: Any, path: str = "") -> list[tuple[str, str]]:
    """(path, key) for every key of the API's own in ``value``."""
    out: list[tuple[str, str]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((path, k))
            if k not in DATA_MAPS:
                out += names(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += names(v, f"{path}[{i}]")
    return out


def times(value: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """(path, time, its seconds) for every ``...Time`` field."""
    out: list[tuple[str, Any, Any]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k.endswith("Time") or k == "time":
                out.append((f"{path}.{k}", v, value.get(f"{k}Seconds", "(absent)")))
            elif k not in DATA_MAPS:
                out += times(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += times(v, f"{path}[{i}]")
    return out


def _plane(tmp: Path, wall: Wall, speed: float) -> ControlPlane:
    (tmp / "cloud.yaml").write_text(CLOUD)
    return ControlPlane(
        Store(tmp / "state.db", wall=wall),
        VirtualCluster(),
        Clock(speed, wall=wall),
        nodes=load_cluster(CLUSTER),
        queue_docs=load_documents(QUEUES),
        cloud=load_cloud(str(tmp / "cloud.yaml")),
        cloud_seed=3,
    )


def _answers(tmp: Path) -> tuple[dict[str, Any], float]:
    wall = Wall(START)
    plane = _plane(tmp, wall, speed=60.0)
    http = client(plane)
    a = auth(ADMIN)

    def post(path: str, doc: dict[str, Any]) -> None:
        r = http.post(path, json=doc, headers=a)
        assert r.status_code == 201, r.text

    post("/api/v1/jobs", job_doc("ends", gpus=1, duration="1m"))
    post("/api/v1/jobs", job_doc("runs", gpus=1, duration="10h"))
    post(
        "/api/v1/jobs",
        job_doc(
            "slice", "serving", "serving", gpus=None, milli=300, gpu_memory="4Gi", duration="10h"
        ),
    )
    post("/api/v1/jobs", job_doc("waits", "serving", "serving", gpus=4, duration="1h"))
    post(
        "/api/v1/jobs",
        job_doc("burst", queue="burst", gpus=8, count=2, cpu=16, memory="64Gi", duration="1h"),
    )
    post("/api/v1/elasticgpuclasses", {"name": "cards", "provisioner": "physical"})
    post(
        "/api/v1/elasticgpuclaims",
        {"name": "c1", "namespace": "research", "className": "cards", "requests": {"cards": 1}},
    )
    plane.tick()
    wall.advance(2)  # two cluster minutes: "ends" ends
    plane.tick()
    paths = [
        "/api/v1/cluster",
        "/api/v1/cluster/history",
        "/api/v1/nodes",
        "/api/v1/nodes/h100-0",
        "/api/v1/jobs",
        "/api/v1/jobs/research/runs",
        "/api/v1/jobs/research/ends",
        "/api/v1/jobs/serving/waits",
        "/api/v1/events",
        "/api/v1/flavors",
        "/api/v1/clusterqueues",
        "/api/v1/cohorts",
        "/api/v1/localqueues",
        "/api/v1/elasticgpuclasses",
        "/api/v1/elasticgpuclaims",
        "/api/v1/elasticgpus",
        "/api/v1/provisioningrequests",
        "/api/v1/cloud",
        "/api/v1/whoami",
        "/healthz",
    ]
    out = {}
    for p in paths:
        r = http.get(p, headers=a)
        assert r.status_code == 200, (p, r.text)
        out[p] = r.json()
    return out, plane.clock.now()


def test_every_name_is_camel_case_and_every_time_rfc3339_with_its_seconds(tmp_path: Path) -> None:
    answers, now = _answers(tmp_path)
    assert answers["/api/v1/provisioningrequests"]["items"], "no ProvisioningRequest to read"
    assert answers["/api/v1/jobs/research/ends"]["status"]["phase"] == "Succeeded"
    bad = [
        (p, where, k)
        for p, body in answers.items()
        for where, k in names(body)
        if not NAME.match(k)
    ]
    assert bad == [], bad
    seen = 0
    for p, body in answers.items():
        for where, stamp, seconds in times(body):
            assert seconds != "(absent)", f"{p}{where}: no Seconds beside it"
            if stamp is None:
                assert seconds is None, (p, where)
                continue
            seen += 1
            assert isinstance(stamp, str) and RFC3339.match(stamp), (p, where, stamp)
            if p != "/api/v1/events":  # an event's time is the wall clock it was written at
                # the wall-clock instant the cluster clock read that many seconds, at x60
                wall = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
                assert wall.tzinfo is not None and wall.utcoffset() == UTC.utcoffset(None)
                assert abs(wall.timestamp() - (START + seconds / 60.0)) < 0.002, (
                    p,
                    where,
                    stamp,
                    seconds,
                )
    assert seen > 20
    job = answers["/api/v1/jobs/research/ends"]["status"]
    assert job["submitTime"] == "2027-01-15T08:00:00.000Z" and job["submitTimeSeconds"] == 0
    assert job["finishTimeSeconds"] == 120.0 and job["finishTime"] == "2027-01-15T08:00:02.000Z"
    listing = answers["/api/v1/jobs"]
    assert listing["timeSeconds"] == round(now, 3)


def test_every_route_declares_the_shape_it_answers_with(tmp_path: Path) -> None:
    plane = _plane(tmp_path, Wall(START), speed=1.0)
    spec = client(plane).get("/openapi.json", headers=auth(ADMIN)).json()
    untyped = []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            ok = next(op["responses"][c] for c in ("200", "201") if c in op["responses"])
            if path == "/metrics":
                continue  # Prometheus text
            schema = ok["content"]["application/json"]["schema"]
            if "$ref" not in schema:
                untyped.append(f"{method.upper()} {path}: {schema}")
    assert untyped == []
    job = spec["components"]["schemas"]["JobStatus"]["properties"]
    assert {"submitTime", "submitTimeSeconds", "pendingReason", "placements"} <= set(job)
    assert spec["components"]["schemas"]["Card"]["required"][:3] == ["index", "model", "memoryMib"]


def _refs(value: Any) -> list[str]:
    if isinstance(value, dict):
        own = [value["$ref"]] if isinstance(value.get("$ref"), str) else []
        return own + [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


def test_models_named_apart_from_the_core_keep_their_names_in_the_document(tmp_path: Path) -> None:
    """``JobView`` (the core has ``Job``) and the other models named apart are still ``Job``,
    ``ClusterQueue``, ... in ``/openapi.json``, as docs/serve.md names them; every reference
    leads to a schema of the document."""
    apart = schema_names()
    assert {
        "JobView": "Job",
        "ClusterQueueView": "ClusterQueue",
        "TaintView": "Taint",
        "CloudView": "Cloud",
        "ClaimRequestsView": "ClaimRequests",
    }.items() <= apart.items()
    plane = _plane(tmp_path, Wall(START), speed=1.0)
    spec = client(plane).get("/openapi.json", headers=auth(ADMIN)).json()
    schemas = spec["components"]["schemas"]
    assert set(apart) & set(schemas) == set()
    assert set(apart.values()) <= set(schemas)
    assert all(schemas[name]["title"] == name for name in apart.values())
    dangling = {r for r in _refs(spec) if r.removeprefix(SCHEMAS) not in schemas}
    assert dangling == set()
    assert schemas["NodeView"]["properties"]["taints"]["items"] == {"$ref": SCHEMAS + "Taint"}


def test_two_schemas_for_one_document_name_are_refused() -> None:
    spec = {"components": {"schemas": {"Job": {"title": "Job"}, "JobView": {"title": "JobView"}}}}
    with pytest.raises(ValueError, match="'JobView' would be named 'Job'"):
        name_schemas(spec)
