"""Wait estimates: where each pending job stands and when it is expected to start, and why.

A forecast run on a snapshot trial, from what the scheduler knows:

- each running job ends when what is left of its expected runtime has passed
  (``core.runtimes``: a declared duration, a learned runtime per queue and user, a run limit,
  or the default; for a learned runtime, the runs of each queue spread by the learned
  distribution of what is left of them (``spread_ends_by_queue``), else the mean residual
  life given how long the job has run), never past its run limit; a job past its expected
  end is not expected "next cycle" forever: it is given a tenth of its expected runtime more
  each time it is asked;
- pending jobs are offered in the **admission order of the cycle itself**
  (``cycle.admission_order``: queues by fairness key, jobs by priority, user usage and age;
  the share history in the key moves on with the forecast's clock), walked again at each
  expected end, against quota and cards, the jobs that start taking
  their place and ending in turn at their own expected end; a later job that fits earlier
  starts earlier (**backfill**), and a StrictFIFO head blocks its queue as in the cycle;
  a job the cycle has **parked** is offered from the first expected end on, not now: the
  cycle offers it again only on an event that could change its answer (an end, a quota
  change), never on time passing alone (a victim reaching its minimum runtime); at that
  end it may preempt, as the cycle it wakes for may;
- a gang holding a **reservation** keeps its nodes: others start there only within their
  run limit, as in the cycle;
- users are charged as the cycle charges them, so the users of a queue take turns in the
  forecast as they will: a job it starts for its expected runtime, a running job it ends for
  what that run is expected to have used in all (as the cycle's release charges what a run
  used);
- each queue that has been submitting steadily is expected to go on at its recent rate
  (``Arrivals``), so capacity a queue frees is not all forecast to go to others when its
  own next jobs, ahead of them in the fair order, will take it;
- a job whose queue is below its nominal quota and that fits only by taking borrowed
  capacity back starts by **preemption** (reclaim) where the cycle first offers it: at the
  next cycle, or for a parked job at the end that wakes it.

The first ``limit`` jobs of the order get a time, each with the basis it rests on; the rest
a position only. A job whose admission waits on an active ProvisioningRequest is out of the
order: it starts when the cloud provisions its capacity (``core.estimate_provisioning``).

It is a forecast, not a promise: the scenario simulator measures its error.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpupool.core import lending, preemption
from gpupool.core.admission import Fit, Vec, try_admit
from gpupool.core.cycle_owed import Owed
from gpupool.core.forecast_walk import Books, admit_by_walk, walks_flavors
from gpupool.core.lending import ForecastView
from gpupool.core.model import Job, JobId, Placement
from gpupool.core.placement.framework import Code, Status
from gpupool.core.runtimes import Dist

if TYPE_CHECKING:
    from collections.abc import Hashable, Set

    from gpupool.core.cycle import Context
    from gpupool.core.preemption import Running
    from gpupool.core.queueing import Pending
    from gpupool.core.snapshot import Snapshot

MAX_STEPS = 400
"""Expected ends walked at most per forecast: enough for a day of a busy cluster."""

MISSES_PER_STEP = 24
"""At one time step, a queue is passed over for the rest of the step after this many of its
jobs in a row did not fit: room freed by one end rarely helps its jobs further down once that
many could not use it. Other queues' jobs are still offered, as the cycle offers every
queue's (a walk that stopped altogether left them to later steps)."""

HORIZON_PAST_ENDS_S = 3600.0
"""Expected arrivals are added up to an hour past the last expected end of a running job."""

SAME_TIME_S = 30.0
"""Expected ends this close together are taken as one step (the cycle runs on an interval
anyway)."""


GOLDEN = 0.6180339887498949
"""The golden ratio's fraction: ``k * GOLDEN mod 1`` spreads quantiles evenly for any k."""


@dataclass(frozen=True, slots=True)
class Estimate:
    position: int  # in the admission order, 0 first
    start_s: float | None  # None: beyond the jobs timed, or no start foreseen
    basis: str  # what the time rests on, one sentence


@dataclass(slots=True)
class _End:
    at_s: float
    job: JobId
    queue: str
    placements: tuple[Placement, ...]
    demand: Vec
    basis: str
    user: str
    used_s: float | None  # how long the run is expected to have run in all; None: as charged
    charge: float  # what its user was charged at its start, for its expected runtime


def _ending(ctx: Context, now_s: float) -> list[tuple[float, int, _End]]:
    out = []
    spread: list[tuple[int, Running, Dist]] = []
    for i, r in enumerate(ctx.running.values()):
        res = ctx.runtimes.residuals(r.job, now_s - r.start_s, now_s)
        if res is not None:
            spread.append((i, r, res))
            continue
        left = ctx.runtimes.remaining(r.job, now_s - r.start_s, now_s)
        at = now_s + left.runtime_s
        used = now_s - r.start_s + left.runtime_s
        out.append(
            (at, i, _End(at, r.job.id, r.queue, r.placements, r.demand, left.basis, *_who(r, used)))
        )
    # Spread queue by queue: each queue's k-th end of its n at the time by which k - 1/2 of
    # its own runs are expected to have ended (see ``spread_ends_by_queue``).
    lefts = spread_ends_by_queue([(r.queue, res) for _, r, res in spread])
    for (i, r, res), left_s in zip(spread, lefts, strict=True):
        at = now_s + left_s
        basis = f"{ctx.runtimes.expected(r.job, now_s).basis}, spread by its recent runtimes"
        # Charged for its expected use (its age and mean residual), not for the end the
        # spread gives it: which of a crowd of runs ends first is a guess, what each is
        # expected to use is not.
        used = now_s - r.start_s + sum(x * w for x, w in res)
        out.append(
            (at, i, _End(at, r.job.id, r.queue, r.placements, r.demand, basis, *_who(r, used)))
        )
    heapq.heapify(out)
    return out


def _who(r: Running, used_s: float) -> tuple[str, float, float]:
    """A running job's user, expected use and charge, for its ``_End``."""
    return r.job.user, used_s, r.charge


def spread_ends_by_queue(runs: list[tuple[str, Dist]]) -> list[float]:
    """``spread_ends`` over each queue's runs apart (``runs``: queue and residual per run),
    in the order given. Spread over all queues at once, the earliest ends go to the runs
    with the shortest median residual whichever queue they run in, so a queue whose learned
    runtimes are a little longer than another's has every run of it end after the other's
    runs of the same age: the forecast gives it its ends (and, as each queue below its
    nominal quota takes back what ends in it, its starts) steadily late, and the other's
    early. Apart, each queue's count of ends by any time is the one its runs are expected
    to reach."""
    by_queue: dict[str, list[int]] = {}
    for i, (q, _) in enumerate(runs):
        by_queue.setdefault(q, []).append(i)
    out = [0.0] * len(runs)
    for idx in by_queue.values():
        for i, left_s in zip(idx, spread_ends([runs[i][1] for i in idx]), strict=True):
            out[i] = left_s
    return out


def spread_ends(residuals: list[Dist]) -> list[float]:
    """Forecast ends for runs whose remaining time is known only as a distribution (each
    run's (seconds, probability) points): the k-th end of n at the time by which k - 1/2
    ends are expected (the sum of the runs' distribution functions), the earliest ends given
    to the runs with the shortest median residual. Ending every run at its mean instead ends
    a crowd of them at one instant, and a job waiting for the first few of them is forecast
    far too late."""
    n = len(residuals)
    points = sorted(pt for r in residuals for pt in r)
    times: list[float] = []
    acc = 0.0
    for x, w in points:
        acc += w
        while len(times) < n and acc >= len(times) + 0.5:
            times.append(x)
    while len(times) < n:
        times.append(points[-1][0])

    def median(r: Dist) -> float:
        acc = 0.0
        for x, w in sorted(r):
            acc += w
            if acc >= 0.5:
                return x
        return max(r)[0]

    order = sorted(range(n), key=lambda i: (median(residuals[i]), i))
    out = [0.0] * n
    for t, i in zip(times, order, strict=True):
        out[i] = t
    return out


def estimate(ctx: Context, now_s: float, limit: int = 200) -> dict[JobId, Estimate]:
    """Position, expected start and its basis for every pending job (see the module)."""
    from gpupool.core.cycle import admission_order, request_share  # the cycle's own order

    snap = ctx.state.snapshot()
    snap.now_s = now_s
    snap.reservation = ctx.reservation
    # Positions: the order as it stands now, each job counted as admitted in turn (its
    # request added to its queue's share), as a cycle with room for all would take them.
    ahead: dict[str, float] = {}
    order = admission_order(ctx, now_s, active_only=False, ahead=ahead)
    positions: list[JobId] = []
    while (p := order.next()) is not None:
        positions.append(p.job.id)
        ahead[p.queue] = ahead.get(p.queue, 0.0) + request_share(ctx, p.queue, p.job)
        order.offered(True)
    timed = set(positions[:limit])
    out: dict[JobId, Estimate] = {
        j: Estimate(
            i,
            None,
            "no start foreseen within the forecast"
            if j in timed
            else "beyond the jobs the forecast times",
        )
        for i, j in enumerate(positions)
    }
    ends = _ending(ctx, now_s)
    seq = len(ends)
    horizon = max((e.at_s for _, _, e in ends), default=now_s) + HORIZON_PAST_ENDS_S
    coming = ctx.arrivals.expected(now_s, horizon)
    real_history, real_arrivals = ctx.history, ctx.arrivals
    ctx.history = real_history.copy()  # the forecast moves the fair order's history on
    ctx.arrivals = real_arrivals.copy()  # and takes in the arrivals it expects
    try:
        with ctx.queues.provisional(coming):
            return _forecast(ctx, snap, now_s, out, timed, ends, seq, coming)
    finally:
        ctx.history, ctx.arrivals = real_history, real_arrivals


def _forecast(
    ctx: Context,
    snap: Snapshot,
    now_s: float,
    out: dict[JobId, Estimate],
    timed: set[JobId],
    ends: list[tuple[float, int, _End]],
    seq: int,
    coming: list[Job],
) -> dict[JobId, Estimate]:
    """The walk over expected ends (see the module), with ``coming`` jobs pending from their
    expected arrival on."""
    from gpupool.core.cycle import admission_order, alone_queues, borrowing_turn, fair_key
    from gpupool.core.cycle import dominant as request_charge

    tree = ctx.tree
    charged: list[tuple[str, str, float]] = []
    left = set(timed)
    arrived: set[JobId] = set()
    nxt = 0
    gone: set[JobId] = set()  # running jobs the forecast evicts
    changes: list[tuple[str, Vec]] = []
    t, why = now_s, "fits now"
    steps = 0
    no_victims: dict[str, int] = {}
    # Jobs the cycle has parked: offered from the first expected end on, when that end wakes
    # them, and judged for preemption then, as the cycle will judge them.
    parked = {j for j in timed if (pj := ctx.queues.get(j)) is not None and pj.parked}
    drawn = 0
    try:
        with snap.trial():
            while left and steps < MAX_STEPS:
                steps += 1
                snap.now_s = t
                while nxt < len(coming) and coming[nxt].submit_time_s <= t:
                    _arrive(ctx, coming[nxt], t)
                    arrived.add(coming[nxt].id)
                    nxt += 1
                for q in ctx.queues.queues():  # the fair order's history moves on as well
                    ctx.history.advance(q, t)
                failed: dict[Hashable, Status] = {}
                # A job the cycle parked is offered again only on an event that could change
                # its answer (an end, a quota change): not now, where the cycle has just
                # parked it (or left it parked, a minimum runtime passing wakes nothing);
                # from the first end on, as every end wakes the parked jobs.
                walk = admission_order(ctx, t, active_only=t == now_s, only=left | arrived)
                if steps == 2:
                    no_victims = {}  # a new cycle: the first end woke the parked jobs
                waiting = _queues_of(ctx, left | arrived)
                # Quota owed to a waiting queue ahead in the fair order is not lent, as in
                # the cycle (``cycle_owed``); only the jobs still pending here count.
                pending = left | arrived
                owed = Owed(ctx, t, lambda q: fair_key(ctx, q), pending)
                misses: dict[str, int] = {}
                while (p := walk.next()) is not None:
                    if misses.get(p.queue, 0) >= MISSES_PER_STEP:
                        walk.offered(False)  # passed over for the rest of this step
                        continue
                    if (
                        borrowing_turn(  # the queue's runs end as this forecast ends them
                            ctx,
                            p.queue,
                            p.job,
                            t,
                            (
                                (e.at_s, e.demand)
                                for _, _, e in ends
                                if e.queue == p.queue and e.job not in gone
                            ),
                        )
                        is not None
                        or owed.blocks_request(p.queue, p.job) is not None
                    ):
                        misses[p.queue] = misses.get(p.queue, 0) + 1
                        walk.offered(False)
                        continue
                    # Preemption is judged where the cycle first offers the job: now, or
                    # for a parked job at the end that wakes it.
                    first = t == now_s or (steps == 2 and p.job.id in parked)
                    if (
                        first
                        and p.job.id in left
                        and walks_flavors(tree, p.queue)
                        and p.job.priority > no_victims.get(p.queue, -(1 << 62))
                    ):
                        fit, basis = admit_by_walk(
                            ctx, snap, p, t, Books(gone, changes, failed)
                        )  # as the cycle does: core/forecast_walk.py
                        basis = basis or why
                        status = Status.ok() if fit is not None else Status(Code.UNRESOLVABLE)
                        if fit is None:
                            no_victims[p.queue] = p.job.priority
                    else:
                        fit, status = try_admit(p.job, p.queue, tree, snap, ctx.profile, failed)
                        basis = why
                    if fit is not None and (
                        owed.blocks(p.queue, fit.demand) is not None
                        or lending.reclaimed_soon(ctx, p, fit, now_s, ForecastView(waiting, t))
                        is not None
                    ):
                        # The cycle does not borrow what is claimed back soon: judged as the
                        # cycle at ``t`` will judge it, on the streams as they will be then.
                        fit = None
                    if (
                        fit is None
                        and first
                        and p.job.id in left
                        and status.code is not Code.UNRESOLVABLE
                        and p.job.priority > no_victims.get(p.queue, -(1 << 62))
                    ):
                        fit, basis = _by_preemption(ctx, snap, p, t, gone, changes)
                        if fit is None:
                            no_victims[p.queue] = p.job.priority
                    if fit is None:
                        misses[p.queue] = misses.get(p.queue, 0) + 1
                        walk.offered(False)
                        continue
                    misses[p.queue] = 0
                    for pl in fit.placements:
                        snap.assume(pl)
                    tree.add(p.queue, fit.demand)
                    changes.append((p.queue, fit.demand))
                    # Charged to its user as the cycle does, so the users of a queue take
                    # turns in the forecast as they do in the cycles ahead.
                    exp = ctx.runtimes.expected(p.job, now_s)
                    charge = request_charge(ctx, p.queue, fit.demand) * ctx.runtimes(p.job)
                    # Runs started here end by the spread of the learned runtimes (quantiles
                    # in a low-discrepancy sequence), not all at their mean.
                    drawn += 1
                    run_s = ctx.runtimes.quantile(p.job, (drawn * GOLDEN) % 1.0, now_s)
                    if run_s is None:
                        run_s = exp.runtime_s
                    ctx.ledger.charge(p.queue, p.job.user, charge, now_s)
                    charged.append((p.queue, p.job.user, charge))
                    left.discard(p.job.id)
                    arrived.discard(p.job.id)
                    pending.discard(p.job.id)
                    owed.changed(p.queue)
                    waiting = _queues_of(ctx, left | arrived)
                    if ctx.reservation is not None and ctx.reservation.job == p.job.id:
                        snap.reservation = None
                    if p.job.id in out:
                        out[p.job.id] = replace(out[p.job.id], start_s=t, basis=basis)
                    seq += 1
                    heapq.heappush(
                        ends,
                        (
                            t + run_s,
                            seq,
                            _End(
                                t + run_s,
                                p.job.id,
                                p.queue,
                                fit.placements,
                                fit.demand,
                                f"{exp.basis}, started in this forecast",
                                p.job.user,
                                None,  # charged its expected runtime, its expected use
                                charge,
                            ),
                        ),
                    )
                    walk.offered(True)
                solo = alone_queues(ctx, ctx.queues.queues())
                for q in ctx.queues.queues():
                    ctx.history.hold(
                        q, tree.share(q), t, waiting=ctx.queues.has_pending(q), alone=q in solo
                    )
                # On to the next expected end: release every job ending by then.
                freed: list[_End] = []
                while ends and (not freed or ends[0][0] <= freed[0].at_s + SAME_TIME_S):
                    _, _, e = heapq.heappop(ends)
                    if e.job in gone:
                        continue
                    for pl in e.placements:
                        snap.release(pl)
                    tree.add(e.queue, e.demand, -1)
                    changes.append((e.queue, {k: -v for k, v in e.demand.items()}))
                    # As the cycle's release does: the user pays for what the run used, not
                    # for what was expected of it at its start, so the users of a queue
                    # take turns after a long or short run as they will in the cycles ahead.
                    if e.used_s is not None:
                        used = request_charge(ctx, e.queue, e.demand) * e.used_s
                        ctx.ledger.charge(e.queue, e.user, used - e.charge, now_s)
                        charged.append((e.queue, e.user, used - e.charge))
                    freed.append(e)
                    gone.add(e.job)  # ended here: no victim of a later preemption
                if not freed:
                    break
                t = freed[-1].at_s
                why = f"room freed when {freed[0].job} ends ({freed[0].basis})" + (
                    f", with {len(freed) - 1} more" if len(freed) > 1 else ""
                )
    finally:
        for q, d in reversed(changes):
            tree.add(q, d, -1)
        for q, user, charge in reversed(charged):
            ctx.ledger.charge(q, user, -charge, now_s)
    return out


def _arrive(ctx: Context, job: Job, t: float) -> None:
    """An expected arrival reaches the forecast at ``t``: it counts in its queue's stream
    from then on, as a real one would for the cycle's lending."""
    p = ctx.queues.get(job.id)
    if p is not None:
        ctx.arrivals.record(p.queue, job, t)


def _queues_of(ctx: Context, jobs: Set[JobId]) -> set[str]:
    """The queues with a job among ``jobs`` pending in the forecast."""
    out: set[str] = set()
    for j in jobs:
        p = ctx.queues.get(j)
        if p is not None:
            out.add(p.queue)
    return out


def _by_preemption(
    ctx: Context,
    snap: Snapshot,
    p: Pending,
    now_s: float,
    gone: set[JobId],
    changes: list[tuple[str, Vec]],
) -> tuple[Fit | None, str]:
    """What the cycle's post-filter would do now for a job that does not fit: the minimal
    victim set (lower-priority jobs of its queue, borrowed capacity of others). The victims
    leave the forecast; the job starts at once (after the victims' grace period, which the
    core does not know)."""
    lately = ctx.history.averages()
    cands = [
        v
        for v in preemption.candidates(
            p.job, p.queue, ctx.tree, ctx.running, ctx.settings, now_s, ctx.preempted_by, lately
        )
        if v.running.job.id not in gone
    ]
    planned = preemption.plan(p.job, p.queue, ctx.tree, snap, ctx.profile, cands, lately)
    if planned is None:
        return None, ""
    victims, fit = planned
    for v in victims:
        r = v.running
        gone.add(r.job.id)
        for pl in r.placements:
            snap.release(pl)
        ctx.tree.add(r.queue, r.demand, -1)
        changes.append((r.queue, {k: -d for k, d in r.demand.items()}))
    kinds = ", ".join(sorted({v.kind for v in victims}))
    return fit, f"preempting {len(victims)} job(s) ({kinds})"
