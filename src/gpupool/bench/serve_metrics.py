"""What ``gpupool bench serve`` reads from the server while it runs: the admissible backlog from
``/api/v1/clusterqueues``, and admissions and latencies from the Prometheus exposition (a
quantile estimated from histogram buckets, as Prometheus' ``histogram_quantile`` does)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

ADMISSIBLE_ROOM_MILLI = 2000


def admissible_backlog(queues: list[Mapping[str, Any]]) -> tuple[int, int]:
    """(pending jobs, pending jobs of queues with room) from /api/v1/clusterqueues items."""
    pending = admissible = 0
    for item in queues:
        status = item.get("status", {})
        n = int(status.get("pendingJobs", 0))
        pending += n
        nominal = sum(int(v.get("gpuMilli", 0)) for v in status.get("nominal", {}).values())
        used = sum(int(v.get("gpuMilli", 0)) for v in status.get("usage", {}).values())
        if nominal - used >= ADMISSIBLE_ROOM_MILLI:
            admissible += n
    return pending, admissible


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """Prometheus' estimate of quantile ``q`` from cumulative (upper bound, count) buckets."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            inside = count - below
            return lower + (upper - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = upper, count
    return lower


def scrape(text: str) -> dict[str, Any]:
    """From the Prometheus exposition: admissions, the p99 of a scheduling cycle and the p99
    of POST /api/v1/jobs as the server measured it (ms; estimated from histogram buckets)."""
    admitted = 0.0
    cycles: list[tuple[float, float]] = []
    posts: dict[float, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "gpupool_jobs_admitted_total":
                admitted += s.value
            elif s.name == "gpupool_decision_latency_seconds_bucket":
                cycles.append((float(s.labels["le"]), s.value))
            elif (
                s.name == "gpupool_api_request_duration_seconds_bucket"
                and s.labels.get("route") == "/api/v1/jobs"
                and s.labels.get("method") == "POST"
            ):
                le = float(s.labels["le"])
                posts[le] = posts.get(le, 0.0) + s.value

    def ms(q: float | None) -> float | None:
        return None if q is None else round(q * 1000, 2)

    return {
        "admitted": int(admitted),
        "decision_ms_p99": ms(histogram_quantile(cycles, 0.99)),
        "server_submit_ms_p99": ms(histogram_quantile(list(posts.items()), 0.99)),
    }
