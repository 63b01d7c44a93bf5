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
  later join it), held in gpupool's view so the job's pods are pinned there; ``Failed`` ->
  ``provisioning_failed``; ``BookingExpired`` -> ``provisioning_failed`` with reason
  ``BookingExpired`` (the core ends the booking and retries the job, as on its own
  expiry); ``CapacityRevoked`` -> ``provisioning_revoked``; a request deleted by someone
  else -> ``delete_provisioning_request``.

Requests gpupool did not make (no entry in the core's book) are left alone.

**After a restart** (any ``Controller.rebuild``: start-up, leadership gained, a queue change)
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

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from gpupool.core.admission import flavor_job
from gpupool.core.errors import GpupoolError, NotFoundError
from gpupool.core.model import JobId, Node, NodeName, PodSet, TaskId
from gpupool.core.provisioning import (
    CLASS_ANNOTATION,
    CONSUME_ANNOTATION,
    REQUEST_LABEL,
    CheckState,
    ProvisioningRequest,
)
from gpupool.k8s.informer import Informer, object_key
from gpupool.k8s.kube import MERGE_PATCH, ApiError, Kube
from gpupool.k8s.provisioning_nodes import NodeBook, fits, matching, pick
from gpupool.k8s.provisioning_objects import (
    API,
    NODES_ANNOTATION,
    PR_PATH,
    Marks,
    attempt_of,
    class_details,
    conditions_of,
    marks_of,
    nodes_annotation,
    pod_template,
    request_from_object,
    request_object,
    template_name,
    template_names,
    wall_s,
)
from gpupool.k8s.translate import TranslateError, node_from_k8s

if TYPE_CHECKING:
    from gpupool.core.decisions import CycleResult
    from gpupool.core.scheduler import Scheduler
    from gpupool.k8s.controller import Controller

__all__ = ["API", "PR_PATH", "Marks", "ProvisioningAdapter", "attempt_of", "conditions_of",
           "marks_of", "pod_template", "request_from_object", "request_object",
           "template_name"]

log = logging.getLogger("gpupool.k8s.provisioning")
_ENDS = ("Failed", "BookingExpired", "CapacityRevoked")


def _ns_path(ns: str, plural: str, name: str = "") -> str:
    base = f"/apis/{API}/namespaces/{ns}/{plural}"
    return f"{base}/{name}" if name else base


class ProvisioningAdapter:
    """Makes, watches and deletes the cluster's ProvisioningRequests for the scheduler of
    ``controller`` (attached as ``controller.provisioning``)."""

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
        controller.provisioning = self

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

    async def create(self, req: ProvisioningRequest, flavor: str | None = None,
                     attempt: int | None = None) -> None:
        if flavor is None or attempt is None:
            flavor, attempt = self._marks(req)
        pods = self._job_pods(req)
        tpl_path = f"/api/v1/namespaces/{req.namespace}/podtemplates"
        try:
            for i in range(len(req.pod_sets)):
                with contextlib.suppress(ApiError):  # a template left by a former attempt
                    await self.kube.request("DELETE", f"{tpl_path}/{template_name(req, i)}")
                await self.kube.request("POST", tpl_path, pod_template(
                    req, self._first_pod(req, i), i, self.controller.opt.names))
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
        self._release(key)
        obj = self.informer.cache.get(key) or {}
        req = self._book_request(key)
        names = set(template_names(obj))
        if req is not None:
            names |= {template_name(req, i) for i in range(len(req.pod_sets))}
        for path in (_ns_path(ns, "provisioningrequests", name),
                     *(f"/api/v1/namespaces/{ns}/podtemplates/{t}" for t in sorted(names))):
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
        """The request's nodes: labelled for it, or held for it in gpupool's view."""
        ns, name = key.split("/", 1)
        value = f"{ns}.{name}"
        held = self.booking.nodes(key)
        return sorted({n.name for n in self.controller.nodes_by_name.values()
                       if n.labels.get(REQUEST_LABEL) == value and n.name not in held}
                      | set(held))

    # -- the nodes of a request (k8s/provisioning_nodes.py) ----------------------------------

    def _book_request(self, key: str) -> ProvisioningRequest | None:
        sched = self.controller.sched
        checks = sched.checks if sched is not None else None
        return checks.book.find(key) if checks is not None else None

    def mark(self, node: Node) -> Node:
        """The controller's view of a node it read: with the label and taint of the request
        holding it; a free node that joined is offered to requests still taking nodes."""
        if node.name not in self.booking.holder and REQUEST_LABEL not in node.labels and \
                (self.booking.short or self.booking.selector):
            self._offer(node)
        return self.booking.mark(node)

    def _busy(self, name: str) -> bool:
        sched = self.controller.sched
        return sched is not None and bool(sched.state.placements_on(NodeName(name)))

    def _offer(self, node: Node) -> None:
        sched = self.controller.sched
        if sched is None or not node.schedulable:
            return
        for key in sorted({*self.booking.short, *self.booking.selector}):
            req = self._book_request(key)
            if req is None or not req.booked:
                self.booking.short.discard(key)
                continue
            if key not in self.booking.selector and self._busy(node.name):
                return
            if not self.booking.wants(key, node, req.pod_sets):
                continue
            self.booking.hold(key, req.node_label, [node.name])
            held = [self.controller.nodes_by_name.get(n) or node
                    for n in self.booking.nodes(key)]
            if key not in self.booking.selector and pick(req.pod_sets, [], held)[1]:
                self.booking.short.discard(key)
            log.info("ProvisioningRequest %s: node %s joined its booking", key, node.name)
            self._spawn(self._record_nodes(key))
            self.controller.wake()
            return

    def _created(self, name: str) -> float:
        obj = self.controller.node_informer.cache.get(name) or {}
        return wall_s((obj.get("metadata") or {}).get("creationTimestamp")) or 0.0

    def _config_details(self, req: ProvisioningRequest) -> dict[str, str]:
        """node label -> provisioningClassDetails key, of the request's config."""
        rec = self._record(req)
        sched = self.controller.sched
        check = rec.check if rec is not None else \
            sched.checks.check_for(req.queue) if sched is not None and sched.checks else None
        return dict(check.config.node_selector_details) if check is not None else {}

    def _attribute(self, key: str, obj: dict[str, Any]) -> list[str]:
        """A request is Provisioned: find its nodes (see ``k8s/provisioning_nodes.py``),
        hold them in gpupool's view and record them on the request."""
        req = self._book_request(key)
        if req is None:
            return []
        ctl = self.controller
        labelled = [n.name for n in ctl.nodes_by_name.values()
                    if n.labels.get(REQUEST_LABEL) == req.node_label]
        if labelled:
            return sorted(labelled)
        free = [n for n in ctl.nodes_by_name.values()
                if n.name not in self.booking.holder and REQUEST_LABEL not in n.labels
                and n.schedulable and not self._busy(n.name)]
        wanted = self._config_details(req)
        details = class_details(obj)
        if wanted and all(d in details for d in wanted.values()):
            selector = {label: details[d] for label, d in wanted.items()}
            self.booking.selector[key] = selector
            chosen = matching(selector, free)
        else:
            since = wall_s((obj.get("metadata") or {}).get("creationTimestamp")) or 0.0
            free = [n for n in free if any(fits(ps, n) for ps in req.pod_sets)]
            free.sort(key=lambda n: (self._created(n.name) < since, -self._created(n.name),
                                     n.name))
            held = [ctl.nodes_by_name[n] for n in self.booking.nodes(key)
                    if n in ctl.nodes_by_name]
            chosen, full = pick(req.pod_sets, free, held)
            if not full:
                self.booking.short.add(key)
        self.booking.hold(key, req.node_label, [n.name for n in chosen])
        for n in chosen:
            self._refresh(n.name)
        self._spawn(self._record_nodes(key))
        return self.booking.nodes(key)

    def _release(self, key: str) -> None:
        for name in self.booking.release(key):
            self._refresh(name)

    def _refresh(self, name: str) -> None:
        """The core's node ``name`` again from the informer's object, with its marks."""
        ctl = self.controller
        obj = ctl.node_informer.cache.get(name)
        if ctl.sched is None or obj is None or name not in ctl.nodes_by_name:
            return
        try:
            node = self.booking.mark(node_from_k8s(obj))
        except TranslateError:
            return
        if ctl.nodes_by_name.get(name) != node:
            ctl.nodes_by_name[name] = node
            ctl.sched.update_node(node)
            ctl.wake()

    async def _record_nodes(self, key: str) -> None:
        """``gpupool.io/nodes`` on the request: its booking, read back after a restart."""
        ns, name = key.split("/", 1)
        value = ",".join(self.booking.nodes(key))
        try:
            await self.kube.request("PATCH", _ns_path(ns, "provisioningrequests", name),
                                    {"metadata": {"annotations": {NODES_ANNOTATION: value}}},
                                    content_type=MERGE_PATCH)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("ProvisioningRequest %s: nodes not recorded: %s", key, exc)

    def _held_back(self, key: str, obj: dict[str, Any]) -> None:
        """A booking recorded on the request (after a restart) is held again."""
        names = nodes_annotation(obj)
        if not names or key in self.booking.label:
            return
        ns, name = key.split("/", 1)
        self.booking.hold(key, f"{ns}.{name}", names)
        for n in names:
            self._refresh(n)

    def _on_request(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        sched = self.controller.sched
        key = object_key(obj)
        conds = conditions_of(obj)
        if event == "DELETED" or any(conds.get(k, (False,))[0] for k in _ENDS):
            self._release(key)
        elif marks_of(obj) is not None:
            self._held_back(key, obj)
        checks = sched.checks if sched is not None else None
        if checks is None or key not in checks.book:
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
                self._fact("provisioned", key, self._attribute(key, obj))
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
            return request_from_object(obj, self._pod_sets(marks), self.nodes_of(key),
                                       self._at, consumed_s)
        except GpupoolError as exc:
            log.warning("ProvisioningRequest %s cannot be read back; left alone: %s", key, exc)
            return None

    def _pod_sets(self, marks: Marks) -> Sequence[PodSet] | None:
        sched = self.controller.sched
        if sched is None:
            return None
        p = sched.queues.get(marks.job)
        r = sched.ctx.running.get(marks.job)
        job = p.job if p is not None else r.job if r is not None else None
        if job is None:
            return None
        fj = flavor_job(job, sched.tree.flavors.get(marks.flavor or "")) or job
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
