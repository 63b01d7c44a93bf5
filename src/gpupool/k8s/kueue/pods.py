"""The scheduler controller where Kueue's objects are the queues: pods read as Kueue reads them.

:class:`KueueController` is gpupool's :class:`~gpupool.k8s.controller.Controller` with two
answers changed (see ``workloads.py``): a pod's queue is a LocalQueue of its own namespace,
named on the pod or on the Job that owns it, whose ClusterQueue's ``namespaceSelector``
admits the namespace, and ``kueue.x-k8s.io/priority-class`` sets its priority. It watches
Jobs for those two labels (only they are kept per Job) and Namespaces for their labels, and
starts scheduling once it has seen them all; where it may not list one of them, it goes on
without (a warning says so): queue labels are then read from the pod alone, or namespace
selectors are not enforced. A pod that names no queue goes where gpupool sends such pods
(``--default-queue``), as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpupool.k8s import slim
from gpupool.k8s.controller import Controller
from gpupool.k8s.informer import Informer, object_key
from gpupool.k8s.kube import KubeError
from gpupool.k8s.kueue.workloads import (
    admits,
    job_labels,
    local_queue,
    workload_labels,
    workload_priority,
)
from gpupool.k8s.reconfigure import readmit
from gpupool.k8s.translate import PodRequest

__all__ = ["KueueController"]

log = logging.getLogger("gpupool.k8s.kueue")


class KueueController(Controller):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.job_labels: dict[str, dict[str, str]] = {}
        self.job_informer = Informer(self.kube, "/apis/batch/v1/jobs", self._on_job,
                                     name="jobs", transform=slim.metadata_only)
        self.namespace_labels: dict[str, dict[str, str]] = {}
        self.namespace_informer = Informer(self.kube, "/api/v1/namespaces",
                                           self._on_namespace, name="namespaces",
                                           transform=slim.metadata_only)
        self.selectors: dict[str, Mapping[str, Any] | None] = {}
        """ClusterQueue -> its namespaceSelector (set by the KueueSource)."""
        self.enforce_selectors = False  # True once Namespaces are watched

    def _on_job(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = object_key(obj)
        labels = job_labels(obj) if event != "DELETED" else {}
        if labels:
            self.job_labels[key] = labels
        else:
            self.job_labels.pop(key, None)

    def _on_namespace(self, event: str, obj: dict[str, Any],
                      old: dict[str, Any] | None) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        labels = dict((obj.get("metadata") or {}).get("labels") or {})
        if event == "DELETED":
            self.namespace_labels.pop(name, None)
            return
        before = self.namespace_labels.get(name)
        self.namespace_labels[name] = labels
        if before is not None and before != labels and self.sched is not None:
            readmit(self)  # a selector may match it now

    async def _listable(self, path: str, what: str) -> bool:
        try:  # may this service account list them? (RBAC: deploy/)
            await self.kube.request("GET", path, params={"limit": "1"})
        except KubeError as exc:
            if exc.status != 403:
                raise
            log.warning("%s are not listable (%s): %s", path, exc, what)
            return False
        return True

    async def run(self) -> None:
        watched = []
        if await self._listable("/apis/batch/v1/jobs", "a pod's queue and priority class "
                                "are read from the pod alone"):
            watched.append(self.job_informer)
        if await self._listable("/api/v1/namespaces", "ClusterQueues' namespaceSelectors "
                                "are not enforced"):
            watched.append(self.namespace_informer)
        tasks = [asyncio.create_task(i.run()) for i in watched]
        try:
            for i in watched:
                await i.synced.wait()
            self.enforce_selectors = self.namespace_informer in watched
            await super().run()
        finally:
            for t in tasks:
                t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, return_exceptions=True)

    def resolve_queue(self, pod: Mapping[str, Any]) -> str:
        """``namespace/name`` of the pod's LocalQueue; NotFoundError when its namespace has no
        LocalQueue of that name."""
        assert self.sched is not None
        queue, _ = workload_labels(pod, self.job_labels)
        if queue is None:
            return super().resolve_queue(pod)
        ns = str((pod.get("metadata") or {}).get("namespace", "default"))
        key = local_queue(self.sched.config, ns, queue)
        if self.enforce_selectors:
            cq = self.sched.resolve_queue(key)
            if cq in self.selectors:
                admits(cq, self.selectors[cq], ns, self.namespace_labels.get(ns, {}))
        return key

    def read_request(self, pod: Mapping[str, Any]) -> PodRequest:
        """The pod's request; its priority is its WorkloadPriorityClass's value when it (or
        its Job) names one. InvalidJobError for a name that is no WorkloadPriorityClass."""
        req = super().read_request(pod)
        if self.sched is None:
            return req
        _, name = workload_labels(pod, self.job_labels)
        value = workload_priority(self.sched.config, name)
        return req if value is None else replace(req, priority=value)
