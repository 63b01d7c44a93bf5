"""The Scheduler's provisioning side: facts from the cloud about ProvisioningRequests, and the
admission checks' state taken back after a restart (see ``core.provisioning``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gpupool.core.admission import QuotaTree, request_demand
from gpupool.core.cluster import ClusterState
from gpupool.core.context import Context
from gpupool.core.errors import NotFoundError
from gpupool.core.model import JobId
from gpupool.core.preemption import Running
from gpupool.core.provisioning import (
    AdmissionChecks,
    CheckRecord,
    CheckState,
    ProvisioningRequest,
    ProvisioningState,
)
from gpupool.core.queueing import Queues
from gpupool.core.quota import QueueConfig
from gpupool.core.validation import Validator


class ProvisioningFacts:
    """Part of ``Scheduler``: its provisioning admission checks, facts in and state back."""

    _state: ClusterState
    _tree: QuotaTree
    _queues: Queues
    config: QueueConfig
    validator: Validator
    _ctx: Context
    _max_requests: int

    # -- provisioning: facts from the cloud ---------------------------------------------------

    @property
    def checks(self) -> AdmissionChecks | None:
        """The provisioning admission checks (None when no queue names one)."""
        return self._ctx.checks

    def _book(self) -> AdmissionChecks:
        if self._ctx.checks is None:
            self._ctx.checks = AdmissionChecks(self.config, self._max_requests)
        return self._ctx.checks

    def provisioning_requests(self) -> list[ProvisioningRequest]:
        return self._ctx.checks.requests() if self._ctx.checks is not None else []

    def provisioning_request(self, key: str) -> ProvisioningRequest | None:
        return self._ctx.checks.request(key) if self._ctx.checks is not None else None

    def provisioning_state(self) -> ProvisioningState:
        """What the admission checks hold, as an adapter keeps it across a restart."""
        ac = self._ctx.checks
        return ac.export() if ac is not None else ProvisioningState()

    def create_provisioning_request(
        self, req: ProvisioningRequest, now_s: float
    ) -> ProvisioningRequest:
        """A request made by hand, for no job: its booking is left alone by admission checks
        and expires unless its owner's pods consume it (``consume_provisioning_request``)."""
        return self._book().create(req, now_s)

    def provisioning_accepted(self, key: str, now_s: float) -> ProvisioningRequest:
        return self._book().accept(key, now_s)

    def provisioning_provisioned(
        self, key: str, nodes: Iterable[str], now_s: float
    ) -> ProvisioningRequest:
        """Every node of the request has joined (add them with ``add_node`` first or after:
        the job starts once they are there). The job waiting for it starts at the next
        cycle."""
        req = self._book().provisioned(key, nodes, now_s)
        self._queues.wake()
        return req

    def provisioning_failed(
        self, key: str, message: str, now_s: float, reason: str = "ProvisioningFailed"
    ) -> ProvisioningRequest:
        return self._book().request_failed(key, message, now_s, reason)

    def provisioning_revoked(self, key: str, message: str, now_s: float) -> ProvisioningRequest:
        """The cloud took the nodes back (remove them with ``remove_node``: their jobs are
        requeued whole)."""
        return self._book().revoke(key, message, now_s)

    def consume_provisioning_request(self, key: str, now_s: float) -> ProvisioningRequest:
        """Pods of a request made by hand started on its nodes: the booking will not expire."""
        return self._book().consume(key, now_s)

    def delete_provisioning_request(self, key: str, now_s: float) -> ProvisioningRequest:
        """Delete (cancel) a request. A job waiting for it backs off and retries at the next
        cycle, as for a failure."""
        return self._book().delete(key, now_s)

    # -- provisioning: taken back after a restart ----------------------------------------------

    def restore_provisioning(self, requests: Iterable[ProvisioningRequest]) -> None:
        """ProvisioningRequests as they stood before a restart, with their conditions, nodes
        and consumption; nothing is asked of the cloud."""
        self._book().restore(requests)

    def restore_check(
        self,
        job: JobId,
        state: CheckState,
        *,
        request: str = "",
        flavor: str = "",
        attempts: int = 0,
        made: int = 0,
        retry_at_s: float = 0.0,
        message: str = "",
    ) -> CheckRecord:
        """A pending job's place in its queue's admission check, as before a restart. The job
        was submitted again first (it is in its queue); where the check held quota for it (a
        request made and not failed: Pending with a request, or Ready) the quota is reserved
        again and the job leaves its queue, as does a job backing off or rejected. NotFoundError
        when the job is not pending or its queue has no check; the request must be restored
        first (``restore_provisioning``)."""
        ac = self._ctx.checks
        if ac is None or job not in self._queues:
            raise NotFoundError(f"job {job} is not pending in a queue with an admission check")
        p = self._queues.get(job)
        assert p is not None
        check = ac.check_for(p.queue)
        if check is None:
            raise NotFoundError(f"ClusterQueue {p.queue} has no admission check")
        holds = bool(request) and state in (CheckState.PENDING, CheckState.READY)
        rec = ac.restore_record(
            CheckRecord(
                p.job,
                p.queue,
                check,
                ac.namespace(p.job),
                state,
                request,
                flavor,
                request_demand(p.job, flavor) if holds else {},
                attempts=attempts,
                retry_at_s=retry_at_s,
                message=message,
                preemptions=p.preemptions,
            ),
            made,
        )
        if holds:
            self._tree.add(p.queue, rec.demand)
        if holds or state in (CheckState.RETRY, CheckState.REJECTED):
            self._queues.remove(job)
        return rec

    def restore_requests_made(self, job: JobId, made: int) -> None:
        """How many ProvisioningRequests a job had before a restart (read back from their
        names): its next one is numbered past them."""
        self._book().restore_made(job, made)

    def restore_booking(self, job: JobId, request: str) -> Running:
        """A running job taken back (``restore``) that runs on the nodes of ``request``: the
        request stays until the job ends, and the job's run limit is what the booking left it
        at its start."""
        ac = self._book()
        r = self._ctx.running.get(job)
        if r is None:
            raise NotFoundError(f"job {job} is not running")
        req = ac.restore_booking(job, request, r.job)
        ends = req.run_ends_s
        if ends is not None:
            left = max(0.0, ends - r.start_s)
            if r.job.run_limit_s is None or left < r.job.run_limit_s:
                r = replace(r, job=replace(r.job, run_limit_s=left))
                self._ctx.running[job] = r
        return r
