"""deploy/grafana/gpupool-dashboard.json: valid JSON Grafana can import, a data source
variable, and every query names metrics that gpupool exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gpupool.metrics import Gauges, Metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "gpupool-dashboard.json"
NAME = re.compile(r"\bgpupool_[a-zA-Z0-9_:]*")


def exported_names() -> set[str]:
    """Every sample name /metrics can show, from a Metrics with every series present."""
    m = Metrics()
    m.watch(
        lambda: Gauges(
            pending={"q": 1},
            running={"q": 1},
            gpus_allocated={("f", "q"): 1.0},
            gpu_milli_allocated={("f", "q"): 1000},
            gpus_total={"f": 8},
            gpu_milli_total={"f": 8000},
            gpu_milli_nominal={("f", "q"): 4000},
            fragmentation_ratio=0.1,
            nodes={"ready": 1},
            queue_share={"q": 0.5},
        )
    )
    m.submitted("q")
    m.admitted("q", 3.0)
    m.preempted("q", "reclaim")
    m.cycle(0.01)
    m.request("POST", "/api/v1/jobs", 201, 0.002)
    return {
        s.name for fam in text_string_to_metric_families(m.render().decode()) for s in fam.samples
    }


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def targets(dash: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            out.append((panel["title"], t))
    return out


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    dash = load()
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in dash["panels"]:
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]), p["title"]
        assert p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]
        if p["type"] != "row":
            assert p["targets"], f"{p['title']}: no query"
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs)), p["title"]


def test_queries_use_the_datasource_variable() -> None:
    dash = load()
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for p in dash["panels"]:
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", p["title"]


def test_every_expression_names_metrics_that_exist() -> None:
    names = exported_names()
    dash = load()
    exprs = [(title, t["expr"]) for title, t in targets(dash)]
    queue_var = next(v for v in dash["templating"]["list"] if v["name"] == "queue")
    exprs.append(("$queue", queue_var["query"]["query"]))
    for title, expr in exprs:
        used = NAME.findall(expr)
        assert used, f"{title}: {expr!r} names no gpupool metric"
        missing = [n for n in used if n not in names]
        assert not missing, f"{title}: {missing} not exported (known: {sorted(names)})"


def test_the_issue_panels_are_there() -> None:
    exprs = " ".join(t["expr"] for _, t in targets(load()))
    for needle in (
        "gpupool_gpus_allocated",
        "gpupool_jobs_pending",
        "gpupool_jobs_running",
        "histogram_quantile(0.5, sum by (le, queue) (rate(gpupool_admission_wait_seconds_bucket",
        "histogram_quantile(0.95, sum by (le, queue) (rate(gpupool_admission_wait_seconds_bucket",
        "histogram_quantile(0.99, sum by (le) (rate(gpupool_decision_latency_seconds_bucket",
        "gpupool_fragmentation_ratio",
        "sum by (reason) (rate(gpupool_preemptions_total",
        "histogram_quantile(0.99, sum by (le, method, route) (rate("
        "gpupool_api_request_duration_seconds_bucket",
    ):
        assert needle in exprs, needle
