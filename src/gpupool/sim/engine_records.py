"""What the event kernel records: its events, per job its submit, start, end and why it waited,
per batch a sample of what was allocated, and the run's result with the figures read from it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from gpupool.core.model import (
    WHOLE_GPU_MILLI,
    Job,
    JobId,
    Node,
    NodeName,
)
from gpupool.core.reasons import Reason


class EventKind(StrEnum):
    ARRIVAL = "arrival"
    COMPLETION = "completion"
    NODE_JOINED = "node-joined"
    NODE_REMOVED = "node-removed"
    NODE_CORDONED = "node-cordoned"
    NODE_UNCORDONED = "node-uncordoned"


@dataclass(frozen=True, slots=True)
class Event:
    """One fact at one simulated time. ``run`` tells a completion which run of a job it ends,
    so the completion of a run that a node removal cut short is ignored."""

    time_s: float
    kind: EventKind
    job: Job | None = None
    node: Node | None = None
    name: NodeName | None = None
    run: int = 0


LogEntry = tuple[float, str, str, str]
"""(time_s, what, job or node, detail): one line of the event log."""


@dataclass(slots=True)
class JobOutcome:
    """What happened to one job. Times are simulated seconds."""

    id: JobId
    submit_s: float
    tasks: int
    gpu_milli: int  # asked, over all tasks (MIG instances count as the share they stand for)
    start_s: float | None = None  # first start
    end_s: float | None = None
    nodes: tuple[str, ...] = ()  # nodes of the last run
    parks: int = 0  # cycles in which the job was offered and did not fit
    first_reason: str = ""  # why it waited, as the first cycle that parked it said
    first_reasons: tuple[Reason, ...] = ()  # the same, as data (``core.reasons``)
    last_reason: str = ""
    restarts: int = 0  # runs cut short by a node leaving
    rejected: str = ""  # why validation refused the job at submission ("" = accepted)

    @property
    def wait_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.submit_s

    @property
    def completed(self) -> bool:
        return self.end_s is not None


@dataclass(slots=True)
class ClusterSeries:
    """The whole cluster's use, one sample per batch taken after its cycle: columns of equal
    length."""

    time_s: list[float] = field(default_factory=list)
    gpu_used_milli: list[int] = field(default_factory=list)
    gpu_total_milli: list[int] = field(default_factory=list)
    cpu_used_milli: list[int] = field(default_factory=list)
    cpu_total_milli: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.time_s)

    def gpu_fraction(self) -> npt.NDArray[np.float64]:
        used = np.asarray(self.gpu_used_milli, np.float64)
        total = np.asarray(self.gpu_total_milli, np.float64)
        return np.divide(used, total, out=np.zeros_like(used), where=total > 0)

    def time_weighted_mean(self, values: npt.NDArray[np.float64]) -> float:
        """Mean of a step function that holds each sample until the next one."""
        t = np.asarray(self.time_s, np.float64)
        if t.size == 0:
            return 0.0
        span = float(t[-1] - t[0])
        if span <= 0:
            return float(values.mean())
        return float(np.sum(values[:-1] * np.diff(t)) / span)


@dataclass(slots=True)
class SimResult:
    records: dict[JobId, JobOutcome]
    series: ClusterSeries
    log: list[LogEntry]
    cycles: int
    offers: int  # jobs offered to run_cycle, over all cycles
    start_s: float
    end_s: float

    def started(self) -> list[JobOutcome]:
        return [r for r in self.records.values() if r.start_s is not None]

    def waits_s(self) -> npt.NDArray[np.float64]:
        return np.asarray([r.wait_s for r in self.started()], np.float64)

    def gpu_hours(self) -> float:
        """GPU time held by jobs, in GPU-hours (a half card for two hours is one)."""
        total = 0.0
        for r in self.records.values():
            if r.start_s is not None and r.end_s is not None:
                total += r.gpu_milli / WHOLE_GPU_MILLI * (r.end_s - r.start_s)
        return total / 3600.0


def percentiles(
    values: npt.NDArray[np.float64], qs: Iterable[int] = (50, 90, 99)
) -> dict[str, float]:
    """{"p50": ..., ...}; zeros for an empty array (no job started, nothing waited)."""
    if values.size == 0:
        return {f"p{q}": 0.0 for q in qs}
    return {f"p{q}": float(np.percentile(values, q)) for q in qs}
