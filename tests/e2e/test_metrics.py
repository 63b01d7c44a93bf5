"""``/metrics`` of the service: every family the issue names, in base units with the gpupool_
prefix, and the values after jobs are admitted and one is preempted (in-process, a clock the
test moves, the example cluster and queues)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.app import Service
from gpupool.control import Clock
from tests.e2e.serve_kit import (
    ADMIN,
    CLUSTER,
    QUEUES,
    RESEARCH,
    TestClient,
    Wall,
    auth,
    job_doc,
    tokens,
)

# family name (as the parser reports it: counters without _total) -> its labels
FAMILIES = {
    "gpupool_jobs_pending": {"queue"},
    "gpupool_jobs_running": {"queue"},
    "gpupool_jobs_submitted": {"queue"},
    "gpupool_jobs_admitted": {"queue"},
    "gpupool_admission_wait_seconds": {"queue"},
    "gpupool_decision_latency_seconds": set(),
    "gpupool_gpus_allocated": {"flavor", "queue"},
    "gpupool_gpu_milli_allocated": {"flavor", "queue"},
    "gpupool_gpus_total": {"flavor"},
    "gpupool_gpu_milli_total": {"flavor"},
    "gpupool_queue_nominal_gpus": {"flavor", "queue"},
    "gpupool_queue_nominal_gpu_milli": {"flavor", "queue"},
    "gpupool_fragmentation_ratio": set(),
    "gpupool_preemptions": {"queue", "reason"},
    "gpupool_api_request_duration_seconds": {"method", "route", "code"},
    "gpupool_nodes": {"state"},
    "gpupool_queue_dominant_share": {"queue"},
    "gpupool_pending_reasons": {"plugin"},
    "gpupool_process_resident_memory_bytes": set(),
}


def scrape(text: str) -> dict[str, Any]:
    """{family name: (type, {(sample name, frozenset(labels)): value})}."""
    out: dict[str, Any] = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = (
            fam.type,
            {(s.name, frozenset(s.labels.items())): s.value for s in fam.samples},
        )
    return out


def value(families: dict[str, Any], family: str, sample: str | None = None, **labels: str) -> float:
    _, samples = families[family]
    return float(samples[(sample or family, frozenset(labels.items()))])


@pytest.fixture(scope="module")
def families(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Four low-priority 4-GPU H100 jobs fill llm's H100s (12 nominal + 4 borrowed), a slice
    runs on an A6000 for notebooks; ten minutes later a production job in llm preempts one
    of the four and takes its cards."""
    state = Path(tmp_path_factory.mktemp("metrics")) / "state.db"
    service = Service(state=state, cluster=CLUSTER, queues=QUEUES, speed=1.0)
    wall = Wall()
    service.plane.clock = Clock(1.0, wall=wall)
    client = TestClient(service.api(tokens()))
    for i in range(4):
        r = client.post(
            "/api/v1/jobs",
            headers=auth(RESEARCH),
            json=job_doc(
                f"low-{i}", gpus=4, models=["H100-80GB"], duration="10h", priorityClassName="batch"
            ),
        )
        assert r.status_code == 201, r.text
    r = client.post(
        "/api/v1/jobs",
        headers=auth(ADMIN),
        json=job_doc(
            "nb-0",
            namespace="notebooks",
            queue="notebooks",
            gpus=None,
            milli=500,
            gpu_memory="8Gi",
            duration="10h",
        ),
    )
    assert r.status_code == 201, r.text
    wall.advance(30)
    assert service.plane.tick().bound == 5
    wall.advance(600)  # past the queues' minRuntime (5m)
    r = client.post(
        "/api/v1/jobs",
        headers=auth(RESEARCH),
        json=job_doc(
            "high-0", gpus=4, models=["H100-80GB"], duration="1h", priorityClassName="production"
        ),
    )
    assert r.status_code == 201, r.text
    ticks = 0  # cycles after the first
    while service.plane.job("research/high-0").phase != "Running":
        wall.advance(10)
        service.plane.tick()
        ticks += 1
        assert ticks < 10, "the production job was never admitted"
    r = client.get("/metrics", headers=auth(ADMIN))
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    out = scrape(r.text)
    out["_ticks"] = ticks
    out["_text"] = r.text
    return out


def test_every_family_is_there_with_its_labels(families: dict[str, Any]) -> None:
    for name, labels in FAMILIES.items():
        assert name in families, f"{name} is missing from /metrics"
        _, samples = families[name]
        assert samples, f"{name} has no samples"
        for _, sample_labels in samples:
            keys = {k for k, _ in sample_labels} - {"le"}
            assert keys == labels, f"{name}: labels {keys}, expected {labels}"


def test_every_gpupool_family_has_the_prefix_and_base_units(families: dict[str, Any]) -> None:
    names = [n for n in families if not n.startswith("_")]
    assert all(n.startswith("gpupool_") for n in names), names
    for n in names:  # base units: seconds and bytes, never ms or MiB
        assert not any(part in n for part in ("_ms", "_milliseconds", "_mib", "_minutes"))
    assert families["gpupool_admission_wait_seconds"][0] == "histogram"
    assert families["gpupool_decision_latency_seconds"][0] == "histogram"
    assert families["gpupool_api_request_duration_seconds"][0] == "histogram"
    assert families["gpupool_preemptions"][0] == "counter"
    assert "gpupool_preemptions_total{" in families["_text"]


def test_jobs_by_queue(families: dict[str, Any]) -> None:
    assert value(families, "gpupool_jobs_running", queue="llm") == 4
    assert value(families, "gpupool_jobs_pending", queue="llm") == 1  # the preempted one
    assert value(families, "gpupool_jobs_running", queue="notebooks") == 1
    assert value(families, "gpupool_jobs_pending", queue="vision") == 0  # idle queues too
    assert (
        value(families, "gpupool_jobs_submitted", "gpupool_jobs_submitted_total", queue="llm") == 5
    )
    assert value(families, "gpupool_jobs_admitted", "gpupool_jobs_admitted_total", queue="llm") == 5


def test_gpus_allocated_and_total_by_flavor_and_queue(families: dict[str, Any]) -> None:
    assert value(families, "gpupool_gpus_allocated", flavor="h100", queue="llm") == 16
    assert value(families, "gpupool_gpu_milli_allocated", flavor="h100", queue="llm") == 16000
    assert value(families, "gpupool_gpus_allocated", flavor="a6000", queue="notebooks") == 0.5
    assert value(families, "gpupool_gpu_milli_allocated", flavor="a6000", queue="notebooks") == 500
    assert value(families, "gpupool_gpus_total", flavor="h100") == 16
    assert value(families, "gpupool_gpu_milli_total", flavor="a100") == 24000
    assert value(families, "gpupool_queue_nominal_gpus", flavor="h100", queue="llm") == 12
    assert (
        value(families, "gpupool_queue_nominal_gpu_milli", flavor="a100", queue="vision") == 12000
    )


def test_preemptions_by_reason(families: dict[str, Any]) -> None:
    assert (
        value(
            families,
            "gpupool_preemptions",
            "gpupool_preemptions_total",
            queue="llm",
            reason="within-queue",
        )
        == 1
    )


def test_pending_jobs_by_the_plugin_holding_them_back(families: dict[str, Any]) -> None:
    # the one pending job is the preempted one, parked by its eviction until capacity frees
    assert value(families, "gpupool_pending_reasons", plugin="eviction") == 1
    _, samples = families["gpupool_pending_reasons"]
    assert sum(samples.values()) == 1


def test_admission_wait_histogram(families: dict[str, Any]) -> None:
    count = value(
        families,
        "gpupool_admission_wait_seconds",
        "gpupool_admission_wait_seconds_count",
        queue="llm",
    )
    assert count == 5
    # the four low jobs waited 30 s; the production job the cycles it took (10 s each)
    wait_high = families["_ticks"] * 10
    total = value(
        families,
        "gpupool_admission_wait_seconds",
        "gpupool_admission_wait_seconds_sum",
        queue="llm",
    )
    assert total == 4 * 30 + wait_high
    assert (
        value(
            families,
            "gpupool_admission_wait_seconds",
            "gpupool_admission_wait_seconds_bucket",
            queue="llm",
            le="30.0",
        )
        >= 4
    )
    assert (
        value(
            families,
            "gpupool_admission_wait_seconds",
            "gpupool_admission_wait_seconds_bucket",
            queue="llm",
            le="+Inf",
        )
        == 5
    )


def test_decision_latency_and_api_latency(families: dict[str, Any]) -> None:
    cycles = value(
        families, "gpupool_decision_latency_seconds", "gpupool_decision_latency_seconds_count"
    )
    assert cycles == 1 + families["_ticks"]
    assert (
        value(families, "gpupool_decision_latency_seconds", "gpupool_decision_latency_seconds_sum")
        > 0
    )
    posts = value(
        families,
        "gpupool_api_request_duration_seconds",
        "gpupool_api_request_duration_seconds_count",
        method="POST",
        route="/api/v1/jobs",
        code="201",
    )
    assert posts == 6


def test_fragmentation_and_nodes(families: dict[str, Any]) -> None:
    ratio = value(families, "gpupool_fragmentation_ratio")
    assert 0 < ratio < 1  # half an A6000 is free beside the slice
    assert value(families, "gpupool_nodes", state="ready") == 12
    assert value(families, "gpupool_process_resident_memory_bytes") > 1 << 20
