"""When borrowing is worth a later reclaim.

A queue above its nominal quota borrows what other queues of its cohort tree leave unused;
the owner may reclaim it at any time, and when it does the borrower's run is lost (evicted,
to start again from scratch). Borrowing pays when the borrowed job is likely to end before
the owner wants its quota back; it is churn when the owner is a queue that submits steadily
and has nothing pending only for the moment between two of its arrivals: the borrower starts,
the owner's next job arrives a minute later, finds itself below its nominal quota, and
reclaims (issue 15: every team at its nominal quota, 0.1 to 0.2 evictions per started job).

So before a job borrows, each other queue of its cohort tree that is below its nominal quota,
has nothing pending and is submitting steadily (``Arrivals.stream``: a recent rate, not a
burst, not stopped) is counted as already holding what it is expected to ask for while the
borrower runs: its mean request per job times the jobs it is expected to submit in the
borrower's expected runtime, at most what it leaves unused of its nominal quota. If the job
no longer fits the queue's quota with that held back, it waits: for the owner's next job, or
for capacity nobody is expected to claim. A queue that has stopped submitting, or that comes
in bursts, lends freely, and is reclaimed from when it returns (borrow-reclaim's returning
team).
"""

from __future__ import annotations

import math
from collections.abc import Set
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpupool.core.admission import ACCELERATOR_RESOURCES, Fit, Vec, request_demand

if TYPE_CHECKING:
    from gpupool.core.context import Context
    from gpupool.core.queueing import Pending


def expected_claims(
    ctx: Context, q: str, runtime_s: float, now_s: float, pending: Set[str] | None = None
) -> dict[str, Vec]:
    """Per other queue of ``q``'s cohort tree with nothing pending and a steady stream at
    ``now_s``: the part of its unused nominal quota it is expected to ask for within
    ``runtime_s``. ``pending``: the queues with jobs pending (a forecast's own view), else
    the real ones."""
    tree = ctx.tree
    out: dict[str, Vec] = {}
    for o in tree.cohort_queues(q):
        if o == q:
            continue
        if (o in pending) if pending is not None else ctx.queues.has_pending(o):
            continue
        got = ctx.arrivals.stream(o, now_s)
        if got is None:
            continue
        gap, recent = got
        jobs = runtime_s / gap if gap > 0 else float(len(recent))
        nominal, usage = tree.nominal(o), tree.usage(o)
        unused = {
            k: v - usage.get(k, 0)
            for k, v in nominal.items()
            if k[1] in ACCELERATOR_RESOURCES and usage.get(k, 0) < v
        }
        if not unused:
            continue
        asked: dict[tuple[str, object], float] = {}
        for j in recent:
            for flavor in {f for f, _ in unused}:
                for k, v in request_demand(j, flavor).items():
                    asked[k] = asked.get(k, 0.0) + v / len(recent)
        hold = {k: min(free, math.ceil(jobs * asked.get(k, 0.0))) for k, free in unused.items()}
        hold = {k: v for k, v in hold.items() if v > 0}
        if hold:
            out[o] = hold
    return out


@dataclass(frozen=True, slots=True)
class ForecastView:
    """How a wait estimate's forecast asks at one of its own times: the queues with jobs
    pending in it, and that time, at which the lenders' streams are judged (on the arrivals
    the forecast expects by then, as the cycle will judge them then)."""

    pending: Set[str]
    at_s: float


def reclaimed_soon(
    ctx: Context, p: Pending, fit: Fit, now_s: float, forecast: ForecastView | None = None
) -> str | None:
    """Why the borrowing ``fit`` of pending job ``p`` is not worth it (one sentence), or None
    when it is (or does not borrow). See the module. ``forecast``: asked by a forecast at
    its own time (``ForecastView``); the job's expected runtime is as learned by ``now_s``."""
    if not fit.borrowing:
        return None
    q = p.queue
    exp = ctx.runtimes.expected(p.job, now_s)
    if forecast is None:
        claims = expected_claims(ctx, q, exp.runtime_s, now_s)
    else:
        claims = expected_claims(ctx, q, exp.runtime_s, forecast.at_s, forecast.pending)
    if not claims:
        return None
    tree = ctx.tree
    for o, hold in claims.items():
        tree.add(o, hold)
    try:
        short = tree.shortfall(q, fit.demand)
    finally:
        for o, hold in claims.items():
            tree.add(o, hold, -1)
    if not short:
        return None
    owners = ", ".join(sorted(claims))
    return (
        f"queue {q} would borrow quota that {owners} submit for steadily and would "
        f"reclaim within this job's expected {exp.runtime_s / 60:.0f} min "
        f"({exp.basis}); waiting for capacity nobody is expected to claim"
    )
