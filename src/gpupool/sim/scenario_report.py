"""What a scenario run measured: ``summary.json``, ``report.md`` and the plots.

Definitions (``docs/scenarios.md`` repeats them for users):

- **GPU-seconds**: a job holding g GPUs (a slice counts its fraction, 250 milli = 0.25) for
  t seconds uses g x t; counted per ClusterQueue and per user, over the whole run and inside
  the saturated window.
- **share** of a queue: its GPU-seconds in the window over all queues' GPU-seconds in the
  window (a share of what was allocated, not of capacity).
- **entitled share**: the queue's weighted fair share of GPUs, ``tree.entitled(cq)`` summed
  over flavors, over the sum for all queues: what weighted dominant-resource fairness
  promises a queue when every queue wants more than it gets. ``nominal_share`` (nominal
  quota over the sum of nominal quotas) is reported beside it; with equal weights and
  equal quotas the two agree.
- **jain_index**: Jain's fairness index of x_q = share / entitled share over the queues that
  submitted anything before the window ended: (sum x)^2 / (n sum x^2), 1 when every queue
  got exactly its entitlement.
- **utilization**: GPU-seconds allocated in the window over GPUs x window length.
- **partial_gang_placements**: binds with fewer placements than the job's gang minimum.
- **quota_violations**: (queue, cycle) samples where a queue used more than nominal +
  borrowingLimit of a resource it lists (or more than nominal outside a cohort), by the
  running jobs' demands or by the quota tree's own books.
- **preemptions**: evictions by reason; ``guaranteed_preempted`` counts evictions (reclaim
  and fair-share) that took a queue below its nominal GPU quota, i.e. took more than it had
  borrowed; ``mutual`` counts pairs of jobs that preempted each other.
- **provisioning** (scenarios with a ``kind: Cloud``): per ProvisioningRequest, when it was
  made, provisioned, consumed and how it ended; ``submit_to_start_s``: from submission to the
  first start of the jobs of queues with a provisioning admission check (those that started);
  ``idle_booking_gpu_hours``: GPUs of a request's nodes x the time from Provisioned to the
  first pod on them (or to the end of the booking when none came); ``partial_provisions``:
  requests whose nodes did not all join at one instant in one zone (0: all or nothing). The
  cloud's GPUs count in the capacity that utilization is measured against.
- **wait_estimate**: jobs are asked about at the first estimate after they arrive (after
  every cycle, or every ``estimateEvery``); for those still pending then and given a start
  time, the absolute error between that estimate and the actual start. Jobs that never
  started are left out (``started`` counts the rest); ``asked`` counts the jobs asked about,
  ``estimated_jobs`` those given a time (the estimator gives times to the first jobs of the
  global order only), ``median_estimate_delay_s`` how long after arrival they were asked.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gpupool.config.fields import fmt_s
from gpupool.core.model import WHOLE_GPU_MILLI
from gpupool.sim.report import dumps_summary
from gpupool.sim.scenario import JobRun, RunResult, Scenario
from gpupool.sim.scenario_targets import check_targets

if TYPE_CHECKING:
    from matplotlib.axes import Axes

SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.md"
SHARES_PLOT = "shares.png"
USERS_PLOT = "users.png"
WAITS_PLOT = "waits.png"
ENTITLED_BASIS = ("what the scheduler acts on, QuotaTree.entitled summed over flavors in GPUs: "
                  "nominal quota first (guaranteed), then a cohort's own quota split by "
                  "fair-sharing weight")

_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")


# -- numbers ---------------------------------------------------------------------------------


def _r(x: float | None, digits: int = 4) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return round(float(x), digits) + 0.0


def _waits(values: Iterable[float]) -> dict[str, float | None]:
    arr = np.asarray(list(values), np.float64)
    if arr.size == 0:
        return {"p50": None, "p99": None, "max": None, "n": 0}
    return {"p50": _r(float(np.percentile(arr, 50)), 1),
            "p99": _r(float(np.percentile(arr, 99)), 1),
            "max": _r(float(arr.max()), 1), "n": int(arr.size)}


def _stat(values: Sequence[float | None], digits: int = 4) -> dict[str, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"mean": None, "min": None, "max": None}
    return {"mean": _r(sum(vals) / len(vals), digits), "min": _r(min(vals), digits),
            "max": _r(max(vals), digits)}


def jain(xs: Sequence[float]) -> float | None:
    """Jain's index: (sum x)^2 / (n sum x^2); None without values, 1.0 when all are 0."""
    if not xs:
        return None
    sq = sum(x * x for x in xs)
    if sq == 0:
        return 1.0
    return sum(xs) ** 2 / (len(xs) * sq)


def step_mean(t: npt.NDArray[np.float64], y: npt.NDArray[np.float64], a: float,
              b: float) -> float:
    """Mean over [a, b] of the step function that holds y[i] from t[i] to t[i+1]."""
    if b <= a or t.size == 0:
        return 0.0
    edges = np.clip(np.append(t, max(b, float(t[-1]))), a, b)
    widths = np.diff(edges)
    return float(np.sum(y * widths) / (b - a))


# -- one run --------------------------------------------------------------------------------


def gangs(result: RunResult, top: int = 20) -> list[JobRun]:
    """Jobs of several tasks, the largest first (at most ``top``)."""
    multi = [j for j in result.jobs.values() if j.job.task_count > 1 and not j.rejected]
    multi.sort(key=lambda j: (-j.gpu_milli, j.submit_s, j.job.id))
    return multi[:top]


def summarise_run(r: RunResult) -> dict[str, Any]:
    s = r.scenario
    w0, w1 = s.window
    jobs = list(r.jobs.values())
    queues = sorted(r.entitled_gpu)
    accepted = [j for j in jobs if not j.rejected]
    started = [j for j in accepted if j.start_s is not None]
    window_total = sum(j.window_gpu_s for j in jobs)
    q_window: dict[str, float] = defaultdict(float)
    q_total: dict[str, float] = defaultdict(float)
    for j in jobs:
        q_window[j.queue] += j.window_gpu_s
        q_total[j.queue] += j.gpu_s
    ent_sum = sum(r.entitled_gpu.values()) or 1.0
    nom_sum = sum(r.nominal_milli.values()) or 1
    active = {j.queue for j in accepted if j.submit_s < w1}
    evict_count: Counter[str] = Counter(e.job for e in r.evictions)
    by_queue_evictions: Counter[str] = Counter(e.queue for e in r.evictions)
    out_queues: dict[str, Any] = {}
    ratios = []
    for q in queues:
        share = q_window[q] / window_total if window_total > 0 else 0.0
        ent = r.entitled_gpu[q] / ent_sum
        qjobs = [j for j in accepted if j.queue == q]
        waits = [j.wait_s for j in qjobs if j.wait_s is not None]
        out_queues[q] = {
            "gpu_seconds": _r(q_total[q], 1),
            "window_gpu_seconds": _r(q_window[q], 1),
            "share": _r(share),
            "entitled_share": _r(ent),
            "nominal_share": _r(r.nominal_milli[q] / nom_sum),
            "share_error_pts": _r(100 * (share - ent), 2),
            "jobs": len(qjobs),
            "started": sum(1 for j in qjobs if j.start_s is not None),
            "never_started": sum(1 for j in qjobs if j.start_s is None),
            "wait_s": _waits(waits),
            "wait_with_unstarted_s": _waits(
                j.wait_s if j.wait_s is not None else s.duration_s - j.submit_s
                for j in qjobs),
            "preempted": by_queue_evictions[q],
            "time_to_nominal_s": _r(r.time_to_nominal_s.get(q), 1),
        }
        if q in active and ent > 0:
            ratios.append(share / ent)
    users: dict[str, dict[str, Any]] = {}
    by_user: dict[str, list[JobRun]] = defaultdict(list)
    for j in accepted:
        by_user[j.job.user].append(j)
    for u in sorted(by_user):
        ujobs = by_user[u]
        win = sum(j.window_gpu_s for j in ujobs)
        users[u] = {
            "queues": sorted({j.queue for j in ujobs}),
            "gpu_seconds": _r(sum(j.gpu_s for j in ujobs), 1),
            "window_gpu_seconds": _r(win, 1),
            "window_share": _r(win / window_total if window_total > 0 else 0.0),
            "jobs": len(ujobs),
            "wait_s": _waits(j.wait_s for j in ujobs if j.wait_s is not None),
        }
    streams: dict[str, dict[str, Any]] = {}
    by_stream: dict[str, list[JobRun]] = defaultdict(list)
    for j in accepted:
        by_stream[f"{j.tenant}/{j.stream}"].append(j)
    for key in sorted(by_stream):
        sj = by_stream[key]
        streams[key] = {
            "jobs": len(sj),
            "started": sum(1 for j in sj if j.start_s is not None),
            "stopped_at_run_limit": sum(1 for j in sj if j.stopped_at_limit),
            "gpu_seconds": _r(sum(j.gpu_s for j in sj), 1),
            "wait_s": _waits(j.wait_s for j in sj if j.wait_s is not None),
        }
    t, used = r.series.arrays()
    total_used = used.sum(axis=1) if used.size else np.zeros(0)
    gang_rows = []
    for g in gangs(r):
        until = g.start_s if g.start_s is not None else s.duration_s
        cap = capacity_gpu_s(r, g.submit_s, until) * WHOLE_GPU_MILLI
        util = step_mean(t, total_used, g.submit_s, until) * (until - g.submit_s) / cap \
            if cap and until > g.submit_s else None
        gang_rows.append({
            "job": g.job.id, "tasks": g.job.task_count, "gpus": _r(g.gpu_milli / 1000, 3),
            "submit_s": _r(g.submit_s, 1), "start_s": _r(g.start_s, 1),
            "wait_s": _r(g.wait_s, 1), "utilization_while_waiting": _r(util),
            "preempted": g.evictions,
        })
    reasons = Counter(e.reason for e in r.evictions)
    pairs = {(e.preemptor, e.job) for e in r.evictions}
    mutual = sum(1 for a, b in pairs if a < b and (b, a) in pairs)
    guaranteed = sum(1 for e in r.evictions if e.reason != "within-queue" and
                     e.queue_used_before_milli - e.gpu_milli < e.queue_nominal_milli)
    judged = [j for j in accepted
              if j.estimated and j.estimate_s is not None and j.start_s is not None]
    errors = [abs(j.estimate_s - j.start_s) for j in judged]  # type: ignore[operator]
    # Relative to the job's actual wait, submission to start (a wait under 1 s counts 1 s).
    rel = [abs(j.estimate_s - j.start_s)  # type: ignore[operator]
           / max(1.0, j.start_s - j.submit_s)  # type: ignore[operator]
           for j in judged]
    estimated = [j for j in accepted if j.estimated]
    asked = [j for j in accepted if j.estimate_at_s is not None]
    delays = [j.estimate_at_s - j.submit_s for j in estimated if j.estimate_at_s is not None]
    return {
        "seed": r.seed,
        "jobs": {
            "submitted": len(jobs),
            "rejected": len(jobs) - len(accepted),
            "started": len(started),
            "completed": sum(1 for j in accepted if j.end_s is not None),
            "stopped_at_run_limit": sum(1 for j in accepted if j.stopped_at_limit),
            "never_started": len(accepted) - len(started),
        },
        "cycles": r.cycles,
        "gpu_seconds": _r(sum(j.gpu_s for j in jobs), 1),
        "window_gpu_seconds": _r(window_total, 1),
        "utilization": _r(window_total / capacity_gpu_s(r, w0, w1))
        if capacity_gpu_s(r, w0, w1) > 0 else None,
        "jain_index": _r(jain(ratios)),
        "jain_queues": sorted(q for q in queues if q in active and r.entitled_gpu[q] > 0),
        "partial_gang_placements": r.partial_gang_placements,
        "quota_violations": r.quota_violations,
        "max_preemptions_per_job": max(evict_count.values(), default=0),
        "max_preemptions_allowed": r.max_preemptions_allowed,
        "preemptions": {
            "count": len(r.evictions),
            "by_reason": dict(sorted(reasons.items())),
            "jobs_preempted": len(evict_count),
            "guaranteed_preempted": guaranteed,
            "mutual": mutual,
        },
        "wait_s": _waits(j.wait_s for j in accepted if j.wait_s is not None),
        "wait_estimate": {
            "asked": len(asked),
            "estimated_jobs": len(estimated),
            "median_estimate_delay_s": _r(float(np.median(delays)), 1) if delays else None,
            "started": len(errors),
            "median_abs_error_s": _r(float(np.median(errors)), 1) if errors else None,
            "p90_abs_error_s": _r(float(np.percentile(errors, 90)), 1) if errors else None,
            "median_rel_error": _r(float(np.median(rel))) if rel else None,
        },
        "queues": out_queues,
        "users": users,
        "streams": streams,
        "gangs": gang_rows,
        "quota_violation_examples": list(r.quota_violation_examples),
        "wall_s": _r(r.wall_s, 3),
        **({"provisioning": provisioning_summary(r)} if r.cloud is not None else {}),
    }


def capacity_gpu_s(r: RunResult, a: float, b: float) -> float:
    """GPU-seconds of capacity within [a, b]: the fixed cluster's, plus the cloud's nodes."""
    fixed = r.scenario.gpus * max(0.0, b - a)
    return fixed + (r.cloud.gpu_seconds(a, b) if r.cloud is not None else 0.0)


def provisioned_queues(scenario: Scenario) -> set[str]:
    return {q.name for q in scenario.config.cluster_queues if q.admission_checks}


def provisioning_summary(r: RunResult) -> dict[str, Any]:
    """Requests, bookings and the jobs that waited for them (see the module docstring)."""
    cloud = r.cloud
    assert cloud is not None
    s = r.scenario
    reqs = list(cloud.requests.values())
    outcomes = Counter(q.outcome for q in reqs)
    partial = 0
    for q in reqs:
        if q.node_names and (len(q.node_names) != q.nodes or len(set(q.nodes_added_s)) != 1
                             or any(f"-{q.zone}-" not in n for n in q.node_names)):
            partial += 1
    checked = provisioned_queues(s)
    by_job: dict[str, list[Any]] = defaultdict(list)
    for q in reqs:
        if q.job:
            by_job[q.job].append(q)
    rows: list[dict[str, Any]] = []
    waits: list[float] = []
    for j in sorted((j for j in r.jobs.values() if j.queue in checked and not j.rejected),
                    key=lambda j: (j.submit_s, j.job.id)):
        if j.wait_s is not None:
            waits.append(j.wait_s)
        mine = by_job.get(j.job.id, [])
        first = next((q for q in mine if q.provisioned_s is not None), None)
        rows.append({
            "job": j.job.id, "tasks": j.job.task_count, "gpus": _r(j.gpu_milli / 1000, 3),
            "submit_s": _r(j.submit_s, 1), "start_s": _r(j.start_s, 1),
            "wait_s": _r(j.wait_s, 1), "requests": len(mine),
            "failed_requests": sum(1 for q in mine if q.outcome == "failed"),
            "zone": first.zone if first else None,
            "provisioned_s": _r(first.provisioned_s, 1) if first else None,
            "stopped_at_run_limit": j.stopped_at_limit, "revoked": j.revoked,
        })
    idle = sum(q.idle_booking_gpu_s for q in reqs)
    return {
        "requests": len(reqs),
        "by_outcome": dict(sorted(outcomes.items())),
        "provisioned": sum(1 for q in reqs if q.provisioned_s is not None),
        "partial_provisions": partial,
        "expired_bookings": outcomes.get("expired", 0),
        "revoked_at_run_limit": outcomes.get("revoked", 0),
        "failed": outcomes.get("failed", 0),
        "nodes_made": cloud.nodes_made,
        "cloud_gpu_hours": _r(cloud.gpu_seconds(0.0, s.duration_s) / 3600, 2),
        "peak_cloud_gpus": max(cloud.capacity_gpus, default=0),
        "idle_booking_gpu_hours": _r(idle / 3600, 3),
        "idle_booking_gpu_hours_consumed": _r(sum(
            q.idle_booking_gpu_s for q in reqs if q.consumed_s is not None) / 3600, 3),
        "idle_booking_gpu_hours_unconsumed": _r(sum(
            q.idle_booking_gpu_s for q in reqs if q.consumed_s is None) / 3600, 3),
        "jobs": len(rows),
        "started": len(waits),
        "never_started": len(rows) - len(waits),
        "stopped_at_run_limit": sum(1 for row in rows if row["stopped_at_run_limit"]),
        "submit_to_start_s": {**_waits(waits),
                              "mean": _r(sum(waits) / len(waits), 1) if waits else None},
        "gangs": rows,
        "request_log": [{
            "request": q.key, "job": q.job, "pool": q.pool, "zone": q.zone, "nodes": q.nodes,
            "gpus": q.gpus, "created_s": _r(q.created_s, 1),
            "provisioned_s": _r(q.provisioned_s, 1), "consumed_s": _r(q.consumed_s, 1),
            "ended_s": _r(q.ended_s, 1), "outcome": q.outcome, "reason": q.reason,
            "idle_booking_gpu_hours": _r(q.idle_booking_gpu_s / 3600, 3)} for q in reqs],
        "stockouts": {k: [[_r(a, 1), _r(b, 1)] for a, b in v]
                      for k, v in cloud.stockouts.items() if v},
    }


# -- over seeds -----------------------------------------------------------------------------


def summarise(scenario: Scenario, runs: Sequence[RunResult], wall_s: float = 0.0,
              duration_override: bool = False) -> dict[str, Any]:
    per_seed = [summarise_run(r) for r in runs]
    for p in per_seed:
        p["targets"] = check_targets(scenario.targets, p)
        p["targets_met"] = all(row["met"] for row in p["targets"])
    first = runs[0] if runs else None
    queues_info: dict[str, Any] = {}
    by_cq = {q.name: q for q in scenario.config.cluster_queues}
    for q in sorted(by_cq):
        cq = by_cq[q]
        queues_info[q] = {
            "cohort": cq.cohort,
            "weight": cq.weight,
            "nominal_gpus": _r(first.nominal_milli[q] / 1000, 3) if first else None,
            "entitled_gpus": _r(first.entitled_gpu[q] / 1000, 3) if first else None,
            "tenants": [t.name for t in scenario.tenants if t.cluster_queue == q],
        }
    return {
        "scenario": scenario.name,
        "file": scenario.path,
        "description": scenario.description,
        "seeds": [r.seed for r in runs],
        "duration_s": scenario.duration_s,
        "shortened": duration_override,
        "scheduling_interval_s": scenario.interval_s,
        "grace_period_s": scenario.grace_s,
        "window": {"start_s": scenario.window[0], "end_s": scenario.window[1]},
        "cluster": {"nodes": len(scenario.nodes), "gpus": scenario.gpus,
                    **({"cloud": {
                        "name": scenario.cloud.name, "region": scenario.cloud.region,
                        "gpu_quota": scenario.cloud.gpu_quota,
                        "pools": {p.name: {"model": p.model, "gpus_per_node": p.gpus_per_node,
                                           "zones": list(p.zones),
                                           "max_nodes_per_zone": p.max_nodes_per_zone}
                                  for p in scenario.cloud.pools}}}
                       if scenario.cloud is not None else {})},
        "settings": {
            "max_preemptions_per_job": scenario.config.settings.max_preemptions_per_job,
            "min_runtime_s": scenario.config.settings.min_runtime_s,
            "usage_half_life_s": scenario.config.settings.usage_half_life_s,
        },
        "entitled_basis": ENTITLED_BASIS,
        "queue_config": queues_info,
        "aggregate": aggregate(per_seed),
        "targets_met": all(p["targets_met"] for p in per_seed),
        "runs": {str(p["seed"]): p for p in per_seed},
        "wall_s": _r(wall_s, 3),
    }


def aggregate(per_seed: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Over seeds: mean, min and max of each figure; counts that must be zero are summed;
    waits and estimate errors are the means of the per-seed percentiles."""
    if not per_seed:
        return {}
    queues = list(per_seed[0]["queues"])
    users = sorted({u for p in per_seed for u in p["users"]})
    out_q = {}
    for q in queues:
        rows = [p["queues"][q] for p in per_seed]
        errors = [row["share_error_pts"] for row in rows if row["share_error_pts"] is not None]
        out_q[q] = {
            "share": _stat([row["share"] for row in rows]),
            "entitled_share": rows[0]["entitled_share"],
            "nominal_share": rows[0]["nominal_share"],
            "share_error_pts": {**_stat(errors, 2),
                                "max_abs": _r(max((abs(e) for e in errors), default=0.0), 2)},
            "gpu_seconds": _stat([row["gpu_seconds"] for row in rows], 1),
            "wait_p50_s": _stat([row["wait_s"]["p50"] for row in rows], 1),
            "wait_p99_s": _stat([row["wait_s"]["p99"] for row in rows], 1),
            "preempted": sum(row["preempted"] for row in rows),
            "time_to_nominal_s": _stat([row["time_to_nominal_s"] for row in rows], 1),
        }
    out_u = {}
    for u in users:
        rows = [p["users"][u] for p in per_seed if u in p["users"]]
        out_u[u] = {
            "gpu_seconds": _stat([row["gpu_seconds"] for row in rows], 1),
            "window_share": _stat([row["window_share"] for row in rows]),
        }
    reasons: Counter[str] = Counter()
    for p in per_seed:
        reasons.update(p["preemptions"]["by_reason"])
    est = [p["wait_estimate"]["median_abs_error_s"] for p in per_seed]
    est_rel = [p["wait_estimate"]["median_rel_error"] for p in per_seed]
    prov = [p["provisioning"] for p in per_seed if "provisioning" in p]
    extra: dict[str, Any] = {}
    if prov:
        outcomes: Counter[str] = Counter()
        for pv in prov:
            outcomes.update(pv["by_outcome"])
        extra["provisioning"] = {
            "submit_to_start_p50_s": _stat([pv["submit_to_start_s"]["p50"] for pv in prov], 1),
            "submit_to_start_max_s": _stat([pv["submit_to_start_s"]["max"] for pv in prov], 1),
            "submit_to_start_mean_s": _stat([pv["submit_to_start_s"]["mean"] for pv in prov],
                                            1),
            "idle_booking_gpu_hours": _stat([pv["idle_booking_gpu_hours"] for pv in prov], 3),
            "idle_booking_gpu_hours_unconsumed": _stat(
                [pv["idle_booking_gpu_hours_unconsumed"] for pv in prov], 3),
            "cloud_gpu_hours": _stat([pv["cloud_gpu_hours"] for pv in prov], 2),
            "requests": sum(pv["requests"] for pv in prov),
            "by_outcome": dict(sorted(outcomes.items())),
            "partial_provisions": sum(pv["partial_provisions"] for pv in prov),
            "expired_bookings": sum(pv["expired_bookings"] for pv in prov),
            "revoked_at_run_limit": sum(pv["revoked_at_run_limit"] for pv in prov),
            "stopped_at_run_limit": sum(pv["stopped_at_run_limit"] for pv in prov),
            "never_started": sum(pv["never_started"] for pv in prov),
        }
    return {**extra,
        "jain_index": _stat([p["jain_index"] for p in per_seed]),
        "utilization": _stat([p["utilization"] for p in per_seed]),
        "partial_gang_placements": sum(p["partial_gang_placements"] for p in per_seed),
        "quota_violations": sum(p["quota_violations"] for p in per_seed),
        "max_preemptions_per_job": max(p["max_preemptions_per_job"] for p in per_seed),
        "max_preemptions_allowed": per_seed[0]["max_preemptions_allowed"],
        "preemptions": {
            "count": _stat([p["preemptions"]["count"] for p in per_seed], 1),
            "by_reason": dict(sorted(reasons.items())),
            "guaranteed_preempted": sum(p["preemptions"]["guaranteed_preempted"]
                                        for p in per_seed),
            "mutual": sum(p["preemptions"]["mutual"] for p in per_seed),
        },
        "wait_p50_s": _stat([p["wait_s"]["p50"] for p in per_seed], 1),
        "wait_p99_s": _stat([p["wait_s"]["p99"] for p in per_seed], 1),
        "wait_estimate_median_abs_error_s": _stat(est, 1),
        "wait_estimate_median_rel_error": _stat(est_rel),
        "evictions_per_started_job": _stat([
            p["preemptions"]["count"] / p["jobs"]["started"] if p["jobs"]["started"] else 0.0
            for p in per_seed]),
        "max_abs_share_error_pts": _r(max(
            (out_q[q]["share_error_pts"]["max_abs"] or 0.0) for q in queues), 2)
        if queues else None,
        "queues": out_q,
        "users": out_u,
    }


# -- report.md --------------------------------------------------------------------------------


def _pct(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{100 * x:.{digits}f} %"


def _dur(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x < 90:
        return f"{x:.0f} s"
    if x < 5400:
        return f"{x / 60:.1f} min"
    return f"{x / 3600:.2f} h"


def _mmm(st: Mapping[str, Any], fmt: Callable[[Any], str]) -> str:
    if st.get("mean") is None:
        return "n/a"
    if st["min"] == st["max"]:
        return fmt(st["mean"])
    return f"{fmt(st['mean'])} ({fmt(st['min'])} – {fmt(st['max'])})"


def render_report(summary: Mapping[str, Any], plots: Sequence[str] = ()) -> str:
    s = summary
    a = s["aggregate"]
    seeds = s["seeds"]
    w = s["window"]
    lines = [f"# Scenario {s['scenario']}", ""]
    if s["description"]:
        lines += [s["description"], ""]
    lines += [
        f"`{s['file']}`: {s['cluster']['nodes']} nodes, {s['cluster']['gpus']} GPUs, "
        f"{len(s['queue_config'])} ClusterQueues; simulated {fmt_s(s['duration_s'])}"
        + (" (shortened with --duration)" if s["shortened"] else "")
        + f", seeds {', '.join(map(str, seeds))}; scheduling every "
        f"{fmt_s(s['scheduling_interval_s'])}, victims' grace period "
        f"{fmt_s(s['grace_period_s'])}; saturated window {fmt_s(w['start_s'])} – "
        f"{fmt_s(w['end_s'])}.",
        "",
        "Figures over seeds are the mean, with the range (min – max) when seeds differ.",
        "",
        "## Figures and goals",
        "",
        "The fairness goals (Jain index, gap to the entitled share) hold when every queue "
        "wants more than its share through the saturated window; the others always hold.",
        "",
        "| figure | value | goal |",
        "|---|---|---|",
        f"| Jain index of share / entitled share, saturated window | "
        f"{_mmm(a['jain_index'], lambda x: f'{x:.4f}')} | ≥ 0.99 |",
        f"| largest gap between a queue's share and its entitled share | "
        f"{a['max_abs_share_error_pts']:.2f} points | ≤ 2 points |",
        f"| GPU utilization, saturated window | {_mmm(a['utilization'], _pct)} | high |",
        f"| partial gang placements | {a['partial_gang_placements']} | 0 |",
        f"| samples with a queue above nominal + borrowing limit | {a['quota_violations']} "
        "| 0 |",
        f"| most preemptions of one job | {a['max_preemptions_per_job']} | ≤ "
        f"{a['max_preemptions_allowed']} |",
        f"| preemptions that took guaranteed (not borrowed) quota | "
        f"{a['preemptions']['guaranteed_preempted']} | 0 |",
        f"| pairs of jobs that preempted each other | {a['preemptions']['mutual']} | 0 |",
        f"| wait estimate, median absolute error | "
        f"{_mmm(a['wait_estimate_median_abs_error_s'], _dur)} | small |",
        "",
    ]
    lines += render_targets(s)
    lines += [
        "## Queues",
        "",
        "Share: of the GPU-time allocated in the saturated window. Entitled: "
        f"{s['entitled_basis']}.",
        "",
        "| queue | weight | nominal GPUs | entitled share | share | gap (points) | "
        "wait p50 | wait p99 | preempted | at nominal after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for q, info in s["queue_config"].items():
        row = a["queues"][q]
        lines.append(
            f"| {q} | {info['weight']:g} | {info['nominal_gpus']:g} | "
            f"{_pct(row['entitled_share'])} | {_mmm(row['share'], _pct)} | "
            f"{_mmm(row['share_error_pts'], lambda x: f'{x:+.2f}')} | "
            f"{_mmm(row['wait_p50_s'], _dur)} | {_mmm(row['wait_p99_s'], _dur)} | "
            f"{row['preempted']} | {_mmm(row['time_to_nominal_s'], _dur)} |")
    lines += ["", "\"At nominal after\": from the queue's first submission to the first cycle "
              "after which it held its nominal GPU quota.", ""]
    if SHARES_PLOT in plots:
        lines += [f"![GPU allocation by queue over time, and shares against entitlement]"
                  f"({SHARES_PLOT})", ""]
    lines += ["## Users", "", "| user | GPU-hours | share of the window |", "|---|---|---|"]
    for u, row in a["users"].items():
        gh = row["gpu_seconds"]
        lines.append(f"| {u} | {_mmm(gh, lambda x: f'{x / 3600:,.1f}')} | "
                     f"{_mmm(row['window_share'], _pct)} |")
    if USERS_PLOT in plots:
        lines += ["", f"![GPU allocation by user over time]({USERS_PLOT})"]
    lines += ["", "## Preemptions", ""]
    by_reason = a["preemptions"]["by_reason"]
    if by_reason:
        lines += ["| reason | evictions (all seeds) |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in by_reason.items()]
    else:
        lines.append("No job was preempted.")
    lines.append("")
    first = s["runs"][str(seeds[0])] if seeds else None
    if first is not None:
        lines += [f"## Streams (seed {seeds[0]})", "",
                  "| tenant/stream | jobs | started | stopped at run limit | wait p50 | "
                  "wait p99 | wait max |", "|---|---|---|---|---|---|---|"]
        for key, row in first["streams"].items():
            ws = row["wait_s"]
            lines.append(f"| {key} | {row['jobs']} | {row['started']} | "
                         f"{row['stopped_at_run_limit']} | {_dur(ws['p50'])} | "
                         f"{_dur(ws['p99'])} | {_dur(ws['max'])} |")
        lines.append("")
        if first["gangs"]:
            lines += [f"## Gangs (seed {seeds[0]}, the largest)", "",
                      "| job | tasks | GPUs | submitted | started | waited | GPU utilization "
                      "while it waited | preempted |", "|---|---|---|---|---|---|---|---|"]
            for g in first["gangs"][:10]:
                lines.append(
                    f"| {g['job']} | {g['tasks']} | {g['gpus']:g} | {_dur(g['submit_s'])} | "
                    f"{_dur(g['start_s'])} | {_dur(g['wait_s'])} | "
                    f"{_pct(g['utilization_while_waiting'])} | {g['preempted']} |")
            lines.append("")
        j = first["jobs"]
        lines += [f"## Jobs (seed {seeds[0]})", "",
                  f"{j['submitted']:,} submitted, {j['rejected']:,} rejected, "
                  f"{j['started']:,} started, {j['completed']:,} completed "
                  f"({j['stopped_at_run_limit']:,} stopped at their run limit), "
                  f"{j['never_started']:,} never started; {first['cycles']:,} scheduling "
                  f"cycles. Wait estimates: {first['wait_estimate']['asked']:,} jobs were still "
                  "pending at the first estimate after they arrived (median "
                  f"{_dur(first['wait_estimate']['median_estimate_delay_s'])} after), "
                  f"{first['wait_estimate']['estimated_jobs']:,} got a start time; for the "
                  f"{first['wait_estimate']['started']:,} of them that started, the median "
                  "absolute error was "
                  f"{_dur(first['wait_estimate']['median_abs_error_s'])} (p90 "
                  f"{_dur(first['wait_estimate']['p90_abs_error_s'])}).", ""]
    if WAITS_PLOT in plots:
        lines += [f"![Waits per queue]({WAITS_PLOT})", ""]
    if "provisioning" in a:
        lines += render_provisioning(s)
    return "\n".join(lines)


def render_targets(s: Mapping[str, Any]) -> list[str]:
    """The scenario's own targets (``spec.targets``), checked on every seed."""
    runs = s["runs"]
    if not runs or not next(iter(runs.values())).get("targets"):
        return []
    seeds = list(runs)
    lines = ["## Targets of this scenario", "",
             f"All met on every seed: **{'yes' if s['targets_met'] else 'no'}**.", "",
             "| target | goal | " + " | ".join(f"seed {k}" for k in seeds) + " |",
             "|---|---|" + "---|" * len(seeds)]
    first = runs[seeds[0]]["targets"]
    for i, row in enumerate(first):
        cells = []
        for k in seeds:
            r = runs[k]["targets"][i]
            cells.append(f"{r['measured']} {'✓' if r['met'] else '✗'}")
        lines.append(f"| {row['target']} | {row['goal']} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def render_provisioning(s: Mapping[str, Any]) -> list[str]:
    """The report's section on queued provisioning: figures over seeds, then the first
    seed's gangs and requests."""
    a = s["aggregate"]["provisioning"]
    cloud = s["cluster"].get("cloud", {})
    pools = ", ".join(f"{n} ({p['gpus_per_node']} x {p['model']} a node, zones "
                      f"{'/'.join(p['zones'])}, {p['max_nodes_per_zone']} nodes a zone)"
                      for n, p in cloud.get("pools", {}).items())
    lines = [
        "## Provisioning", "",
        f"Cloud {cloud.get('name', '')} ({cloud.get('region', '')}): regional quota "
        f"{cloud.get('gpu_quota', 0)} GPUs; pools {pools or 'none'}.", "",
        "| figure | value |", "|---|---|",
        f"| time from submission to start, provisioned jobs, p50 | "
        f"{_mmm(a['submit_to_start_p50_s'], _dur)} |",
        f"| time from submission to start, provisioned jobs, mean | "
        f"{_mmm(a['submit_to_start_mean_s'], _dur)} |",
        f"| time from submission to start, provisioned jobs, max | "
        f"{_mmm(a['submit_to_start_max_s'], _dur)} |",
        f"| GPU-hours idle in bookings (Provisioned, before the first pod) | "
        f"{_mmm(a['idle_booking_gpu_hours'], lambda x: f'{x:,.2f}')} |",
        f"| of which in bookings no pod consumed (expired or cancelled) | "
        f"{_mmm(a['idle_booking_gpu_hours_unconsumed'], lambda x: f'{x:,.2f}')} |",
        f"| cloud GPU-hours provisioned | {_mmm(a['cloud_gpu_hours'], lambda x: f'{x:,.1f}')} |",
        f"| requests (all seeds) by outcome | "
        f"{', '.join(f'{k} {v}' for k, v in a['by_outcome'].items()) or 'none'} |",
        f"| requests whose nodes did not all join at once in one zone | "
        f"{a['partial_provisions']} (goal 0) |",
        f"| bookings expired | {a['expired_bookings']} |",
        f"| capacity revoked at maxRunDurationSeconds | {a['revoked_at_run_limit']} |",
        f"| provisioned jobs stopped at their run limit | {a['stopped_at_run_limit']} |",
        f"| provisioned jobs that never started | {a['never_started']} |",
        "",
    ]
    seeds = s["seeds"]
    first = s["runs"][str(seeds[0])]["provisioning"] if seeds else None
    if first is None:
        return lines
    lines += [f"### Provisioned jobs (seed {seeds[0]})", "",
              "| job | GPUs | submitted | provisioned | started | waited | requests | zone | "
              "stopped at run limit |", "|---|---|---|---|---|---|---|---|---|"]
    for g in first["gangs"]:
        lines.append(
            f"| {g['job']} | {g['gpus']:g} | {_dur(g['submit_s'])} | "
            f"{_dur(g['provisioned_s'])} | {_dur(g['start_s'])} | {_dur(g['wait_s'])} | "
            f"{g['requests']} ({g['failed_requests']} failed) | {g['zone'] or '–'} | "
            f"{'yes' if g['stopped_at_run_limit'] else 'no'} |")
    lines += ["", f"### Requests (seed {seeds[0]})", "",
              "| request | pool/zone | nodes | made | provisioned | consumed | ended | outcome "
              "| GPU-hours idle booked |", "|---|---|---|---|---|---|---|---|---|"]
    for q in first["request_log"]:
        lines.append(
            f"| {q['request']} | {q['pool']}/{q['zone'] or '–'} | {q['nodes']} | "
            f"{_dur(q['created_s'])} | {_dur(q['provisioned_s'])} | {_dur(q['consumed_s'])} | "
            f"{_dur(q['ended_s'])} | {q['outcome']}"
            + (f" ({q['reason']})" if q["reason"] else "")
            + f" | {q['idle_booking_gpu_hours']:.2f} |")
    lines.append("")
    return lines


# -- plots -------------------------------------------------------------------------------------


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> None:
    fig.savefig(path, format="png", metadata={"Software": None})


def _hours(span_s: float) -> tuple[float, str]:
    return (3600.0, "hours") if span_s > 3 * 3600 else (60.0, "minutes")


def resample(t: npt.NDArray[np.float64], y: npt.NDArray[np.float64], end_s: float,
             step_s: float) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Mean of a step function (each column of ``y`` held from t[i] on) per bin of
    ``step_s``, over [0, end_s]."""
    edges = np.arange(0.0, end_s + step_s, step_s)
    edges[-1] = min(edges[-1], end_s) if edges.size > 1 else end_s
    out = np.zeros((edges.size - 1, y.shape[1]))
    for k in range(edges.size - 1):
        a, b = edges[k], edges[k + 1]
        if b > a:
            for c in range(y.shape[1]):
                out[k, c] = step_mean(t, y[:, c], a, b)
    return (edges[:-1] + edges[1:]) / 2, out


def plot_shares(path: Path, r: RunResult, by: str = "queue") -> None:
    """Top: GPUs allocated per queue (or per user) over time, stacked, under the capacity.
    Bottom: each one's share of the allocated GPUs over 10 minutes, against its entitled
    share (queues only); the saturated window shaded."""
    s = r.scenario
    if by == "queue":
        t, used = r.series.arrays()
        names = r.series.queues
    else:
        t, used = r.series.user_arrays()
        names = r.series.users
    unit, unit_name = _hours(s.duration_s)
    step = max(60.0, s.duration_s / 240)
    mid, binned = resample(t, used / WHOLE_GPU_MILLI, s.duration_s, step)
    smooth = max(1, round(600 / step))  # 10-minute windows: GPU-time of one / of all
    fig = _figure(11, 7.2)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2.4))
    x = mid / unit
    colors = {q: _COLORS[i % len(_COLORS)] for i, q in enumerate(names)}
    top.stackplot(x, binned.T, labels=names, colors=[colors[q] for q in names], alpha=0.85,
                  linewidth=0)
    if r.cloud is not None and by == "queue":
        ct = np.asarray([*r.cloud.capacity_t, s.duration_s], np.float64)
        cg = np.asarray([*r.cloud.capacity_gpus, r.cloud.capacity_gpus[-1]], np.float64)
        top.step(ct / unit, s.gpus + cg, where="post", color="black", linewidth=1,
                 linestyle="--", label="capacity")
        ymax = float(s.gpus + cg.max())
    else:
        top.axhline(s.gpus, color="black", linewidth=1, linestyle="--", label="capacity")
        ymax = float(s.gpus)
    top.set_ylim(0, max(ymax, float(binned.sum(axis=1).max()) if binned.size else 0.0) * 1.08)
    top.set_ylabel("GPUs allocated")
    top.legend(loc="lower right", fontsize=8, ncol=min(len(names) + 1, 6), framealpha=0.9)
    top.set_title(f"{s.name} · seed {r.seed} · GPUs allocated per {by} ({fmt_s(step)} "
                  f"means); below: shares of the allocated GPU-time over "
                  f"{fmt_s(smooth * step)}", fontsize=11)
    kernel = np.ones(smooth)
    rolled = np.stack([np.convolve(binned[:, i], kernel, mode="same")
                       for i in range(len(names))], axis=1) if names else binned
    total = rolled.sum(axis=1)
    ent_sum = sum(r.entitled_gpu.values()) or 1.0
    for i, q in enumerate(names):
        share = np.divide(rolled[:, i], total, out=np.zeros_like(total), where=total > 0)
        bottom.plot(x, 100 * share, color=colors[q], linewidth=1.3, label=q)
        if by == "queue":
            bottom.axhline(100 * r.entitled_gpu[q] / ent_sum, color=colors[q], linewidth=1,
                           linestyle=(0, (4, 3)))
    for ax in (top, bottom):
        ax.axvspan(s.window[0] / unit, s.window[1] / unit, color="#999999", alpha=0.15,
                   linewidth=0)
        ax.grid(True, alpha=0.3)
    bottom.set_ylim(0, 104)
    bottom.set_ylabel("% of allocated GPUs")
    bottom.set_xlabel(f"simulated time ({unit_name}); shaded: the saturated window"
                      + ("; dashed: entitled shares" if by == "queue" else ""))
    bottom.set_xlim(0, s.duration_s / unit)
    bottom.legend(loc="upper right", fontsize=8, ncol=min(len(names), 6), framealpha=0.9)
    _save(fig, path)


def plot_waits(path: Path, runs: Sequence[RunResult]) -> None:
    """Waits per queue, all seeds together: box (quartiles), whiskers at p1 and p99. Jobs
    that never started count with the time they had waited by the end (a lower bound), so a
    queue whose backlog only grows shows it."""
    queues = runs[0].series.queues if runs else []
    data = []
    unstarted = []
    for q in queues:
        waits = []
        left = 0
        for r in runs:
            for j in r.jobs.values():
                if j.queue != q or j.rejected:
                    continue
                if j.wait_s is not None:
                    waits.append(j.wait_s)
                else:
                    waits.append(r.scenario.duration_s - j.submit_s)
                    left += 1
        data.append(np.asarray(waits, np.float64) / 60)
        unstarted.append(left)
    fig = _figure(max(6.0, 1.5 * len(queues) + 2), 4.8)
    ax: Axes = fig.subplots()
    shown = [d if d.size else np.zeros(1) for d in data]
    box = ax.boxplot(shown, whis=(1, 99), showfliers=False, patch_artist=True,
                     medianprops={"color": "black", "linewidth": 1.4})
    ax.set_xticks(range(1, len(queues) + 1), queues)
    for i, patch in enumerate(box["boxes"]):
        patch.set_facecolor(_COLORS[i % len(_COLORS)])
        patch.set_alpha(0.6)
    top = max((float(np.percentile(d, 99)) for d in data if d.size), default=1.0)
    for i, d in enumerate(data):
        if d.size:
            note = f"p50 {np.median(d):.1f}\np99 {np.percentile(d, 99):.1f}"
            if unstarted[i]:
                note += f"\n{unstarted[i]:,} never started"
            ax.text(i + 1, top * 1.04, note, ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, max(1.0, top * 1.3))
    ax.set_ylabel("wait before the first start (minutes)")
    seeds = ", ".join(str(r.seed) for r in runs)
    ax.set_title(f"{runs[0].scenario.name if runs else ''} · waits per queue · seeds {seeds} "
                 "· whiskers p1–p99", fontsize=11)
    ax.set_xlabel("jobs that never started count with their wait until the end")
    ax.grid(True, axis="y", alpha=0.3)
    _save(fig, path)


def write_outputs(out: Path, summary: Mapping[str, Any], runs: Sequence[RunResult],
                  plots: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    if plots and runs:
        plot_shares(out / SHARES_PLOT, runs[0])
        plot_shares(out / USERS_PLOT, runs[0], by="user")
        plot_waits(out / WAITS_PLOT, runs)
        names = [SHARES_PLOT, USERS_PLOT, WAITS_PLOT]
    (out / SUMMARY_FILE).write_text(dumps_summary(summary))
    (out / REPORT_FILE).write_text(render_report(summary, names))
    return [out / SUMMARY_FILE, out / REPORT_FILE, *(out / n for n in names)]
