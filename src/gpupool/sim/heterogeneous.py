"""``gpupool bench heterogeneous``: the same jobs on a mixed cluster, pinned and with fallback.

One scenario file (by default the packaged copy of ``examples/scenarios/heterogeneous.yaml``)
is run twice with one seed: as written ("fallback": jobs may run in their alternatives' forms
on other vendors' cards) and with every job's alternatives removed ("pinned": each job runs
only as its own request). Arrival times, durations and users are the same in both runs (a
stream's random draws do not depend on its alternatives).

Figures, each over the scenario's saturated window unless said otherwise:

- ``utilisation``: cards' compute allocated over cards' compute present (time-weighted);
  ``utilisation_normalised`` the same in normalised compute (each card by its relative
  capacity);
- ``wait_p50_s``: the median wait of every job submitted (rejected ones aside), from
  submission to first start; a job that never started counts as waiting until the end of the
  run (a lower bound of its wait), so a run that leaves work unstarted is not flattered;
- ``jain``: Jain's index over the queues of (normalised compute held, time-weighted) over
  (normalised entitlement): 1.0 when every queue holds the same part of its entitlement;
- ``forbidden_placements``: shares of cards that the card's division rule cannot give (a slice
  of a whole-only card, a slice of a template card that is not a template, ...), checked on
  every bind.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpupool.core.model import JobId
from gpupool.core.quota import ACROSS_FLAVORS, Resource
from gpupool.sim.scenario import (
    RunResult,
    Scenario,
    ScenarioRun,
    Stream,
    generate_jobs,
    load_scenario,
)

DEFAULT_SCENARIO = Path(__file__).resolve().parent.parent / "data" / "heterogeneous.yaml"
NORM = (ACROSS_FLAVORS, Resource.NORMALIZED_MILLI)


def pinned(scenario: Scenario) -> Scenario:
    """The scenario with every job's alternatives removed."""

    def strip(stream: Stream) -> Stream:
        jobs = tuple(
            dataclasses.replace(j, shape=dataclasses.replace(j.shape, alternatives=()))
            for j in stream.jobs
        )
        return dataclasses.replace(
            stream, shape=dataclasses.replace(stream.shape, alternatives=()), jobs=jobs
        )

    tenants = tuple(
        dataclasses.replace(t, streams=tuple(strip(s) for s in t.streams)) for t in scenario.tenants
    )
    return dataclasses.replace(scenario, tenants=tenants)


class _NormalisedRun(ScenarioRun):
    """A scenario run that also follows normalised compute per queue and checks every share
    it binds against its card's division rule."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.norm_used = [0] * len(self.queues)
        self.norm_of: dict[JobId, int] = {}
        self.norm_time: list[float] = []
        self.norm_series: list[list[int]] = []
        self.forbidden = 0
        self.shares = 0
        self.forms: dict[str, int] = {}

    def _bind(self, bind: Any) -> None:
        for p in bind.placements:
            node = self.sched.node(p.node)
            assert node is not None
            for s in p.shares:
                self.shares += 1
                card = node.gpus[s.index]
                if s.mig_profile is None and not card.device.allows(
                    s.gpu_milli, s.memory_mib, card.memory_mib
                ):
                    self.forbidden += 1
        running = self.sched.running_job(JobId(bind.job))
        norm = int(running.demand.get(NORM, 0)) if running is not None else 0
        form = bind.alternative or "own"
        self.forms[form] = self.forms.get(form, 0) + 1
        jid = JobId(bind.job)
        self.norm_of[jid] = norm
        self.norm_used[self.qindex[self.jobs[jid].queue]] += norm
        super()._bind(bind)

    def _close_run(self, jid: JobId, at: float) -> None:
        self.norm_used[self.qindex[self.jobs[jid].queue]] -= self.norm_of.pop(jid, 0)
        super()._close_run(jid, at)

    def _sample(self) -> None:
        super()._sample()
        if self.norm_time and self.norm_time[-1] == self.now:
            self.norm_series[-1] = list(self.norm_used)
        else:
            self.norm_time.append(self.now)
            self.norm_series.append(list(self.norm_used))


def _window_mean(
    time_s: list[float], values: np.ndarray[Any, Any], window: tuple[float, float], end_s: float
) -> np.ndarray[Any, Any]:
    """Time-weighted mean over ``window`` of a step function sampled at ``time_s``."""
    t = np.asarray(time_s, np.float64)
    nxt = np.append(t[1:], end_s)
    lo, hi = window
    dt = np.clip(np.minimum(nxt, hi) - np.maximum(t, lo), 0.0, None)
    span = hi - lo
    return np.asarray((values * dt[:, None]).sum(axis=0) / span if span > 0 else values[-1] * 0.0)


@dataclass(frozen=True, slots=True)
class ModeResult:
    utilisation: float
    utilisation_normalised: float
    wait_p50_s: float
    jain: float
    forbidden_placements: int
    jobs: int
    started: int
    shares_checked: int
    runs_by_form: dict[str, int]
    queue_shares: dict[str, float]

    def as_json(self) -> dict[str, Any]:
        return {
            "utilisation": round(self.utilisation, 4),
            "utilisation_normalised": round(self.utilisation_normalised, 4),
            "wait_p50_s": round(self.wait_p50_s, 1),
            "jain": round(self.jain, 4),
            "forbidden_placements": self.forbidden_placements,
            "jobs": self.jobs,
            "started": self.started,
            "shares_checked": self.shares_checked,
            "runs_by_form": dict(sorted(self.runs_by_form.items())),
            "queue_shares": {q: round(v, 4) for q, v in sorted(self.queue_shares.items())},
        }


def measure(scenario: Scenario, seed: int) -> ModeResult:
    """Run ``scenario`` once and take the figures (module docstring)."""
    jobs, sources = generate_jobs(scenario, seed)
    run = _NormalisedRun(scenario, seed, jobs, sources, None, 64)
    result: RunResult = run.loop()
    end = scenario.duration_s
    window = scenario.window
    t, used = result.series.arrays()
    cards_milli = scenario.gpus * 1000
    util = float(_window_mean(list(t), used, window, end).sum()) / max(1, cards_milli)
    norm = np.asarray(run.norm_series, np.float64).reshape(len(run.norm_time), len(run.queues))
    held = _window_mean(run.norm_time, norm, window, end)
    capacity = sum(
        g.device.relative_capacity * 1000 for n in scenario.nodes for g in n.gpus if g.healthy
    )
    util_norm = float(held.sum()) / max(1.0, capacity)
    shares: dict[str, float] = {}
    for i, q in enumerate(run.queues):
        ent = run.sched.entitled(q).get(NORM, 0.0)
        if ent > 0:
            shares[q] = float(held[i]) / ent
    xs = np.asarray(list(shares.values()), np.float64)
    jain = float(xs.sum() ** 2 / (xs.size * (xs**2).sum())) if xs.size and xs.any() else 0.0
    waits = [
        ((r.start_s if r.start_s is not None else end) - r.submit_s)
        for r in result.jobs.values()
        if not r.rejected
    ]
    started = sum(1 for r in result.jobs.values() if r.start_s is not None)
    return ModeResult(
        util,
        util_norm,
        float(np.median(waits)) if waits else math.nan,
        jain,
        run.forbidden,
        len(waits),
        started,
        run.shares,
        run.forms,
        shares,
    )


def run(
    path: str | Path | None = None, seed: int = 1, duration_s: float | None = None
) -> dict[str, ModeResult]:
    """Both modes of one scenario: ``{"pinned": ..., "fallback": ...}``."""
    scenario = load_scenario(path or DEFAULT_SCENARIO)
    if duration_s is not None:
        scenario = scenario.shortened(duration_s)
    return {"pinned": measure(pinned(scenario), seed), "fallback": measure(scenario, seed)}
