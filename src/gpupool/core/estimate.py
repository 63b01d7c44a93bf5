"""Wait estimates: where each pending job stands and when it is expected to start.

A shadow run on a snapshot trial: running jobs end at their expected times (the runtime
hint: declared run limit by default), and pending jobs are admitted in the order the cycle
would take them (queues by weighted share, jobs by priority, user usage, age), against quota
and cards. The first ``limit`` pending jobs get a time; the rest only a position. The shadow
run gives up trying further jobs at a time step after a few consecutive misses, so it stays
cheap; the estimate is therefore a forecast, not a promise (its error is measured by the
scenario simulator).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from gpupool.core.admission import Vec, request_demand, try_admit
from gpupool.core.model import JobId, Placement

if TYPE_CHECKING:
    from gpupool.core.cycle import Context

MISSES_PER_STEP = 5


def estimate_starts(ctx: Context, now_s: float,
                    limit: int = 200) -> dict[JobId, tuple[int, float | None]]:
    tree, snap = ctx.tree, ctx.state.snapshot()
    by_queue = {q: ctx.queues.ordered(q, now_s, active_only=False) for q in ctx.queues.queues()}
    # Global order: repeatedly the queue with the lowest share takes its next job; shares
    # are advanced with each job's request as the cycle would.
    order = []
    share = {q: tree.share(q) for q in by_queue}
    idx = dict.fromkeys(by_queue, 0)
    heap = [(share[q], q) for q, js in by_queue.items() if js]
    heapq.heapify(heap)
    while heap:
        s, q = heapq.heappop(heap)
        p = by_queue[q][idx[q]]
        idx[q] += 1
        order.append(p)
        if idx[q] < len(by_queue[q]):
            ent = tree.entitled(q)
            flavor = tree.queues[q].flavors[0].flavor if tree.queues[q].flavors else ""
            d = request_demand(p.job, flavor)
            s += max((v / ent[k] for k, v in d.items() if ent.get(k, 0) > 0), default=0.0)
            heapq.heappush(heap, (s, q))
    out: dict[JobId, tuple[int, float | None]] = {
        p.job.id: (i, None) for i, p in enumerate(order)}
    todo = order[:limit]
    ends: list[tuple[float, int, str, tuple[Placement, ...], Vec]] = []
    seq = 0
    for r in ctx.running.values():
        seq += 1
        heapq.heappush(ends, (max(now_s, r.start_s + ctx.runtime(r.job)), seq, r.queue,
                              r.placements, r.demand))
    changes: list[tuple[str, Vec]] = []
    t = now_s
    try:
        with snap.trial():
            while todo:
                misses = 0
                left = []
                for p in todo:
                    if misses >= MISSES_PER_STEP:
                        left.append(p)
                        continue
                    fit, _ = try_admit(p.job, p.queue, tree, snap, ctx.profile)
                    if fit is None:
                        misses += 1
                        left.append(p)
                        continue
                    for pl in fit.placements:
                        snap.assume(pl)
                    tree.add(p.queue, fit.demand)
                    changes.append((p.queue, fit.demand))
                    out[p.job.id] = (out[p.job.id][0], t)
                    seq += 1
                    heapq.heappush(ends, (t + ctx.runtime(p.job), seq, p.queue, fit.placements,
                                          fit.demand))
                todo = left
                if not todo or not ends:
                    break
                t, _, q, placements, demand = heapq.heappop(ends)
                for pl in placements:
                    snap.release(pl)
                tree.add(q, demand, -1)
                changes.append((q, {k: -v for k, v in demand.items()}))
    finally:
        for q, d in reversed(changes):
            tree.add(q, d, -1)
    return out
