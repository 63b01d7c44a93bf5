"""What one seed of a scenario produced, raw: each job's story, the evictions, the GPU use of
each queue and user over time. The report (``scenario_report.py``) turns it into figures."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

from gpupool.core.admission import Key
from gpupool.core.model import WHOLE_GPU_MILLI, Job, JobId
from gpupool.core.quota import Resource
from gpupool.sim.scenario_model import Scenario

if TYPE_CHECKING:
    from gpupool.cloud.region import CloudRun

__all__ = ["Eviction", "JobRun", "QueueSeries", "RunResult", "gpu_entitlement"]


@dataclass(slots=True)
class JobRun:
    """What happened to one job."""

    job: Job
    tenant: str
    stream: str
    queue: str  # ClusterQueue
    gpu_milli: int  # over all tasks, as charged (a slice: compute or memory, the larger)
    submit_s: float
    duration_s: float = 0.0  # how long it really runs (declared to the scheduler or not)
    flavor: str = ""  # the flavor of its current (or last) run
    start_s: float | None = None  # first start
    end_s: float | None = None  # when its last run ended, if it did
    runs: int = 0
    evictions: int = 0
    stopped_at_limit: bool = False
    estimate_s: float | None = None  # estimated start, as first estimated
    estimate_at_s: float | None = None  # when: the first estimate after it arrived
    estimated: bool = False  # it was pending then and got a start time
    position: int | None = None
    rejected: str = ""
    revoked: int = 0  # runs cut short by the cloud taking their nodes back
    provisioned: bool = False  # it ran on nodes provisioned for it (a provisioning check)
    gpu_s: float = 0.0  # GPU-seconds held, all runs
    window_gpu_s: float = 0.0  # of which inside the saturated window

    @property
    def wait_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.submit_s


@dataclass(frozen=True, slots=True)
class Eviction:
    time_s: float
    job: str
    queue: str
    reason: str
    preemptor: str
    preemptor_queue: str
    gpu_milli: int
    queue_used_before_milli: int  # the victim queue's GPU use of the victim's flavor before it
    queue_nominal_milli: int  # the victim queue's nominal GPU quota of that flavor


@dataclass(slots=True)
class QueueSeries:
    """GPU milli allocated per queue and per user, sampled after every batch of events and
    every cycle."""

    queues: list[str]
    users: list[str] = field(default_factory=list)
    time_s: list[float] = field(default_factory=list)
    used_milli: list[list[int]] = field(default_factory=list)  # [sample][queue]
    user_milli: list[list[int]] = field(default_factory=list)  # [sample][user]
    pending: list[int] = field(default_factory=list)

    def arrays(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        t = np.asarray(self.time_s, np.float64)
        u = np.asarray(self.used_milli, np.float64).reshape(len(self.time_s), len(self.queues))
        return t, u

    def user_arrays(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        t = np.asarray(self.time_s, np.float64)
        u = np.asarray(self.user_milli, np.float64).reshape(len(self.time_s), len(self.users))
        return t, u


@dataclass
class RunResult:
    """One seed of one scenario, raw: the report turns it into figures."""

    scenario: Scenario
    seed: int
    jobs: dict[JobId, JobRun]
    series: QueueSeries
    evictions: list[Eviction]
    partial_gang_placements: int
    cycles: int
    entitled_gpu: dict[str, float]  # weighted fair share of GPUs per ClusterQueue
    nominal_milli: dict[str, int]  # nominal GPU quota per ClusterQueue, milli
    time_to_nominal_s: dict[str, float | None]
    max_preemptions_allowed: int
    wall_s: float = 0.0
    cloud: CloudRun | None = None
    measured: dict[str, float | str] | None = None  # SimMeasuredUse.summary(), when measured


class QuotaFigures(Protocol):
    """Where a ClusterQueue's entitlement and nominal quota are read: the Scheduler's
    queries (or a quota tree)."""

    def entitled(self, cq: str, /) -> Mapping[Key, float]: ...

    def nominal(self, cq: str, /) -> Mapping[Key, int]: ...


def gpu_entitlement(tree: QuotaFigures, cq: str) -> tuple[float, int]:
    """(weighted fair share, nominal) of GPUs of a ClusterQueue, summed over flavors, in
    milli-GPU. A flavor whose quota names ``gpu_milli`` and not ``gpu`` counts that."""
    entitled = tree.entitled(cq)
    nominal = tree.nominal(cq)
    flavors = {f for f, _ in entitled} | {f for f, _ in nominal}
    e_total = 0.0
    n_total = 0
    for f in sorted(flavors):
        e_total += max(
            float(entitled.get((f, Resource.GPU), 0)) * WHOLE_GPU_MILLI,
            float(entitled.get((f, Resource.GPU_MILLI), 0)),
        )
        n_total += max(
            int(nominal.get((f, Resource.GPU), 0)) * WHOLE_GPU_MILLI,
            int(nominal.get((f, Resource.GPU_MILLI), 0)),
        )
    return e_total, n_total
