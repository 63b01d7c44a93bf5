"""Prometheus metrics of gpupool, ``gpupool_`` prefix, base units.

Counters and histograms are fed as things happen (a job admitted, a preemption, a cycle); the
gauges (jobs pending and running per queue, pending jobs by the plugin holding them back, GPUs
allocated and total per flavor and queue, fragmentation) are read from the service when
Prometheus scrapes, through one callback, so they are never stale and cost nothing between
scrapes. Each ``Metrics`` has its own registry:
two services in one process (tests) do not share counters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass(slots=True)
class Gauges:
    """What the service reports at scrape time."""

    pending: Mapping[str, int] = field(default_factory=dict)  # by ClusterQueue
    running: Mapping[str, int] = field(default_factory=dict)
    gpus_allocated: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (flavor, q)
    gpu_milli_allocated: Mapping[tuple[str, str], int] = field(default_factory=dict)
    gpus_total: Mapping[str, int] = field(default_factory=dict)  # by flavor
    gpu_milli_total: Mapping[str, int] = field(default_factory=dict)
    gpu_milli_nominal: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (flavor, q)
    fragmentation_ratio: float = 0.0
    nodes: Mapping[str, int] = field(default_factory=dict)  # by state
    queue_share: Mapping[str, float] = field(default_factory=dict)
    pending_reasons: Mapping[str, int] = field(default_factory=dict)  # by plugin


class _Live(Collector):
    def __init__(self, source: Callable[[], Gauges]) -> None:
        self.source = source

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterable[GaugeMetricFamily]:
        g = self.source()

        def family(
            name: str, doc: str, labels: list[str], values: Mapping[Any, float]
        ) -> GaugeMetricFamily:
            fam = GaugeMetricFamily(name, doc, labels=labels)
            for key, value in sorted(values.items(), key=lambda kv: str(kv[0])):
                fam.add_metric(list(key) if isinstance(key, tuple) else [str(key)], float(value))
            return fam

        yield family(
            "gpupool_jobs_pending", "Jobs waiting in each ClusterQueue.", ["queue"], g.pending
        )
        yield family("gpupool_jobs_running", "Jobs running, by ClusterQueue.", ["queue"], g.running)
        yield family(
            "gpupool_gpus_allocated",
            "GPUs held (slices counted as fractions), by flavor and ClusterQueue.",
            ["flavor", "queue"],
            g.gpus_allocated,
        )
        yield family(
            "gpupool_gpu_milli_allocated",
            "GPU compute held in milli-GPU, by flavor and ClusterQueue.",
            ["flavor", "queue"],
            g.gpu_milli_allocated,
        )
        yield family("gpupool_gpus_total", "Usable GPUs, by flavor.", ["flavor"], g.gpus_total)
        yield family(
            "gpupool_gpu_milli_total",
            "Usable GPU compute in milli-GPU, by flavor.",
            ["flavor"],
            g.gpu_milli_total,
        )
        yield family(
            "gpupool_queue_nominal_gpus",
            "Nominal GPU quota of each ClusterQueue "
            "(fractions of a card count), by flavor and ClusterQueue.",
            ["flavor", "queue"],
            {k: v / 1000 for k, v in g.gpu_milli_nominal.items()},
        )
        yield family(
            "gpupool_queue_nominal_gpu_milli",
            "Nominal GPU quota of each ClusterQueue in milli-GPU, by flavor and ClusterQueue.",
            ["flavor", "queue"],
            g.gpu_milli_nominal,
        )
        yield family("gpupool_nodes", "Nodes by state.", ["state"], g.nodes)
        yield family(
            "gpupool_queue_dominant_share",
            "Weighted dominant-resource share of each ClusterQueue (1 is exactly its fair share).",
            ["queue"],
            g.queue_share,
        )
        yield family(
            "gpupool_pending_reasons",
            "Pending jobs by the plugin (a filter, or a "
            "step of the core such as quota) that holds them back; a job held back "
            "by two counts under both.",
            ["plugin"],
            g.pending_reasons,
        )
        frag = GaugeMetricFamily(
            "gpupool_fragmentation_ratio",
            "Share of free GPU compute "
            "that sits on partly used cards or on nodes whose CPU or "
            "memory is used up.",
        )
        frag.add_metric([], g.fragmentation_ratio)
        yield frag


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._submitted = Counter(
            "gpupool_jobs_submitted_total", "Jobs accepted.", ["queue"], registry=r
        )
        self._admitted = Counter(
            "gpupool_jobs_admitted_total", "Jobs admitted and bound.", ["queue"], registry=r
        )
        self._preempted = Counter(
            "gpupool_preemptions_total",
            "Jobs preempted, by reason (within-queue, reclaim, fair-share).",
            ["queue", "reason"],
            registry=r,
        )
        self._wait = Histogram(
            "gpupool_admission_wait_seconds",
            "Time from submission to admission, in cluster seconds.",
            ["queue"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self._decision = Histogram(
            "gpupool_decision_latency_seconds",
            "Wall time of one scheduling cycle.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self._requests = Histogram(
            "gpupool_api_request_duration_seconds",
            "API request latency.",
            ["method", "route", "code"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        # gpupool_process_resident_memory_bytes, _cpu_seconds_total, _open_fds, ...
        ProcessCollector(namespace="gpupool", registry=r)

    def watch(self, source: Callable[[], Gauges]) -> None:
        """Report ``source()``'s gauges at every scrape."""
        self.registry.register(_Live(source))

    def submitted(self, queue: str) -> None:
        self._submitted.labels(queue).inc()

    def admitted(self, queue: str, wait_s: float) -> None:
        self._admitted.labels(queue).inc()
        self._wait.labels(queue).observe(max(0.0, wait_s))

    def preempted(self, queue: str, reason: str) -> None:
        self._preempted.labels(queue, reason).inc()

    def cycle(self, seconds: float) -> None:
        self._decision.observe(seconds)

    def request(self, method: str, route: str, code: int, seconds: float) -> None:
        self._requests.labels(method, route, str(code)).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
