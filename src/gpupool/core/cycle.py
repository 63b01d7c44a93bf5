"""run_cycle(): the only place the steps of a scheduling cycle are sequenced."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Set

from gpupool.core import fungibility, lending, preemption
from gpupool.core.admission import Fit, request_demand, try_admit
from gpupool.core.cluster import ClusterState
from gpupool.core.context import (
    SHARE_HALF_LIFE_S,
    Context,
    dominant,
    release,
    start,
    weighted_share,
)
from gpupool.core.cycle_owed import Owed
from gpupool.core.cycle_reserve import reserve
from gpupool.core.cycle_turn import alone, alone_queues, borrowing_turn, gpus, over_share_s
from gpupool.core.decisions import Bind, CycleResult, Evict, Hold, Park
from gpupool.core.model import ClusterQueueName, Job, JobId
from gpupool.core.placement.framework import Code, Profile, Status
from gpupool.core.placement.place import place_job
from gpupool.core.provisioning import admit
from gpupool.core.queueing import AdmissionOrder, Pending
from gpupool.core.quota import QueueingStrategy
from gpupool.core.reasons import Step, step
from gpupool.core.snapshot import Snapshot

__all__ = [
    "SHARE_HALF_LIFE_S",
    "Context",
    "admission_order",
    "alone",
    "alone_queues",
    "borrowing_turn",
    "dominant",
    "fair_key",
    "over_share_s",
    "release",
    "request_share",
    "run_cycle",
    "schedule",
]


def run_cycle(state: ClusterState, pending: Iterable[Job], profile: Profile) -> CycleResult:
    """Placement only, no queues: places ``pending`` jobs in the order given; each sees the
    ones placed before it. ``schedule`` below is the cycle with quotas and fair sharing.

    Decisions come out; nothing is bound here. Placements are assumed in ``state`` at once,
    so the adapter confirms or forgets each after its bind.
    """
    snap = state.snapshot()  # 1. one consistent view
    result = CycleResult(cycle=state.next_cycle())
    for job in pending:  # 2. in the queue's order
        placements, status = place_job(job, snap, profile)  # 3. filter -> score -> cards
        if not placements:
            result.parks.append(Park(job.id, status))  # 4. parked, with the reason
            continue
        for p in placements:  # 5. reserve: the whole gang
            snap.assume(p)
            state.assume(p)
        result.binds.append(Bind(job.id, tuple(placements)))  # 6. the adapter binds
    return result


# -- the queue-aware cycle ---------------------------------------------------------------------


def schedule(ctx: Context, now_s: float) -> CycleResult:
    """One admission cycle: many jobs per cycle, queues in weighted-fair order.

    1. one snapshot; room held for a reserved gang stays held;
    2. preemptors whose victims are gone first, then queues by lowest weighted dominant share
       (a heap, re-keyed after each admission), each queue's jobs by priority, user usage, age;
    3. quota and flavor, then placement (all-or-nothing), then quota with what was placed;
    4. on no fit: preemption (minimal victims; the room is held, the job binds next cycle);
    5. otherwise a large gang gets a reservation (backfill), and the job is parked with reasons;
    6. admitted jobs are assumed in the state and charged to quota and to their user.

    Queues with a provisioning admission check take step 0 first (``admit.settle``), and in
    step 3 their jobs reserve quota and get a ProvisioningRequest instead of a placement
    (``admit.request_capacity``); see ``gpupool.core.provisioning``.
    """
    snap = ctx.state.snapshot()  # 1.
    snap.now_s = now_s
    for q in ctx.queues.queues():
        ctx.history.advance(q, now_s)
    if ctx.reservation is not None and not _next_in_fair_order(
        ctx, ctx.reservation.queue, now_s, _held_for(ctx)
    ):
        ctx.reservation = None  # its queue is no longer first in the fair order: room freed
    snap.reservation = ctx.reservation
    snap.load = ctx.usage.view(snap.table, now_s) if ctx.usage is not None else None
    result = CycleResult(cycle=ctx.state.next_cycle())
    if ctx.checks is not None:
        admit.settle(ctx, ctx.checks, snap, now_s, result)  # 0.
    failed: dict[Hashable, Status] = {}
    # Per queue, the highest priority whose preemption attempt found no victim set this
    # cycle: a job of that queue with no higher priority would find none either.
    no_victims: dict[str, int] = {}
    nominated = [ctx.queues.get(j) for j in ctx.nominated]
    ctx.nominated = []
    for p in nominated:
        if p is not None:
            _try(ctx, snap, p, now_s, result, failed, no_victims, preempt=False)
    order = admission_order(ctx, now_s)  # 2.
    ctx.held = {}
    ctx.owed = Owed(ctx, now_s, lambda q: fair_key(ctx, q))
    try:
        while (p := order.next()) is not None:
            order.offered(_try(ctx, snap, p, now_s, result, failed, no_victims, preempt=True))
    finally:
        ctx.owed = None
    ctx.held = {}
    solo = alone_queues(ctx, ctx.queues.queues())
    for q in ctx.queues.queues():
        ctx.history.hold(
            q, ctx.tree.share(q), now_s, waiting=ctx.queues.has_pending(q), alone=q in solo
        )
    if ctx.usage is not None:  # what was placed counts by its request until it shows
        for b in result.binds:
            for pl in b.placements:
                ctx.usage.placed(pl, now_s)
    return result


BORROWING_KEY = 1e6
"""Added to the fair key of a queue at or above its nominal quota: such queues come after
every queue still below it (see ``fair_key``)."""


def fair_key(ctx: Context, q: str) -> float:
    """A queue's place in the fair order: its weighted share now plus the share it held
    lately (``ShareHistory``); lowest first. A queue below its nominal quota goes before every
    queue that would borrow (Kueue orders entries that fit nominal quota before borrowing
    ones): capacity a queue is guaranteed goes back to it when it frees, instead of being lent
    to a queue with banked credit and reclaimed from it a minute later."""
    key = ctx.tree.share(q) + ctx.history.average(q)
    return key if ctx.tree.below_nominal(q) else key + BORROWING_KEY


def admission_order(
    ctx: Context,
    now_s: float,
    active_only: bool = True,
    only: Set[JobId] | None = None,
    ahead: Mapping[str, float] | None = None,
) -> AdmissionOrder:
    """The cycle's order of pending jobs (see ``AdmissionOrder``); the wait estimator walks
    the same order on its forecast (``only``: the jobs it still has to place; ``ahead``: share
    to add to a queue's key for jobs counted as admitted without being placed)."""
    strict = frozenset(
        q
        for q, cq in ctx.tree.queues.items()
        if cq.queueing_strategy is QueueingStrategy.STRICT_FIFO
    )
    extra = ahead if ahead is not None else {}
    return AdmissionOrder(
        ctx.queues,
        ctx.queues.queues(),
        lambda q: fair_key(ctx, q) + extra.get(q, 0.0),
        now_s,
        strict=strict,
        active_only=active_only,
        only=only,
    )


def request_share(ctx: Context, q: str, job: Job) -> float:
    """The weighted share a job's request adds to its queue (before placement)."""
    queue = ctx.tree.queues[q]
    flavor = queue.flavors[0].flavor if queue.flavors else ""
    return weighted_share(ctx.tree, q, request_demand(job, flavor))


def _try(
    ctx: Context,
    snap: Snapshot,
    p: Pending,
    now_s: float,
    result: CycleResult,
    failed: dict[Hashable, Status],
    no_victims: dict[str, int],
    preempt: bool,
) -> bool:
    job, q = p.job, p.queue
    if ctx.checks is not None and ctx.checks.check_for(q) is not None:
        return admit.request_capacity(ctx, ctx.checks, snap, p, now_s, result)
    res = ctx.reservation
    if (
        res is not None
        and res.holds_quota
        and res.queue == q
        and not res.admits(job.id, job.run_limit_s, now_s)
    ):
        status = Status(
            Code.UNSCHEDULABLE,
            (
                step(
                    Step.HOLD,
                    f"waiting behind gang {res.job} of queue {q}, which holds room from "
                    f"t={res.start_s:.0f}s (a job with a run limit ending before then may "
                    "backfill)",
                ),
            ),
        )
        ctx.queues.park(job.id, status)
        result.parks.append(Park(job.id, status))
        return False
    turn = borrowing_turn(ctx, q, job, now_s)
    if turn is not None:  # not parked: its turn comes with time alone
        status = Status(Code.UNSCHEDULABLE, (step(Step.QUOTA, turn),))
        ctx.queues.note(job.id, status)
        result.parks.append(Park(job.id, status))
        return False
    owed = ctx.owed.blocks_request(q, job) if ctx.owed is not None else None
    if owed is not None:  # 3. quota owed to a queue ahead of this one: not even placed
        status = Status(Code.UNSCHEDULABLE, (step(Step.QUOTA, owed),))
        ctx.queues.park(job.id, status)
        result.parks.append(Park(job.id, status))
        return False
    if preempt and ctx.tree.queues[q].fungibility.searches_with_preemption:
        choice, status = fungibility.choose(  # 3. and 4.
            job,
            q,
            ctx.tree,
            snap,
            ctx.profile,
            failed,
            lambda only: _plan(ctx, snap, job, q, now_s, no_victims, only),
        )
        if choice is not None and not choice.victims:
            return _admit_unless_reclaimed(ctx, snap, p, choice.fit, now_s, result)  # 6.
        if choice is not None:
            _preempt(
                ctx,
                snap,
                job,
                q,
                list(choice.victims),
                choice.fit,
                now_s,
                result,
                failed,
                no_victims,
            )
            return False
    else:
        fit, status = try_admit(job, q, ctx.tree, snap, ctx.profile, failed)  # 3.
        if fit is not None:
            return _admit_unless_reclaimed(ctx, snap, p, fit, now_s, result)  # 6.
        if preempt and status.code is not Code.UNRESOLVABLE:  # 4.
            planned = _plan(ctx, snap, job, q, now_s, no_victims)
            if planned is None:
                no_victims[q] = max(job.priority, no_victims.get(q, -(1 << 62)))
            else:
                _preempt(
                    ctx, snap, job, q, planned[0], planned[1], now_s, result, failed, no_victims
                )
                return False
    if (
        ctx.reservation is None
        and gpus(job) >= ctx.reserve_min_gpus
        and _next_in_fair_order(ctx, q, now_s, job)
    ):
        kept, snap.reservation = snap.reservation, None  # room kept from a gang that started
        ctx.reservation = reserve(ctx, snap, p, now_s)  # 5.
        snap.reservation = kept
        if ctx.reservation is not None:
            snap.reservation = ctx.reservation
            result.holds.append(
                Hold(
                    job.id,
                    tuple(snap.table.nodes[int(r)].name for r in ctx.reservation.rows),
                    ctx.reservation.start_s,
                )
            )
    ctx.queues.park(job.id, status)
    result.parks.append(Park(job.id, status))
    return False


def _admit_unless_reclaimed(
    ctx: Context, snap: Snapshot, p: Pending, fit: Fit, now_s: float, result: CycleResult
) -> bool:
    """Admits ``p`` with ``fit`` unless the quota it would borrow is owed to a waiting queue
    ahead of it (``cycle_owed``) or is its lender's again soon (``lending.reclaimed_soon``):
    then it is parked with that reason. True when admitted."""
    owed = ctx.owed.blocks(p.queue, fit.demand) if ctx.owed is not None else None
    soon = owed or lending.reclaimed_soon(ctx, p, fit, now_s)
    if soon is None:
        _admit(ctx, snap, p, fit, now_s, result)
        return True
    status = Status(Code.UNSCHEDULABLE, (step(Step.QUOTA, soon),))
    ctx.queues.park(p.job.id, status)
    result.parks.append(Park(p.job.id, status))
    return False


def _plan(
    ctx: Context,
    snap: Snapshot,
    job: Job,
    q: str,
    now_s: float,
    no_victims: dict[str, int],
    only: tuple[str, str] | None = None,
) -> tuple[list[preemption.Victim], Fit] | None:
    """The minimal victim set that lets ``job`` fit (in ``only``'s flavor and form when
    given), or None; nothing is changed."""
    if job.priority <= no_victims.get(q, -(1 << 62)):
        return None  # a job of this queue with no lower priority found none this cycle
    lately = ctx.history.averages()
    held = ctx.held.get(q)
    cands = preemption.candidates(
        job, q, ctx.tree, ctx.running, ctx.settings, now_s, ctx.preempted_by, lately, held, only
    )
    if ctx.checks is not None:  # jobs on provisioned nodes free nothing others could use
        cands = [v for v in cands if ctx.checks.booking_of(v.running.job.id) is None]
    return preemption.plan(job, q, ctx.tree, snap, ctx.profile, cands, lately, held, only)


def _preempt(
    ctx: Context,
    snap: Snapshot,
    job: Job,
    q: str,
    victims: list[preemption.Victim],
    fit: Fit,
    now_s: float,
    result: CycleResult,
    failed: dict[Hashable, Status],
    no_victims: dict[str, int],
) -> None:
    """Evicts the victims and holds the room (and the quota) for ``job``, which binds once
    they are gone."""
    for v in victims:
        _evict(ctx, snap, v, job.id, now_s, result)
    for pl in fit.placements:
        snap.assume(pl)  # the room is held for the preemptor this cycle
    # And its quota, for its own queue's later jobs: else the next one still looks
    # within nominal and reclaims again, past the nominal quota.
    mine = ctx.held.setdefault(q, {})
    for k, amount in fit.demand.items():
        mine[k] = mine.get(k, 0) + amount
    if ctx.owed is not None:
        ctx.owed.changed(q)
    ctx.nominated.append(job.id)
    failed.clear()
    no_victims.clear()
    ctx.queues.note(
        job.id,
        Status(Code.WAIT, (step(Step.PREEMPTION, f"preempting {len(victims)} job(s) to start"),)),
    )


def _held_for(ctx: Context) -> Job | None:
    res = ctx.reservation
    p = ctx.queues.get(res.job) if res is not None else None
    return p.job if p is not None else None


def _next_in_fair_order(ctx: Context, q: str, now_s: float, job: Job | None = None) -> bool:
    """Whether queue ``q`` comes first in the fair order (lowest ``fair_key``) of the queues
    with pending jobs in its cohort tree, and it is ``job``'s turn if it would borrow
    (``borrowing_turn``). Only such a queue's gang may hold nodes for later:
    a reservation makes room that nobody else may take, so granting it to a queue above its
    share would let a large job buy capacity beyond the share by waiting (priority orders
    work inside the queue, it never buys room against other queues)."""
    if job is not None and borrowing_turn(ctx, q, job, now_s) is not None:
        return False
    mine = fair_key(ctx, q)
    root = ctx.tree.cohort_root(q)
    return all(
        mine <= fair_key(ctx, o)
        for o in ctx.queues.queues()
        if o != q and ctx.queues.has_pending(o) and ctx.tree.cohort_root(o) == root
    )


def _admit(
    ctx: Context, snap: Snapshot, p: Pending, fit: Fit, now_s: float, result: CycleResult
) -> None:
    job, q = p.job, p.queue
    ctx.queues.remove(job.id)
    held = (
        ctx.reservation if ctx.reservation is not None and ctx.reservation.job == job.id else None
    )
    if ctx.owed is not None:
        ctx.owed.changed(q)
    start(
        ctx,
        snap,
        job,
        q,
        fit.flavor,
        fit.placements,
        fit.demand,
        now_s,
        p.preemptions,
        fit.alternative,
    )
    if held is not None:
        # The room drained for the gang stays held for the rest of the cycle: when the gang
        # started elsewhere, its queue's next large job may be reserved on it next cycle.
        snap.reservation = held
    result.binds.append(Bind(job.id, fit.placements, q, fit.flavor, fit.alternative))


def _evict(
    ctx: Context,
    snap: Snapshot,
    v: preemption.Victim,
    preemptor: JobId,
    now_s: float,
    result: CycleResult,
) -> None:
    r = v.running
    release(ctx, r.job.id, now_s, snap=snap, wake=False)
    if ctx.owed is not None:
        ctx.owed.changed(r.queue)
    ctx.queues.add(r.job, preemptions=r.preemptions + 1)
    # Parked until the next event that frees capacity: not re-admitted in this same cycle.
    ctx.queues.park(
        r.job.id,
        Status(
            Code.UNSCHEDULABLE,
            (
                step(
                    Step.EVICTION,
                    f"evicted ({v.kind}) by {preemptor}; waiting to be admitted again",
                ),
            ),
        ),
    )
    ctx.preempted_by.setdefault(r.job.id, {})[preemptor] = now_s
    result.evicts.append(
        Evict(
            r.job.id,
            ClusterQueueName(r.queue),
            v.kind,
            preemptor,
            f"{v.kind}: preempted by {preemptor}",
        )
    )
