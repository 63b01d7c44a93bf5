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

**After a restart** the requests gpupool made are taken back from the informer's cache
(``k8s/provisioning_restore.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from gpupool.core.errors import GpupoolError
from gpupool.core.model import JobId, Node, NodeName, TaskId
from gpupool.core.provisioning import (
    CLASS_ANNOTATION,
    CONSUME_ANNOTATION,
    REQUEST_LABEL,
    ProvisioningRequest,
)
from gpupool.k8s.informer import Informer, object_key
from gpupool.k8s.kube import MERGE_PATCH, Kube, KubeError
from gpupool.k8s.provisioning_nodes import NodeBook, enough, fits, matching, pick
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
from gpupool.k8s.provisioning_restore import TakeBack
from gpupool.k8s.translate import TranslateError, node_from_k8s

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


def _ns_path(ns: str, plural: str, name: str = "") -> str:
    base = f"/apis/{API}/namespaces/{ns}/{plural}"
    return f"{base}/{name}" if name else base


class ProvisioningAdapter(TakeBack):
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
                _ns_path(req.namespace, "provisioningrequests"),
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
            _ns_path(ns, "provisioningrequests", name),
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

    def nodes_of(self, key: str) -> list[str]:
        """The request's nodes: labelled for it, or held for it in gpupool's view."""
        ns, name = key.split("/", 1)
        value = f"{ns}.{name}"
        held = self.booking.nodes(key)
        return sorted(
            {
                n.name
                for n in self.controller.nodes_by_name.values()
                if n.labels.get(REQUEST_LABEL) == value and n.name not in held
            }
            | set(held)
        )

    # -- the nodes of a request (k8s/provisioning_nodes.py) ----------------------------------

    def _book_request(self, key: str) -> ProvisioningRequest | None:
        sched = self.controller.sched
        checks = sched.checks if sched is not None else None
        return checks.request(key) if checks is not None else None

    def mark(self, node: Node) -> Node:
        """The controller's view of a node it read: with the label and taint of the request
        holding it; a free node that joined is offered to requests still taking nodes."""
        key = self.booking.holder.get(node.name)
        if (
            key is None
            and REQUEST_LABEL not in node.labels
            and (self.booking.short or self.booking.selector)
        ):
            self._offer(node)
        elif key is not None and (key in self.booking.short or key in self.booking.arriving):
            self._arrived(key, node)
        return self.booking.mark(node)

    def _arrived(self, key: str, fresh: Node) -> None:
        """Whether the nodes held for ``key`` (``fresh`` as it is now) hold all its pods:
        then it takes no more, and the core hears it is Provisioned if it has not yet."""
        req = self._book_request(key)
        if req is None:
            return
        held = [
            fresh if n == fresh.name else self.controller.nodes_by_name.get(n)
            for n in self.booking.nodes(key)
        ]
        if not enough(req.pod_sets, [n for n in held if n is not None]):
            return
        self.booking.short.discard(key)
        if key in self.booking.arriving:  # every node is there: Provisioned now
            self.booking.arriving.discard(key)
            self._fact("provisioned", key, self.booking.nodes(key))

    def _busy(self, name: str) -> bool:
        sched = self.controller.sched
        return sched is not None and bool(sched.placements_on(NodeName(name)))

    def _offer(self, node: Node) -> None:
        sched = self.controller.sched
        if sched is None or not node.schedulable:
            return
        for key in sorted({*self.booking.short, *self.booking.selector}):
            req = self._book_request(key)
            if req is None or req.ended or req.consumed_s is not None:
                self.booking.short.discard(key)
                self.booking.arriving.discard(key)
                continue
            if key not in self.booking.selector and self._busy(node.name):
                return
            if not self.booking.wants(key, node, req.pod_sets):
                continue
            self.booking.hold(key, req.node_label, [node.name])
            log.info("ProvisioningRequest %s: node %s joined its booking", key, node.name)
            self._spawn(self._record_nodes(key))
            self._arrived(key, node)
            self.controller.wake()
            return

    def _created(self, name: str) -> float:
        obj = self.controller.node_informer.cache.get(name) or {}
        return wall_s((obj.get("metadata") or {}).get("creationTimestamp")) or 0.0

    def _config_details(self, req: ProvisioningRequest) -> dict[str, str]:
        """node label -> provisioningClassDetails key, of the request's config."""
        rec = self._record(req)
        sched = self.controller.sched
        check = (
            rec.check
            if rec is not None
            else sched.checks.check_for(req.queue)
            if sched is not None and sched.checks
            else None
        )
        return dict(check.config.node_selector_details) if check is not None else {}

    def _attribute(self, key: str, obj: dict[str, Any]) -> tuple[list[str], bool]:
        """A request is Provisioned: find its nodes (see ``k8s/provisioning_nodes.py``),
        hold them in gpupool's view and record them on the request; and whether they hold
        all its pods (if not, nodes that register later are taken until they do)."""
        req = self._book_request(key)
        if req is None:
            return [], False
        ctl = self.controller
        labelled = [
            n.name
            for n in ctl.nodes_by_name.values()
            if n.labels.get(REQUEST_LABEL) == req.node_label
        ]
        if labelled:
            return sorted(labelled), True
        held = [ctl.nodes_by_name[n] for n in self.booking.nodes(key) if n in ctl.nodes_by_name]
        free = [
            n
            for n in ctl.nodes_by_name.values()
            if n.name not in self.booking.holder
            and REQUEST_LABEL not in n.labels
            and n.schedulable
            and not self._busy(n.name)
        ]
        wanted = self._config_details(req)
        details = class_details(obj)
        if wanted and all(d in details for d in wanted.values()):
            selector = {label: details[d] for label, d in wanted.items()}
            self.booking.selector[key] = selector
            chosen = matching(selector, free)
            full = enough(req.pod_sets, [*held, *chosen])
        else:
            since = wall_s((obj.get("metadata") or {}).get("creationTimestamp")) or 0.0
            free = [n for n in free if any(fits(ps, n) for ps in req.pod_sets)]
            free.sort(key=lambda n: (self._created(n.name) < since, -self._created(n.name), n.name))
            chosen, full = pick(req.pod_sets, free, held)
            if not full:
                self.booking.short.add(key)
        self.booking.hold(key, req.node_label, [n.name for n in chosen])
        for n in chosen:
            self._refresh(n.name)
        self._spawn(self._record_nodes(key))
        return self.booking.nodes(key), full

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
            await self.kube.request(
                "PATCH",
                _ns_path(ns, "provisioningrequests", name),
                {"metadata": {"annotations": {NODES_ANNOTATION: value}}},
                content_type=MERGE_PATCH,
            )
        except KubeError as exc:
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
