"""``gpupool bench serve`` end to end at a tiny scale: a real server subprocess, real HTTP."""

from __future__ import annotations

import json

import pytest

from gpupool.bench.serve_metrics import admissible_backlog, histogram_quantile
from gpupool.bench.serve_workload import queue_docs
from gpupool.cli import main


def test_bench_serve_runs_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["bench", "serve", "--rate", "20", "--duration", "3", "--nodes", "12", "--json"]) == 0
    )
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    for key in (
        "rate",
        "duration_s",
        "submitted",
        "accepted",
        "errors",
        "achieved_rate",
        "latency_ms",
        "backlog",
        "admitted",
        "server_peak_rss_mib",
        "cycles",
        "decision_ms",
        "targets",
    ):
        assert key in out, key
    assert set(out["latency_ms"]) == {"p50", "p99", "max"}
    assert {"pending_admissible_start", "pending_admissible_end", "max"} <= set(out["backlog"])
    assert out["submitted"] == 60
    assert out["accepted"] > 0
    assert out["accepted"] + out["errors"] == out["submitted"]
    assert 0 < out["admitted"] <= out["accepted"]
    assert out["cycles"] > 0
    assert out["server_peak_rss_mib"] > 0
    assert out["latency_ms"]["p50"] <= out["latency_ms"]["p99"] <= out["latency_ms"]["max"]
    assert "target >= 200 jobs/s:" in captured.err


def test_bench_serve_prints_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "serve", "--rate", "10", "--duration", "1", "--nodes", "6"]) == 0
    out = capsys.readouterr().out
    assert "jobs accepted" in out and "API latency p50" in out
    assert "target p99 < 100 ms:" in out


def test_admissible_backlog_counts_pending_jobs_of_queues_with_room() -> None:
    roomy = {
        "status": {
            "pendingJobs": 3,
            "nominal": {"a": {"gpuMilli": 8000}},
            "usage": {"a": {"gpuMilli": 1000}},
        }
    }
    full = {
        "status": {
            "pendingJobs": 5,
            "nominal": {"a": {"gpuMilli": 8000}},
            "usage": {"a": {"gpuMilli": 7000}},
        }
    }
    assert admissible_backlog([roomy, full]) == (8, 3)


def test_histogram_quantile_interpolates_within_a_bucket() -> None:
    buckets = [(0.01, 50.0), (0.1, 100.0), (float("inf"), 100.0)]
    assert histogram_quantile(buckets, 0.5) == pytest.approx(0.01)
    assert histogram_quantile(buckets, 0.99) == pytest.approx(0.01 + 0.09 * 49 / 50)
    assert histogram_quantile([], 0.99) is None


def test_bench_queues_split_every_flavor_between_the_queues() -> None:
    docs = queue_docs(9)
    cqs = [d for d in docs if d["kind"] == "ClusterQueue"]
    lqs = [d for d in docs if d["kind"] == "LocalQueue"]
    assert len(cqs) == 4 and len(lqs) == 8
    quota = cqs[0]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
    assert quota == "6000m"  # 3 nodes x 8 GPUs / 4 queues
