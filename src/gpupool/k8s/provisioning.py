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

**After a restart** (any ``Controller.rebuild``: start-up, leadership gained, a queue change)
the requests gpupool made are taken back from the informer's cache, which the controller
waits for before it first builds its scheduler. gpupool's requests carry the label
``app.kubernetes.io/managed-by: gpupool`` and the annotations ``gpupool.io/job``,
``gpupool.io/queue``, ``gpupool.io/flavor`` and ``gpupool.io/attempt``; a request without
them is not gpupool's and is left alone. Each is read back with its conditions (times mapped
to the controller's clock), its nodes (those labelled for it) and, when bound pods annotated
to consume it exist, as consumed at the start of the job running there:

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

import asyncio
import contextlib
import copy
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpupool.core.admission import flavor_job
from gpupool.core.errors import GpupoolError, NotFoundError
from gpupool.core.model import JobId, PodSet
from gpupool.core.provisioning import (
    CLASS_ANNOTATION,
    CONSUME_ANNOTATION,
    MAX_RUN_PARAMETER,
    REQUEST_LABEL,
    CheckState,
    Condition,
    ConditionType,
    ProvisioningRequest,
    request_name,
)
from gpupool.k8s.informer import Informer, object_key
from gpupool.k8s.kube import MERGE_PATCH, ApiError, Kube

if TYPE_CHECKING:
    from gpupool.core.decisions import CycleResult
    from gpupool.core.scheduler import Scheduler
    from gpupool.k8s.controller import Controller

__all__ = ["API", "PR_PATH", "Marks", "ProvisioningAdapter", "attempt_of", "conditions_of",
           "marks_of", "pod_template", "request_from_object", "request_object",
           "template_name"]

log = logging.getLogger("gpupool.k8s.provisioning")

API = "autoscaling.x-k8s.io/v1"
PR_PATH = f"/apis/{API}/provisioningrequests"
TEMPLATE_PREFIX = "ppt-"
MANAGED_BY = ("app.kubernetes.io/managed-by", "gpupool")
JOB_ANNOTATION = "gpupool.io/job"
QUEUE_ANNOTATION = "gpupool.io/queue"
FLAVOR_ANNOTATION = "gpupool.io/flavor"
ATTEMPT_ANNOTATION = "gpupool.io/attempt"


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


def request_object(req: ProvisioningRequest, parameters: Mapping[str, str],
                   flavor: str = "", attempt: int = 0) -> dict[str, Any]:
    """The ``autoscaling.x-k8s.io/v1`` ProvisioningRequest for the core's request:
    ``parameters`` are the ProvisioningRequestConfig's (strings), with the request's
    ``maxRunDurationSeconds``. A request made for a job names it, its ClusterQueue, the
    flavor its quota was reserved in and its attempt (what a restart reads back)."""
    params = {str(k): str(v) for k, v in parameters.items()}
    if req.max_run_duration_s is not None:
        params[MAX_RUN_PARAMETER] = str(int(req.max_run_duration_s))
    meta: dict[str, Any] = {"name": req.name, "namespace": req.namespace,
                            "labels": {MANAGED_BY[0]: MANAGED_BY[1]}}
    if req.job:
        meta["annotations"] = {JOB_ANNOTATION: req.job, QUEUE_ANNOTATION: req.queue,
                               FLAVOR_ANNOTATION: flavor, ATTEMPT_ANNOTATION: str(attempt)}
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


# -- reading gpupool's requests back -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Marks:
    """What gpupool wrote on a request it made for a job (``attempt`` 0 when not written)."""

    job: JobId
    queue: str
    flavor: str | None
    attempt: int


def marks_of(obj: Mapping[str, Any]) -> Marks | None:
    """gpupool's marks on a ProvisioningRequest object; None for one gpupool did not make for
    a job (no ``managed-by: gpupool`` label or no ``gpupool.io/job`` annotation)."""
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(MANAGED_BY[0]) != MANAGED_BY[1]:
        return None
    ann = meta.get("annotations") or {}
    job = str(ann.get(JOB_ANNOTATION) or "")
    if not job:
        return None
    raw = str(ann.get(ATTEMPT_ANNOTATION) or "")
    flavor = ann.get(FLAVOR_ANNOTATION)
    return Marks(JobId(job), str(ann.get(QUEUE_ANNOTATION) or ""),
                 None if flavor is None else str(flavor),
                 int(raw) if raw.isdigit() else 0)


def attempt_of(name: str, job: str) -> int:
    """n when ``name`` is ``request_name(job, n)`` (the job's n-th request), else 0."""
    m = re.fullmatch(r".*-([0-9]{1,9})", name)
    if m is None:
        return 0
    n = int(m.group(1))
    return n if request_name(job, n) == name else 0


def _wall_s(stamp: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (``lastTransitionTime``), None if absent
    or not one."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def request_from_object(obj: Mapping[str, Any], pod_set: PodSet | None,
                        nodes: Iterable[str], at: Callable[[float | None], float],
                        consumed_s: float | None = None) -> ProvisioningRequest:
    """The core's request for a ProvisioningRequest object gpupool made, as it stands:
    conditions (their times through ``at``, wall seconds -> the controller's clock), ``nodes``
    and ``consumed_s``. ``pod_set`` is the job's (None: a pod set of the object's count alone).
    InvalidJobError when the object cannot be one (no pod set, a bad count)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    marks = marks_of(obj)
    pod_sets: list[Any] = list(spec.get("podSets") or [])
    count = int((pod_sets[0] or {}).get("count") or 0) if len(pod_sets) == 1 else 0
    if pod_set is None or pod_set.count != count:
        pod_set = PodSet("main", count)
    params = spec.get("parameters") or {}
    raw = params.get(MAX_RUN_PARAMETER)
    try:
        max_run = float(raw) if raw is not None else None
    except ValueError:
        max_run = None
    known = {k.value: k for k in ConditionType}
    conds: list[Condition] = []
    for c in (obj.get("status") or {}).get("conditions") or ():
        kind = known.get(str(c.get("type")))
        if kind is not None and all(x.type is not kind for x in conds):
            conds.append(Condition(kind, str(c.get("status")) == "True",
                                   str(c.get("reason") or ""), str(c.get("message") or ""),
                                   at(_wall_s(c.get("lastTransitionTime")))))
    order = list(ConditionType)
    conds.sort(key=lambda c: order.index(c.type))
    return ProvisioningRequest(
        name=str(meta.get("name") or ""), pod_sets=(pod_set,),
        namespace=str(meta.get("namespace") or "default"),
        provisioning_class_name=str(spec.get("provisioningClassName") or ""),
        max_run_duration_s=max_run, job=str(marks.job) if marks else "",
        queue=marks.queue if marks else "",
        created_s=at(_wall_s(meta.get("creationTimestamp"))), conditions=tuple(conds),
        nodes=tuple(nodes), consumed_s=consumed_s)


class ProvisioningAdapter:
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
        return checks.records.get(JobId(req.job)) if checks is not None and req.job else None

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

    async def create(self, req: ProvisioningRequest, flavor: str | None = None,
                     attempt: int | None = None) -> None:
        if flavor is None or attempt is None:
            flavor, attempt = self._marks(req)
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
                                    request_object(req, self._parameters(req), flavor,
                                                   attempt))
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

    # -- taken back after a restart ----------------------------------------------------------

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
            return request_from_object(obj, self._pod_set(marks), self.nodes_of(key), self._at,
                                       consumed_s)
        except GpupoolError as exc:
            log.warning("ProvisioningRequest %s cannot be read back; left alone: %s", key, exc)
            return None

    def _pod_set(self, marks: Marks) -> PodSet | None:
        sched = self.controller.sched
        if sched is None:
            return None
        p = sched.queues.get(marks.job)
        r = sched.ctx.running.get(marks.job)
        job = p.job if p is not None else r.job if r is not None else None
        if job is None or len(job.pod_sets) != 1:
            return None
        fj = flavor_job(job, sched.tree.flavors.get(marks.flavor or "")) or job
        return fj.pod_sets[0]

    def _taken_back(self, sched: Scheduler, req: ProvisioningRequest) -> None:
        sched.restore_provisioning([req])
        self.made.add(req.key)
        self.fed[req.key] = {c.type.value for c in req.conditions if c.status}

    def _drop(self, sched: Scheduler, req: ProvisioningRequest, why: str) -> None:
        """Delete a request of gpupool's (at the next cycle, as the core's deletions are)."""
        log.warning("ProvisioningRequest %s deleted: %s", req.key, why)
        sched.restore_provisioning([req])
        sched.delete_provisioning_request(req.key, self.controller.clock())

    def _consumes(self, pods: Iterable[str]) -> str | None:
        """The request (key) bound pods among ``pods`` are annotated to consume."""
        for key in pods:
            pod = self.controller.pod(key) or {}
            name = ((pod.get("metadata") or {}).get("annotations") or {}).get(
                CONSUME_ANNOTATION)
            if name and (pod.get("spec") or {}).get("nodeName"):
                return f"{key.split('/', 1)[0]}/{name}"
        return None

    def _consumed(self, key: str) -> bool:
        """Whether any bound pod (running or ended) is annotated to consume ``key``."""
        ns, name = key.split("/", 1)
        for k, pod in self.controller.all_pods():
            meta = pod.get("metadata") or {}
            if k.startswith(ns + "/") and (pod.get("spec") or {}).get("nodeName") and \
                    (meta.get("annotations") or {}).get(CONSUME_ANNOTATION) == name:
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
            r = sched.ctx.running.get(marks.job)
            if info is not None and info.running and r is not None and \
                    self._consumes(info.pods) == key:
                req = self._read(key, consumed_s=r.start_s)
                if req is None:
                    continue
                self._taken_back(sched, req)
                sched.restore_booking(marks.job, key)
                log.info("ProvisioningRequest %s taken back: booking of running job %s", key,
                         marks.job)
                continue
            self.waiting.setdefault(marks.job, []).append(key)

    def resubmitted(self, job: JobId) -> None:
        """A pending job was submitted (again): its check is taken back from its latest
        request, its older ones deleted, and its next request numbered past all of them."""
        sched = self.controller.sched
        checks = sched.checks if sched is not None else None
        if sched is None or checks is None or job not in sched.queues:
            return
        info = self.controller.jobs.get(job)
        made = 0
        for key in info.pods if info is not None else ():
            pod = self.controller.pod(key) or {}
            name = ((pod.get("metadata") or {}).get("annotations") or {}).get(
                CONSUME_ANNOTATION)
            made = max(made, attempt_of(str(name or ""), str(job)))
        reqs = [r for r in map(self._read, self.waiting.pop(job, ())) if r is not None]
        reqs.sort(key=lambda r: (attempt_of(r.name, str(job)), r.key))
        made = max([made, *(attempt_of(r.name, str(job)) for r in reqs)])
        if not reqs:
            if made:
                checks.made[job] = max(made, checks.made.get(job, 0))
            return
        *old, req = reqs
        for o in old:
            self._drop(sched, o, f"job {job} made {req.name} after it")
        obj = self.informer.cache.get(req.key) or {}
        marks = marks_of(obj)
        assert marks is not None
        p = sched.queues.get(job)
        assert p is not None
        flavor = marks.flavor
        if flavor is None:
            cq = sched.tree.queues.get(p.queue)
            flavor = cq.flavors[0].flavor if cq is not None and cq.flavors else ""
        state = CheckState.READY if req.provisioned_s is not None and not req.ended \
            else CheckState.PENDING
        self._taken_back(sched, req)
        try:
            sched.restore_check(job, state, request=req.key, flavor=flavor,
                                attempts=marks.attempt or attempt_of(req.name, str(job)) or 1,
                                made=made, message=f"ProvisioningRequest {req.key} taken "
                                                   "back after a restart")
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
                    log.info("ProvisioningRequest %s taken back: a booking of gone job %s, "
                             "for the next job of queue %s", key, job, req.queue)
                elif job in ctl.jobs:
                    self._drop(sched, req, f"its job {job} runs without it")
                else:
                    self._drop(sched, req, f"its job {job} no longer exists")

    async def run(self) -> None:
        try:
            await self.informer.run()
        finally:
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
