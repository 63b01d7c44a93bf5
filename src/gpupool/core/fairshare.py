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
