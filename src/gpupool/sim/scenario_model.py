"""What a scenario is, once read: its tenants, their streams of jobs and the shape of each job.

Values only (frozen dataclasses); ``scenario_schema.py`` reads them from a file and
``scenario_jobs.py`` turns them into jobs for one seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from gpupool.config.fields import Dist, fmt_s
from gpupool.core.errors import ConfigError
from gpupool.core.model import WHOLE_GPU_MILLI, Alternative, GpuRequest, Node
from gpupool.core.quota import QueueConfig
from gpupool.sim.scenario_targets import Targets

if TYPE_CHECKING:
    from gpupool.cloud.spec import CloudSpec
    from gpupool.sim.measured import MeasuredSpec

__all__ = [
    "DEFAULT_ESTIMATE_EVERY_S",
    "DEFAULT_GRACE_S",
    "DEFAULT_INTERVAL_S",
    "SCENARIO_KIND",
    "ExplicitJob",
    "Scenario",
    "Shape",
    "Stream",
    "Tenant",
]

SCENARIO_KIND = "Scenario"
DEFAULT_INTERVAL_S = 10.0
DEFAULT_GRACE_S = 0.0
DEFAULT_ESTIMATE_EVERY_S = 300.0


@dataclass(frozen=True, slots=True)
class Shape:
    """What each job of a stream asks for, per task, and how long it runs."""

    duration: Dist
    gpus: int = 0
    gpu_milli: int = 0
    gpu_memory_mib: int = 0
    cpu_milli: int = 1000
    memory_mib: int = 4096
    tasks: int = 1
    min_member: int | None = None
    models: frozenset[str] = frozenset()
    run_limit_s: float | None = None
    priority: int = 0
    priority_name: str = ""
    user: str | None = None
    declare_duration: bool = False  # the job tells the scheduler how long it runs
    alternatives: tuple[Alternative, ...] = ()  # other accelerators it may run on

    @property
    def gpu_milli_per_task(self) -> int:
        return self.gpus * WHOLE_GPU_MILLI if self.gpus else self.gpu_milli

    def request(self) -> GpuRequest:
        if self.gpus:
            return GpuRequest(count=self.gpus, models=self.models)
        return GpuRequest(
            gpu_milli=self.gpu_milli, memory_mib=self.gpu_memory_mib, models=self.models
        )


@dataclass(frozen=True, slots=True)
class ExplicitJob:
    at_s: float
    shape: Shape
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Stream:
    """One arrival process of one tenant: ``poisson``, ``every``, ``burst`` or ``jobs``."""

    name: str
    kind: str
    shape: Shape
    start_s: float = 0.0
    stop_s: float = math.inf
    rate_per_h: float = 0.0
    every_s: float = 0.0
    burst_at_s: float = 0.0
    burst_count: int = 0
    max_jobs: int | None = None
    jobs: tuple[ExplicitJob, ...] = ()


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    queue: str  # the LocalQueue as written ("ns/name" or "name")
    cluster_queue: str
    users: tuple[str, ...]
    streams: tuple[Stream, ...]


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    duration_s: float
    interval_s: float
    grace_s: float
    window: tuple[float, float]
    tenants: tuple[Tenant, ...]
    nodes: tuple[Node, ...]
    config: QueueConfig
    description: str = ""
    estimate_every_s: float = DEFAULT_ESTIMATE_EVERY_S  # 0: after every cycle
    cloud: CloudSpec | None = None  # a simulated cloud for queues with provisioning checks
    targets: Targets = field(default_factory=Targets)  # checked by the report, every seed
    measured: MeasuredSpec | None = None  # spec.measuredUse: actual use sampled every cycle

    @property
    def gpus(self) -> int:
        return sum(sum(1 for g in n.gpus if g.healthy) for n in self.nodes)

    def shortened(self, duration_s: float) -> Scenario:
        """The same scenario run for ``duration_s``; the fairness window is cut to fit."""
        if not duration_s > 0:
            raise ConfigError(
                f"--duration {duration_s:g}s: must be positive",
                field="--duration",
                value=duration_s,
                rule="must be positive",
            )
        start, end = self.window
        if start >= duration_s:
            rule = (
                f"ends before the saturated window of {self.path} starts "
                f"({fmt_s(start)}); give a longer duration"
            )
            raise ConfigError(
                f"--duration {fmt_s(duration_s)} {rule}",
                field="--duration",
                value=duration_s,
                rule=rule,
            )
        return replace(self, duration_s=duration_s, window=(start, min(end, duration_s)))
