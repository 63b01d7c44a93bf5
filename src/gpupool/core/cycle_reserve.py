"""Room held for a large job that cannot start: when and where it could start if running jobs
end as expected (the reservation the cycle's step 5 makes; backfill may use the room only
until then)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gpupool.core.admission import request_demand, try_admit
from gpupool.core.model import Placement
from gpupool.core.snapshot import Reservation, Snapshot

if TYPE_CHECKING:
    from gpupool.core.context import Context
    from gpupool.core.queueing import Pending


def reserve(ctx: Context, snap: Snapshot, p: Pending, now_s: float) -> Reservation | None:
    """When and where the gang could start if running jobs end as expected: release them in
    order of expected end (binary search on how many) until quota and cards both fit.

    A gang that would borrow (its queue is running jobs already: a second gang beside the
    first) is reserved room beside what its queue holds: its queue's own running jobs are
    not released in the search unless it cannot fit without them. Room its queue's own gang
    frees is its queue's anyway (below its nominal quota then, it comes first in the fair
    order); reserved there, the gang only ever replaces the one running, and a queue whose
    turn to borrow has come never borrows (issue 15: the top-priority gang team held 16 of
    its 24 GPUs for hours, each new gang reserved on the nodes of the one about to end)."""
    job, q = p.job, p.queue
    queue = ctx.tree.queues[q]
    flavor = queue.flavors[0].flavor if queue.flavors else ""
    by_end = sorted(
        ctx.running.values(), key=lambda r: (r.start_s + ctx.runtimes.at_most(r.job), r.job.id)
    )
    ends = by_end
    if ctx.tree.borrows(q, request_demand(job, flavor)):
        ends = [r for r in by_end if r.queue != q]

    def fits(k: int) -> tuple[Placement, ...]:
        with snap.trial():
            for r in ends[:k]:
                for pl in r.placements:
                    snap.forget(pl)
                ctx.tree.add(r.queue, r.demand, -1)
            try:
                fit = try_admit(job, q, ctx.tree, snap, ctx.profile)[0]
            finally:
                for r in ends[:k]:
                    ctx.tree.add(r.queue, r.demand, +1)
            return fit.placements if fit is not None else ()

    if len(ends) < len(by_end) and not fits(len(ends)):
        ends = by_end  # it needs its own queue's room too
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
    start = (
        now_s
        if lo == 0
        else max(now_s, ends[lo - 1].start_s + ctx.runtimes.at_most(ends[lo - 1].job))
    )
    rows = np.unique(np.array([snap.table.row(pl.node) for pl in placements], np.int64))
    return Reservation(job.id, rows, start, q, holds_quota)
