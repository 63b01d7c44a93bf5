"""Quota owed to a waiting queue: nobody borrows what a queue ahead in the fair order, below
its nominal quota, is waiting for.

A queue below its nominal quota may always use it (nominal quota is guaranteed), and the fair
order offers its jobs first. That is not enough when its waiting job is larger than what frees
at a time, or does not fit the cards yet: a 2-GPU job of a queue 2 GPUs below its nominal
quota needs 2 GPUs of the cohort free at once, and two whole cards on one node. While it
waits, each piece of capacity that frees goes to whatever fits in it: a queue already over its
nominal quota, borrowing it in small slices that also keep the cards from ever coming free
whole. The owner is passed over at every cycle, and the borrower runs above its share for as
long as the owner's jobs are larger than the pieces (issue 15: a team flooding memory-heavy
slices took 2 points over its share while the other teams, below their nominal quota, waited
with whole-GPU jobs, and were then given their quota back by evicting the slices).

Kueue's scheduler keeps, for a workload that fits its queue's nominal quota but is not
admitted in the cycle, the part within that nominal quota from the entries after it (its
``resourcesToReserve``). Here the same holds across cycles: a queue with pending jobs that
fit within its unused nominal quota (per flavor and resource, each job counted in the first
flavor of its queue's order where it fits) is **owed** that quota (at most the unused part),
and quota its preemptors of the cycle hold counts as owed too. Jobs of ``reserve_min_gpus``
GPUs or more do not count: their room is held by a reservation on the nodes where they will
run (``cycle_reserve.reserve``); quota held for them as well would sit idle on every other node
(gang-vs-stream: utilisation 96 % to 88 %). A job of another queue may
borrow only what is left with the owed quota counted as used, and only an owner ahead of its
queue in the fair order (a lower ``cycle.fair_key``) is owed anything by it: a queue the order
would serve first anyway (a queue with large jobs whose turn to borrow has come, below its
share) is not held back by owners that have had more. A job within its own nominal quota is
never held back: only borrowing yields.

``Owed`` is one cycle's view, computed per queue when first asked and dropped for a queue
whose usage, pending jobs or held quota change (``changed``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from gpupool.core.admission import Key, Vec, request_demand
from gpupool.core.quota import Resource

if TYPE_CHECKING:
    from gpupool.core.context import Context
    from gpupool.core.model import Job, JobId


class Owed:
    """What each queue of the cycle is owed (see the module); ``key`` is the fair order's."""

    def __init__(
        self,
        ctx: Context,
        now_s: float,
        key: Callable[[str], float],
        pending: Collection[JobId] | None = None,
    ) -> None:
        self._ctx = ctx
        self._now_s = now_s
        self._key = key
        self._pending = pending
        self._of: dict[str, Vec] = {}

    def changed(self, queue: str) -> None:
        """``queue``'s usage, pending jobs or held quota changed: ask again next time."""
        self._of.pop(queue, None)

    def of(self, queue: str) -> Vec:
        """What ``queue`` is owed now (empty when nothing)."""
        got = self._of.get(queue)
        if got is None:
            got = self._of[queue] = owed(self._ctx, queue, self._now_s, self._pending)
        return got

    def claims(self, queue: str) -> dict[str, Vec]:
        """The owners that ``queue``'s borrowing must leave their quota to: the other queues
        of its cohort tree ahead of it in the fair order that are owed something."""
        tree = self._ctx.tree
        mine = self._key(queue)
        return {
            o: v
            for o in tree.cohort_queues(queue)
            if o != queue and self._key(o) < mine
            if (v := self.of(o))
        }

    def blocks(self, queue: str, demand: Mapping[Key, int]) -> str | None:
        """Why ``demand`` (of a job of ``queue``) would borrow owed quota, or None."""
        tree = self._ctx.tree
        if not tree.borrows(queue, demand):
            return None
        claims = self.claims(queue)
        if not claims:
            return None
        for o, v in claims.items():
            tree.add(o, v)
        try:
            short = tree.shortfall(queue, demand)
        finally:
            for o, v in claims.items():
                tree.add(o, v, -1)
        if not short:
            return None
        return (
            f"queue {queue} would borrow quota owed to {', '.join(sorted(claims))} (below "
            "nominal quota, ahead in the fair order, with jobs waiting that fit within it); "
            "waiting until that quota is used or more frees"
        )

    def blocks_request(self, queue: str, job: Job) -> str | None:
        """``blocks`` for the job's request alone, before placement: why it would borrow
        owed quota in every flavor of its queue, or None when some flavor may take it."""
        flavors = [fq.flavor for fq in self._ctx.tree.queues[queue].flavors] or [""]
        why = None
        for flavor in flavors:
            why = self.blocks(queue, request_demand(job, flavor))
            if why is None:
                return None
        return why


def owed(ctx: Context, q: str, now_s: float, pending: Collection[JobId] | None = None) -> Vec:
    """What queue ``q`` is owed now: per flavor and resource of its nominal quota, the demand
    of its pending jobs that fit within what it leaves unused there (each job counted in the
    first flavor of its queue where it fits), at most that unused quota; plus what its
    preemptors of this cycle hold. ``pending``, when given, are the only queued jobs that
    count as waiting (the wait estimate's forecast, whose started jobs stay queued)."""
    tree = ctx.tree
    nominal, usage = tree.nominal(q), tree.usage(q)
    held = ctx.held.get(q, {})
    unused = {
        k: v - usage.get(k, 0) - held.get(k, 0)
        for k, v in nominal.items()
        if usage.get(k, 0) + held.get(k, 0) < v
    }
    out: Vec = dict(held)
    if not unused or not ctx.queues.has_pending(q):
        return out
    flavors = [fq.flavor for fq in tree.queues[q].flavors] or [""]
    asked: Vec = {}
    for p in ctx.queues.ordered(q, now_s, active_only=False):
        if pending is not None and p.job.id not in pending:
            continue
        for flavor in flavors:
            whole = request_demand(p.job, flavor)
            if whole.get((flavor, Resource.GPU), 0) >= ctx.reserve_min_gpus:
                break  # a large job's room is held by its reservation, where it will run
            d = {k: v for k, v in whole.items() if k in nominal and v > 0}
            if d and all(v <= unused.get(k, 0) for k, v in d.items()):
                for k, v in d.items():
                    asked[k] = asked.get(k, 0) + v
                break
    for k, v in asked.items():
        out[k] = out.get(k, 0) + min(v, unused[k])
    return out
