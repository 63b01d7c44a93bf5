"""Wait estimates for jobs of a queue with a provisioning check that still wait for their
queue's quota (no ProvisioningRequest made yet): the request is made when the quota the job
needs is expected to free, then it waits in its provisioning class's queue and is made as
``core.estimate_provisioning`` expects of the requests already made.

- **Quota**: the queue's running jobs give their quota back at their expected ends (as the
  nodes of the class are expected to leave), jobs waiting on a request at their expected
  start plus runtime; the jobs before it in the admission order take theirs first, and hold
  it for their expected runtime from their expected start. The rest of the cohort is taken as
  it is now: what it lends stays lent, what it borrows stays borrowed.
- **The cloud**: the request joins the class's waiting requests in the order of its asking
  (after every request made before it), is given room when the nodes ahead leave, never
  before it is made, and takes the class's making time.

No start when no expected end frees enough quota, or the class has nothing to go by.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

from gpupool.core.demand import request_demand
from gpupool.core.estimate import Estimate
from gpupool.core.estimate_provisioning import (
    ClassQueue,
    Waiting,
    class_waiting,
    left_of,
    runtime_of,
)

if TYPE_CHECKING:
    from gpupool.core.context import Context
    from gpupool.core.model import Job, JobId
    from gpupool.core.queueing import Pending
    from gpupool.core.quota_tree import Vec


def waiting_for_quota(
    ctx: Context,
    pending: list[tuple[int, Pending]],
    on_requests: dict[JobId, Estimate],
    now_s: float,
) -> dict[JobId, Estimate]:
    """Jobs of a queue with a provisioning check still waiting for their queue's quota (no
    request made yet), each with its place in the admission order: the request is made when
    the quota the job needs frees (the queue's running jobs end, as the nodes ahead leave in
    ``ClassQueue``; a job waiting on its request frees its quota when it is expected to end; the
    jobs before it in the order take theirs first), then it waits in its class's queue behind
    the requests made before it and is made as those are (see the module). No start when no
    end frees enough, or the class has nothing to go by. The rest of the cohort is taken as it
    is now: what it lends stays lent, what it borrows stays borrowed."""
    ac = ctx.checks
    out: dict[JobId, Estimate] = {}
    if ac is None:
        return out
    by_queue: dict[str, list[Pending]] = {}
    for _, p in sorted(pending, key=lambda x: x[0]):
        by_queue.setdefault(str(p.queue), []).append(p)
    for q, jobs in by_queue.items():
        check = ac.check_for(q)
        if check is None:
            continue
        frees = _frees(ctx, q, on_requests, now_s)
        quota = _QuotaWalk(ctx, q, frees, now_s)
        cls = check.config.provisioning_class_name
        later: list[Waiting] = []
        for p in jobs:
            demand = quota.demand(p.job)
            if demand is None:
                out[p.job.id] = Estimate(
                    0, None, f"needs more than queue {q}'s nominal quota: no start foreseen"
                )
                continue
            at = quota.take(demand)
            if at is None:
                out[p.job.id] = Estimate(
                    0, None, f"waits for queue {q}'s quota; no expected end frees enough"
                )
                continue
            w = Waiting(
                at,
                f"{p.job.id} (not made yet)",
                sum(ps.count for ps in p.job.pod_sets),
                at,
                runtime_of(ctx, p.job, now_s, check.config.max_run_duration_s),
                False,
            )
            later.append(w)
            est = _future_request(ctx, cls, later, now_s, q)
            out[p.job.id] = est
            if est.start_s is not None:
                quota.hold(demand, est.start_s + w.runtime_s)
    return out


def _frees(
    ctx: Context, q: str, on_requests: dict[JobId, Estimate], now_s: float
) -> list[tuple[float, int, Vec]]:
    """When the quota queue ``q`` holds now is expected back: its running jobs' ends, and its
    jobs waiting on requests (quota reserved) at their expected start plus runtime."""
    out: list[tuple[float, int, Vec]] = []
    for r in ctx.running.values():
        if r.queue == q:
            out.append((now_s + left_of(ctx, r, now_s), len(out), r.demand))
    ac = ctx.checks
    for rec in ac.records() if ac is not None else ():
        if rec.queue != q or not rec.demand:
            continue
        e = on_requests.get(rec.job.id)
        req = ac.request(rec.request) if ac is not None and rec.request else None
        limit = req.max_run_duration_s if req is not None else None
        if e is None or e.start_s is None:
            out.append((math.inf, len(out), rec.demand))
        else:
            out.append((e.start_s + runtime_of(ctx, rec.job, now_s, limit), len(out), rec.demand))
    heapq.heapify(out)
    return out


class _QuotaWalk:
    """A queue's free quota as its holders end, in the forecast's time."""

    def __init__(
        self, ctx: Context, q: str, frees: list[tuple[float, int, Vec]], now_s: float
    ) -> None:
        self.ctx, self.q, self.frees, self.t = ctx, q, frees, now_s
        self.nominal = ctx.tree.node(q).nominal
        self.free: dict[object, int] = {}
        self.seq = len(frees)

    def demand(self, job: Job) -> Vec | None:
        """What the job takes of the queue's quota, in its queue's first flavor that could
        ever hold it; None: none could."""
        for fq in self.ctx.tree.queues[self.q].flavors:
            d = request_demand(job, fq.flavor)
            if all(v <= self.nominal.get(k, v) for k, v in d.items()):
                return d
        return None

    def _short(self, demand: Vec) -> bool:
        return any(
            v > self.free.setdefault(k, self.ctx.tree.available(self.q, k))
            for k, v in demand.items()
            if k in self.nominal
        )

    def take(self, demand: Vec) -> float | None:
        """When ``demand`` fits (and takes it), walking the holders' ends; None: never."""
        while self._short(demand):
            if not self.frees or self.frees[0][0] == math.inf:
                return None
            at, _, got = heapq.heappop(self.frees)
            self.t = max(self.t, at)
            for k, v in got.items():
                if k in self.nominal:
                    self.free[k] = self.free.setdefault(k, self.ctx.tree.available(self.q, k)) + v
        for k, v in demand.items():
            if k in self.nominal:
                self.free[k] -= v
        return self.t

    def hold(self, demand: Vec, until_s: float) -> None:
        self.seq += 1
        heapq.heappush(self.frees, (until_s, self.seq, demand))


def _future_request(ctx: Context, cls: str, later: list[Waiting], now_s: float, q: str) -> Estimate:
    """The estimate of the last of ``later``, a request of queue ``q`` to be made at its
    ``created_s``, behind the class's waiting requests and the ``later`` ones before it."""
    w = later[-1]
    ac = ctx.checks
    assert ac is not None
    cap = ac.capacity(cls)
    made = (
        f"waits for queue {q}'s quota, expected free at t={w.created_s:.0f}s, "
        "then for its ProvisioningRequest"
    )
    if not cap.delays:
        return Estimate(0, None, f"{made}; no {cls} request was provisioned here yet")
    waiting = sorted(
        [*class_waiting(ctx, ac, cls, now_s), *later], key=lambda x: (x.first_s, x.created_s, x.key)
    )
    return ClassQueue(ctx, ac, cap, now_s).estimate((w.key, w.created_s), waiting, made, ("", ""))
