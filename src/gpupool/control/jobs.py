"""Jobs: submitted (written, then acknowledged), read, cancelled and deleted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpupool.config.jobs import parse_job
from gpupool.control import provisioning
from gpupool.control.journal import Changes
from gpupool.control.limits import check_metadata
from gpupool.control.records import TERMINAL, EventReason, JobPhase, JobRecord, in_document_terms
from gpupool.core.errors import ConflictError, InvalidJobError, NotFoundError
from gpupool.core.model import JobId
from gpupool.store.sqlite import NewEvent
from gpupool.usage.profile import check_annotation

if TYPE_CHECKING:
    from gpupool.control.plane import ControlPlane


def submit(
    plane: ControlPlane, body: object, namespace: str | None = None, *, sync: bool = True
) -> JobRecord:
    """Accept a Job document: written to the state file and queued, or an error and
    nothing changed (InvalidJobError, NotFoundError for a queue, ConflictError).

    The write is made durable after the lock is let go, so that submissions arriving
    together share one fsync; with ``sync=False`` that is left to the caller, who calls
    ``sync()`` before acknowledging (and may then read the record under the lock first).
    """
    rec = _submit(plane, body, namespace)
    if sync:
        plane.sync()
    return rec


def _submit(plane: ControlPlane, body: object, namespace: str | None) -> JobRecord:
    check_metadata(body)  # before the lock: a refusal costs no one a wait
    check_annotation(body)  # an actual-use profile the virtual cluster could not run
    with plane.lock:
        now = plane.clock.now()
        request = parse_job(body, plane.config, namespace=namespace, submit_time_s=now)
        if request.key in plane.jobs:
            raise ConflictError(
                f"job {request.key} already exists ({plane.jobs[request.key].phase})"
            )
        sched = plane.scheduler
        cq = sched.resolve_queue(request.job.queue)
        try:
            sched.submit(request.job, now)  # checks it could ever run here, then queues
        except InvalidJobError as exc:
            raise in_document_terms(exc, request) from None
        try:
            uid = plane.journal.insert_job(
                request,
                now,
                NewEvent(
                    now,
                    "Normal",
                    "Submitted",
                    "Job",
                    request.key,
                    request.namespace,
                    f"queued in {request.queue} (ClusterQueue {cq})",
                ),
            )
        except BaseException:
            sched.cancel(request.job.id, now)  # not on disk, so not accepted
            raise
        rec = JobRecord(uid, request, JobPhase.PENDING, now, cluster_queue=cq)
        plane.jobs[request.key] = rec
        plane.metrics.submitted(cq)
        return rec


def job(plane: ControlPlane, key: str) -> JobRecord:
    with plane.lock:
        rec = plane.jobs.get(key)
        if rec is None:
            raise NotFoundError(f"job {key} not found")
        return rec


def cancel(plane: ControlPlane, key: str) -> JobRecord:
    """Cancel a pending or running job (its cards are free at once). Idempotent: a job
    that has ended already is left as it is, record and all (``delete`` removes it)."""
    with plane.lock:
        rec = plane.job(key)
        if rec.phase in TERMINAL:
            return rec
        _cancel(plane, rec, plane.clock.now())
        return rec


def delete(plane: ControlPlane, key: str) -> JobRecord:
    """Delete a job: cancelled first if it is pending or running, then its record is
    removed (its events stay), so that its name can be used again. Returns the record
    as it was last."""
    with plane.lock:
        rec = plane.job(key)
        now = plane.clock.now()
        if rec.phase not in TERMINAL:
            _cancel(plane, rec, now)
        plane.journal.delete_job(
            key,
            NewEvent(
                now,
                "Normal",
                "Deleted",
                "Job",
                key,
                rec.request.namespace,
                f"deleted ({rec.phase.lower()})",
            ),
        )
        del plane.jobs[key]
        return rec


def _cancel(plane: ControlPlane, rec: JobRecord, now: float) -> None:
    key = rec.key
    written = Changes()  # on disk first: a failed write cancels nothing
    written.job(key, phase=JobPhase.CANCELLED, finished_s=now, message="cancelled")
    written.event(
        now,
        EventReason.CANCELLED,
        "Job",
        key,
        f"cancelled while {rec.phase.lower()}",
        rec.request.namespace,
    )
    plane.journal.commit(written)
    if rec.phase == JobPhase.RUNNING:
        plane.backend.stop(key)
    plane.scheduler.cancel(JobId(key), now)
    rec.phase, rec.finished_s, rec.message = JobPhase.CANCELLED, now, "cancelled"
    changes = Changes()
    provisioning.save_provisioning(plane, changes)
    plane.journal.commit(changes)
