"""Victim selection, run as the post-filter step when a job fits neither quota nor cluster.

Three kinds of victims, as Kueue's preemption:

- **within-queue**: a job of the same ClusterQueue with lower priority
  (``withinClusterQueue: LowerPriority``);
- **reclaim**: a job of another queue of the same cohort tree that is *borrowing*, when the
  preemptor's queue would still be within its nominal quota (``reclaimWithinCohort``);
- **fair-share**: a job of another borrowing queue whose fair key (weighted share plus the
  share held lately, the key of the admission order), even after losing the victim, stays
  strictly above the preemptor queue's key with the new job. The strict inequality is what
  stops two queues from preempting each other back and forth; using the order's own key is
  what stops a queue from preempting capacity the order has just given another (a queue that
  held little lately goes first in the order even when it holds more now).

Guards: jobs of non-preemptive queues are never victims; a job is not preempted before it has
run ``min_runtime_s`` nor more than ``max_preemptions_per_job`` times; a job never preempts a
job that preempted it within ``preemption_cooldown_s``.

The set is minimal the Kueue way: candidates are removed in a trial, cheapest first (lowest
priority, then most recently started), until the job fits; then each victim but the last is
put back, in reverse order, and kept out only if the job no longer fits without it. Victims
are whole jobs, so a gang is never cut in half.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.core.admission import Fit, Key, QuotaTree, Vec, request_demand, try_admit
from gpupool.core.alternatives import chosen
from gpupool.core.decisions import Preemption
from gpupool.core.model import Job, JobId, NodeName, Placement
from gpupool.core.placement.framework import Profile
from gpupool.core.quota import QueueSettings, Reclaim, WithinQueue
from gpupool.core.snapshot import Snapshot


@dataclass(slots=True)
class Running:
    """An admitted job: where it runs and what it costs in quota."""

    job: Job
    queue: str
    flavor: str
    placements: tuple[Placement, ...]
    demand: Vec
    start_s: float
    preemptions: int = 0
    charge: float = 0.0  # usage charged to its user at admission
    alternative: str = ""  # the form it runs in: "" its own request, else an alternative


@dataclass(frozen=True, slots=True)
class Victim:
    running: Running
    kind: Preemption


def _within_nominal(tree: QuotaTree, cq: str, demand: Vec) -> bool:
    usage = tree.usage(cq)
    nominal = tree.nominal(cq)
    return all(
        usage.get(k, 0) + v <= nominal[k] for k, v in demand.items() if k in nominal and v > 0
    )


def candidates(
    job: Job,
    cq: str,
    tree: QuotaTree,
    running: Mapping[JobId, Running],
    settings: QueueSettings,
    now_s: float,
    preempted_by: Mapping[JobId, Mapping[JobId, float]],
    lately: Mapping[str, float] | None = None,
    held: Mapping[Key, int] | None = None,
    only: tuple[str, str] | None = None,
) -> list[Victim]:
    """Jobs that may be preempted for ``job``, cheapest first. ``lately``: each queue's share
    held over the last while (``fairshare.ShareHistory``), added to the share in the
    fair-share comparison as in the admission order. ``held``: quota the preemptor's queue
    will take for preemptors of this cycle that bind in the next, counted as used.
    ``only``: the (flavor, form) the job would run as (else its own, in the first flavor)."""
    past = lately if lately is not None else {}
    queue = tree.queues[cq]
    policy = queue.preemption
    root = tree.cohort_root(cq)
    demand = _plus(_lower_bound(job, tree, cq, only), held)
    within_nominal = _within_nominal(tree, cq, demand)
    my_share = tree.share(cq, demand) + past.get(cq, 0.0)
    recent = preempted_by.get(job.id, {})
    out: list[Victim] = []
    for r in running.values():
        vq = tree.queues[r.queue]
        if vq.non_preemptive or r.start_s >= now_s or now_s - r.start_s < settings.min_runtime_s:
            continue  # never a job admitted this very cycle
        if r.preemptions >= settings.max_preemptions_per_job:
            continue
        if now_s - recent.get(r.job.id, -1e300) < settings.preemption_cooldown_s:
            continue  # r preempted this job recently: no preempting back
        if r.queue == cq:
            if (
                policy.within_cluster_queue is WithinQueue.LOWER_PRIORITY
                and r.job.priority < job.priority
            ):
                out.append(Victim(r, Preemption.WITHIN_QUEUE))
            continue
        if tree.cohort_root(r.queue) != root or not tree.borrowed(r.queue):
            continue
        reclaim = policy.reclaim_within_cohort
        if within_nominal and (
            reclaim is Reclaim.ANY
            or (reclaim is Reclaim.LOWER_PRIORITY and r.job.priority < job.priority)
        ):
            out.append(Victim(r, Preemption.RECLAIM))
        elif policy.fair_share and my_share < tree.share(
            r.queue, {k: -v for k, v in r.demand.items()}
        ) + past.get(r.queue, 0.0):
            out.append(Victim(r, Preemption.FAIR_SHARE))
    out.sort(
        key=lambda v: (
            v.kind == "within-queue",
            v.running.job.priority,
            -v.running.start_s,
            v.running.job.id,
        )
    )
    return out


def by_node(cands: list[Victim], snap: Snapshot) -> list[Victim]:
    """``cands`` grouped node by node, the nodes that would have the most GPUs free with all
    their candidates gone first (then fewest victims); inside a node, in ``cands``' order.
    A job that needs whole nodes (a gang of 8-GPU tasks) is helped only by victims that
    empty a node: taken cheapest first across the cluster, the victims allowed (a queue
    gives back only what it borrowed) run out before any node is empty."""
    table = snap.table
    groups: dict[str, list[Victim]] = {}
    for v in cands:
        node = v.running.placements[0].node if v.running.placements else ""
        groups.setdefault(node, []).append(v)

    def rank(node: str) -> tuple[int, int]:
        vs = groups[node]
        if not node:
            return (0, len(vs))
        row = table.row(NodeName(node))
        freed = sum(p.gpu_milli for v in vs for p in v.running.placements if p.node == node)
        return (-(int(table.milli_free[row]) + freed), len(vs))

    return [v for node in sorted(groups, key=rank) for v in groups[node]]


def _plus(demand: Vec, held: Mapping[Key, int] | None) -> Vec:
    if not held:
        return demand
    out = dict(demand)
    for k, v in held.items():
        out[k] = out.get(k, 0) + v
    return out


def _lower_bound(job: Job, tree: QuotaTree, cq: str, only: tuple[str, str] | None) -> Vec:
    """What the job asks of quota before placement: in ``only``'s flavor and form, else its
    own request in the queue's first flavor."""
    if only is not None:
        return request_demand(chosen(job, only[1]), only[0])
    return request_demand(job, tree.queues[cq].flavors[0].flavor if tree.queues[cq].flavors else "")


def plan(
    job: Job,
    cq: str,
    tree: QuotaTree,
    snap: Snapshot,
    profile: Profile,
    cands: list[Victim],
    lately: Mapping[str, float] | None = None,
    held: Mapping[Key, int] | None = None,
    only: tuple[str, str] | None = None,
) -> tuple[list[Victim], Fit] | None:
    """The minimal victim set that lets ``job`` fit, and its fit; None when none does.
    ``lately``, ``held`` and ``only`` as for ``candidates``; with ``only`` the job must fit
    in that flavor and form.

    Works in a snapshot trial and restores the quota tree: nothing is changed on return.
    """
    past = lately if lately is not None else {}
    if not cands:
        return None
    lower_bound = _lower_bound(job, tree, cq, only)
    out: list[Victim] = []  # victims currently taken out of the quota tree

    def take_out(v: Victim) -> None:
        for p in v.running.placements:
            snap.release(p)
        tree.add(v.running.queue, v.running.demand, -1)
        out.append(v)

    def put_back(v: Victim) -> None:
        for p in v.running.placements:
            snap.assume(p)
        tree.add(v.running.queue, v.running.demand, +1)
        out.remove(v)

    def attempt() -> Fit | None:
        if tree.shortfall(cq, _plus(lower_bound, held)):
            return None
        return try_admit(job, cq, tree, snap, profile, only=only)[0]

    def still_allowed(v: Victim) -> bool:
        """Another queue's job is a victim only while its queue stays at or above nominal
        without it (only borrowed capacity is taken back) and, for fair-share, while that
        queue's share stays above the preemptor's; checked as victims are taken."""
        if v.kind == "within-queue":
            return True
        vq = v.running.queue
        usage, nominal = tree.usage(vq), tree.nominal(vq)
        if any(
            usage.get(k, 0) - d < nominal[k]
            for k, d in v.running.demand.items()
            if k in nominal and d > 0
        ):
            return False
        return v.kind != "fair-share" or tree.share(cq, _plus(lower_bound, held)) + past.get(
            cq, 0.0
        ) < tree.share(vq, {k: -d for k, d in v.running.demand.items()}) + past.get(vq, 0.0)

    def greedy(order: list[Victim]) -> tuple[list[Victim], Fit] | None:
        with snap.trial():
            fit: Fit | None = None
            for v in order:
                if not still_allowed(v):
                    continue
                take_out(v)
                fit = attempt()
                if fit is not None:
                    break
            if fit is None:
                while out:
                    put_back(out[-1])
                return None
            for v in reversed(out[:-1]):
                put_back(v)
                again = attempt()
                if again is None:
                    take_out(v)
                else:
                    fit = again
            fit = attempt()
            assert fit is not None, "the victim set stopped fitting while minimising"
            rank = {id(v): i for i, v in enumerate(cands)}
            return sorted(out, key=lambda v: rank[id(v)]), fit

    try:
        found = greedy(cands)
        if found is None:
            grouped = by_node(cands, snap)
            if grouped != cands:
                found = greedy(grouped)
        return found
    finally:
        for v in out:
            tree.add(v.running.queue, v.running.demand, +1)
