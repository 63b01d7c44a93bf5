"""Queued provisioning on Kubernetes: cluster-autoscaler's ``autoscaling.x-k8s.io/v1``
ProvisioningRequest and PodTemplate objects for the core's provisioning admission check.

The core decides (``gpupool.core.provisioning``, driven by the queue-aware cycle); this
adapter carries the decisions to the cluster and the cluster-autoscaler's answers back:

- ``CycleResult.provision``: for each request a **PodTemplate** ``ppt-<request>`` (the job's
  first pod, its spec as created, with the flavor's node labels in its ``nodeSelector``) and
  a **ProvisioningRequest** in the job's namespace: one pod set (``podTemplateRef``,
  ``count``), the class of the queue's ProvisioningRequestConfig
  (``queued-provisioning.gke.io``, ``check-capacity.autoscaling.x-k8s.io``, ...), its
  ``parameters`` (``maxRunDurationSeconds`` among them, as strings). The job's pods are
  annotated ``autoscaling.x-k8s.io/consume-provisioning-request: <request>`` and
  ``autoscaling.x-k8s.io/provisioning-class-name: <class>`` at once, so the autoscaler counts
  them against the request and does not scale up for them on its own;
- ``CycleResult.deprovision``: the request and its PodTemplate are deleted (cancelled);
- the requests are watched, and each condition the autoscaler sets is fed to the scheduler
  once: ``Accepted`` -> ``provisioning_accepted``; ``Provisioned`` ->
  ``provisioning_provisioned`` with the nodes labelled ``gpupool.io/provisioning-request=
  <namespace>.<name>`` (the node pool labels and taints them so; the job's pods get that
  selector and toleration from the core); ``Failed`` -> ``provisioning_failed``;
  ``BookingExpired`` -> ``provisioning_failed`` with reason ``BookingExpired`` (the core ends
  the booking and retries the job, as on its own expiry); ``CapacityRevoked`` ->
  ``provisioning_revoked``; a request deleted by someone else ->
  ``delete_provisioning_request``.

Requests gpupool did not make (no entry in the core's book) are left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpupool.core.errors import GpupoolError
from gpupool.core.model import JobId, PodSet
from gpupool.core.provisioning import (
    CLASS_ANNOTATION,
    CONSUME_ANNOTATION,
    MAX_RUN_PARAMETER,
    REQUEST_LABEL,
    ProvisioningRequest,
)
from gpupool.k8s.informer import Informer, object_key
from gpupool.k8s.kube import MERGE_PATCH, ApiError, Kube

if TYPE_CHECKING:
    from gpupool.core.decisions import CycleResult
    from gpupool.k8s.controller import Controller

__all__ = ["API", "PR_PATH", "ProvisioningAdapter", "conditions_of", "pod_template",
           "request_object", "template_name"]

log = logging.getLogger("gpupool.k8s.provisioning")

API = "autoscaling.x-k8s.io/v1"
PR_PATH = f"/apis/{API}/provisioningrequests"
TEMPLATE_PREFIX = "ppt-"


def template_name(req: ProvisioningRequest) -> str:
    return (TEMPLATE_PREFIX + req.name)[:253]


def _ns_path(ns: str, plural: str, name: str = "") -> str:
    base = f"/apis/{API}/namespaces/{ns}/{plural}"
    return f"{base}/{name}" if name else base


def _quantity_mib(mib: int) -> str:
    return f"{mib}Mi"


def _synthetic_spec(ps: PodSet) -> dict[str, Any]:
    """A pod spec from the core's pod set, when the job's pods cannot be read."""
    limits: dict[str, str] = {}
    g = ps.gpu
    if g.mig_profile:
        limits[f"nvidia.com/mig-{g.mig_profile}"] = "1"
    elif g.count:
        limits["nvidia.com/gpu"] = str(g.count)
    elif g.gpu_milli or g.memory_mib:
        limits["nvidia.com/gpu"] = "1"
    requests = {"cpu": f"{ps.cpu_milli}m", "memory": _quantity_mib(ps.memory_mib)}
    return {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9",
                            "resources": {"requests": requests, "limits": limits}}]}


def pod_template(req: ProvisioningRequest, pod: Mapping[str, Any] | None) -> dict[str, Any]:
    """The PodTemplate a request's pod set points to: ``pod``'s spec (the job's first pod)
    without what the scheduler fills in, with the pod set's node selector (the flavor's
    labels); a spec made from the pod set when ``pod`` is None."""
    ps = req.pod_set
    if pod is not None:
        spec = copy.deepcopy(dict(pod.get("spec") or {}))
        for k in ("nodeName", "schedulerName", "priority", "preemptionPolicy"):
            spec.pop(k, None)
        labels = dict((pod.get("metadata") or {}).get("labels") or {})
    else:
        spec, labels = _synthetic_spec(ps), {}
    selector = {**(spec.get("nodeSelector") or {}), **ps.node_selector}
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": template_name(req), "namespace": req.namespace,
                         "labels": {"gpupool.io/provisioning-request": req.name}},
            "template": {"metadata": {"labels": labels}, "spec": spec}}


def request_object(req: ProvisioningRequest, parameters: Mapping[str, str]) -> dict[str, Any]:
    """The ``autoscaling.x-k8s.io/v1`` ProvisioningRequest for the core's request:
    ``parameters`` are the ProvisioningRequestConfig's (strings), with the request's
    ``maxRunDurationSeconds``."""
    params = {str(k): str(v) for k, v in parameters.items()}
    if req.max_run_duration_s is not None:
        params[MAX_RUN_PARAMETER] = str(int(req.max_run_duration_s))
    meta: dict[str, Any] = {"name": req.name, "namespace": req.namespace,
                            "labels": {"app.kubernetes.io/managed-by": "gpupool"}}
    if req.job:
        meta["annotations"] = {"gpupool.io/job": req.job, "gpupool.io/queue": req.queue}
    body: dict[str, Any] = {
        "apiVersion": API, "kind": "ProvisioningRequest", "metadata": meta,
        "spec": {"provisioningClassName": req.provisioning_class_name,
                 "podSets": [{"podTemplateRef": {"name": template_name(req)},
                              "count": req.pod_set.count}]}}
    if params:
        body["spec"]["parameters"] = params
    return body


def conditions_of(obj: Mapping[str, Any]) -> dict[str, tuple[bool, str, str]]:
    """Condition type -> (status is True, reason, message) of a ProvisioningRequest."""
    out: dict[str, tuple[bool, str, str]] = {}
    for c in (obj.get("status") or {}).get("conditions") or ():
        out[str(c.get("type"))] = (str(c.get("status")) == "True", str(c.get("reason") or ""),
                                   str(c.get("message") or ""))
    return out


class ProvisioningAdapter:
    """Makes, watches and deletes the cluster's ProvisioningRequests for the scheduler of
    ``controller`` (attached as ``controller.provisioning``)."""

    def __init__(self, kube: Kube, controller: Controller) -> None:
        self.kube = kube
        self.controller = controller
        self.informer = Informer(kube, PR_PATH, self._on_request, name="provisioningrequests")
        self.fed: dict[str, set[str]] = {}  # request key -> conditions fed to the core
        self.made: set[str] = set()  # keys created here and not deleted
        self._tasks: set[asyncio.Task[Any]] = set()
        controller.provisioning = self

    # -- decisions out ---------------------------------------------------------------------

    def handle(self, result: CycleResult) -> None:
        """A cycle's provisioning decisions, written in the background."""
        for req in result.provision:
            self._spawn(self.create(req))
        for key in result.deprovision:
            self._spawn(self.delete(key))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _parameters(self, req: ProvisioningRequest) -> dict[str, str]:
        sched = self.controller.sched
        checks = sched.checks if sched is not None else None
        rec = checks.records.get(JobId(req.job)) if checks is not None and req.job else None
        return dict(rec.check.config.parameters) if rec is not None else {}

    def _job_pods(self, req: ProvisioningRequest) -> list[str]:
        info = self.controller.jobs.get(JobId(req.job)) if req.job else None
        return sorted(info.pods) if info is not None else []

    async def create(self, req: ProvisioningRequest) -> None:
        pods = self._job_pods(req)
        first = self.controller.pod_informer.cache.get(pods[0]) if pods else None
        try:
            with contextlib.suppress(ApiError):  # a template left by a former attempt
                await self.kube.request(
                    "DELETE", f"/api/v1/namespaces/{req.namespace}/podtemplates/"
                              f"{template_name(req)}")
            await self.kube.request("POST", f"/api/v1/namespaces/{req.namespace}/podtemplates",
                                    pod_template(req, first))
            await self.kube.request("POST", _ns_path(req.namespace, "provisioningrequests"),
                                    request_object(req, self._parameters(req)))
            self.made.add(req.key)
        except ApiError as exc:
            if exc.status != 409:
                log.error("ProvisioningRequest %s not created: %s", req.key, exc)
                self._fact("failed", req.key, f"not created: {exc.message}", "CreateFailed")
                return
            self.made.add(req.key)
        annotations = {CONSUME_ANNOTATION: req.name,
                       CLASS_ANNOTATION: req.provisioning_class_name}
        for key in pods:
            ns, name = key.split("/", 1)
            with contextlib.suppress(ApiError):
                await self.kube.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}",
                                        {"metadata": {"annotations": annotations}},
                                        content_type=MERGE_PATCH)

    async def delete(self, key: str) -> None:
        ns, name = key.split("/", 1)
        self.made.discard(key)
        self.fed.pop(key, None)
        for path in (_ns_path(ns, "provisioningrequests", name),
                     f"/api/v1/namespaces/{ns}/podtemplates/{(TEMPLATE_PREFIX + name)[:253]}"):
            try:
                await self.kube.request("DELETE", path)
            except ApiError as exc:
                if exc.status != 404:
                    log.warning("deleting %s: %s", path, exc)

    def bind_annotations(self, job: JobId) -> dict[str, str]:
        """For a job admitted on a booking: the request its pods consume."""
        sched = self.controller.sched
        checks = sched.checks if sched is not None else None
        key = checks.booked.get(job) if checks is not None else None
        if checks is None or key is None:
            return {}
        req = checks.book.find(key)
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

    def nodes_of(self, key: str) -> list[str]:
        ns, name = key.split("/", 1)
        value = f"{ns}.{name}"
        return sorted(n.name for n in self.controller.nodes_by_name.values()
                      if n.labels.get(REQUEST_LABEL) == value)

    def _on_request(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        sched = self.controller.sched
        key = object_key(obj)
        checks = sched.checks if sched is not None else None
        if checks is None or key not in checks.book:
            return
        if event == "DELETED":
            if key in self.made:  # deleted by someone else: cancelled
                self.made.discard(key)
                self._fact("deleted", key)
            return
        fed = self.fed.setdefault(key, set())
        conds = conditions_of(obj)
        for kind in ("Accepted", "Provisioned", "Failed", "BookingExpired", "CapacityRevoked"):
            state = conds.get(kind)
            if state is None or not state[0] or kind in fed:
                continue
            fed.add(kind)
            _, reason, message = state
            if kind == "Accepted":
                self._fact("accepted", key)
            elif kind == "Provisioned":
                self._fact("provisioned", key, self.nodes_of(key))
            elif kind == "Failed":
                self._fact("failed", key, message or "failed", reason or "ProvisioningFailed")
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
