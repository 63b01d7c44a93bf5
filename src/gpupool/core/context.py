"""What the queue-aware cycle reads and changes (``Context``, owned by ``Scheduler``), and the
two moves every mode makes the same way: a job starts running (``start``) and a running job
lets go of what it holds (``release``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpupool.core.admission import QuotaTree, Vec
from gpupool.core.arrivals import Arrivals
from gpupool.core.cluster import ClusterState
from gpupool.core.fairshare import ShareHistory, UsageLedger
from gpupool.core.model import Job, JobId, Placement
from gpupool.core.placement.framework import Profile
from gpupool.core.preemption import Running
from gpupool.core.queueing import Queues
from gpupool.core.quota import QueueSettings
from gpupool.core.runtimes import Runtimes
from gpupool.core.snapshot import Reservation, Snapshot
from gpupool.core.usage import LoadModel

if TYPE_CHECKING:
    from gpupool.core.cycle_owed import Owed
    from gpupool.core.provisioning import AdmissionChecks

SHARE_HALF_LIFE_S = 3600.0
"""How long a queue's past share counts in the fair order (it halves every hour): long
enough to even out gangs that run for an hour or two, short enough that a queue idle this
morning banks nothing for the afternoon."""


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
    held: dict[str, Vec] = field(default_factory=dict)
    """Per queue, the quota its preemptors of this cycle will take when they bind in the
    next: its later jobs of the cycle are judged as if it were taken."""
    owed: Owed | None = None
    """During a cycle's fair order, the quota owed to waiting queues (``core/cycle_owed.py``):
    other queues' jobs do not borrow it. None outside it."""
    usage: LoadModel | None = None
    """Measured use of the cards (``core.usage``); None places by requests alone."""


def dominant(ctx: Context, q: str, demand: Vec) -> float:
    """The weighted share ``demand`` stands for in queue ``q`` (what a user is charged per
    second of it)."""
    return weighted_share(ctx.tree, q, demand)


def weighted_share(tree: QuotaTree, q: str, demand: Vec) -> float:
    ent = tree.entitled(q)
    return max((v / ent[k] for k, v in demand.items() if ent.get(k, 0) > 0), default=0.0)


def start(
    ctx: Context,
    snap: Snapshot,
    job: Job,
    q: str,
    flavor: str,
    placements: Sequence[Placement],
    demand: Vec,
    now_s: float,
    preemptions: int,
    alternative: str = "",
) -> Running:
    """A job starts: its placements are assumed (in the cycle's snapshot and in the state),
    its demand charged to its queue's quota, its expected use charged to its user, and it is
    running from ``now_s`` (in the form ``alternative`` names, "" its own request)."""
    held = tuple(placements)
    for pl in held:
        snap.assume(pl)
        ctx.state.assume(pl)
    ctx.tree.add(q, demand)
    charge = weighted_share(ctx.tree, q, demand) * ctx.runtimes(job)
    ctx.ledger.charge(q, job.user, charge, now_s)
    r = ctx.running[job.id] = Running(
        job, q, flavor, held, demand, now_s, preemptions, charge, alternative
    )
    ctx.runtimes.started(job, now_s)
    if ctx.reservation is not None and ctx.reservation.job == job.id:
        ctx.reservation = None
        snap.reservation = None
    return r


def release(
    ctx: Context, job: JobId, now_s: float, snap: Snapshot | None = None, wake: bool = True
) -> Running:
    """Free what a running job holds (it ended, was cancelled or evicted) and wake the
    parked jobs that the freed capacity could help (not for an eviction inside a cycle: the
    room is held for the preemptor, and waking would offer the victim its place back)."""
    r = ctx.running.pop(job)
    ctx.runtimes.stopped(r.job, r.start_s)
    for pl in r.placements:
        ctx.state.forget(pl.task)
        if snap is not None:
            snap.forget(pl)
        if ctx.usage is not None:  # it still shows in the samples until the next one
            ctx.usage.released(pl, now_s)
    ctx.tree.add(r.queue, r.demand, -1)
    used = weighted_share(ctx.tree, r.queue, r.demand) * max(0.0, now_s - r.start_s)
    ctx.ledger.charge(r.queue, r.job.user, used - r.charge, now_s)
    # Freed quota helps the queue's cohort tree; freed nodes help any queue whose flavors
    # cover them, which is every queue in general: wake them all.
    if wake:
        ctx.queues.wake()
    return r
