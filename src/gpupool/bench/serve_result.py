"""What a run of ``gpupool bench serve`` measured, its JSON form, and whether it met the targets
(``TARGET_RATE`` jobs/s, p99 under ``TARGET_P99_MS``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpupool.bench.serve_metrics import ADMISSIBLE_ROOM_MILLI
from gpupool.bench.serve_workload import GPUS_PER_NODE

TARGET_RATE = 200.0
TARGET_P99_MS = 100.0


@dataclass(slots=True)
class BacklogSample:
    """The server's backlog at one instant of the run (seconds from its start)."""

    t: float
    pending: int
    admissible: int


@dataclass(slots=True)
class ServeBenchResult:
    rate: float
    duration_s: float
    nodes: int
    speed: float
    concurrency: int
    submitted: int
    accepted: int
    errors: int
    error_kinds: dict[str, int]
    load_wall_s: float
    latencies_ms: np.ndarray
    queued_ms: np.ndarray
    samples: list[BacklogSample]
    admitted: int
    cycles: int
    decision_ms_p99: float | None
    server_peak_rss_mib: float | None
    drain_s: float | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def achieved_rate(self) -> float:
        return self.accepted / self.load_wall_s if self.load_wall_s > 0 else 0.0

    def _pct(self, values: np.ndarray, q: float) -> float:
        return round(float(np.percentile(values, q)), 2) if len(values) else 0.0

    @property
    def p99_ms(self) -> float:
        return self._pct(self.latencies_ms, 99)

    @property
    def met(self) -> dict[str, bool]:
        """The rate is met when jobs were offered at >= TARGET_RATE, every one was accepted,
        and the last answer came within a second of the end of the schedule (the server kept
        pace); p99 when the requests' p99 latency is under TARGET_P99_MS."""
        kept_pace = self.load_wall_s <= self.duration_s + 1.0
        return {
            "rate": self.rate >= TARGET_RATE and self.errors == 0 and kept_pace,
            "p99": len(self.latencies_ms) > 0 and self.p99_ms < TARGET_P99_MS,
        }

    def as_json(self) -> dict[str, Any]:
        lat = self.latencies_ms
        admissible = [s.admissible for s in self.samples]
        return {
            "rate": self.rate,
            "duration_s": self.duration_s,
            "nodes": self.nodes,
            "gpus": self.nodes * GPUS_PER_NODE,
            "speed": self.speed,
            "concurrency": self.concurrency,
            "submitted": self.submitted,
            "accepted": self.accepted,
            "errors": self.errors,
            "error_kinds": dict(sorted(self.error_kinds.items())),
            "achieved_rate": round(self.achieved_rate, 1),
            "latency_ms": {
                "p50": self._pct(lat, 50),
                "p99": self._pct(lat, 99),
                "max": round(float(lat.max()), 2) if len(lat) else 0.0,
            },
            "client_queue_ms": {
                "p50": self._pct(self.queued_ms, 50),
                "p99": self._pct(self.queued_ms, 99),
                "max": round(float(self.queued_ms.max()), 2) if len(self.queued_ms) else 0.0,
            },
            "backlog": {
                "definition": "pending jobs of ClusterQueues with at least "
                f"{ADMISSIBLE_ROOM_MILLI} milli-GPU of nominal quota unused, "
                "sampled once a second",
                "pending_admissible_start": admissible[0] if admissible else 0,
                "pending_admissible_end": admissible[-1] if admissible else 0,
                "max": max(admissible, default=0),
                "samples": len(admissible),
            },
            "drain_s": None if self.drain_s is None else round(self.drain_s, 2),
            "admitted": self.admitted,
            "cycles": self.cycles,
            "decision_ms": {"p99": self.decision_ms_p99},
            "server_peak_rss_mib": self.server_peak_rss_mib,
            "targets": {
                "rate_jobs_per_s": TARGET_RATE,
                "p99_ms": TARGET_P99_MS,
                "rate_met": self.met["rate"],
                "p99_met": self.met["p99"],
            },
            **self.extra,
        }
