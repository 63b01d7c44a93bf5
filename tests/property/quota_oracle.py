"""An independent check of quota: every ClusterQueue within what its quota allows, by two books.

The oracle is written from the quota documents alone (Kueue's semantics), not from the
scheduler's own reasoning: a queue may hold at most ``nominalQuota + borrowingLimit`` of each
resource it lists in a cohort, with no limit where borrowing is unlimited; outside a cohort, or
when it is non-preemptive, at most its nominal quota. After every cycle it sums the demands of
the running jobs per queue, and reads the scheduler's quota books (``Scheduler.usage``); either
one above the limit is a violation. Each (queue, cycle) over counts once.

Tests hand it to ``simulate(..., observe=oracle)``; the simulator itself does not check quota.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupool.core.quota import QueueConfig, Resource
from gpupool.core.scheduler import Scheduler

Limits = dict[str, dict[tuple[str, Resource], int]]


def quota_limits(config: QueueConfig) -> Limits:
    """Per ClusterQueue, the most it may hold per (flavor, resource) it lists."""
    out: Limits = {}
    for cq in config.cluster_queues:
        lim: dict[tuple[str, Resource], int] = {}
        for fq in cq.flavors:
            for res, quota in fq.resources.items():
                if cq.non_preemptive or cq.cohort is None:
                    lim[(fq.flavor, res)] = quota.nominal
                elif quota.borrowing_limit is not None:
                    lim[(fq.flavor, res)] = quota.nominal + quota.borrowing_limit
        out[cq.name] = lim
    return out


@dataclass
class QuotaOracle:
    """Call it with (time, scheduler) after each cycle; ``violations`` says what it found."""

    config: QueueConfig
    limits: Limits = field(init=False)
    violations: list[str] = field(default_factory=list)
    checks: int = 0

    def __post_init__(self) -> None:
        self.limits = quota_limits(self.config)

    def __call__(self, now: float, sched: Scheduler) -> None:
        self.checks += 1
        held: dict[str, dict[tuple[str, Resource], int]] = {q: {} for q in self.limits}
        for r in sched.running():
            mine = held.setdefault(r.queue, {})
            for key, v in r.demand.items():
                mine[key] = mine.get(key, 0) + int(v)
        for q, lim in self.limits.items():
            books = sched.usage(q)
            for key, cap in lim.items():
                running, booked = held[q].get(key, 0), int(books.get(key, 0))
                if running > cap or booked > cap:
                    self.violations.append(
                        f"t={now:g}s {q} {key[0]}.{key[1]}: running jobs {running}, "
                        f"quota books {booked}, limit {cap}"
                    )
                    break
