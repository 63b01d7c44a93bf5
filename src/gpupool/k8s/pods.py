"""Pods into the core: what each pod event means for the scheduler.

One informer watches every pod; :meth:`PodEvents.on_pod` sorts them:

- **gpupool's pods** (``spec.schedulerName``): a pending pod is admitted
  (``k8s/admit.py``: read, then submitted as a job, alone or with its gang; gated pods and
  pods in bind backoff wait); an ended pod lets its cards go once every pod of its job has
  ended.
- **pods of the schedulers gpupool's extender binds for** (``foreign_schedulers``): only
  their cards matter; their bound pods' cards are taken.
- **every other pod** (DaemonSets, other schedulers, static pods) is kept reduced and
  counted against its node's CPU and memory (``k8s/podview.py``).

A bound pod whose cards the core does not hold (bound by another leader, by HAMi's own
scheduler, or a bind whose answer was lost) has its recorded cards taken back.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpupool.core.errors import (
    AdapterError,
    InvalidJobError,
    NotFoundError,
)
from gpupool.core.model import JobId, NodeName, Placement
from gpupool.k8s.informer import object_key
from gpupool.k8s.jobs import JobInfo, job_for_pods
from gpupool.k8s.parts import ControllerParts
from gpupool.k8s.podaffinity import has_namespace_selector, pod_meta
from gpupool.k8s.podview import REQUESTS, pod_usage
from gpupool.k8s.translate import (
    RecordedPlacement,
    TranslateError,
    is_terminal,
    placement_from_hami,
    read_placement,
)

__all__ = ["ended", "is_reduced"]

log = logging.getLogger("gpupool.k8s")


def ended(pod: Mapping[str, Any]) -> bool:
    return is_terminal(pod) or bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_reduced(pod: Mapping[str, Any]) -> bool:
    return REQUESTS in pod


class PodEvents(ControllerParts):
    """The pod half of :class:`~gpupool.k8s.controller.Controller` (mixed into it)."""

    def _on_pod(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if self.sched is None:
            return
        key = object_key(obj)
        scheduler = (obj.get("spec") or {}).get("schedulerName")
        if key in self.evicting:
            if event == "DELETED" or ended(obj):
                self._victim_gone(key)
        elif scheduler == self.opt.scheduler_name and not is_reduced(obj):
            self._on_own_pod(event, key, obj)
        elif scheduler in self.opt.foreign_schedulers and not is_reduced(obj):
            self._on_foreign_pod(event, key, obj)
        self._count(event, key, obj)

    def _count(self, event: str, key: str, obj: Mapping[str, Any]) -> None:
        """A pod holding capacity outside the core is counted on its node: its requests
        against the node's CPU and memory, its namespace, labels and anti-affinity for pod
        affinity and topology spread."""
        node = (obj.get("spec") or {}).get("nodeName")
        assert self.sched is not None
        pods_version = self.sched.pods_version
        gone = event == "DELETED" or ended(obj)
        self._count_mig(key, obj, str(node or ""), gone)
        if gone:
            self.extended.drop(key)
        elif node and key in self.pod_job:  # gpupool's own, its extended resources here
            self.extended.take(key, str(node), self._asks(key, obj))
        elif node:
            self.extended.drop(key)  # counted with the other pods (self.usage)
        if gone or not node or key in self.pod_job:
            self.usage.drop(key)
            self.sched.set_pod(key, None)  # the core counts a pod it holds by its placement
        else:
            self.usage.put(key, str(node), pod_usage(obj))
            self.sched.set_pod(key, NodeName(str(node)), pod_meta(obj, self.namespaces.known()))
        if self.usage.changed or self.sched.pods_version != pods_version:
            self._dirty.set()

    def _namespace_changed(self, name: str) -> None:
        """A Namespace appeared, went or changed its labels: pod affinity terms with a
        ``namespaceSelector`` are read again (kube-scheduler matches them against the
        labels as they are now): those of the pods counted on nodes, and those of pending
        pods, which are withdrawn and admitted again."""
        if self.sched is None:
            return
        known = self.namespaces.known()
        again = []
        for key, pod in list(self.pod_informer.cache.items()):
            if not has_namespace_selector(pod):
                continue
            node = (pod.get("spec") or {}).get("nodeName")
            if node and key not in self.pod_job and not ended(pod):
                self.sched.set_pod(key, NodeName(str(node)), pod_meta(pod, known))
            job = self.pod_job.get(key)
            if not node and job is not None and not self.jobs[job].running:
                again.append(key)
        for key in again:
            self._pod_ended(key)
        for key in again:
            if key not in self.pod_job and not self._in_gang(key):
                self._admit(key)
        self._dirty.set()

    def _on_own_pod(self, event: str, key: str, obj: dict[str, Any]) -> None:
        if event == "DELETED" or ended(obj):
            self._pod_ended(key)
            return
        if (obj.get("spec") or {}).get("nodeName"):
            self.gated.pop(key, None)
            job = self.pod_job.get(key)
            if job is not None and self.jobs[job].running:
                return  # bound here
            if job is not None:
                self._pod_ended(key)  # bound while pending here: stop scheduling it
            # its recorded cards are taken (a bind whose answer was lost, another leader)
            self._bound_elsewhere(key, obj)
            return
        if key in self.pod_job or key in self.rejected or self._in_gang(key):
            return
        self._admit(key)
        self._dirty.set()

    def _on_foreign_pod(self, event: str, key: str, obj: dict[str, Any]) -> None:
        """A pod of another scheduler: only its cards matter (bound through the extender)."""
        if event == "DELETED" or ended(obj):
            self._pod_ended(key)
        elif (obj.get("spec") or {}).get("nodeName") and key not in self.pod_job:
            self._bound_elsewhere(key, obj)

    def all_pods(self) -> list[tuple[str, dict[str, Any]]]:
        """Every cached pod (key, object) of gpupool and of the foreign schedulers."""
        return [(k, p) for k, p in self.pod_informer.cache.items() if not is_reduced(p)]

    def pod(self, key: str) -> dict[str, Any] | None:
        """A cached pod by key, gpupool's or a foreign scheduler's."""
        pod = self.pod_informer.cache.get(key)
        return None if pod is None or is_reduced(pod) else pod

    def own_pod(self, key: str) -> dict[str, Any] | None:
        pod = self.pod(key)
        if pod is None or (pod.get("spec") or {}).get("schedulerName") != self.opt.scheduler_name:
            return None
        return pod

    async def bind_foreign(self, pod: dict[str, Any], p: Placement) -> None:
        """Binds a pod another scheduler chose ``p.node`` for (the extender's bind): its
        cards are taken in the core first (ConflictError when they are not free), then the
        pod is bound as gpupool binds its own. AdapterError when the bind failed."""
        if self.sched is None:
            raise NotFoundError("gpupool is not leading")
        key = object_key(pod)
        req = self.read_request(pod)
        queue = self.resolve_queue(pod)
        job, task_pod = job_for_pods(JobId(key), queue, [(key, req)], gang=False)
        now = self.clock()
        self.sched.restore(job, [p], now)
        info = JobInfo(job.id, queue, task_pod, running=True)
        self.jobs[job.id] = info
        self.pod_job[key] = job.id
        self.requests[key] = req
        self.uids[key] = str((pod.get("metadata") or {}).get("uid") or "")
        item = replace(self._bind_item(key, p, info, "", now, pod), watched=False)
        # the pod was just read: no cache fence; kube-scheduler's extender call times out
        outcome = await self.binder.bind(item, lock_wait_s=self.opt.extender_lock_wait_s)
        if key not in self.stats.bound_at:
            raise AdapterError(f"binding {key} to {p.node} failed: {outcome}")

    def _in_gang(self, key: str) -> bool:
        return key in self.gang_of

    def _bound_elsewhere(self, key: str, obj: Mapping[str, Any]) -> None:
        """A pod bound outside this replica's view (another leader): take its cards."""
        try:
            rec = self.recorded(obj)
        except TranslateError as exc:
            log.warning("%s", exc)
            return
        if rec is None or rec.job in self.jobs:
            return
        # the job's bound pods seen so far, kept until the whole job is (no scan of all pods)
        members = self.unclaimed.setdefault(rec.job, {})
        members[key] = rec
        self.unclaimed_job[key] = rec.job
        if len(members) >= rec.gang_size:
            del self.unclaimed[rec.job]
            for k in members:
                self.unclaimed_job.pop(k, None)
            self._restore(rec.job, sorted(members.items()))

    def recorded(self, pod: Mapping[str, Any]) -> RecordedPlacement | None:
        """A bound pod's cards: gpupool's record, else HAMi's device annotation (a pod that
        HAMi's scheduler bound). TranslateError when neither can be read."""
        rec = read_placement(pod)
        if rec is not None:
            return rec
        node = self.nodes_by_name.get(str((pod.get("spec") or {}).get("nodeName") or ""))
        if node is None:
            return None
        try:
            req = self.read_request(pod)
            queue = self.resolve_queue(pod)
        except (InvalidJobError, NotFoundError) as exc:
            raise TranslateError(f"bound pod {object_key(pod)}: {exc}") from exc
        return placement_from_hami(pod, node, queue, req.cpu_milli, req.memory_mib)

    def _pod_ended(self, key: str) -> None:
        assert self.sched is not None
        self.extended.drop(key)
        self.extended_asks.pop(key, None)
        was = self.mig.drop(key)
        if was is not None:
            self._mig_changed(was)
        self.rejected.pop(key, None)
        self.status.forget(key)
        self.requests.pop(key, None)
        self.constraints.pop(key, None)
        self.gated.pop(key, None)
        gang_id = self.gang_of.pop(key, None)
        if gang_id is not None and gang_id in self.gangs:
            members = self.gangs[gang_id][1]
            members.pop(key, None)
            if not members:
                del self.gangs[gang_id]
        unclaimed = self.unclaimed_job.pop(key, None)
        if unclaimed is not None:
            bound = self.unclaimed.get(unclaimed, {})
            bound.pop(key, None)
            if not bound:
                self.unclaimed.pop(unclaimed, None)
        found = self.pod_job.pop(key, None)
        if found is None:
            return
        job_id = found
        info = self.jobs[job_id]
        now = self.clock()
        if not info.running:
            # pending: withdraw the job; its other pods wait again (a gang) or go on alone
            self.sched.cancel(job_id, now)
            del self.jobs[job_id]
            for other in info.pods:
                if other != key and self.pod_job.pop(other, None) is not None:
                    self._admit(other)
            self._dirty.set()
            return
        info.ended.add(key)
        if all(k in info.ended for k in info.pods):
            del self.jobs[job_id]
            with contextlib.suppress(NotFoundError):
                self.sched.finished(job_id, now)
            self._dirty.set()

    def _still_waiting(self, key: str) -> bool:
        if key in self.gated:
            return True
        job = self.pod_job.get(key)
        if job is not None:
            info = self.jobs.get(job)
            return info is not None and not info.running
        return self._in_gang(key)
