"""Kueue's flavor fungibility with preemption: the queue's flavors walked one by one.

A queue whose ``flavorFungibility`` says ``whenCanPreempt: MayStopSearch`` (or
``preference: PreemptionOverBorrowing``) cannot be served by trying every flavor without
preemption first: a flavor early in its order where the job would preempt must win over a
later one where it would borrow. So each candidate, every flavor in the queue's order and in
each the job's own form and then its alternatives (``gpupool.core.alternatives``), is judged
as Kueue's flavor assigner judges a flavor:

- it **fits** (perhaps borrowing), or it fits once a minimal victim set is preempted
  (**reclaim** when every victim is another queue's borrowed capacity, **preempt** when one
  is of the job's own queue), or it does not fit at all (no victim set helps: skipped);
- the walk **stops** at a fit that needs no borrowing; at a borrowing fit when
  ``whenCanBorrow`` is ``MayStopSearch``; at a preemption when ``whenCanPreempt`` is
  ``MayStopSearch`` and it needs no borrowing or ``whenCanBorrow`` is ``MayStopSearch``;
- otherwise the best candidate seen wins at the end, by ``preference``:
  ``BorrowingOverPreemption`` ranks fit over reclaim over preempt and then no borrowing over
  borrowing; ``PreemptionOverBorrowing`` ranks no borrowing first, then the mode. Ties keep the
  earlier candidate (the queue's order, then the job's).

Queues with Kueue's defaults never come here (``FlavorFungibility.searches_with_preemption``):
for them the cycle tries every flavor without preemption and then plans preemption over all
of them, which picks the same flavor and is cheaper.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import IntEnum

from gpupool.core.admission import Fit, QuotaTree, try_admit
from gpupool.core.alternatives import variants
from gpupool.core.model import Job
from gpupool.core.placement.framework import Code, Profile, Status
from gpupool.core.preemption import Victim
from gpupool.core.quota import FlavorFungibility, Fungibility, Preference
from gpupool.core.reasons import Reason
from gpupool.core.snapshot import Snapshot

Planner = Callable[[tuple[str, str]], "tuple[list[Victim], Fit] | None"]
"""Plans preemption for the job in one (flavor, form); None when no victim set lets it fit."""


class Mode(IntEnum):
    """What a candidate needs, best last (Kueue's ``preemptionMode`` without ``noFit``)."""

    PREEMPT = 1  # a victim of the job's own queue
    RECLAIM = 2  # only other queues' borrowed capacity
    FIT = 3


@dataclass(frozen=True, slots=True)
class Choice:
    """The flavor and form chosen, and the victims it needs (none: admit now)."""

    fit: Fit
    victims: tuple[Victim, ...] = ()

    @property
    def mode(self) -> Mode:
        if not self.victims:
            return Mode.FIT
        if any(v.kind == "within-queue" for v in self.victims):
            return Mode.PREEMPT
        return Mode.RECLAIM


def stops(c: Choice, f: FlavorFungibility) -> bool:
    """Whether the walk takes ``c`` without looking at later flavors."""
    borrow_ok = not c.fit.borrowing or f.when_can_borrow is Fungibility.STOP
    if c.mode is Mode.FIT:
        return borrow_ok
    return f.when_can_preempt is Fungibility.STOP and borrow_ok


def better(a: Choice, b: Choice, preference: Preference) -> bool:
    """Whether ``a`` ranks strictly above ``b`` under ``preference``."""
    if preference is Preference.PREEMPTION_OVER_BORROWING:
        return (not a.fit.borrowing, a.mode) > (not b.fit.borrowing, b.mode)
    return (a.mode, not a.fit.borrowing) > (b.mode, not b.fit.borrowing)


def choose(
    job: Job,
    cq: str,
    tree: QuotaTree,
    snap: Snapshot,
    profile: Profile,
    failed: dict[Hashable, Status] | None,
    plan: Planner,
) -> tuple[Choice | None, Status]:
    """The queue's flavors walked one by one, each form tried without and then with
    preemption (``plan``); see the module's docstring for the rules. Changes nothing."""
    queue = tree.queues[cq]
    f = queue.fungibility
    keys = [fq.flavor for fq in queue.flavors] or [""]
    best: Choice | None = None
    reasons: list[Reason] = []
    unresolvable = True
    for key in keys:
        for form, _ in variants(job):
            only = (key, form)
            fit, status = try_admit(job, cq, tree, snap, profile, failed, only)
            if fit is not None:
                c = Choice(fit)
            else:
                reasons.extend(status.reasons)
                unresolvable = unresolvable and status.code is Code.UNRESOLVABLE
                planned = None if status.code is Code.UNRESOLVABLE else plan(only)
                if planned is None:
                    continue
                c = Choice(planned[1], tuple(planned[0]))
            if stops(c, f):
                return c, Status.ok()
            if best is None or better(c, best, f.preference):
                best = c
    if best is not None:
        return best, Status.ok()
    code = Code.UNRESOLVABLE if unresolvable and reasons else Code.UNSCHEDULABLE
    return None, Status(code, tuple(reasons))
