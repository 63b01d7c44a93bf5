"""The figures of a scenario over its seeds: ``summary.json`` (each seed's, the scenario's
settings, and the aggregate: means, ranges, sums of what must be zero)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gpupool.sim.scenario_model import Scenario
from gpupool.sim.scenario_results import RunResult
from gpupool.sim.scenario_summary import rounded, stats, summarise_run
from gpupool.sim.scenario_targets import check_targets

__all__ = ["ENTITLED_BASIS", "aggregate", "summarise"]

ENTITLED_BASIS = (
    "what the scheduler acts on, QuotaTree.entitled summed over flavors in GPUs: "
    "nominal quota first (guaranteed), then a cohort's own quota split by "
    "fair-sharing weight"
)


# -- over seeds -----------------------------------------------------------------------------


def summarise(
    scenario: Scenario,
    runs: Sequence[RunResult],
    wall_s: float = 0.0,
    duration_override: bool = False,
) -> dict[str, Any]:
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
            "nominal_gpus": rounded(first.nominal_milli[q] / 1000, 3) if first else None,
            "entitled_gpus": rounded(first.entitled_gpu[q] / 1000, 3) if first else None,
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
        "cluster": {
            "nodes": len(scenario.nodes),
            "gpus": scenario.gpus,
            **(
                {
                    "cloud": {
                        "name": scenario.cloud.name,
                        "region": scenario.cloud.region,
                        "gpu_quota": scenario.cloud.gpu_quota,
                        "pools": {
                            p.name: {
                                "model": p.model,
                                "gpus_per_node": p.gpus_per_node,
                                "zones": list(p.zones),
                                "max_nodes_per_zone": p.max_nodes_per_zone,
                            }
                            for p in scenario.cloud.pools
                        },
                    }
                }
                if scenario.cloud is not None
                else {}
            ),
        },
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
        "wall_s": rounded(wall_s, 3),
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
            "share": stats([row["share"] for row in rows]),
            "entitled_share": rows[0]["entitled_share"],
            "nominal_share": rows[0]["nominal_share"],
            "share_error_pts": {
                **stats(errors, 2),
                "max_abs": rounded(max((abs(e) for e in errors), default=0.0), 2),
            },
            "gpu_seconds": stats([row["gpu_seconds"] for row in rows], 1),
            "wait_p50_s": stats([row["wait_s"]["p50"] for row in rows], 1),
            "wait_p99_s": stats([row["wait_s"]["p99"] for row in rows], 1),
            "preempted": sum(row["preempted"] for row in rows),
            "time_to_nominal_s": stats([row["time_to_nominal_s"] for row in rows], 1),
        }
    out_u = {}
    for u in users:
        rows = [p["users"][u] for p in per_seed if u in p["users"]]
        out_u[u] = {
            "gpu_seconds": stats([row["gpu_seconds"] for row in rows], 1),
            "window_share": stats([row["window_share"] for row in rows]),
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
            "submit_to_start_p50_s": stats([pv["submit_to_start_s"]["p50"] for pv in prov], 1),
            "submit_to_start_max_s": stats([pv["submit_to_start_s"]["max"] for pv in prov], 1),
            "submit_to_start_mean_s": stats([pv["submit_to_start_s"]["mean"] for pv in prov], 1),
            "idle_booking_gpu_hours": stats([pv["idle_booking_gpu_hours"] for pv in prov], 3),
            "idle_booking_gpu_hours_unconsumed": stats(
                [pv["idle_booking_gpu_hours_unconsumed"] for pv in prov], 3
            ),
            "cloud_gpu_hours": stats([pv["cloud_gpu_hours"] for pv in prov], 2),
            "requests": sum(pv["requests"] for pv in prov),
            "by_outcome": dict(sorted(outcomes.items())),
            "partial_provisions": sum(pv["partial_provisions"] for pv in prov),
            "expired_bookings": sum(pv["expired_bookings"] for pv in prov),
            "revoked_at_run_limit": sum(pv["revoked_at_run_limit"] for pv in prov),
            "stopped_at_run_limit": sum(pv["stopped_at_run_limit"] for pv in prov),
            "never_started": sum(pv["never_started"] for pv in prov),
        }
    measured = [p["measured_use"] for p in per_seed if "measured_use" in p]
    if measured:
        extra["measured_use"] = {
            "place_by": measured[0]["place_by"],
            **{
                k: stats([m[k] for m in measured], 1)
                for k in ("hot_card_gpu_s", "memory_over_card_s", "busy_gpu_s")
            },
        }
    return {
        **extra,
        "jain_index": stats([p["jain_index"] for p in per_seed]),
        "utilization": stats([p["utilization"] for p in per_seed]),
        "partial_gang_placements": sum(p["partial_gang_placements"] for p in per_seed),
        "max_preemptions_per_job": max(p["max_preemptions_per_job"] for p in per_seed),
        "max_preemptions_allowed": per_seed[0]["max_preemptions_allowed"],
        "preemptions": {
            "count": stats([p["preemptions"]["count"] for p in per_seed], 1),
            "by_reason": dict(sorted(reasons.items())),
            "guaranteed_preempted": sum(p["preemptions"]["guaranteed_preempted"] for p in per_seed),
            "mutual": sum(p["preemptions"]["mutual"] for p in per_seed),
        },
        "wait_p50_s": stats([p["wait_s"]["p50"] for p in per_seed], 1),
        "wait_p99_s": stats([p["wait_s"]["p99"] for p in per_seed], 1),
        "wait_estimate_median_abs_error_s": stats(est, 1),
        "wait_estimate_median_rel_error": stats(est_rel),
        "evictions_per_started_job": stats(
            [
                p["preemptions"]["count"] / p["jobs"]["started"] if p["jobs"]["started"] else 0.0
                for p in per_seed
            ]
        ),
        "max_abs_share_error_pts": rounded(
            max((out_q[q]["share_error_pts"]["max_abs"] or 0.0) for q in queues), 2
        )
        if queues
        else None,
        "queues": out_q,
        "users": out_u,
    }
