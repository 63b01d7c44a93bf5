"""The loop's step: jobs that ended are finished, the core runs one cycle, and its decisions
are carried out on the cluster and written, all in one transaction."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from gpupool.control import history, provisioning, recovery
from gpupool.control.codec import placement_to_json
from gpupool.control.journal import Changes
from gpupool.control.reasons import owner_reason
from gpupool.control.records import (
    HISTORY_EVERY_S,
    EventReason,
    JobPhase,
    JobRecord,
    TickResult,
    for_owner,
)
from gpupool.core.decisions import CycleResult
from gpupool.core.model import JobId

if TYPE_CHECKING:
    from gpupool.control.plane import ControlPlane


def tick(plane: ControlPlane) -> TickResult:
    """Finish jobs that ended, run one cycle, carry out and record its decisions."""
    with plane.lock:
        now = plane.clock.now()
        out = TickResult(now)
        changes = Changes()
        for key in plane.backend.due(now):
            rec = plane.jobs.get(key)
            if rec is None or rec.phase != JobPhase.RUNNING:
                continue
            limit = plane.scheduler.run_limit_s(JobId(key))
            plane.scheduler.finished(JobId(key), now)
            limited = limit is not None and (rec.job.duration_s or 0.0) > limit
            rec.phase = JobPhase.FAILED if limited else JobPhase.SUCCEEDED
            rec.finished_s = now
            rec.message = f"stopped at its run limit ({limit:g} s)" if limited else "completed"
            changes.job(key, phase=rec.phase, finished_s=now, message=rec.message)
            reason = EventReason.RUN_LIMIT_REACHED if limited else EventReason.COMPLETED
            changes.event(
                now, reason, "Job", key, rec.message, rec.request.namespace, warning=limited
            )
            out.finished += 1
        plane._tick_changes = changes
        try:
            if plane.cloud is not None:
                plane.cloud.advance(now)  # nodes made or taken back by now
            t0 = time.perf_counter()
            result = plane.scheduler.cycle(now)
            out.decision_s = time.perf_counter() - t0
            _carry_out(plane, result, now, changes, out)
            if plane.cloud is not None:
                plane.cloud.on_cycle(result, now)
            provisioning.save_provisioning(plane, changes)
        finally:
            plane._tick_changes = None
        plane.journal.commit(changes)
        plane.cycles += 1
        plane.metrics.cycle(out.decision_s)
        plane.last_tick = out
        for w in plane.watchers:
            w.ticked(out)
        if plane.clock.monotonic() - plane._sampled_at >= HISTORY_EVERY_S:
            history.sample(plane, now)
        return out


def _carry_out(
    plane: ControlPlane, result: CycleResult, now: float, changes: Changes, out: TickResult
) -> None:
    for ev in result.evicts:
        rec = plane.jobs[ev.job]
        plane.backend.stop(rec.key)
        rec.phase, rec.placements, rec.started_s, rec.flavor = JobPhase.PENDING, (), None, ""
        rec.alternative = ""
        rec.preemptions += 1
        ns = rec.request.namespace
        rec.message = for_owner(ev.message, ns, plane.jobs)
        changes.job(
            rec.key,
            phase=JobPhase.PENDING,
            placements=[],
            started_s=None,
            flavor="",
            alternative="",
            preemptions=rec.preemptions,
            message=rec.message,
        )
        changes.event(
            now,
            EventReason.PREEMPTED,
            "Job",
            rec.key,
            for_owner(
                f"{ev.reason}: preempted by {ev.preemptor}; back in its queue", ns, plane.jobs
            ),
            ns,
            warning=True,
        )
        plane.metrics.preempted(ev.queue, ev.reason)
        out.evicted += 1
    for b in result.binds:
        rec = plane.jobs[b.job]
        plane.scheduler.confirm(b.placements)
        rec.phase, rec.placements, rec.started_s = JobPhase.RUNNING, b.placements, now
        rec.flavor, rec.cluster_queue, rec.message = b.flavor, b.queue, ""
        rec.alternative = b.alternative
        plane.backend.start(rec.key, b.placements, now, recovery.end_s(plane, rec))
        nodes = sorted({pl.node for pl in b.placements})
        changes.job(
            rec.key,
            phase=JobPhase.RUNNING,
            started_s=now,
            flavor=b.flavor,
            message="",
            alternative=b.alternative,
            placements=[placement_to_json(pl) for pl in b.placements],
        )
        changes.event(
            now,
            EventReason.ADMITTED,
            "Job",
            rec.key,
            f"admitted by ClusterQueue {b.queue} (flavor {b.flavor or '-'}) "
            f"after {now - rec.submitted_s:.0f} s; bound to "
            f"{', '.join(nodes[:4])}{' ...' if len(nodes) > 4 else ''}",
            rec.request.namespace,
        )
        plane.metrics.admitted(b.queue, now - rec.submitted_s)
        out.bound += 1
    for p in result.parks:
        parked = plane.jobs.get(p.job)
        if parked is not None:
            message = owner_reason(p.status, _usable(plane, parked), plane.config.flavors)
            parked.message = for_owner(message, parked.request.namespace, plane.jobs)
            out.parked += 1


def _usable(plane: ControlPlane, rec: JobRecord) -> set[str]:
    """The flavors of the job's ClusterQueue whose nodes could hold it (cached while the
    nodes stay as they are)."""
    version = plane.scheduler.nodes_version
    hit = plane._usable_cache.get(rec.key)
    if hit is not None and hit[0] == version:
        return hit[1]
    usable = plane.scheduler.usable_flavors(rec.job, rec.cluster_queue)
    if len(plane._usable_cache) > 100_000:
        plane._usable_cache.clear()
    plane._usable_cache[rec.key] = (version, usable)
    return usable
