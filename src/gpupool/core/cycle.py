"""run_cycle(): the only place the steps of a scheduling cycle are sequenced."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Set
from dataclasses import dataclass, field, replace

import numpy as np

from gpupool.core import preemption
from gpupool.core.admission import (
    Fit,
    QuotaTree,
    Vec,
    flavor_job,
    placement_demand,
    request_demand,
    try_admit,
)
from gpupool.core.cluster import ClusterState
from gpupool.core.decisions import Bind, CycleResult, Evict, Park, Reserve
from gpupool.core.estimate import Arrivals
from gpupool.core.fairshare import ShareHistory, UsageLedger
from gpupool.core.model import GpuKind, Job, JobId, Placement
from gpupool.core.placement.framework import Code, Profile, Status
from gpupool.core.placement.place import place_job
from gpupool.core.preemption import Running
from gpupool.core.provisioning import AdmissionChecks, CheckRecord, CheckState, ConditionType
from gpupool.core.queueing import AdmissionOrder, Pending, Queues
from gpupool.core.quota import QueueingStrategy, QueueSettings
from gpupool.core.runtimes import Runtimes
from gpupool.core.snapshot import Reservation, Snapshot
from gpupool.core.usage import LoadModel

SHARE_HALF_LIFE_S = 3600.0
"""How long a queue's past share counts in the fair order (it halves every hour): long
enough to even out gangs that run for an hour or two, short enough that a queue idle this
morning banks nothing for the afternoon."""


def run_cycle(state: ClusterState, pending: Iterable[Job], profile: Profile) -> CycleResult:
    """Placement only, no queues: places ``pending`` jobs in the order given; each sees the
    ones placed before it. ``schedule`` below is the cycle with quotas and fair sharing.

    Decisions come out; nothing is bound here. Placements are assumed in ``state`` at once,
    so the adapter confirms or forgets each after its bind.
    """
    snap = state.snapshot()                                   # 1. one consistent view
    result = CycleResult(cycle=state.next_cycle())
    for job in pending:                                       # 2. in the queue's order
        placements, status = place_job(job, snap, profile)    # 3. filter -> score -> cards
        if not placements:
            result.parks.append(Park(job.id, status))         # 4. parked, with the reason
            continue
        for p in placements:                                  # 5. reserve: the whole gang
            snap.assume(p)
            state.assume(p)
        result.binds.append(Bind(job.id, tuple(placements)))  # 6. the adapter binds
    return result


# -- the queue-aware cycle ---------------------------------------------------------------------


@dataclass(slots=True)
class Context:
    """What the queue-aware cycle reads and changes; owned by ``Scheduler``."""

    state: ClusterState
    tree: QuotaTree
    queues: Queues
    ledger: UsageLedger
    settings: QueueSettings
    profile: Profile
    runtimes: Runtimes
    running: dict[JobId, Running] = field(default_factory=dict)
    preempted_by: dict[JobId, dict[JobId, float]] = field(default_factory=dict)
    nominated: list[JobId] = field(default_factory=list)
    reservation: Reservation | None = None
    reserve_min_gpus: int = 8
    checks: AdmissionChecks | None = None
    """Provisioning admission checks of the queues that name one (None: no queue does)."""
    arrivals: Arrivals = field(default_factory=Arrivals)
    """Recent submissions per queue: the wait estimates expect more like them."""
    history: ShareHistory = field(default_factory=lambda: ShareHistory(SHARE_HALF_LIFE_S))
    """Each queue's share averaged over time: half of its key in the fair order."""
    usage: LoadModel | None = None
    """Measured use of the cards (``core.usage``); None places by requests alone."""


def schedule(ctx: Context, now_s: float) -> CycleResult:
    """One admission cycle: many jobs per cycle, queues in weighted-fair order.

    1. one snapshot; room held for a reserved gang stays held;
    2. preemptors whose victims are gone first, then queues by lowest weighted dominant share
       (a heap, re-keyed after each admission), each queue's jobs by priority, user usage, age;
    3. quota and flavor, then placement (all-or-nothing), then quota with what was placed;
    4. on no fit: preemption (minimal victims; the room is held, the job binds next cycle);
    5. otherwise a large gang gets a reservation (backfill), and the job is parked with reasons;
    6. admitted jobs are assumed in the state and charged to quota and to their user.

    Queues with a provisioning admission check take step 0 first (``_checks_first``), and in
    step 3 their jobs reserve quota and get a ProvisioningRequest instead of a placement
    (``_request_capacity``); see ``gpupool.core.provisioning``.
    """
    snap = ctx.state.snapshot()                                             # 1.
    snap.now_s = now_s
    for q in ctx.queues.queues():
        ctx.history.advance(q, now_s)
    if ctx.reservation is not None and not _next_in_fair_order(ctx, ctx.reservation.queue):
        ctx.reservation = None  # its queue is no longer first in the fair order: room freed
    snap.reservation = ctx.reservation
    snap.load = ctx.usage.view(snap.table, now_s) if ctx.usage is not None else None
    result = CycleResult(cycle=ctx.state.next_cycle())
    if ctx.checks is not None:
        _checks_first(ctx, snap, now_s, result)                             # 0.
    failed: dict[Hashable, Status] = {}
    # Per queue, the highest priority whose preemption attempt found no victim set this
    # cycle: a job of that queue with no higher priority would find none either.
    no_victims: dict[str, int] = {}
    nominated = [ctx.queues.get(j) for j in ctx.nominated]
    ctx.nominated = []
    for p in nominated:
        if p is not None:
            _try(ctx, snap, p, now_s, result, failed, no_victims, preempt=False)
    order = admission_order(ctx, now_s)                                     # 2.
    while (p := order.next()) is not None:
        order.offered(_try(ctx, snap, p, now_s, result, failed, no_victims, preempt=True))
    for q in ctx.queues.queues():
        ctx.history.hold(q, ctx.tree.share(q), now_s)
    if ctx.usage is not None:  # what was placed counts by its request until it shows
        for b in result.binds:
            for pl in b.placements:
                ctx.usage.placed(pl, now_s)
    return result


def fair_key(ctx: Context, q: str) -> float:
    """A queue's place in the fair order: its weighted share now plus the share it held
    lately (``ShareHistory``); lowest first."""
    return ctx.tree.share(q) + ctx.history.average(q)


def admission_order(ctx: Context, now_s: float, active_only: bool = True,
                    only: Set[JobId] | None = None,
                    ahead: Mapping[str, float] | None = None) -> AdmissionOrder:
    """The cycle's order of pending jobs (see ``AdmissionOrder``); the wait estimator walks
    the same order on its forecast (``only``: the jobs it still has to place; ``ahead``: share
    to add to a queue's key for jobs counted as admitted without being placed)."""
    strict = frozenset(q for q, cq in ctx.tree.queues.items()
                       if cq.queueing_strategy is QueueingStrategy.STRICT_FIFO)
    extra = ahead if ahead is not None else {}
    return AdmissionOrder(ctx.queues, ctx.queues.queues(),
                          lambda q: fair_key(ctx, q) + extra.get(q, 0.0), now_s,
                          strict=strict, active_only=active_only, only=only)


def request_share(ctx: Context, q: str, job: Job) -> float:
    """The weighted share a job's request adds to its queue (before placement)."""
    queue = ctx.tree.queues[q]
    flavor = queue.flavors[0].flavor if queue.flavors else ""
    return _dominant(ctx.tree, q, request_demand(job, flavor))


def _try(ctx: Context, snap: Snapshot, p: Pending, now_s: float, result: CycleResult,
         failed: dict[Hashable, Status], no_victims: dict[str, int], preempt: bool) -> bool:
    job, q = p.job, p.queue
    if ctx.checks is not None and ctx.checks.check_for(q) is not None:
        return _request_capacity(ctx, snap, p, now_s, result)
    res = ctx.reservation
    if res is not None and res.holds_quota and res.queue == q \
            and not res.admits(job.id, job.run_limit_s, now_s):
        status = Status(Code.UNSCHEDULABLE, (
            f"waiting behind gang {res.job} of queue {q}, which holds room from "
            f"t={res.start_s:.0f}s (a job with a run limit ending before then may backfill)",))
        ctx.queues.park(job.id, status)
        result.parks.append(Park(job.id, status))
        return False
    fit, status = try_admit(job, q, ctx.tree, snap, ctx.profile, failed)  # 3.
    if fit is not None:
        _admit(ctx, snap, p, fit, now_s, result)                            # 6.
        return True
    if preempt and status.code is not Code.UNRESOLVABLE \
            and job.priority > no_victims.get(q, -(1 << 62)):                   # 4.
        cands = preemption.candidates(job, q, ctx.tree, ctx.running, ctx.settings, now_s,
                                      ctx.preempted_by)
        if ctx.checks is not None:  # jobs on provisioned nodes free nothing others could use
            cands = [v for v in cands if v.running.job.id not in ctx.checks.booked]
        planned = preemption.plan(job, q, ctx.tree, snap, ctx.profile, cands)
        if planned is None:
            no_victims[q] = max(job.priority, no_victims.get(q, -(1 << 62)))
        if planned is not None:
            victims, fit = planned
            for v in victims:
                _evict(ctx, snap, v, job.id, now_s, result)
            for pl in fit.placements:
                snap.assume(pl)  # the room is held for the preemptor this cycle
            ctx.nominated.append(job.id)
            failed.clear()
            no_victims.clear()
            ctx.queues.note(job.id, Status(Code.WAIT, (
                f"preempting {len(victims)} job(s) to start",)))
            return False
    if ctx.reservation is None and _gpus(job) >= ctx.reserve_min_gpus \
            and _next_in_fair_order(ctx, q):
        ctx.reservation = _reserve(ctx, snap, p, now_s)                     # 5.
        if ctx.reservation is not None:
            snap.reservation = ctx.reservation
            result.reservations.append(Reserve(job.id, tuple(
                snap.table.nodes[int(r)].name for r in ctx.reservation.rows),
                ctx.reservation.start_s))
    ctx.queues.park(job.id, status)
    result.parks.append(Park(job.id, status))
    return False


def _next_in_fair_order(ctx: Context, q: str) -> bool:
    """Whether queue ``q`` comes first in the fair order (lowest ``fair_key``) of the queues
    with pending jobs in its cohort tree. Only such a queue's gang may hold nodes for later:
    a reservation makes room that nobody else may take, so granting it to a queue above its
    share would let a large job buy capacity beyond the share by waiting (priority orders
    work inside the queue, it never buys room against other queues)."""
    mine = fair_key(ctx, q)
    root = ctx.tree.cohort_root(q)
    return all(mine <= fair_key(ctx, o) for o in ctx.queues.queues()
               if o != q and ctx.queues.has_pending(o) and ctx.tree.cohort_root(o) == root)


def _gpus(job: Job) -> int:
    return sum(ps.count * (ps.gpu.count or (1 if ps.gpu.kind is not GpuKind.NONE else 0))
               for ps in job.pod_sets)


def _admit(ctx: Context, snap: Snapshot, p: Pending, fit: Fit, now_s: float,
           result: CycleResult) -> None:
    job, q = p.job, p.queue
    for pl in fit.placements:
        snap.assume(pl)
        ctx.state.assume(pl)
    ctx.tree.add(q, fit.demand)
    ctx.queues.remove(job.id)
    charge = _dominant(ctx.tree, q, fit.demand) * ctx.runtimes(job)
    ctx.ledger.charge(q, job.user, charge, now_s)
    ctx.running[job.id] = Running(job, q, fit.flavor, fit.placements, fit.demand, now_s,
                                  p.preemptions, charge)
    ctx.runtimes.started(job, now_s)
    if ctx.reservation is not None and ctx.reservation.job == job.id:
        ctx.reservation = None
        snap.reservation = None
    result.binds.append(Bind(job.id, fit.placements, q, fit.flavor))


def dominant(ctx: Context, q: str, demand: Vec) -> float:
    """The weighted share ``demand`` stands for in queue ``q`` (what a user is charged per
    second of it)."""
    return _dominant(ctx.tree, q, demand)


def _dominant(tree: QuotaTree, q: str, demand: Vec) -> float:
    ent = tree.entitled(q)
    return max((v / ent[k] for k, v in demand.items() if ent.get(k, 0) > 0), default=0.0)


def _evict(ctx: Context, snap: Snapshot, v: preemption.Victim, preemptor: JobId, now_s: float,
           result: CycleResult) -> None:
    r = v.running
    release(ctx, r.job.id, now_s, snap=snap, wake=False)
    ctx.queues.add(r.job, preemptions=r.preemptions + 1)
    # Parked until the next event that frees capacity: not re-admitted in this same cycle.
    ctx.queues.park(r.job.id, Status(Code.UNSCHEDULABLE, (
        f"evicted ({v.kind}) by {preemptor}; waiting to be admitted again",)))
    ctx.preempted_by.setdefault(r.job.id, {})[preemptor] = now_s
    result.evicts.append(Evict(r.job.id, r.queue, v.kind, preemptor,
                               f"{v.kind}: preempted by {preemptor}"))


def release(ctx: Context, job: JobId, now_s: float, snap: Snapshot | None = None,
            wake: bool = True) -> Running:
    """Free what a running job holds (it ended, was cancelled or evicted) and wake the
    parked jobs that the freed capacity could help (not for an eviction inside a cycle: the
    room is held for the preemptor, and waking would offer the victim its place back)."""
    r = ctx.running.pop(job)
    ctx.runtimes.stopped(r.job, r.start_s)
    for pl in r.placements:
        ctx.state.forget(pl.task)
        if snap is not None:
            snap.release(pl)
        if ctx.usage is not None:  # it still shows in the samples until the next one
            ctx.usage.released(pl, now_s)
    ctx.tree.add(r.queue, r.demand, -1)
    used = _dominant(ctx.tree, r.queue, r.demand) * max(0.0, now_s - r.start_s)
    ctx.ledger.charge(r.queue, r.job.user, used - r.charge, now_s)
    # Freed quota helps the queue's cohort tree; freed nodes help any queue whose flavors
    # cover them, which is every queue in general: wake them all.
    if wake:
        ctx.queues.wake()
    return r


def _reserve(ctx: Context, snap: Snapshot, p: Pending, now_s: float) -> Reservation | None:
    """When and where the gang could start if running jobs end as expected: release them in
    order of expected end (binary search on how many) until quota and cards both fit."""
    job, q = p.job, p.queue
    ends = sorted(ctx.running.values(), key=lambda r: (r.start_s + ctx.runtimes.at_most(r.job),
                                                       r.job.id))

    def fits(k: int) -> tuple[Placement, ...]:
        with snap.trial():
            for r in ends[:k]:
                for pl in r.placements:
                    snap.release(pl)
                ctx.tree.add(r.queue, r.demand, -1)
            try:
                fit = try_admit(job, q, ctx.tree, snap, ctx.profile)[0]
            finally:
                for r in ends[:k]:
                    ctx.tree.add(r.queue, r.demand, +1)
            return fit.placements if fit is not None else ()

    queue = ctx.tree.queues[q]
    flavor = queue.flavors[0].flavor if queue.flavors else ""
    holds_quota = bool(ctx.tree.shortfall(q, request_demand(job, flavor)))
    lo, hi = 0, len(ends)
    if not fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    placements = fits(lo)
    start = now_s if lo == 0 else max(
        now_s, ends[lo - 1].start_s + ctx.runtimes.at_most(ends[lo - 1].job))
    rows = np.unique(np.array([snap.table.row(pl.node) for pl in placements], np.int64))
    return Reservation(job.id, rows, start, q, holds_quota)


# -- provisioning admission checks ------------------------------------------------------------


def _checks_first(ctx: Context, snap: Snapshot, now_s: float, result: CycleResult) -> None:
    """Step 0, for queues with a provisioning admission check:

    a. requests deleted since the last cycle are passed on; bookings past their expiry expire;
    b. jobs whose request failed, expired or was revoked release their quota and back off
       (or are rejected when their retries are spent); jobs whose request is Provisioned are
       Ready;
    c. jobs whose backoff is over go back to their queue;
    d. Ready jobs start on their nodes, the booking that expires first first.
    """
    ac = ctx.checks
    assert ac is not None
    result.deprovision.extend(ac.outbox)                                    # a.
    ac.outbox.clear()
    for expired in ac.book.expire(now_s):
        if ac.record_of(expired.key) is None:
            result.deprovision.append(expired.key)  # nobody waits for it: its nodes may go
    for rec in list(ac.records.values()):                                   # b.
        if not rec.request or rec.state not in (CheckState.PENDING, CheckState.READY):
            continue
        req = ac.book.find(rec.request)
        if req is None:
            _check_failed(ctx, rec, f"ProvisioningRequest {rec.request} was deleted", now_s,
                          result)
        elif req.ended:
            kind = next(k for k in (ConditionType.FAILED, ConditionType.BOOKING_EXPIRED,
                                    ConditionType.CAPACITY_REVOKED) if req.is_true(k))
            cond = req.condition(kind)
            why = f"{cond.reason}: {cond.message}" if cond is not None else kind.value
            _check_failed(ctx, rec, f"ProvisioningRequest {req.key} {kind.value} ({why})",
                          now_s, result)
        elif req.provisioned_s is not None and rec.state is CheckState.PENDING:
            rec.state = CheckState.READY
            rec.message = (f"ProvisioningRequest {req.key} Provisioned at "
                           f"t={req.provisioned_s:.0f}s on {len(req.nodes)} nodes; booked until "
                           f"t={(req.booking_expires_s or 0.0):.0f}s")
    for rec in list(ac.records.values()):                                   # c.
        if rec.state is CheckState.RETRY and rec.retry_at_s <= now_s:
            rec.state = CheckState.PENDING
            rec.message = f"retry {rec.attempts} of {rec.check.config.retry.backoff_limit_count}:" \
                          " queued for quota again"
            ctx.queues.add(rec.job, preemptions=rec.preemptions)
    ready = [r for r in ac.records.values() if r.state is CheckState.READY]   # d.
    ready.sort(key=lambda r: (ac.book.get(r.request).booking_expires_s or 0.0, r.request))
    for rec in ready:
        _start_booked(ctx, snap, rec, now_s, result)


def _check_failed(ctx: Context, rec: CheckRecord, why: str, now_s: float,
                  result: CycleResult) -> None:
    """The job's request will not serve it: quota released, request deleted, and the job
    queued again after the backoff, or rejected when its retries are spent."""
    ac = ctx.checks
    assert ac is not None
    if rec.demand:
        ctx.tree.add(rec.queue, rec.demand, -1)
        rec.demand = {}
        ctx.queues.wake()
    if rec.request:
        if rec.request in ac.book:
            ac.book.delete(rec.request)
        result.deprovision.append(rec.request)
        rec.request = ""
    retry = rec.check.config.retry
    if rec.attempts > retry.backoff_limit_count:
        rec.state = CheckState.REJECTED
        rec.message = (f"{why}; rejected after {rec.attempts} ProvisioningRequests "
                       f"(backoffLimitCount {retry.backoff_limit_count})")
        result.parks.append(Park(rec.job.id, Status(Code.UNRESOLVABLE, (ac.status(rec),))))
        return
    rec.state = CheckState.RETRY
    rec.retry_at_s = now_s + retry.delay_s(rec.attempts)
    rec.message = (f"{why}; quota released, retry {rec.attempts} of "
                   f"{retry.backoff_limit_count} at t={rec.retry_at_s:.0f}s")
    result.parks.append(Park(rec.job.id, Status(Code.WAIT, (ac.status(rec),))))


def _request_capacity(ctx: Context, snap: Snapshot, p: Pending, now_s: float,
                      result: CycleResult) -> bool:
    """Step 3 for a job of a queue with a provisioning check: take a booking its queue's
    former jobs left (the one that expires first), or reserve quota and make a request.
    True only when the job was admitted on such a booking."""
    ac = ctx.checks
    assert ac is not None
    job, q = p.job, p.queue
    check = ac.check_for(q)
    assert check is not None
    rec = ac.records.get(job.id)
    if rec is None:
        rec = ac.records[job.id] = CheckRecord(job, q, check, ac.namespace(job),
                                               preemptions=p.preemptions)
    queue = ctx.tree.queues[q]
    flavors = [fq.flavor for fq in queue.flavors] or [""]
    for req in ac.orphans(q):
        placements, _ = place_job(req.pinned(job), snap, ctx.profile)
        if not placements:
            continue
        flavor = next((f for f in flavors if not ctx.tree.shortfall(
            q, placement_demand(placements, f, snap.table))), None)
        if flavor is None:
            continue
        rec.request, rec.flavor, rec.state = req.key, flavor, CheckState.READY
        rec.message = f"took the booking of ProvisioningRequest {req.key}"
        ctx.queues.remove(job.id)
        return _start_booked(ctx, snap, rec, now_s, result)
    reasons: list[str] = []
    chosen: tuple[str, Vec] | None = None
    for f in flavors:
        demand = request_demand(job, f)
        short = ctx.tree.shortfall(q, demand)
        if not short:
            chosen = (f, demand)
            break
        reasons.extend(short)
    if chosen is None:
        status = Status(Code.UNSCHEDULABLE, ("; ".join(reasons),))
        ctx.queues.park(job.id, status)
        result.parks.append(Park(job.id, status))
        return False
    if ac.book.at_limit(rec.namespace):
        status = Status(Code.UNSCHEDULABLE, (
            f"project {rec.namespace} has {ac.book.active(rec.namespace)} active "
            f"ProvisioningRequests, the most allowed ({ac.book.max_active_per_project}); "
            "waiting for one to end",))
        ctx.queues.park(job.id, status)
        result.parks.append(Park(job.id, status))
        return False
    flavor, demand = chosen
    fj = flavor_job(job, ctx.tree.flavors.get(flavor)) or job
    ctx.tree.add(q, demand)
    req = ac.request_for(rec, fj.pod_sets, now_s)
    rec.flavor, rec.demand, rec.request, rec.state = flavor, demand, req.key, CheckState.PENDING
    rec.message = (f"quota reserved; ProvisioningRequest {req.key} made (attempt "
                   f"{rec.attempts} of {1 + check.config.retry.backoff_limit_count})")
    ctx.queues.remove(job.id)
    result.provision.append(req)
    result.parks.append(Park(job.id, Status(Code.WAIT, (ac.status(rec),))))
    return False


def _start_booked(ctx: Context, snap: Snapshot, rec: CheckRecord, now_s: float,
                  result: CycleResult) -> bool:
    """Admit a Ready job on its request's nodes (its pods pinned there), all or nothing; its
    run limit becomes what is left of the request's maxRunDurationSeconds."""
    ac = ctx.checks
    assert ac is not None
    req = ac.book.get(rec.request)
    placements, status = place_job(req.pinned(rec.job), snap, ctx.profile)
    if not placements:
        rec.message = (f"ProvisioningRequest {req.key} is Provisioned but its nodes cannot "
                       f"hold the job yet: {status.message}")
        return False
    demand = placement_demand(placements, rec.flavor, snap.table)
    job = rec.job
    ends = req.run_ends_s
    if ends is not None:
        left = max(0.0, ends - now_s)
        if job.run_limit_s is None or left < job.run_limit_s:
            job = replace(job, run_limit_s=left)
    for pl in placements:
        snap.assume(pl)
        ctx.state.assume(pl)
    if rec.demand:
        ctx.tree.add(rec.queue, rec.demand, -1)
    ctx.tree.add(rec.queue, demand)
    charge = _dominant(ctx.tree, rec.queue, demand) * ctx.runtimes(job)
    ctx.ledger.charge(rec.queue, job.user, charge, now_s)
    ctx.running[job.id] = Running(job, rec.queue, rec.flavor, tuple(placements), demand, now_s,
                                  rec.preemptions, charge)
    ctx.runtimes.started(job, now_s)
    ac.book.consume(req.key, now_s)
    ac.booked[job.id] = req.key
    ac.submitted[job.id] = rec.job
    del ac.records[job.id]
    result.binds.append(Bind(job.id, tuple(placements), rec.queue, rec.flavor))
    return True
