"""The API fuzzed from its own OpenAPI spec (schemathesis): whatever comes in, no server error,
and every response has the status codes, content type and shape the spec declares.

The service runs in-process on the example cluster with its state in memory; the fuzzer holds
the admin token, so every route (nodes and queue objects included) is reached. Examples are
few per operation (GPUPOOL_FUZZ_EXAMPLES, default 20), positive and negative, derandomized,
from the examples and fuzzing phases (the coverage phase alone sends some 700 requests to
POST /api/v1/jobs), so the run is the same every time and short.
"""

from __future__ import annotations

import os
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gpupool.api.app import create_app
from tests.e2e.serve_kit import (
    ADMIN,
    Wall,
    auth,
    client,
    holders_ok,
    make_plane,
    tokens,
    with_changes,
)

EXAMPLES_PER_OPERATION = int(os.environ.get("GPUPOOL_FUZZ_EXAMPLES", "20"))

app = create_app(make_plane(":memory:", Wall()), tokens())
schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=auth(ADMIN))
schema.config.update(headers=auth(ADMIN))
schema.config.generation.update(
    max_examples=EXAMPLES_PER_OPERATION,
    deterministic=True,
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
)
schema.config.phases.update(phases=["examples", "fuzzing"])

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@schema.parametrize()
def test_api_conforms_to_its_spec(case: schemathesis.Case) -> None:
    case.call_and_validate(checks=CHECKS)


# -- job documents near the valid ones ---------------------------------------------------------
#
# Whole random documents seldom get past the first field check; these are built from valid
# parts with odd quantities, shapes and combinations mixed in, so they reach the queue, the
# validator and the scheduler. Whatever is accepted is then scheduled, and no card may end up
# held past its compute or memory.

QUEUES = [
    ("research", "llm"),
    ("research", "vision"),
    ("serving", "serving"),
    ("notebooks", "notebooks"),
]
MODELS = ["H100-80GB", "A100-80GB", "A100-40GB", "T4", "RTX-A6000"]
GPU = st.one_of(
    st.none(),
    st.builds(
        lambda n, m: {"count": n, "models": m},
        st.integers(1, 8),
        st.lists(st.sampled_from(MODELS), max_size=1),
    ),
    st.builds(
        lambda n, mem: {"milli": n, "memory": mem},
        st.integers(1, 999),
        st.sampled_from(["4Gi", "20Gi", "40Gi", "5000Mi", 1024]),
    ),
    st.just({"mig": "1g.5gb"}),
)
POD_SET = st.builds(
    lambda count, cpu, memory, gpu: {
        "count": count,
        "cpu": cpu,
        "memory": memory,
        **({"gpu": gpu} if gpu is not None else {}),
    },
    st.integers(1, 4),
    st.one_of(st.integers(0, 48), st.sampled_from(["500m", "1.5"])),
    st.sampled_from(["1Gi", "512Mi", "0", "64Gi", 2**30]),
    GPU,
)
DURATION = st.sampled_from(["10m", "1h", "30s", "1h30m", 60, 0.5])

# (where, odd values): one of these replaces a valid value in a third of the documents
ODD: list[tuple[str, list[Any]]] = [
    ("metadata.name", ["Job", "-x", "a" * 70, "", 7, None]),
    ("metadata.namespace", ["nobody", "Research", ""]),
    ("spec.queue", ["serving", "nope", "", ["llm"]]),
    ("spec.duration", ["0s", "-5m", "400d", "soon", -1, True]),
    ("spec.runLimit", ["0s", "-1h", "x"]),
    ("spec.minMember", [0, -1, 99, "2"]),
    ("spec.priority", [10**12, -(10**12), 1.5, "high"]),
    ("spec.priorityClassName", ["gold", ""]),
    ("spec.podSets", [[], None, {"name": "main"}, [{}] * 9]),
    ("spec.podSets.0.name", ["Bad_Name", "", "x" * 64]),
    ("spec.podSets.0.count", [0, -1, 10**6, 2.5, "3"]),
    ("spec.podSets.0.cpu", [-1, "-1", "1e30", "x", 10**12, "0.0001", float("inf")]),
    ("spec.podSets.0.memory", [-1, "-1Gi", "1e15", "abc", "3Ti", 2**60]),
    (
        "spec.podSets.0.gpu",
        [
            {"count": 9},
            {"count": 0},
            {"milli": 0},
            {"milli": 1000},
            {"milli": 500, "memory": "81Gi"},
            {"milli": 500, "memory": -1},
            {"count": 1, "milli": 500},
            {"mig": "7g.40gb"},
            {"mig": "1g.5gb", "count": 1},
            {"count": 2, "models": ["V100"]},
            {"count": 8, "models": ["T4"]},
            {},
            {"count": 1, "x": 1},
        ],
    ),
    ("spec.podSets.0.nodeSelector", [{"zone": "mars"}, {"a": 1}, []]),
    ("spec.podSets.0.tolerations", [[{"operator": "Sometimes"}], [{"effect": "Never"}], {}]),
    ("spec.extra", [1]),
]


@st.composite
def job_documents(draw: st.DrawFn) -> dict[str, Any]:
    ns, queue = draw(st.sampled_from(QUEUES))
    pod_sets = draw(st.lists(POD_SET, min_size=1, max_size=3))
    for i, ps in enumerate(pod_sets):
        ps["name"] = f"ps{i}"
    spec: dict[str, Any] = {"queue": queue, "duration": draw(DURATION), "podSets": pod_sets}
    if draw(st.booleans()):
        spec["minMember"] = draw(st.integers(1, sum(p["count"] for p in pod_sets)))
    choice = draw(st.integers(0, 2))
    if choice == 1:
        spec["priority"] = draw(st.integers(-100, 1000))
    elif choice == 2:
        spec["priorityClassName"] = draw(st.sampled_from(["production", "normal", "batch"]))
    if draw(st.booleans()):
        spec["runLimit"] = draw(DURATION)
    doc = {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": draw(st.from_regex(r"\A[a-z][a-z0-9-]{2,10}[a-z0-9]\Z")),
            "namespace": ns,
        },
        "spec": spec,
    }
    if draw(st.integers(0, 2)) == 2:  # (hypothesis leans to 0: the valid document)
        where, values = draw(st.sampled_from(ODD))
        doc = with_changes(doc, where, draw(st.sampled_from(values)))
    return doc


class _Near:
    def __init__(self) -> None:
        self.wall = Wall()
        self.plane = make_plane(":memory:", self.wall, speed=60.0)
        self.client = client(self.plane)
        self.sent = 0


_near: list[_Near] = []


@settings(
    max_examples=150, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
)
@given(doc=job_documents(), minutes=st.integers(0, 30), cancel=st.integers(0, 5))
def test_near_valid_jobs_are_accepted_or_refused_with_a_reason(
    doc: dict[str, Any], minutes: int, cancel: int
) -> None:
    if not _near:
        _near.append(_Near())
    s = _near[0]
    s.sent += 1
    name = doc["metadata"].get("name")
    if isinstance(name, str) and name[-1:].isalnum() and s.sent % 10:  # one in ten reused
        doc["metadata"]["name"] = f"{name}-{s.sent}"
    r = s.client.post("/api/v1/jobs", json=doc, headers=auth(ADMIN))
    assert r.status_code in (201, 409, 422), r.text
    body = r.json()
    if r.status_code == 201:
        assert body["status"]["phase"] == "Pending"
        if cancel == 5:
            key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
            assert s.client.delete(f"/api/v1/jobs/{key}", headers=auth(ADMIN)).status_code == 200
    else:
        assert set(body) == {"error", "message", "details"} and body["message"]
        if body["error"] == "InvalidJobError":
            assert body["details"]["field"] and body["details"]["rule"]
    s.wall.advance(minutes)  # x60: up to half an hour of cluster time
    s.plane.tick()
    if cancel == 4:  # cancel the oldest running job, its cards are free at once
        running = [k for k, rec in s.plane.jobs.items() if rec.phase == "Running"]
        if running:
            assert (
                s.client.delete(f"/api/v1/jobs/{running[0]}", headers=auth(ADMIN)).status_code
                == 200
            )
    nodes = s.client.get("/api/v1/nodes", headers=auth(ADMIN)).json()["items"]
    assert holders_ok(nodes) == []
    cluster = s.client.get("/api/v1/cluster", headers=auth(ADMIN)).json()
    # the cluster's gpu_milli counts cards that are not MIG-partitioned (a MIG holder shows
    # its instance's share of its card, which is not in that total)
    assert cluster["gpuMilli"]["used"] == sum(
        h["gpuMilli"] or 0
        for n in nodes
        for g in n["gpus"]
        for h in g["holders"]
        if h["migProfile"] is None
    )
