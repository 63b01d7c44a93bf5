"""Start-up and recovery: the state file read back and the scheduler built from it.

Recovery is the same path as start-up: the state file holds nodes, queue objects and jobs;
running jobs take back exactly the cards they held (``Scheduler.restore``), pending jobs go back
to their queues in submission order. Changing a queue object rebuilds the scheduler the same
way, so there is one way to build it, exercised on every start.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpupool.cloud.region import Cloud
from gpupool.config.documents import Document
from gpupool.config.jobs import parse_job
from gpupool.config.queues import queue_config_from_documents
from gpupool.control import provisioning
from gpupool.control.codec import node_from_json, placement_from_json, request_from_json
from gpupool.control.journal import Changes
from gpupool.control.records import (
    ACTIVE,
    CHECK_KIND,
    CLOUD_HORIZON_S,
    CLOUD_KIND,
    QUEUE_KINDS,
    REQUEST_KIND,
    EventReason,
    JobPhase,
    JobRecord,
    key_of,
)
from gpupool.core.errors import ConflictError, InvalidJobError, NotFoundError
from gpupool.core.model import JobId, Node
from gpupool.core.provisioning import CheckState
from gpupool.core.quota import QueueConfig
from gpupool.core.scheduler import Scheduler

if TYPE_CHECKING:
    from gpupool.control.plane import ControlPlane


def open_state(
    plane: ControlPlane, nodes: Sequence[Node], queue_docs: Sequence[Mapping[str, Any]]
) -> None:
    """Start-up: a new state file is seeded with ``nodes`` and ``queue_docs``; an existing one
    is read back (queue objects, nodes, provisioning state, jobs, the simulated cloud) and the
    scheduler built from it."""
    plane.journal.seed(
        nodes, ((str(d.get("kind")), key_of(str(d.get("kind")), d), d) for d in queue_docs)
    )
    plane.queue_docs = {(k, n): b for k, n, b, _ in plane.store.objects() if k in QUEUE_KINDS}
    plane.config = config_of(plane.queue_docs)
    for _, name, body, _ in plane.store.objects("Node"):
        plane.node_status[name] = body
    for kind in (REQUEST_KIND, CHECK_KIND):
        for _, name, body, _ in plane.store.objects(kind):
            plane._saved[(kind, name)] = body
    for row in plane.store.jobs():
        request = parse_job(
            row.document,
            plane.config,
            submit_time_s=row.submitted_s,
            check_queue=row.phase in ACTIVE,
        )
        rec = JobRecord(
            row.uid,
            request,
            JobPhase(row.phase),
            row.submitted_s,
            row.started_s,
            row.finished_s,
            row.flavor,
            "",
            tuple(placement_from_json(row.key, p) for p in row.placements),
            row.preemptions,
            row.message,
            row.alternative,
        )
        plane.jobs[row.key] = rec
    build(plane)
    if plane._cloud_spec is not None:
        plane.cloud = Cloud(plane._cloud_spec, plane, plane._cloud_seed, CLOUD_HORIZON_S)
        saved = [b for _, n, b, _ in plane.store.objects(CLOUD_KIND) if n == plane._cloud_spec.name]
        if saved:
            try:
                plane.cloud.restore(saved[0])
                plane.cloud.reconcile(
                    {r.key for r in plane.scheduler.provisioning_requests()}, plane.clock.now()
                )
            except (KeyError, TypeError, ValueError) as exc:  # another cloud file
                spec, why = plane._cloud_spec, repr(exc)
                plane.cloud = Cloud(spec, plane, plane._cloud_seed, CLOUD_HORIZON_S)
                plane.journal.record(
                    lambda c: c.event(
                        plane.clock.now(),
                        EventReason.CLOUD_RESET,
                        "Cloud",
                        spec.name,
                        f"the saved cloud state does not fit this cloud's spec ({why}); it "
                        "starts afresh",
                        warning=True,
                    )
                )
    recovered = Counter(r.phase for r in plane.jobs.values())
    if recovered:
        said = "state file read: " + ", ".join(
            f"{n} {p.lower()}" for p, n in sorted(recovered.items())
        )
        plane.journal.record(
            lambda c: c.event(plane.clock.now(), EventReason.RECOVERED, "Cluster", "", said)
        )


def config_of(docs: Mapping[tuple[str, str], Mapping[str, Any]]) -> QueueConfig:
    return queue_config_from_documents(
        [Document(f"{kind} {name}", 1, body) for (kind, name), body in docs.items()]
    )


def nodes_of(plane: ControlPlane) -> list[Node]:
    out = []
    for body in plane.node_status.values():
        if not body.get("failed"):
            out.append(node_from_json(body["node"]))
    return out


def build(plane: ControlPlane) -> None:
    """A new Scheduler from the nodes, queues and jobs held now."""
    rows = provisioning.provisioning_rows(plane) if hasattr(plane, "scheduler") else plane._saved
    sched = Scheduler(nodes_of(plane), plane.config, plane.profile)
    now = plane.clock.now()
    requests = [request_from_json(b) for (k, _), b in sorted(rows.items()) if k == REQUEST_KIND]
    if requests:
        sched.restore_provisioning(requests)
    checks = {n: b for (k, n), b in rows.items() if k == CHECK_KIND}
    running = sorted(
        (r for r in plane.jobs.values() if r.phase == JobPhase.RUNNING),
        key=lambda r: (r.started_s or 0.0, r.uid),
    )
    conflicts = Changes()
    for rec in running:
        try:
            restored = sched.restore(
                rec.job,
                rec.placements,
                rec.started_s or now,
                rec.flavor,
                rec.preemptions,
                rec.alternative,
            )
        except ConflictError as exc:
            # Two holders of one card (a state file two servers wrote): the one that
            # started first keeps it, the later one goes back to its queue, whole.
            _requeue_conflict(rec, str(exc), now, conflicts)
            continue
        rec.cluster_queue = restored.queue
        booking = (checks.get(rec.key) or {}).get("booking")
        if booking:
            with contextlib.suppress(NotFoundError):
                sched.restore_booking(JobId(rec.key), str(booking))
        plane.backend.start(rec.key, rec.placements, rec.started_s or now, end_s(plane, rec, sched))
    for rec in sorted(
        (r for r in plane.jobs.values() if r.phase == JobPhase.PENDING), key=lambda r: r.uid
    ):
        try:
            sched.submit(rec.job, rec.submitted_s)
        except InvalidJobError:
            # Accepted before; the nodes it needs are away (failed) for now. It waits,
            # parked with its reason, until they are back.
            sched.queue_again(rec.job, rec.preemptions)
        rec.cluster_queue = sched.resolve_queue(rec.job.queue)
        check = checks.get(rec.key)
        if check and not check.get("booking"):
            with contextlib.suppress(NotFoundError, ValueError):
                # its queue may have lost its admission check since: it queues plainly
                sched.restore_check(
                    JobId(rec.key),
                    CheckState(check["state"]),
                    request=str(check["request"]),
                    flavor=str(check["flavor"]),
                    attempts=int(check["attempts"]),
                    made=int(check["made"]),
                    retry_at_s=float(check["retryAt"]),
                    message=str(check["message"]),
                )
    for w in plane.watchers:
        w.scheduler_built(sched)
    plane.scheduler = sched
    plane._usable_cache.clear()  # a new table, maybe new flavors
    plane.journal.commit(conflicts)
    if plane.cloud is not None:  # deletions the old scheduler had not passed on yet
        plane.cloud.reconcile({r.key for r in sched.provisioning_requests()}, now)


def _requeue_conflict(rec: JobRecord, why: str, now: float, changes: Changes) -> None:
    """A running job whose cards another running job, started earlier, holds: back to
    Pending (it queues below, in submission order) with a Warning event."""
    rec.phase, rec.placements, rec.started_s, rec.flavor = JobPhase.PENDING, (), None, ""
    rec.alternative = ""
    rec.message = (
        f"its cards were held by another job when the state file was read "
        f"({why}); back in its queue"
    )
    changes.job(
        rec.key,
        phase=JobPhase.PENDING,
        placements=[],
        started_s=None,
        flavor="",
        alternative="",
        message=rec.message,
    )
    changes.event(
        now,
        EventReason.RESTORE_CONFLICT,
        "Job",
        rec.key,
        rec.message,
        rec.request.namespace,
        warning=True,
    )


def end_s(plane: ControlPlane, rec: JobRecord, sched: Scheduler | None = None) -> float:
    """When a running job ends: its duration, or its run limit (cut by the booking it
    runs on, when it consumed one)."""
    run = rec.job.duration_s or 0.0
    limit = (sched or plane.scheduler).run_limit_s(JobId(rec.key))
    if limit is not None:
        run = min(run, limit)
    return (rec.started_s or 0.0) + run
