"""Queued provisioning after a restart: the ProvisioningRequests gpupool made, taken back.

After any ``Controller.rebuild`` (start-up, leadership gained, a queue change)
the requests gpupool made are taken back from the informer's cache, which the controller
waits for before it first builds its scheduler. gpupool's requests carry the label
``app.kubernetes.io/managed-by: gpupool`` and the annotations ``gpupool.io/job``,
``gpupool.io/queue``, ``gpupool.io/flavor`` and ``gpupool.io/attempt``, and once
Provisioned ``gpupool.io/nodes`` (its booking); a request without them is not gpupool's and
is left alone. Each is read back with its conditions (times mapped to the controller's
clock), its nodes and, when bound pods annotated to consume it exist, as consumed at the
start of the job running there:

- a running job whose pods consume a request keeps it as its booking
  (``Scheduler.restore_booking``): the request is deleted when the job ends and its run
  limit is what the booking left it;
- a pending job's latest request (the highest ``<job>-<n>``) becomes its check record again
  (``Scheduler.restore_check``): ``Ready`` when Provisioned and not ended, else ``Pending``
  with the request (a Failed, expired or revoked one is failed over to a retry by the next
  cycle); quota is reserved again, no request is made for it. Older requests of the job are
  deleted. The job's next request is numbered past every ``<n>`` seen, on requests and on its
  pods' consume annotation, so no name is used twice. A gang whose pods are not all there yet
  gets its request back when it is complete;
- a request whose job is gone is deleted (logged), unless it is an unconsumed booking
  (Provisioned, not ended): that one is kept, as the core keeps the booking of a job that
  went away, for the next job of its queue that fits its nodes, until it expires.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from gpupool.core.admission import flavor_job
from gpupool.core.errors import GpupoolError, NotFoundError
from gpupool.core.model import JobId, PodSet
from gpupool.core.provisioning import CONSUME_ANNOTATION, CheckState, ProvisioningRequest
from gpupool.k8s.provisioning_objects import (
    Marks,
    attempt_of,
    marks_of,
    request_from_object,
)

if TYPE_CHECKING:
    from gpupool.core.scheduler import Scheduler
    from gpupool.k8s.controller import Controller
    from gpupool.k8s.informer import Informer

__all__ = ["TakeBack"]

log = logging.getLogger("gpupool.k8s.provisioning")


class TakeBack:
    """The restart half of ``ProvisioningAdapter``: requests read back from its informer's
    cache at a rebuild (``restore``), when their job is submitted again (``resubmitted``),
    and those whose job never comes back (``sweep``)."""

    controller: Controller
    informer: Informer
    made: set[str]  # keys created (or taken back) and not deleted
    fed: dict[str, set[str]]  # request key -> conditions fed to the core
    waiting: dict[JobId, list[str]]  # requests read back, by job, for jobs not submitted yet

    if TYPE_CHECKING:

        def nodes_of(self, key: str) -> list[str]: ...

        def _attribute(self, key: str, obj: dict[str, Any]) -> tuple[list[str], bool]: ...

    def _at(self, wall_s: float | None) -> float:
        """A wall time as the controller's clock reads it (now when unknown)."""
        now = self.controller.clock()
        return now if wall_s is None else now - max(0.0, time.time() - wall_s)

    def _read(self, key: str, consumed_s: float | None = None) -> ProvisioningRequest | None:
        """The core's request for the cached object ``key`` (None when gone or unreadable),
        with the pod set of its job where the core knows the job."""
        obj = self.informer.cache.get(key)
        marks = marks_of(obj) if obj is not None else None
        if obj is None or marks is None:
            return None
        try:
            return request_from_object(
                obj, self._pod_sets(marks), self.nodes_of(key), self._at, consumed_s
            )
        except GpupoolError as exc:
            log.warning("ProvisioningRequest %s cannot be read back; left alone: %s", key, exc)
            return None

    def _pod_sets(self, marks: Marks) -> Sequence[PodSet] | None:
        sched = self.controller.sched
        if sched is None:
            return None
        p = sched.pending_job(marks.job)
        r = sched.running_job(marks.job)
        job = p.job if p is not None else r.job if r is not None else None
        if job is None:
            return None
        fj = flavor_job(job, sched.flavor(marks.flavor or "")) or job
        return fj.pod_sets

    def _taken_back(self, sched: Scheduler, req: ProvisioningRequest) -> None:
        sched.restore_provisioning([req])
        self.made.add(req.key)
        self.fed[req.key] = {c.type.value for c in req.conditions if c.status}
        if req.booked:  # its nodes: held again, or found (Provisioned while none ran)
            obj = self.informer.cache.get(req.key)
            if obj is not None:
                self._attribute(req.key, obj)

    def _drop(self, sched: Scheduler, req: ProvisioningRequest, why: str) -> None:
        """Delete a request of gpupool's (at the next cycle, as the core's deletions are)."""
        log.warning("ProvisioningRequest %s deleted: %s", req.key, why)
        sched.restore_provisioning([req])
        sched.delete_provisioning_request(req.key, self.controller.clock())

    def _consumes(self, pods: Iterable[str]) -> str | None:
        """The request (key) bound pods among ``pods`` are annotated to consume."""
        for key in pods:
            pod = self.controller.pod(key) or {}
            name = ((pod.get("metadata") or {}).get("annotations") or {}).get(CONSUME_ANNOTATION)
            if name and (pod.get("spec") or {}).get("nodeName"):
                return f"{key.split('/', 1)[0]}/{name}"
        return None

    def _consumed(self, key: str) -> bool:
        """Whether any bound pod (running or ended) is annotated to consume ``key``."""
        ns, name = key.split("/", 1)
        for k, pod in self.controller.all_pods():
            meta = pod.get("metadata") or {}
            if (
                k.startswith(ns + "/")
                and (pod.get("spec") or {}).get("nodeName")
                and (meta.get("annotations") or {}).get(CONSUME_ANNOTATION) == name
            ):
                return True
        return False

    def restore(self, sched: Scheduler) -> None:
        """The scheduler was rebuilt and its running jobs taken back: the requests gpupool
        made are read from the cache; a running job's booking is taken back now, the others
        wait for their job to be submitted again (``resubmitted``) or for ``sweep``."""
        self.fed.clear()
        self.made.clear()
        self.waiting.clear()
        ctl = self.controller
        for key, obj in sorted(self.informer.cache.items()):
            marks = marks_of(obj)
            if marks is None:
                continue
            info = ctl.jobs.get(marks.job)
            r = sched.running_job(marks.job)
            if (
                info is not None
                and info.running
                and r is not None
                and self._consumes(info.pods) == key
            ):
                req = self._read(key, consumed_s=r.start_s)
                if req is None:
                    continue
                self._taken_back(sched, req)
                sched.restore_booking(marks.job, key)
                log.info(
                    "ProvisioningRequest %s taken back: booking of running job %s", key, marks.job
                )
                continue
            self.waiting.setdefault(marks.job, []).append(key)

    def resubmitted(self, job: JobId) -> None:
        """A pending job was submitted (again): its check is taken back from its latest
        request, its older ones deleted, and its next request numbered past all of them."""
        sched = self.controller.sched
        checks = sched.checks if sched is not None else None
        if sched is None or checks is None or not sched.is_pending(job):
            return
        info = self.controller.jobs.get(job)
        made = 0
        for key in info.pods if info is not None else ():
            pod = self.controller.pod(key) or {}
            name = ((pod.get("metadata") or {}).get("annotations") or {}).get(CONSUME_ANNOTATION)
            made = max(made, attempt_of(str(name or ""), str(job)))
        reqs = [r for r in map(self._read, self.waiting.pop(job, ())) if r is not None]
        reqs.sort(key=lambda r: (attempt_of(r.name, str(job)), r.key))
        made = max([made, *(attempt_of(r.name, str(job)) for r in reqs)])
        if not reqs:
            if made:
                sched.restore_requests_made(job, made)
            return
        *old, req = reqs
        for o in old:
            self._drop(sched, o, f"job {job} made {req.name} after it")
        obj = self.informer.cache.get(req.key) or {}
        marks = marks_of(obj)
        assert marks is not None
        p = sched.pending_job(job)
        assert p is not None
        flavor = marks.flavor
        if flavor is None:
            flavor = next(iter(sched.flavors_of(p.queue)), "")
        state = (
            CheckState.READY
            if req.provisioned_s is not None and not req.ended
            else CheckState.PENDING
        )
        self._taken_back(sched, req)
        try:
            sched.restore_check(
                job,
                state,
                request=req.key,
                flavor=flavor,
                attempts=marks.attempt or attempt_of(req.name, str(job)) or 1,
                made=made,
                message=f"ProvisioningRequest {req.key} taken back after a restart",
            )
        except NotFoundError as exc:
            self._drop(sched, req, f"job {job}: {exc}")
            return
        log.info("ProvisioningRequest %s taken back: job %s %s", req.key, job, state.value)

    def sweep(self) -> None:
        """Requests read back whose job was not submitted again: kept while the job's gang
        waits for its pods; else deleted, or kept as a booking its queue's next job may take
        when Provisioned and unconsumed (it expires otherwise)."""
        ctl = self.controller
        sched = ctl.sched
        if sched is None:
            return
        for job, keys in list(self.waiting.items()):
            if job in ctl.gangs and job not in ctl.jobs:
                continue
            del self.waiting[job]
            for key in keys:
                req = self._read(key)
                if req is None:
                    continue
                if req.booked and not self._consumed(key):
                    self._taken_back(sched, req)
                    log.info(
                        "ProvisioningRequest %s taken back: a booking of gone job %s, "
                        "for the next job of queue %s",
                        key,
                        job,
                        req.queue,
                    )
                elif job in ctl.jobs:
                    self._drop(sched, req, f"its job {job} runs without it")
                else:
                    self._drop(sched, req, f"its job {job} no longer exists")
