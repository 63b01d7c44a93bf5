"""A scenario's jobs for one seed: each tenant's streams turned into jobs, in submission order.

Each stream draws from its own generator (``numpy.random.default_rng([seed, tenant,
stream])``): its arrival times, then its durations, then its users, so the jobs of one stream
do not change when another stream is added.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpupool.core.errors import ConfigError
from gpupool.core.model import Job, JobId, PodSet, QueueName
from gpupool.sim.scenario_model import Scenario, Stream

__all__ = ["JobSource", "generate_jobs"]


@dataclass(frozen=True, slots=True)
class JobSource:
    """Where a generated job comes from."""

    tenant: str
    stream: str
    duration_s: float  # how long it really runs (it tells the scheduler only if it declares)


def _arrival_times(
    stream: Stream, rng: np.random.Generator, duration_s: float
) -> npt.NDArray[np.float64]:
    stop = min(stream.stop_s, duration_s)
    if stream.kind == "poisson":
        mean_gap = 3600.0 / stream.rate_per_h
        times: list[npt.NDArray[np.float64]] = []
        t = stream.start_s
        expected = max(16, int((stop - t) / mean_gap * 1.2) + 16)
        while t < stop:
            gaps = rng.exponential(mean_gap, expected)
            chunk = t + np.cumsum(gaps)
            times.append(chunk[chunk < stop])
            t = float(chunk[-1])
        out = np.concatenate(times) if times else np.zeros(0)
    elif stream.kind == "every":
        out = np.arange(stream.start_s, stop, stream.every_s, dtype=np.float64)
    elif stream.kind == "burst":
        out = np.full(stream.burst_count, stream.burst_at_s)
    else:
        out = np.asarray([j.at_s for j in stream.jobs], np.float64)
        out = out[out < duration_s]
    if stream.max_jobs is not None:
        out = out[: stream.max_jobs]
    return out


def generate_jobs(scenario: Scenario, seed: int) -> tuple[list[Job], dict[JobId, JobSource]]:
    """Every job of the scenario for ``seed``, in submission order.

    Each stream draws from its own generator, ``default_rng([seed, tenant, stream])``: its
    arrival times, then its durations, then its users, so the jobs of one stream do not
    depend on the others.
    """
    jobs: list[tuple[float, int, int, int, Job]] = []
    sources: dict[JobId, JobSource] = {}
    for ti, tenant in enumerate(scenario.tenants):
        for si, stream in enumerate(tenant.streams):
            rng = np.random.default_rng([seed, ti, si])
            times = _arrival_times(stream, rng, scenario.duration_s)
            n = times.size
            if stream.kind == "jobs":
                shapes = [j.shape for j in stream.jobs][:n]
                names = [j.name for j in stream.jobs][:n]
                order = np.argsort(times, kind="stable")
                times = times[order]
                shapes = [shapes[k] for k in order.tolist()]
                names = [names[k] for k in order.tolist()]
            else:
                shapes = [stream.shape] * n
                names = [None] * n
            if stream.kind == "jobs":  # one draw per job, in order
                durations = np.asarray([sh.duration.draw(rng, 1)[0] for sh in shapes], np.float64)
            else:
                durations = stream.shape.duration.draw(rng, n)
            picks = rng.integers(0, len(tenant.users), n)
            for k in range(n):
                shape = shapes[k]
                user = shape.user or tenant.users[int(picks[k])]
                jid = JobId(
                    f"{tenant.name}-{names[k]}"
                    if names[k]
                    else f"{tenant.name}-{stream.name}-{k:05d}"
                )
                if jid in sources:
                    raise ConfigError(f"{scenario.path}: job name {jid} is used twice")
                actual = max(1e-3, float(durations[k]))
                job = Job(
                    id=jid,
                    pod_sets=(
                        PodSet(
                            "main",
                            count=shape.tasks,
                            cpu_milli=shape.cpu_milli,
                            memory_mib=shape.memory_mib,
                            gpu=shape.request(),
                        ),
                    ),
                    queue=QueueName(tenant.queue),
                    priority=shape.priority,
                    submit_time_s=float(times[k]),
                    duration_s=actual if shape.declare_duration else None,
                    min_member=shape.min_member,
                    user=user,
                    run_limit_s=shape.run_limit_s,
                    alternatives=shape.alternatives,
                )
                sources[jid] = JobSource(tenant.name, stream.name, actual)
                jobs.append((float(times[k]), ti, si, k, job))
    jobs.sort(key=lambda x: x[:4])
    return [j[4] for j in jobs], sources
