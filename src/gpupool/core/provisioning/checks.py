"""The provisioning admission check's state: each job's way through the check, the bookings
running jobs consume, and the ledger of requests, all private behind verbs.

The cycle drives it (``core.provisioning.admit``): ``reserve`` (quota reserved, a request
made), ``take_booking`` (a booking a former job left), ``start_booked`` (the job runs on the
request's nodes), ``fail`` (quota released, back off or rejected). The cloud's answers come in
as facts (``accept``, ``provisioned``, ``request_failed``, ``revoke``, ``consume``,
``delete``). Adapters read it (``request``, ``record``, ``booking_of``) and keep it across a
restart (``export``, then ``restore`` and ``restore_record``/``restore_booking``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from gpupool.core.errors import InvalidJobError, NotFoundError
from gpupool.core.model import Job, JobId, PodSet
from gpupool.core.provisioning.config import AdmissionCheck
from gpupool.core.provisioning.history import ClassCapacity
from gpupool.core.provisioning.ledger import RequestLedger
from gpupool.core.provisioning.request import (
    MAX_ACTIVE_PER_PROJECT,
    MAX_NODES,
    MAX_POD_SETS,
    ProvisioningRequest,
    request_name,
)
from gpupool.core.reasons import Reason, Step, step
from gpupool.core.validation import check_request

if TYPE_CHECKING:
    from gpupool.core.admission import Vec
    from gpupool.core.quota import QueueConfig


class CheckState(StrEnum):
    """Kueue's AdmissionCheckState, per job."""

    PENDING = "Pending"  # waiting for quota (queued) or for its request (quota reserved)
    READY = "Ready"  # its request is Provisioned: the job starts on the nodes
    RETRY = "Retry"  # its request failed; quota released; waiting out the backoff
    REJECTED = "Rejected"  # retries spent: parked for good


@dataclass(frozen=True, slots=True)
class CheckRecord:
    """One job's way through the check. ``request`` is the key of its current request ("" when
    none); ``demand`` the quota reserved for it (empty when none); ``attempts`` the requests
    made so far."""

    job: Job
    queue: str
    check: AdmissionCheck
    namespace: str
    state: CheckState = CheckState.PENDING
    request: str = ""
    flavor: str = ""
    demand: Vec = field(default_factory=dict)
    attempts: int = 0
    retry_at_s: float = 0.0
    message: str = ""
    preemptions: int = 0


@dataclass(frozen=True, slots=True)
class Failure:
    """What ``fail`` undid: the quota the record held (to give back) and the request it deleted
    ("" when none), with the record as it stands now."""

    record: CheckRecord
    released: Vec
    deleted: str


@dataclass(frozen=True, slots=True)
class ProvisioningState:
    """Everything the checks hold, as an adapter keeps it across a restart: every request,
    each pending job's record, the request each running job consumed (and the job as it was
    submitted, its run limit not cut to the booking's), the requests made per job ever (their
    names' suffix)."""

    requests: tuple[ProvisioningRequest, ...] = ()
    records: tuple[CheckRecord, ...] = ()
    bookings: Mapping[JobId, str] = field(default_factory=dict)
    submitted: Mapping[JobId, Job] = field(default_factory=dict)
    made: Mapping[JobId, int] = field(default_factory=dict)


class AdmissionChecks:
    """The provisioning admission checks of a QueueConfig and every job's state in them."""

    def __init__(
        self, config: QueueConfig, max_active_per_project: int = MAX_ACTIVE_PER_PROJECT
    ) -> None:
        self.reconfigure(config)
        self._ledger = RequestLedger(max_active_per_project)
        self._records: dict[JobId, CheckRecord] = {}
        self._made: dict[JobId, int] = {}  # requests made per job, ever: their names' suffix
        self._booked: dict[JobId, str] = {}  # running job -> the request it consumed
        self._submitted: dict[JobId, Job] = {}  # running job -> as submitted (run limit uncut)
        self._outbox: list[str] = []  # requests deleted between cycles, for the next result

    # -- configuration -------------------------------------------------------------------------

    def reconfigure(self, config: QueueConfig) -> None:
        """The checks of a new configuration; requests, records and bookings are kept (a job
        already in a check finishes it as it began)."""
        self._checks = {c.name: c for c in config.admission_checks}
        self._by_queue: dict[str, AdmissionCheck] = {}
        for q in config.cluster_queues:
            for name in q.admission_checks:
                self._by_queue[q.name] = self._checks[name]
        self._ns = {lq.name: lq.namespace for lq in config.local_queues}

    @property
    def configured(self) -> bool:
        """Whether any ClusterQueue names a provisioning check."""
        return bool(self._by_queue)

    def check_for(self, queue: str) -> AdmissionCheck | None:
        return self._by_queue.get(queue)

    def namespace(self, job: Job) -> str:
        """The project a job's requests count to: its LocalQueue's namespace."""
        q = str(job.queue)
        if "/" in q:
            return q.split("/", 1)[0]
        return self._ns.get(q, "default")

    def validate(self, job: Job, queue: str) -> None:
        """Rules for a job of a queue with a provisioning check, instead of the inventory
        checks (its nodes do not exist yet): at most MAX_POD_SETS pod sets and MAX_NODES pods."""
        check_request(job)
        if len(job.pod_sets) > MAX_POD_SETS:
            raise InvalidJobError(
                "pod_sets",
                [ps.name for ps in job.pod_sets],
                f"queue {queue} provisions capacity through admission check "
                f"{self._by_queue[queue].name}, and a ProvisioningRequest holds at most "
                f"{MAX_POD_SETS} pod sets",
                job=job.id,
            )
        for i, ps in enumerate(job.pod_sets):
            if ps.count > MAX_NODES:
                raise InvalidJobError(
                    f"pod_sets[{i}].count",
                    ps.count,
                    f"a ProvisioningRequest asks for at most {MAX_NODES} nodes",
                    job=job.id,
                )
        if job.task_count > MAX_NODES:
            raise InvalidJobError(
                "pod_sets[*].count",
                job.task_count,
                f"a ProvisioningRequest asks for at most {MAX_NODES} nodes in all its pod sets",
                job=job.id,
            )

    # -- reading -------------------------------------------------------------------------------

    def request(self, key: str) -> ProvisioningRequest | None:
        return self._ledger.find(key)

    def requests(self) -> list[ProvisioningRequest]:
        return list(self._ledger)

    def capacity(self, provisioning_class_name: str) -> ClassCapacity:
        """What the class's requests have shown of the cloud: making times, scale-down lag,
        concurrent capacity, the requests holding nodes (``history``)."""
        return self._ledger.capacity(provisioning_class_name)

    def first_made_s(self, key: str) -> float | None:
        """When the job of request ``key`` made its first request (its place in the cloud's
        queue; None: not known)."""
        return self._ledger.first_made_s(key)

    def job_on(self, request: str) -> JobId | None:
        """The running job that consumed ``request``'s booking (None: none)."""
        return next((j for j, k in self._booked.items() if k == request), None)

    def record(self, job: JobId) -> CheckRecord | None:
        """The job's place in its check while it has not started (None otherwise)."""
        return self._records.get(job)

    def records(self) -> list[CheckRecord]:
        return list(self._records.values())

    def record_of(self, request: str) -> CheckRecord | None:
        """The record of the job waiting for ``request``."""
        return next((r for r in self._records.values() if r.request == request), None)

    def booking_of(self, job: JobId) -> str | None:
        """The key of the request whose nodes a running job runs on (None: it runs on the
        cluster's own nodes)."""
        return self._booked.get(job)

    def made(self, job: JobId) -> int:
        """How many requests the job ever had (the last one's suffix)."""
        return self._made.get(job, 0)

    def held(self) -> list[tuple[str, Vec]]:
        """(ClusterQueue, demand) of the quota reserved for jobs waiting on their request."""
        return [(r.queue, r.demand) for r in self._records.values() if r.demand]

    def next_deadline(self) -> float | None:
        """The earliest time a booking expires, if any waits."""
        return self._ledger.next_deadline()

    def limit_reason(self, namespace: str) -> str | None:
        """Why the project may not make another request now (None: it may)."""
        if not self._ledger.at_limit(namespace):
            return None
        return (
            f"project {namespace} has {self._ledger.active(namespace)} active "
            f"ProvisioningRequests, the most allowed ({self._ledger.max_active_per_project})"
        )

    def orphans(self, queue: str) -> list[ProvisioningRequest]:
        """Bookings a check made for a job of ``queue`` that no longer waits for them, the one
        that expires first first: the next job that fits their nodes takes them."""
        mine = {r.request for r in self._records.values() if r.request}
        taken = set(self._booked.values())
        out = [
            r
            for r in self._ledger
            if r.booked and r.queue == queue and r.job and r.key not in mine and r.key not in taken
        ]
        out.sort(key=lambda r: (r.booking_expires_s or 0.0, r.key))
        return out

    def ready(self) -> list[CheckRecord]:
        """Jobs whose request is Provisioned, the booking that expires first first."""
        out = [r for r in self._records.values() if r.state is CheckState.READY]
        out.sort(key=lambda r: (self._ledger.get(r.request).booking_expires_s or 0.0, r.request))
        return out

    @staticmethod
    def status(rec: CheckRecord) -> str:
        return f"admission check {rec.check.name} {rec.state.value}: {rec.message}"

    @staticmethod
    def reason(rec: CheckRecord) -> Reason:
        """``status`` as the reason a job of the check waits."""
        return step(Step.ADMISSION_CHECK, AdmissionChecks.status(rec))

    # -- facts from the cloud ------------------------------------------------------------------

    def create(self, req: ProvisioningRequest, now_s: float) -> ProvisioningRequest:
        """A request made by hand, for no job (see ``RequestLedger.create``)."""
        return self._ledger.create(req, now_s)

    def accept(self, key: str, now_s: float) -> ProvisioningRequest:
        return self._ledger.accept(key, now_s)

    def provisioned(self, key: str, nodes: Iterable[str], now_s: float) -> ProvisioningRequest:
        return self._ledger.provisioned(key, nodes, now_s)

    def request_failed(
        self, key: str, message: str, now_s: float, reason: str = "ProvisioningFailed"
    ) -> ProvisioningRequest:
        return self._ledger.fail(key, message, now_s, reason)

    def revoke(self, key: str, message: str, now_s: float) -> ProvisioningRequest:
        return self._ledger.revoke(key, message, now_s)

    def consume(self, key: str, now_s: float) -> ProvisioningRequest:
        return self._ledger.consume(key, now_s)

    def node_left(self, name: str, now_s: float) -> None:
        """A node left the cluster: if a provisioned request brought it, its class learns
        when (``history``)."""
        self._ledger.node_left(name, now_s)

    def delete(self, key: str, now_s: float | None = None) -> ProvisioningRequest:
        """Delete (cancel) a request; the next cycle passes the deletion on."""
        req = self._ledger.delete(key, now_s)
        self._outbox.append(key)
        return req

    # -- the cycle's verbs ---------------------------------------------------------------------

    def take_outbox(self) -> list[str]:
        """Requests deleted since the last cycle (the cycle passes them on)."""
        out, self._outbox = self._outbox, []
        return out

    def expire(self, now_s: float) -> list[str]:
        """Bookings past their expiry expire; returns those nobody waits for (their nodes may
        go)."""
        return [r.key for r in self._ledger.expire(now_s) if self.record_of(r.key) is None]

    def mark_ready(self, job: JobId, message: str) -> CheckRecord:
        rec = self._records[job] = replace(
            self._records[job], state=CheckState.READY, message=message
        )
        return rec

    def due(self, now_s: float) -> list[CheckRecord]:
        """Jobs whose backoff is over: Pending again, to be queued for quota again."""
        out = []
        for rec in list(self._records.values()):
            if rec.state is CheckState.RETRY and rec.retry_at_s <= now_s:
                out.append(
                    self._set(
                        replace(
                            rec,
                            state=CheckState.PENDING,
                            message=f"retry {rec.attempts} of "
                            f"{rec.check.config.retry.backoff_limit_count}: queued for quota "
                            "again",
                        )
                    )
                )
        return out

    def note(self, job: JobId, message: str) -> None:
        self._records[job] = replace(self._records[job], message=message)

    def entry(self, job: Job, queue: str, preemptions: int) -> CheckRecord:
        """The job's record, made when it is first offered to its queue's check."""
        rec = self._records.get(job.id)
        if rec is None:
            check = self._by_queue[queue]
            rec = self._set(
                CheckRecord(job, queue, check, self.namespace(job), preemptions=preemptions)
            )
        return rec

    def reserve(
        self, job: JobId, flavor: str, demand: Vec, pod_sets: tuple[PodSet, ...], now_s: float
    ) -> ProvisioningRequest:
        """Quota ``demand`` is reserved for the job (the caller charged it) and its next
        request made (attempt ``attempts + 1``), named ``<job>-<n>`` with n counting every
        request the job ever had, so a name is not reused (a job requeued after its capacity
        was revoked starts its attempts afresh)."""
        rec = self._records[job]
        made = self._made.get(job, 0)
        while True:
            made += 1
            name = request_name(str(job), made)
            if f"{rec.namespace}/{name}" not in self._ledger:
                break
        self._made[job] = made
        cfg = rec.check.config
        req = self._ledger.create(
            ProvisioningRequest(
                name=name,
                pod_sets=pod_sets,
                namespace=rec.namespace,
                provisioning_class_name=cfg.provisioning_class_name,
                max_run_duration_s=cfg.max_run_duration_s,
                job=str(job),
                queue=rec.queue,
            ),
            now_s,
        )
        attempts = rec.attempts + 1
        self._set(
            replace(
                rec,
                flavor=flavor,
                demand=dict(demand),
                request=req.key,
                state=CheckState.PENDING,
                attempts=attempts,
                message=f"quota reserved; ProvisioningRequest {req.key} made (attempt {attempts} "
                f"of {1 + cfg.retry.backoff_limit_count})",
            )
        )
        return req

    def take_booking(self, job: JobId, request: str, flavor: str) -> CheckRecord:
        """The job takes a booking its queue's former job left (see ``orphans``): Ready."""
        return self._set(
            replace(
                self._records[job],
                request=request,
                flavor=flavor,
                state=CheckState.READY,
                message=f"took the booking of ProvisioningRequest {request}",
            )
        )

    def start_booked(self, job: JobId, now_s: float) -> CheckRecord:
        """The job started on its request's nodes: the booking is consumed and held until the
        job ends. Returns the record it had (its ``demand`` is the reserved quota to give
        back)."""
        rec = self._records.pop(job)
        self._ledger.consume(rec.request, now_s)
        self._booked[job] = rec.request
        self._submitted[job] = rec.job
        return rec

    def fail(self, job: JobId, why: str, now_s: float) -> Failure:
        """The job's request will not serve it: its quota is released (returned for the caller
        to give back), the request deleted, and the job backs off (Retry) or, its retries
        spent, is Rejected."""
        rec = self._records[job]
        deleted = ""
        if rec.request:
            if rec.request in self._ledger:
                self._ledger.delete(rec.request, now_s)
            deleted = rec.request
        retry = rec.check.config.retry
        if rec.attempts > retry.backoff_limit_count:
            new = replace(
                rec,
                demand={},
                request="",
                state=CheckState.REJECTED,
                message=f"{why}; rejected after {rec.attempts} ProvisioningRequests "
                f"(backoffLimitCount {retry.backoff_limit_count})",
            )
        else:
            at = now_s + retry.delay_s(rec.attempts)
            new = replace(
                rec,
                demand={},
                request="",
                state=CheckState.RETRY,
                retry_at_s=at,
                message=f"{why}; quota released, retry {rec.attempts} of "
                f"{retry.backoff_limit_count} at t={at:.0f}s",
            )
        return Failure(self._set(new), rec.demand, deleted)

    def unbook(self, job: JobId, now_s: float | None = None) -> Job | None:
        """A job that ran on provisioned nodes is done with them (at ``now_s``): its request is
        deleted. Returns the job as submitted (its run limit not cut to the request's); None
        when it ran on no booking."""
        key = self._booked.pop(job, None)
        if key is None:
            return None
        if key in self._ledger:
            self._ledger.delete(key, now_s)
        self._outbox.append(key)
        return self._submitted.pop(job, None)

    def cancel(self, job: JobId, now_s: float | None = None) -> CheckRecord | None:
        """The job left while in its check: its record is dropped (returned: the caller gives
        back its ``demand``) and its request deleted, unless it is Provisioned already: the
        booking is then kept until it expires, for the next job of the queue that fits."""
        rec = self._records.pop(job, None)
        if (
            rec is not None
            and rec.request
            and rec.request in self._ledger
            and not self._ledger.get(rec.request).booked
        ):
            self.delete(rec.request, now_s)
        return rec

    def _set(self, rec: CheckRecord) -> CheckRecord:
        self._records[rec.job.id] = rec
        return rec

    # -- kept across a restart -----------------------------------------------------------------

    def export(self) -> ProvisioningState:
        return ProvisioningState(
            tuple(self._ledger),
            tuple(self._records.values()),
            dict(self._booked),
            dict(self._submitted),
            dict(self._made),
        )

    def restore(self, requests: Iterable[ProvisioningRequest]) -> None:
        """ProvisioningRequests as they stood before a restart, with their conditions, nodes
        and consumption (no rule is applied: they were accepted then)."""
        for req in requests:
            self._ledger.restore(req)

    def restore_record(self, rec: CheckRecord, made: int) -> CheckRecord:
        if rec.request and rec.request not in self._ledger:
            raise NotFoundError(f"ProvisioningRequest {rec.request!r} does not exist")
        self.restore_made(rec.job.id, made)
        return self._set(rec)

    def restore_booking(self, job: JobId, request: str, submitted: Job) -> ProvisioningRequest:
        req = self._ledger.get(request)
        self._booked[job] = request
        self._submitted[job] = submitted
        return req

    def restore_made(self, job: JobId, made: int) -> None:
        """Requests the job had before a restart: the next one is numbered past them."""
        if made > self._made.get(job, 0):
            self._made[job] = made
