"""Queued provisioning on Kubernetes: cluster-autoscaler's ``autoscaling.x-k8s.io/v1``
ProvisioningRequest and PodTemplate objects for the core's provisioning admission check.

The core decides (``gpupool.core.provisioning``, driven by the queue-aware cycle); this
adapter carries the decisions to the cluster and the cluster-autoscaler's answers back:

- ``CycleResult.provision``: for each request one **PodTemplate** per pod set of the job
  and a **ProvisioningRequest** in the job's namespace pointing to them
  (``k8s/provisioning_objects.py``), with the class of the queue's
  ProvisioningRequestConfig (``best-effort-atomic-scale-up.autoscaling.x-k8s.io`` when it
  names none, ``check-capacity.autoscaling.x-k8s.io``, a cloud's own ...) and its
  ``parameters``. The job's pods are annotated
  ``autoscaling.x-k8s.io/consume-provisioning-request: <request>`` and
  ``autoscaling.x-k8s.io/provisioning-class-name: <class>`` at once (Kueue's podSetUpdates
  write the same), so the autoscaler counts them against the request and does not scale up
  for them on its own;
- ``CycleResult.deprovision``: the request and its PodTemplates are deleted (cancelled);
- the requests are watched, and each condition the autoscaler sets is fed to the scheduler
  once: ``Accepted`` -> ``provisioning_accepted``; ``Provisioned`` ->
  ``provisioning_provisioned`` with the nodes of the request found as
  ``k8s/provisioning_nodes.py`` says (the autoscaler labels no node per request: they are
  found through ``provisioningClassDetails`` or as the booking, and nodes that register
  later join it), held in gpupool's view so the job's pods are pinned there
  (``k8s/provisioning_hold.py``); ``Failed`` ->
  ``provisioning_failed``; ``BookingExpired`` -> ``provisioning_failed`` with reason
  ``BookingExpired`` (the core ends the booking and retries the job, as on its own
  expiry); ``CapacityRevoked`` -> ``provisioning_revoked``; a request deleted by someone
  else -> ``delete_provisioning_request``.

Requests gpupool did not make (no entry in the core's book) are left alone.

**After a restart** the requests gpupool made are taken back from the informer's cache
(``k8s/provisioning_restore.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from gpupool.core.errors import GpupoolError
from gpupool.core.model import JobId, TaskId
from gpupool.core.provisioning import (
    CLASS_ANNOTATION,
    CONSUME_ANNOTATION,
    ProvisioningRequest,
)
from gpupool.k8s.informer import Informer, object_key
from gpupool.k8s.kube import MERGE_PATCH, Kube, KubeError
from gpupool.k8s.provisioning_hold import HoldNodes
from gpupool.k8s.provisioning_nodes import NodeBook
from gpupool.k8s.provisioning_objects import (
    API,
    PR_PATH,
    Marks,
    attempt_of,
    conditions_of,
    marks_of,
    ns_path,
    pod_template,
    request_from_object,
    request_object,
    template_name,
    template_names,
)
from gpupool.k8s.provisioning_restore import TakeBack

if TYPE_CHECKING:
    from gpupool.core.decisions import CycleResult
    from gpupool.k8s.controller import Controller

__all__ = [
    "API",
    "PR_PATH",
    "Marks",
    "ProvisioningAdapter",
    "attempt_of",
    "conditions_of",
    "marks_of",
    "pod_template",
    "request_from_object",
    "request_object",
    "template_name",
]

log = logging.getLogger("gpupool.k8s.provisioning")
_ENDS = ("Failed", "BookingExpired", "CapacityRevoked")


class ProvisioningAdapter(HoldNodes, TakeBack):
    """Makes, watches and deletes the cluster's ProvisioningRequests for the scheduler of
    ``controller`` (attached with ``controller.attach(provisioning=...)``)."""

    def __init__(self, kube: Kube, controller: Controller) -> None:
        self.kube = kube
        self.controller = controller
        self.informer = Informer(kube, PR_PATH, self._on_request, name="provisioningrequests")
        self.fed: dict[str, set[str]] = {}  # request key -> conditions fed to the core
        self.made: set[str] = set()  # keys created here (or taken back) and not deleted
        # requests read back at a rebuild, by job, for jobs not submitted again yet
        self.waiting: dict[JobId, list[str]] = {}
        self.booking = NodeBook()  # the nodes each Provisioned request holds
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- decisions out ---------------------------------------------------------------------

    def handle(self, result: CycleResult) -> None:
        """A cycle's provisioning decisions, written in the background."""
        for req in result.provision:
            flavor, attempt = self._marks(req)
            self._spawn(self.create(req, flavor, attempt))
        for key in result.deprovision:
            self._spawn(self.delete(key))
        if self.waiting:
            self.sweep()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _record(self, req: ProvisioningRequest) -> Any:
        sched = self.controller.sched
        checks = sched.checks if sched is not None else None
        return checks.record(JobId(req.job)) if checks is not None and req.job else None

    def _parameters(self, req: ProvisioningRequest) -> dict[str, str]:
        rec = self._record(req)
        return dict(rec.check.config.parameters) if rec is not None else {}

    def _marks(self, req: ProvisioningRequest) -> tuple[str, int]:
        """(flavor, attempt) of the check record the request was made for."""
        rec = self._record(req)
        return (rec.flavor, rec.attempts) if rec is not None else ("", 0)

    def _job_pods(self, req: ProvisioningRequest) -> list[str]:
        info = self.controller.jobs.get(JobId(req.job)) if req.job else None
        return sorted(info.pods) if info is not None else []

    def _first_pod(self, req: ProvisioningRequest, index: int) -> dict[str, Any] | None:
        """The first pod of the job's pod set ``index`` (as the controller built the job:
        pod set ``ps<i>``, task ``<job>/ps<i>-0``), None when it cannot be read."""
        info = self.controller.jobs.get(JobId(req.job)) if req.job else None
        if info is None:
            return None
        key = info.task_pod.get(TaskId(f"{req.job}/{req.pod_sets[index].name}-0"))
        if key is None and len(req.pod_sets) == 1 and info.pods:
            key = sorted(info.pods)[0]
        return self.controller.pod_informer.cache.get(key) if key else None

    async def create(
        self, req: ProvisioningRequest, flavor: str | None = None, attempt: int | None = None
    ) -> None:
        if flavor is None or attempt is None:
            flavor, attempt = self._marks(req)
        pods = self._job_pods(req)
        tpl_path = f"/api/v1/namespaces/{req.namespace}/podtemplates"
        try:
            for i in range(len(req.pod_sets)):
                with contextlib.suppress(KubeError):  # a template left by a former attempt
                    await self.kube.request("DELETE", f"{tpl_path}/{template_name(req, i)}")
                await self.kube.request(
                    "POST",
                    tpl_path,
                    pod_template(req, self._first_pod(req, i), i, self.controller.opt.names),
                )
            await self.kube.request(
                "POST",
                ns_path(req.namespace, "provisioningrequests"),
                request_object(req, self._parameters(req), flavor, attempt),
            )
            self.made.add(req.key)
        except KubeError as exc:
            if exc.status != 409:
                log.error("ProvisioningRequest %s not created: %s", req.key, exc)
                self._fact("failed", req.key, f"not created: {exc.message}", "CreateFailed")
                return
            self.made.add(req.key)
        annotations = {CONSUME_ANNOTATION: req.name, CLASS_ANNOTATION: req.provisioning_class_name}
        for key in pods:
            ns, name = key.split("/", 1)
            with contextlib.suppress(KubeError):
                await self.kube.request(
                    "PATCH",
                    f"/api/v1/namespaces/{ns}/pods/{name}",
                    {"metadata": {"annotations": annotations}},
                    content_type=MERGE_PATCH,
                )

    async def delete(self, key: str) -> None:
        ns, name = key.split("/", 1)
        self.made.discard(key)
        self.fed.pop(key, None)
        self._release(key)
        obj = self.informer.cache.get(key) or {}
        req = self._book_request(key)
        names = set(template_names(obj))
        if req is not None:
            names |= {template_name(req, i) for i in range(len(req.pod_sets))}
        for path in (
            ns_path(ns, "provisioningrequests", name),
            *(f"/api/v1/namespaces/{ns}/podtemplates/{t}" for t in sorted(names)),
        ):
            try:
                await self.kube.request("DELETE", path)
            except KubeError as exc:
                if exc.status != 404:
                    log.warning("deleting %s: %s", path, exc)

    def bind_annotations(self, job: JobId) -> dict[str, str]:
        """For a job admitted on a booking: the request its pods consume."""
        sched = self.controller.sched
        checks = sched.checks if sched is not None else None
        key = checks.booking_of(job) if checks is not None else None
        if checks is None or key is None:
            return {}
        req = checks.request(key)
        name = key.split("/", 1)[1]
        out = {CONSUME_ANNOTATION: name}
        if req is not None:
            out[CLASS_ANNOTATION] = req.provisioning_class_name
        return out

    # -- facts in --------------------------------------------------------------------------

    def _fact(self, what: str, key: str, *args: Any) -> None:
        sched = self.controller.sched
        if sched is None:
            return
        now = self.controller.clock()
        try:
            if what == "accepted":
                sched.provisioning_accepted(key, now)
            elif what == "provisioned":
                sched.provisioning_provisioned(key, args[0], now)
            elif what == "failed":
                sched.provisioning_failed(key, args[0], now, args[1])
            elif what == "revoked":
                sched.provisioning_revoked(key, args[0], now)
            elif what == "deleted":
                sched.delete_provisioning_request(key, now)
        except GpupoolError as exc:
            log.info("ProvisioningRequest %s: %s not taken: %s", key, what, exc)
        self.controller.wake()

    def _on_request(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        sched = self.controller.sched
        key = object_key(obj)
        conds = conditions_of(obj)
        ends = [k for k in _ENDS if conds.get(k, (False,))[0]]
        if ends == ["BookingExpired"] and (
            key in self.booking.arriving or key in self.booking.late_expiry
        ):
            ends = []  # the autoscaler's clock, while the nodes it asked for still register
        if event == "DELETED" or ends:
            self._release(key)
        elif marks_of(obj) is not None:
            self._held_back(key, obj)
        checks = sched.checks if sched is not None else None
        if checks is None or checks.request(key) is None:
            return
        if event == "DELETED":
            if key in self.made:  # deleted by someone else: cancelled
                self.made.discard(key)
                self._fact("deleted", key)
            return
        fed = self.fed.setdefault(key, set())
        for kind in ("Accepted", "Provisioned", "Failed", "BookingExpired", "CapacityRevoked"):
            state = conds.get(kind)
            if state is None or not state[0] or kind in fed:
                continue
            fed.add(kind)
            _, reason, message = state
            if kind == "Accepted":
                self._fact("accepted", key)
            elif kind == "Provisioned":
                nodes, full = self._attribute(key, obj)
                if full:
                    self._fact("provisioned", key, nodes)
                else:  # best-effort: the scale-up was asked for; its nodes still register
                    self.booking.arriving.add(key)
                    log.info(
                        "ProvisioningRequest %s Provisioned (%s); %d nodes there, the "
                        "rest still registering",
                        key,
                        reason,
                        len(nodes),
                    )
            elif kind == "Failed":
                self._fact("failed", key, message or "failed", reason or "ProvisioningFailed")
            elif kind == "BookingExpired" and key in self.booking.arriving:
                # cluster-autoscaler ends every booking 10 minutes after Provisioned; the
                # job cannot have used it while the nodes were still registering (Kueue has
                # admitted the workload at Provisioned, and ignores it too)
                self.booking.late_expiry.add(key)  # and on the request's later events
                log.info(
                    "ProvisioningRequest %s: BookingExpired ignored: its nodes are still "
                    "registering",
                    key,
                )
            elif kind == "BookingExpired":
                self._fact("failed", key, message or "booking expired", "BookingExpired")
            else:
                self._fact("revoked", key, message or "capacity revoked")

    async def run(self) -> None:
        try:
            await self.informer.run()
        finally:
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
