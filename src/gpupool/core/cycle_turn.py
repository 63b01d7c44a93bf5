"""A large job's turn to borrow: when a job that takes its queue above its fair share may go,
weighed in share-time against what the queue is owed (``ShareHistory.credit``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from gpupool.core.admission import Key, request_demand
from gpupool.core.model import GpuKind, Job

if TYPE_CHECKING:
    from gpupool.core.context import Context

__all__ = ["alone", "alone_queues", "borrowing_turn", "gpus", "over_share_s"]


def borrowing_turn(
    ctx: Context,
    q: str,
    job: Job,
    now_s: float,
    ends: Iterable[tuple[float, Mapping[Key, int]]] | None = None,
) -> str | None:
    """None when ``job`` may be offered now; else why it waits for its queue's turn.

    A large job (``reserve_min_gpus`` or more) that would take its queue above its nominal
    quota may borrow once its queue is owed (``ShareHistory.credit``) at least half of what
    the job would hold it above its fair share: the share-seconds over 1.0 the queue holds
    with the job through the job's expected runtime, its other running jobs ending as
    expected (``over_share_s``). The queue's credit then runs from +half to about -half of
    that over the job, so it stays near 0 on average: the queue has had its share over time,
    whatever the size and length of its jobs. A job that borrows only until its queue's
    running jobs end is weighed for that time alone; one that doubles the queue for hours
    waits until the queue has been below its share for as long.

    The fair order alone does not see it: a queue whose 32-GPU gang just ended holds nothing
    now and comes first at once, and two such gangs back to back at the top priority took
    team-d three points over its share (issue 15). Counting the whole job in the queue's key
    instead (Kueue's share with the workload considered) starves the large jobs' queue: it
    compares the queue plus a whole gang with the others plus nothing. A large job within
    its nominal quota is entitled to go as any job, and so is one whose cohort tree is
    otherwise idle (``alone``): it takes nothing anyone asks for, and its lenders reclaim it
    when they return.

    ``ends``: the queue's running jobs as (expected end, demand); by default its jobs in
    ``ctx.running``, each ending when what is left of its expected runtime has passed (the
    wait estimate's forecast passes its own)."""
    if gpus(job) < ctx.reserve_min_gpus:
        return None
    queue = ctx.tree.queues[q]
    demand = request_demand(job, queue.flavors[0].flavor if queue.flavors else "")
    if not ctx.tree.borrows(q, demand):
        return None
    if alone(ctx, q):
        return None  # the others are idle: it takes nothing from anyone
    runtime = ctx.runtimes.expected(job).runtime_s
    if ends is None:
        ends = (
            (now_s + ctx.runtimes.remaining(r.job, now_s - r.start_s, now_s).runtime_s, r.demand)
            for r in ctx.running.values()
            if r.queue == q
        )
    over = over_share_s(ctx, q, demand, (now_s, now_s + runtime), ends)
    credit = ctx.history.credit(q)
    if credit >= over / 2:
        return None
    short = ctx.tree.shortfall(q, demand)  # what holds it first: quota no turn can give
    return (
        "; ".join(short)
        + ("; then " if short else "")
        + (
            f"waiting for queue {q}'s turn to borrow: it is owed {credit / 3600:.2f} share-hours "
            f"(its share held lately less its fair share), and this job would hold it "
            f"{over / 3600:.2f} share-hours above its fair share (a job this large borrows once "
            "its queue is owed half of that)"
        )
    )


def alone(ctx: Context, q: str) -> bool:
    """Whether every other queue of ``q``'s cohort tree is idle: nothing pending, nothing
    running. (Nothing pending alone is not enough: queues whose jobs all fit at once have
    none pending, and they will ask for their nominal quota within minutes.)"""
    return not any(_busy(ctx, o) for o in ctx.tree.cohort_queues(q) if o != q)


def alone_queues(ctx: Context, queues: Iterable[str]) -> set[str]:
    """Those of ``queues`` that are ``alone``, counted once per cohort tree (a cycle asks
    for every queue)."""
    tree = ctx.tree
    busy: dict[str, int] = {}
    for o in tree.queues:
        if _busy(ctx, o):
            root = tree.cohort_root(o)
            busy[root] = busy.get(root, 0) + 1
    return {
        q for q in queues if busy.get(tree.cohort_root(q), 0) - (1 if _busy(ctx, q) else 0) == 0
    }


def _busy(ctx: Context, q: str) -> bool:
    return ctx.queues.has_pending(q) or any(v > 0 for v in ctx.tree.usage(q).values())


def over_share_s(
    ctx: Context,
    q: str,
    demand: Mapping[Key, int],
    span: tuple[float, float],
    ends: Iterable[tuple[float, Mapping[Key, int]]],
) -> float:
    """The share-seconds above its fair share (1.0) that queue ``q`` holds with ``demand``
    added over ``span`` (from, to), while its running jobs (``ends``: expected end and
    demand) end one by one and nothing else starts."""
    t, until = span
    out = 0.0
    gone: list[Mapping[Key, int]] = []
    try:
        for end, d in sorted(ends, key=lambda e: e[0]):
            if end >= until:
                break
            if end > t:
                out += max(0.0, ctx.tree.share(q, demand) - 1.0) * (end - t)
                t = end
            ctx.tree.add(q, d, -1)
            gone.append(d)
        out += max(0.0, ctx.tree.share(q, demand) - 1.0) * (until - t)
    finally:
        for d in gone:
            ctx.tree.add(q, d)
    return out


def gpus(job: Job) -> int:
    """The GPUs a job asks for in all (a slice counts as one)."""
    return sum(
        ps.count * (ps.gpu.count or (1 if ps.gpu.kind is not GpuKind.NONE else 0))
        for ps in job.pod_sets
    )
