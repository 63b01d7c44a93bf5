"""The wait estimate's admission now for a queue that walks its flavors with preemption.

A queue whose ``flavorFungibility`` searches with preemption (``whenCanPreempt:
MayStopSearch`` or ``preference: PreemptionOverBorrowing``) is served by the flavor walk
(``core/fungibility.py``): an early flavor where the job would preempt can win over a later
one where it fits as it is. The estimate (``core/estimate.py``) otherwise takes the cheaper
two passes (every flavor without preemption, then preemption over all), which for such a
queue would foresee the job starting in the later flavor with no victims, and go on
forecasting from a cluster the cycle will not make. Here the job is walked as the cycle
walks it: the same candidates (running jobs the forecast has not already evicted), the same
stops and preference; when the walk preempts, the victims leave the forecast and the job
starts at once, as :func:`gpupool.core.estimate._by_preemption` takes them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpupool.core import fungibility, preemption
from gpupool.core.admission import Fit, QuotaTree, Vec
from gpupool.core.model import JobId
from gpupool.core.placement.framework import Status

if TYPE_CHECKING:
    from gpupool.core.cycle import Context
    from gpupool.core.queueing import Pending
    from gpupool.core.snapshot import Snapshot

__all__ = ["Books", "admit_by_walk", "walks_flavors"]


def walks_flavors(tree: QuotaTree, queue: str) -> bool:
    """Whether the cycle serves ``queue`` by the flavor walk with preemption."""
    return tree.queues[queue].fungibility.searches_with_preemption


@dataclass(frozen=True, slots=True)
class Books:
    """The forecast's own records, changed in place: running jobs it evicted, quota changes
    to undo, and the cycle's cache of placements that failed."""

    gone: set[JobId]
    changes: list[tuple[str, Vec]]
    failed: dict[Hashable, Status]


def admit_by_walk(
    ctx: Context, snap: Snapshot, p: Pending, now_s: float, books: Books
) -> tuple[Fit | None, str]:
    """The fit the walk chooses for ``p`` now, and the preemption it rests on ("" when it
    needs none); (None, "") when no flavor and form fits even by preempting. Victims of a
    preemption are released from ``snap`` and the quota tree (recorded in ``books.changes``,
    to be undone by the caller) and added to ``books.gone``."""
    gone, changes = books.gone, books.changes
    lately = ctx.history.averages()

    def plan(only: tuple[str, str]) -> tuple[list[preemption.Victim], Fit] | None:
        cands = [
            v
            for v in preemption.candidates(
                p.job,
                p.queue,
                ctx.tree,
                ctx.running,
                ctx.settings,
                now_s,
                ctx.preempted_by,
                lately,
                None,
                only,
            )
            if v.running.job.id not in gone
        ]
        return preemption.plan(
            p.job, p.queue, ctx.tree, snap, ctx.profile, cands, lately, None, only
        )

    choice, _ = fungibility.choose(p.job, p.queue, ctx.tree, snap, ctx.profile, books.failed, plan)
    if choice is None:
        return None, ""
    if not choice.victims:
        return choice.fit, ""
    for v in choice.victims:
        r = v.running
        gone.add(r.job.id)
        for pl in r.placements:
            snap.release(pl)
        ctx.tree.add(r.queue, r.demand, -1)
        changes.append((r.queue, {k: -d for k, d in r.demand.items()}))
    kinds = ", ".join(sorted({v.kind for v in choice.victims}))
    flavor = f" in flavor {choice.fit.flavor}" if choice.fit.flavor else ""
    return choice.fit, f"preempting {len(choice.victims)} job(s) ({kinds}){flavor}"
