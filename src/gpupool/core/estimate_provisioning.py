"""Wait estimates for jobs whose admission waits on a ProvisioningRequest: when the cloud is
expected to provision it, from what its provisioning class's requests have shown
(``core.provisioning.history``: the time the cloud takes to make capacity once there is
room, how long released nodes stay, and the class's concurrent capacity).

- **Booked**: the capacity is provisioned; the job starts at the next cycle.
- **Unbounded** (no request of the class ever waited for room): the request is provisioned
  its making time after its creation.
- **A queue** (the class's capacity showed, ``capacity_nodes``): the class's waiting
  requests are served in the order their jobs first asked (a request made again after a
  failure keeps its place), each when the nodes the class holds leave room for it. Nodes
  leave when a booking's job is expected to end (a booking not yet consumed, when its waiting
  job would end after starting now; one nobody waits for, when it expires), plus the
  scale-down lag; at the booking's ``maxRunDurationSeconds`` at once, when the job runs that
  long. Runtimes come from the first end of the job's queue on (``Runtimes.from_first_end``):
  the ends, the runs going as at least their age, and the run limit counted as one run that
  went to it; a run that outlived every end is expected to its run limit. (The learned mean
  leans on the limit as ``PRIOR_JOBS`` jobs: with one end, a 90-minute run under a 3-hour
  limit is expected to take 157 minutes.) Before any end, as the forecast ends running jobs.
  A request served takes the making time, then holds its nodes for its job's expected runtime
  (one made by hand, for its booking).

A request past its expected provisioning is given the median making time of those that took
at least as long as it has been in the making (a late request is not "now" at every cycle);
past all of them it gets no start, and says so. Each estimate's basis names what it rests on.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpupool.core.estimate import Estimate
from gpupool.core.model import Job, JobId
from gpupool.core.provisioning.history import ClassCapacity
from gpupool.core.provisioning.request import BOOKING_S

if TYPE_CHECKING:
    from gpupool.core.context import Context
    from gpupool.core.preemption import Running
    from gpupool.core.provisioning.checks import AdmissionChecks, CheckRecord
    from gpupool.core.provisioning.request import ProvisioningRequest

RUN_END_S = 1.0
"""A job expected to run to within this of its booking's run end runs to it: the cloud takes
the nodes back then, with no scale-down lag."""


@dataclass(frozen=True, slots=True)
class Waiting:
    first_s: float
    key: str
    nodes: int
    created_s: float
    runtime_s: float  # how long its job is expected to hold the nodes once provisioned
    capped: bool  # the runtime is the booking's maxRunDurationSeconds: no lag after it


def waiting_on_requests(
    ctx: Context, records: list[CheckRecord], now_s: float
) -> dict[JobId, Estimate]:
    """The estimate of each record's job (see the module); records with no request, or whose
    request ended, wait for their next request: no start."""
    ac = ctx.checks
    out: dict[JobId, Estimate] = {}
    if ac is None:
        return out
    for rec in records:
        req = ac.request(rec.request) if rec.request else None
        if req is None or req.ended:
            out[rec.job.id] = Estimate(0, None, "waits for its ProvisioningRequest")
            continue
        if req.booked:
            out[rec.job.id] = Estimate(0, now_s, "its capacity is provisioned")
            continue
        out[rec.job.id] = _estimate(ctx, ac, req, now_s)
    return out


def _estimate(
    ctx: Context, ac: AdmissionChecks, req: ProvisioningRequest, now_s: float
) -> Estimate:
    cls = req.provisioning_class_name
    cap = ac.capacity(cls)
    first = ac.first_made_s(req.key)
    made = f"waits for its ProvisioningRequest (made at t={req.created_s:.0f}s"
    made += (
        f", first asked at t={first:.0f}s)" if first is not None and first < req.created_s else ")"
    )
    if not cap.delays:
        return Estimate(0, None, f"{made}; no {cls} request was provisioned here yet")
    seen = "once" if cap.contended == 1 else f"{cap.contended} times"
    if cap.contended == 0:
        seen = "now"
    return ClassQueue(ctx, ac, cap, now_s).estimate(
        (req.key, req.created_s),
        class_waiting(ctx, ac, cls, now_s),
        made,
        (f" (seen {seen})", ", as the nodes ahead are expected to leave"),
    )


def made_from(cap: ClassCapacity, from_s: float, now_s: float, made: str, why: str) -> Estimate:
    """Provisioned the making time after ``from_s``: its median, or, past it, the median of
    those that took at least as long as it has been in the making."""
    since = max(0.0, now_s - from_s)
    typical, n = cap.delay()
    cond, k = cap.delay(since)
    if typical is None:
        return Estimate(0, None, f"{made}; {why}")
    if from_s + typical >= now_s:
        return Estimate(
            0,
            from_s + typical,
            f"{made}: {why}; making capacity takes ~{typical / 60:.0f} min here, learned from "
            f"{n} {cap.provisioning_class_name} request(s)",
        )
    if cond is None:
        return Estimate(
            0,
            None,
            f"{made}: {why}; in the making longer than any of the last {n} "
            f"{cap.provisioning_class_name} requests took",
        )
    return Estimate(
        0,
        max(now_s, from_s + cond),
        f"{made}: {why}; making capacity takes ~{cond / 60:.0f} min here for the {k} of the "
        f"last {n} {cap.provisioning_class_name} requests that took {since / 60:.0f} min or more",
    )


def class_waiting(ctx: Context, ac: AdmissionChecks, cls: str, now_s: float) -> list[Waiting]:
    """The class's requests not provisioned yet, in the order their jobs first asked."""
    out = []
    for r in ac.requests():
        if r.provisioning_class_name != cls or r.ended or r.provisioned_s is not None:
            continue
        rec = ac.record_of(r.key)
        limit = r.max_run_duration_s
        # No job waits for it (made by hand): its booking expires, unless its owner's pods
        # consume it, which nothing here foretells.
        runtime = BOOKING_S
        if rec is not None:
            runtime = runtime_of(ctx, rec.job, now_s, limit)
        capped = limit is not None and runtime >= limit - RUN_END_S
        if limit is not None:
            runtime = min(runtime, limit)
        first = ac.first_made_s(r.key)
        out.append(
            Waiting(
                first if first is not None else r.created_s,
                r.key,
                r.pod_count,
                r.created_s,
                runtime,
                capped,
            )
        )
    out.sort(key=lambda w: (w.first_s, w.created_s, w.key))
    return out


def bound_nodes(cap: ClassCapacity, waiting: list[Waiting], now_s: float) -> int | None:
    """The class's concurrent capacity in nodes: what it learned, or what it holds now if a
    request has waited longer than making capacity ever took (it waits for room); never less
    than it holds now. None: unbounded as far as anything shows."""
    bound = cap.capacity_nodes
    longest = cap.longest_delay_s
    if (
        longest is not None
        and cap.held_nodes > 0
        and any(now_s - w.created_s > longest for w in waiting)
    ):
        bound = max(bound or 0, cap.held_nodes)
    if bound is None:
        return None
    return max(bound, cap.held_nodes)


@dataclass(frozen=True, slots=True)
class ClassQueue:
    """One class's requests as the forecast walks them."""

    ctx: Context
    ac: AdmissionChecks
    cap: ClassCapacity
    now_s: float

    def estimate(
        self, ask: tuple[str, float], waiting: list[Waiting], made: str, note: tuple[str, str]
    ) -> Estimate:
        """Request ``ask`` (its key, and when it was or will be made) in its class's queue
        ``waiting``: made from its creation where the class shows no bound, else from when
        the nodes ahead leave room for it. ``note``: words put after "while requests waited
        for room" and after the time in the basis."""
        key, from_s = ask
        cap, now_s = self.cap, self.now_s
        cls = cap.provisioning_class_name
        bound = bound_nodes(cap, waiting, now_s)
        if bound is None:
            # Unbounded as far as anything shows: made from its creation.
            return made_from(cap, from_s, now_s, made, f"no {cls} request has waited for room")
        room_s, ahead = self.room(bound, waiting, key)
        if room_s is None:
            return Estimate(
                0,
                None,
                f"{made}; {ahead} {cls} request(s) ahead of it and the class holds at most "
                f"{bound} nodes at once: no room foreseen",
            )
        why = (
            f"{ahead} {cls} request(s) ahead of it; the class held at most {bound} nodes at "
            f"once while requests waited for room{note[0]}, so room for it at "
            f"t={room_s:.0f}s{note[1]}"
        )
        return made_from(cap, room_s, now_s, made, why)

    def room(self, bound: int, waiting: list[Waiting], key: str) -> tuple[float | None, int]:
        """When there is room for request ``key`` (None: never, as far as the forecast goes),
        and how many requests are ahead of it."""
        cap, now_s = self.cap, self.now_s
        lag = cap.lag_s or 0.0
        leaves = [(self.leaves(h.key, h.released_s, h.revoked), h.nodes) for h in cap.holders]
        heapq.heapify(leaves)
        held = cap.held_nodes
        t = now_s
        # Room there is now opened when nodes of the class last left (or at creation).
        opened = cap.left_s if cap.left_s is not None else -math.inf
        typical, _ = cap.delay()
        making = typical or 0.0
        for i, w in enumerate(waiting):
            while held + w.nodes > bound and leaves:
                at, n = heapq.heappop(leaves)
                held -= n
                t = max(t, at)
            if held + w.nodes > bound:
                return None, i
            room = max(t, w.created_s) if t > now_s else max(w.created_s, min(opened, now_s))
            if w.key == key:
                return room, i
            held += w.nodes
            heapq.heappush(
                leaves, (room + making + w.runtime_s + (0.0 if w.capped else lag), w.nodes)
            )
        return None, len(waiting)

    def leaves(self, key: str, released_s: float | None, revoked: bool) -> float:
        """When the nodes of a request of the class are expected to leave the cluster."""
        ctx, ac, now_s = self.ctx, self.ac, self.now_s
        lag = self.cap.lag_s or 0.0
        if released_s is not None:
            return now_s if revoked else max(now_s, released_s + lag)
        req = ac.request(key)
        if req is None:
            return now_s + lag
        job = ac.job_on(key)
        running = ctx.running.get(job) if job is not None else None
        rec = ac.record_of(key)
        if running is not None:
            end = now_s + left_of(ctx, running, now_s)
        elif rec is not None:
            end = now_s + runtime_of(ctx, rec.job, now_s, req.max_run_duration_s)
        elif req.booked and req.booking_expires_s is not None:
            end = req.booking_expires_s
        else:
            end = math.inf
        run_ends = req.run_ends_s
        if run_ends is not None and end >= run_ends - RUN_END_S:
            return run_ends
        return end + lag


def left_of(ctx: Context, r: Running, now_s: float) -> float:
    """How much longer a running job is expected to run: the mean of what its runtime
    distribution from the first end on (``Runtimes.from_first_end``) leaves past its age, cut
    at its run limit; before any end, the forecast's (``Runtimes.residuals``, else
    ``Runtimes.remaining``: the run limit weighs there)."""
    age = now_s - r.start_s
    got = ctx.runtimes.from_first_end(r.job, now_s)
    if got is not None:
        past = [(t - age, p) for t, p in got if t > age]
        total = sum(p for _, p in past)
        if total > 0:
            cap = r.job.run_limit_s - age if r.job.run_limit_s is not None else math.inf
            return sum(min(cap, x) * p for x, p in past) / total
    res = ctx.runtimes.residuals(r.job, age, now_s)
    if res is not None:
        return sum(x * w for x, w in res)
    return ctx.runtimes.remaining(r.job, age, now_s).runtime_s


def runtime_of(ctx: Context, job: Job, now_s: float, limit_s: float | None) -> float:
    """How long a job not started yet is expected to hold its nodes: the mean of its runtime
    distribution from the first end on, else ``Runtimes.expected``; never past ``limit_s``
    (its booking's maxRunDurationSeconds)."""
    got = ctx.runtimes.from_first_end(job, now_s, limit_s)
    mean = (
        sum(t * p for t, p in got)
        if got is not None
        else ctx.runtimes.expected(job, now_s).runtime_s
    )
    return mean if limit_s is None else min(mean, limit_s)
