"""Per-user fairness inside a queue: usage that decays with a half-life, charged at admission.

Across queues, order is by weighted dominant share (``QuotaTree.share``). Inside a queue,
jobs are ordered by priority, then by how much their user has used recently, then by age, so
a user who ran a lot yesterday yields to one who did not, and a burst of submissions is not
free: each admission is charged at once with what the job is expected to use (its dominant
share of the queue's entitlement times its run limit, or a default runtime), and corrected
to what it really used when it ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class _Balance:
    value: float
    at_s: float


class UsageLedger:
    """Decayed usage per (queue, user). Values are in share-seconds."""

    def __init__(self, half_life_s: float) -> None:
        self.half_life_s = half_life_s
        self._rate = math.log(2.0) / half_life_s
        self._b: dict[tuple[str, str], _Balance] = {}

    def value(self, queue: str, user: str, now_s: float) -> float:
        b = self._b.get((queue, user))
        if b is None:
            return 0.0
        return b.value * math.exp(-self._rate * max(0.0, now_s - b.at_s))

    def charge(self, queue: str, user: str, amount: float, now_s: float) -> None:
        """Add ``amount`` (negative to refund) at ``now_s``; never below zero."""
        v = self.value(queue, user, now_s) + amount
        self._b[(queue, user)] = _Balance(max(0.0, v), now_s)

    def users(self, queue: str) -> list[str]:
        return sorted(u for q, u in self._b if q == queue)


class ShareHistory:
    """Each queue's weighted share averaged over time (an exponential moving average in
    continuous time, halving every ``half_life_s``).

    Fairness is promised over time, and jobs come in lumps: a 32-GPU gang admitted when its
    queue had the lowest share takes the queue far above its share for as long as it runs,
    and a queue whose large job waits for room sits below it meanwhile. Ordering queues by the
    share they hold *now* cannot make up for either; ordering by the share now plus the share
    held lately does: a queue that has been above its share yields until the others have
    caught up, and one that has been below goes first.

    The scheduler folds in the share each queue held since the previous cycle at the start of
    every cycle (``advance``) and records the share it holds after the cycle (``hold``); a
    share that changed between cycles (a job ended) is therefore counted from the next cycle,
    an error of at most one scheduling interval.

    Beside the average, each queue has a **credit**: the share-seconds it is owed, the
    integral of (1 - share held) over time with the same decay, from 0 when the queue is
    first seen. It is the measure a large job's turn to borrow is weighed against
    (``cycle_turn.borrowing_turn``). The average cannot serve there: it starts from 0 too,
    so for the first hours every queue reads far below its share whatever it held (team-d
    of gang-priority read 0.40 to 0.77 while it held 1.33, and borrowed on it); divided by
    the time it covers it is unbiased, but a rule on it that makes a queue wait until it is
    owed a whole half-job loses part of that credit to the decay while it waits (0.9 to 4.0
    points under its share on seeds 1-6). The credit starts at "owed nothing", and the turn
    rule keeps it near 0 on average, where the decay neither gives nor takes much.

    While a queue waits below its share (charged under 1.0), its credit does not decay:
    every second it is kept below its share is owed in full, and its debt from a past
    over-share is repaid at face value. Decayed then, the credit could never pass
    (1 - share) / rate at the share the queue holds: a gang whose turn needs more never got
    it (gang-priority seeds 10 and 12: a 32-GPU gang beside a 16-GPU one at 0.67, team-d 4
    points under its share), and what a gang's drain earned beyond its turn was taken by
    the decay before it could be spent. At or above its share, the credit decays as the
    average does, so no lump of history is kept for ever.
    """

    def __init__(self, half_life_s: float) -> None:
        self._rate = math.log(2.0) / half_life_s
        self._avg: dict[str, float] = {}
        self._held: dict[str, float] = {}
        self._at: dict[str, float] = {}
        self._credit: dict[str, float] = {}
        self._charged: dict[str, float] = {}

    def advance(self, queue: str, now_s: float) -> None:
        held = self._held.get(queue)
        if held is None:
            self._at[queue] = now_s
            return
        dt = max(0.0, now_s - self._at[queue])
        keep = math.exp(-self._rate * dt)
        self._avg[queue] = self._avg.get(queue, 0.0) * keep + held * (1.0 - keep)
        charged = self._charged.get(queue, held)
        if charged < 1.0:  # waiting below its share: owed every second, nothing forgotten
            self._credit[queue] = self._credit.get(queue, 0.0) + (1.0 - charged) * dt
        else:
            self._credit[queue] = self._credit.get(queue, 0.0) * keep + (1.0 - charged) * (
                (1.0 - keep) / self._rate
            )
        self._at[queue] = now_s

    def hold(
        self, queue: str, share: float, now_s: float, waiting: bool = True, alone: bool = False
    ) -> None:
        """The share ``queue`` holds from ``now_s`` on. A queue with nothing ``waiting`` is
        counted at its fair share (1.0) at least: a queue that asks for nothing is not wronged
        by holding little, so an idle hour banks no credit to borrow on later (it would take
        the others' capacity on that credit, and they would reclaim it at once). A queue
        ``alone`` (the other queues of its cohort tree idle) is charged in its
        credit at its fair share at most: what it holds beyond that nobody asked for, and a
        gang that borrowed an idle cluster is not made to pay it back later by waiting
        beside the others (the average still counts it, as the fair order always has)."""
        if queue not in self._at:
            self._at[queue] = now_s
        held = share if waiting else max(share, 1.0)
        self._held[queue] = held
        self._charged[queue] = min(held, 1.0) if alone else held

    def average(self, queue: str) -> float:
        return self._avg.get(queue, 0.0)

    def credit(self, queue: str) -> float:
        """The share-seconds ``queue`` is owed (negative: it has had more than its share):
        the integral of its fair share (1.0) less the share it held, each second counted
        with the decay of the average, from 0 at the first cycle that saw the queue, and
        without decay while the queue waits below its share (see the class). A queue with
        nothing waiting is counted at its share at least (``hold``), so it banks nothing
        while it asks for nothing."""
        return self._credit.get(queue, 0.0)

    def averages(self) -> dict[str, float]:
        return dict(self._avg)

    def copy(self) -> ShareHistory:
        """An independent copy (a forecast moves it on without touching the real one)."""
        out = ShareHistory.__new__(ShareHistory)
        out._rate = self._rate
        out._avg, out._held, out._at = dict(self._avg), dict(self._held), dict(self._at)
        out._credit, out._charged = dict(self._credit), dict(self._charged)
        return out

    def state(self) -> dict[str, tuple[float, float, float]]:
        """(average, share held, since) per queue: for snapshots and tests."""
        return {
            q: (self._avg.get(q, 0.0), self._held.get(q, 0.0), at) for q, at in self._at.items()
        }
