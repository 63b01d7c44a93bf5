"""What a scenario promises: its ``spec.targets``, read from the file and checked per seed.

A scenario states the figures it is there to show, and the report checks each of them on every
seed; a target the file does not name is not checked. The figures come from the per-seed
summary (:func:`gpupool.sim.scenario_report.summarise_run`):

- ``shareErrorPts: P``: every queue's share of the window's GPU-time is within P points of
  its entitled share (the entitlement is what the scheduler acts on, so this is "entitlement
  matches delivery");
- ``noGainPts: {queues: [...], pts: P}``: each named queue (the flooding or top-priority one)
  gets at most its entitled share plus P points;
- ``jain: J``: Jain's index of share / entitled share is at least J;
- ``utilization: U``: GPU utilisation in the window is at least U;
- ``guaranteedPreempted: N``: at most N evictions took guaranteed (not borrowed) quota;
- ``evictionsPerStartedJob: E``: evictions / started jobs is below E;
- ``waitEstimate: {relativeError: R, absoluteError: D}``: the median absolute error of the
  wait estimates is at most D, or the median of (error / the job's actual wait) is at most R;
- ``gangWait: D``: every gang (job of several tasks) started within D of its submission.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.config.fields import Where
from gpupool.config.fields import duration_at as _duration
from gpupool.config.fields import known_fields as _known
from gpupool.config.fields import mapping_at as _mapping
from gpupool.config.fields import number_at as _number

TARGET_FIELDS = (
    "shareErrorPts",
    "noGainPts",
    "jain",
    "utilization",
    "guaranteedPreempted",
    "evictionsPerStartedJob",
    "waitEstimate",
    "gangWait",
)


@dataclass(frozen=True, slots=True)
class Targets:
    share_error_pts: float | None = None
    no_gain_queues: tuple[str, ...] = ()
    no_gain_pts: float = 0.0
    jain: float | None = None
    utilization: float | None = None
    guaranteed_preempted: int | None = None
    evictions_per_started_job: float | None = None
    wait_relative_error: float | None = None
    wait_absolute_error_s: float | None = None
    gang_wait_s: float | None = None

    @property
    def empty(self) -> bool:
        return self == Targets()


def _fraction(w: Where, path: str, value: object, upper: float | None = 1.0) -> float:
    x = _number(w, path, value, positive=False)
    if x < 0 or (upper is not None and x > upper):
        raise w.fail(
            path,
            f"{x:g} must be between 0 and {upper:g}"
            if upper is not None
            else f"{x:g} must be zero or more",
        )
    return x


def parse_targets(w: Where, path: str, body: object, queues: set[str]) -> Targets:
    """``spec.targets`` of a scenario; ``queues`` are its ClusterQueues (for ``noGainPts``)."""
    t = _mapping(w, path, body)
    _known(w, path, t, TARGET_FIELDS)
    out: dict[str, Any] = {}
    if "shareErrorPts" in t:
        out["share_error_pts"] = _fraction(w, f"{path}.shareErrorPts", t["shareErrorPts"], 100)
    if "noGainPts" in t:
        ng = _mapping(w, f"{path}.noGainPts", t["noGainPts"])
        _known(w, f"{path}.noGainPts", ng, ("queues", "pts"))
        names = ng.get("queues")
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list) or not names:
            raise w.fail(f"{path}.noGainPts.queues", "expected a list of ClusterQueue names")
        for q in names:
            if q not in queues:
                raise w.fail(
                    f"{path}.noGainPts.queues",
                    f"{q!r} is not a ClusterQueue of this file; known: {', '.join(sorted(queues))}",
                )
        out["no_gain_queues"] = tuple(str(q) for q in names)
        out["no_gain_pts"] = _fraction(w, f"{path}.noGainPts.pts", ng.get("pts", 0), 100)
    if "jain" in t:
        out["jain"] = _fraction(w, f"{path}.jain", t["jain"])
    if "utilization" in t:
        out["utilization"] = _fraction(w, f"{path}.utilization", t["utilization"])
    if "guaranteedPreempted" in t:
        n = t["guaranteedPreempted"]
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise w.fail(f"{path}.guaranteedPreempted", f"{n!r} must be a count (0 or more)")
        out["guaranteed_preempted"] = n
    if "evictionsPerStartedJob" in t:
        out["evictions_per_started_job"] = _fraction(
            w, f"{path}.evictionsPerStartedJob", t["evictionsPerStartedJob"], None
        )
    if "waitEstimate" in t:
        we = _mapping(w, f"{path}.waitEstimate", t["waitEstimate"])
        _known(w, f"{path}.waitEstimate", we, ("relativeError", "absoluteError"))
        if not we:
            raise w.fail(f"{path}.waitEstimate", "give relativeError, absoluteError or both")
        if "relativeError" in we:
            out["wait_relative_error"] = _fraction(
                w, f"{path}.waitEstimate.relativeError", we["relativeError"], None
            )
        if "absoluteError" in we:
            out["wait_absolute_error_s"] = _duration(
                w, f"{path}.waitEstimate.absoluteError", we["absoluteError"]
            )
    if "gangWait" in t:
        out["gang_wait_s"] = _duration(w, f"{path}.gangWait", t["gangWait"])
    return Targets(**out)


def _row(name: str, goal: str, measured: str, met: bool) -> dict[str, Any]:
    return {"target": name, "goal": goal, "measured": measured, "met": met}


def check_targets(t: Targets, run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per target the scenario names: the goal, what this seed measured, and whether
    it is met. ``run`` is one seed's summary."""
    rows: list[dict[str, Any]] = []
    queues = run["queues"]
    if t.share_error_pts is not None:
        worst = max((abs(r["share_error_pts"] or 0.0) for r in queues.values()), default=0.0)
        rows.append(
            _row(
                "share within points of entitlement",
                f"≤ {t.share_error_pts:g}",
                f"{worst:.2f}",
                worst <= t.share_error_pts,
            )
        )
    for q in t.no_gain_queues:
        r = queues[q]
        gain = 100 * (r["share"] - r["entitled_share"])
        rows.append(
            _row(
                f"{q} gains nothing over its entitlement",
                f"≤ +{t.no_gain_pts:g} points",
                f"{gain:+.2f}",
                gain <= t.no_gain_pts,
            )
        )
    if t.jain is not None:
        j = run["jain_index"]
        rows.append(
            _row(
                "Jain index",
                f"≥ {t.jain:g}",
                "n/a" if j is None else f"{j:.4f}",
                j is not None and j >= t.jain,
            )
        )
    if t.utilization is not None:
        u = run["utilization"]
        rows.append(
            _row(
                "utilization",
                f"≥ {t.utilization:.0%}",
                "n/a" if u is None else f"{u:.1%}",
                u is not None and u >= t.utilization,
            )
        )
    if t.guaranteed_preempted is not None:
        g = run["preemptions"]["guaranteed_preempted"]
        rows.append(
            _row(
                "evictions of guaranteed quota",
                f"≤ {t.guaranteed_preempted}",
                str(g),
                g <= t.guaranteed_preempted,
            )
        )
    if t.evictions_per_started_job is not None:
        started = run["jobs"]["started"]
        rate = run["preemptions"]["count"] / started if started else 0.0
        rows.append(
            _row(
                "evictions per started job",
                f"< {t.evictions_per_started_job:g}",
                f"{rate:.3f}",
                rate < t.evictions_per_started_job,
            )
        )
    if t.wait_relative_error is not None or t.wait_absolute_error_s is not None:
        est = run["wait_estimate"]
        mae, rel = est["median_abs_error_s"], est["median_rel_error"]
        ok_abs = (
            t.wait_absolute_error_s is not None
            and mae is not None
            and mae <= t.wait_absolute_error_s
        )
        ok_rel = (
            t.wait_relative_error is not None and rel is not None and rel <= t.wait_relative_error
        )
        goal = " or ".join(
            (
                [f"median error ≤ {t.wait_absolute_error_s:g} s"]
                if t.wait_absolute_error_s is not None
                else []
            )
            + (
                [f"≤ {t.wait_relative_error:.0%} of the wait"]
                if t.wait_relative_error is not None
                else []
            )
        )
        measured = "n/a" if mae is None else f"{mae:.0f} s ({rel:.1%} of the wait)"
        rows.append(
            _row("wait estimate", goal, measured, est["started"] > 0 and (ok_abs or ok_rel))
        )
    if t.gang_wait_s is not None:
        waits = [g["wait_s"] for g in run["gangs"]]
        worst_wait = max((w if w is not None else float("inf") for w in waits), default=0.0)
        rows.append(
            _row(
                "every gang starts within",
                f"≤ {t.gang_wait_s:g} s",
                f"{worst_wait:.0f} s",
                worst_wait <= t.gang_wait_s,
            )
        )
    return rows
