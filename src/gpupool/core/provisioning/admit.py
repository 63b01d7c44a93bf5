"""The cycle's steps for queues with a provisioning admission check (Kueue's
``kueue.x-k8s.io/provisioning-request`` controller):

0. before the queues are walked (``settle``): deletions are passed on, bookings expire, jobs
   whose request failed, expired or was revoked release their quota and back off (or are
   rejected), jobs whose request is Provisioned are Ready, jobs whose backoff is over go back to
   their queue, and Ready jobs start on their nodes, the booking that expires first first;
3. when such a job's turn comes (``request_capacity``): it takes a booking its queue's former
   jobs left, or its quota is reserved and a ProvisioningRequest made.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from gpupool.core.admission import Vec, flavor_job, placement_demand, request_demand
from gpupool.core.context import start
from gpupool.core.decisions import Bind, CycleResult, Park
from gpupool.core.model import ClusterQueueName
from gpupool.core.placement.framework import Code, Status
from gpupool.core.placement.place import place_job
from gpupool.core.provisioning.checks import AdmissionChecks, CheckRecord, CheckState
from gpupool.core.provisioning.request import ConditionType
from gpupool.core.reasons import Reason, Step, step

if TYPE_CHECKING:
    from gpupool.core.context import Context
    from gpupool.core.queueing import Pending
    from gpupool.core.snapshot import Snapshot

_ENDS = (ConditionType.FAILED, ConditionType.BOOKING_EXPIRED, ConditionType.CAPACITY_REVOKED)


def settle(
    ctx: Context, ac: AdmissionChecks, snap: Snapshot, now_s: float, result: CycleResult
) -> None:
    """Step 0 (see the module's docstring)."""
    result.deprovision.extend(ac.take_outbox())
    result.deprovision.extend(ac.expire(now_s))
    for rec in ac.records():
        if not rec.request or rec.state not in (CheckState.PENDING, CheckState.READY):
            continue
        req = ac.request(rec.request)
        if req is None:
            _fail(ctx, ac, rec, f"ProvisioningRequest {rec.request} was deleted", now_s, result)
        elif req.ended:
            kind = next(k for k in _ENDS if req.is_true(k))
            cond = req.condition(kind)
            why = f"{cond.reason}: {cond.message}" if cond is not None else kind.value
            _fail(
                ctx, ac, rec, f"ProvisioningRequest {req.key} {kind.value} ({why})", now_s, result
            )
        elif req.provisioned_s is not None and rec.state is CheckState.PENDING:
            ac.mark_ready(
                rec.job.id,
                (
                    f"ProvisioningRequest {req.key} Provisioned at t={req.provisioned_s:.0f}s on "
                    f"{len(req.nodes)} nodes; booked until t={(req.booking_expires_s or 0.0):.0f}s"
                ),
            )
    for rec in ac.due(now_s):
        ctx.queues.add(rec.job, preemptions=rec.preemptions)
    for rec in ac.ready():
        _start_booked(ctx, ac, snap, rec, now_s, result)


def _fail(
    ctx: Context, ac: AdmissionChecks, rec: CheckRecord, why: str, now_s: float, result: CycleResult
) -> None:
    """The job's request will not serve it: quota released, request deleted, and the job
    queued again after the backoff, or rejected when its retries are spent."""
    failure = ac.fail(rec.job.id, why, now_s)
    if failure.released:
        ctx.tree.add(rec.queue, failure.released, -1)
        ctx.queues.wake()
    if failure.deleted:
        result.deprovision.append(failure.deleted)
    code = Code.UNRESOLVABLE if failure.record.state is CheckState.REJECTED else Code.WAIT
    result.parks.append(Park(rec.job.id, Status(code, (ac.reason(failure.record),))))


def request_capacity(
    ctx: Context, ac: AdmissionChecks, snap: Snapshot, p: Pending, now_s: float, result: CycleResult
) -> bool:
    """Step 3 for a job of a queue with a provisioning check: take a booking its queue's
    former jobs left (the one that expires first), or reserve quota and make a request.
    True only when the job was admitted on such a booking."""
    job, q = p.job, p.queue
    rec = ac.entry(job, q, p.preemptions)
    queue = ctx.tree.queues[q]
    flavors = [fq.flavor for fq in queue.flavors] or [""]
    for req in ac.orphans(q):
        placements, _ = place_job(req.pinned(job), snap, ctx.profile)
        if not placements:
            continue
        flavor = next(
            (
                f
                for f in flavors
                if not ctx.tree.shortfall(
                    q, placement_demand(placements, f, snap.table, ctx.tree.normalized)
                )
            ),
            None,
        )
        if flavor is None:
            continue
        rec = ac.take_booking(job.id, req.key, flavor)
        ctx.queues.remove(job.id)
        return _start_booked(ctx, ac, snap, rec, now_s, result)
    reasons: list[Reason] = []
    chosen: tuple[str, Vec] | None = None
    for f in flavors:
        demand = request_demand(job, f)
        short = ctx.tree.short_reasons(q, demand)
        if not short:
            chosen = (f, demand)
            break
        reasons.extend(short)
    limit = ac.limit_reason(rec.namespace) if chosen is not None else None
    if chosen is None or limit is not None:
        why = (
            tuple(reasons)
            if chosen is None
            else (step(Step.ADMISSION_CHECK, f"{limit}; waiting for one to end"),)
        )
        status = Status(Code.UNSCHEDULABLE, why)
        ctx.queues.park(job.id, status)
        result.parks.append(Park(job.id, status))
        return False
    flavor, demand = chosen
    fj = flavor_job(job, ctx.tree.flavors.get(flavor)) or job
    ctx.tree.add(q, demand)
    req = ac.reserve(job.id, flavor, demand, fj.pod_sets, now_s)
    ctx.queues.remove(job.id)
    result.provision.append(req)
    rec = ac.record(job.id) or rec
    result.parks.append(Park(job.id, Status(Code.WAIT, (ac.reason(rec),))))
    return False


def _start_booked(
    ctx: Context,
    ac: AdmissionChecks,
    snap: Snapshot,
    rec: CheckRecord,
    now_s: float,
    result: CycleResult,
) -> bool:
    """Admit a Ready job on its request's nodes (its pods pinned there), all or nothing; its
    run limit becomes what is left of the request's maxRunDurationSeconds."""
    req = ac.request(rec.request)
    assert req is not None
    placements, status = place_job(req.pinned(rec.job), snap, ctx.profile)
    if not placements:
        ac.note(
            rec.job.id,
            f"ProvisioningRequest {req.key} is Provisioned but its nodes "
            f"cannot hold the job yet: {status.message}",
        )
        return False
    demand = placement_demand(placements, rec.flavor, snap.table, ctx.tree.normalized)
    job = rec.job
    ends = req.run_ends_s
    if ends is not None:
        left = max(0.0, ends - now_s)
        if job.run_limit_s is None or left < job.run_limit_s:
            job = replace(job, run_limit_s=left)
    if rec.demand:
        ctx.tree.add(rec.queue, rec.demand, -1)
    start(ctx, snap, job, rec.queue, rec.flavor, placements, demand, now_s, rec.preemptions)
    ac.start_booked(job.id, now_s)
    result.binds.append(Bind(job.id, tuple(placements), ClusterQueueName(rec.queue), rec.flavor))
    return True
