"""The scheduler controller where Kueue's objects are the queues: pods read as Kueue reads them.

:class:`KueueController` is gpupool's :class:`~gpupool.k8s.controller.Controller` with two
answers changed (see ``workloads.py``): a pod's queue is a LocalQueue of its own namespace,
named on the pod or on the Job that owns it, whose ClusterQueue's ``namespaceSelector``
admits the namespace, and ``kueue.x-k8s.io/priority-class`` sets its priority. It watches
Jobs for those two labels (only they are kept per Job), reads Namespaces' labels from the
controller's Namespace watch (``k8s/namespaces.py``), and starts scheduling once it has
seen them all; where it may not list one of them, it goes on without (a warning says so):
queue labels are then read from the pod alone, or namespace selectors are not enforced.
A pod that names no queue goes where gpupool sends such pods (``--default-queue``), as
before.
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
from gpupool.k8s.kueue.workloads import (
    admits,
    job_labels,
    local_queue,
    workload_labels,
    workload_priority,
)
from gpupool.k8s.namespaces import listable
from gpupool.k8s.reconfigure import readmit
from gpupool.k8s.translate import PodRequest

__all__ = ["KueueController"]

log = logging.getLogger("gpupool.k8s.kueue")


class KueueController(Controller):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.job_labels: dict[str, dict[str, str]] = {}
        self.job_informer = Informer(
            self.kube,
            "/apis/batch/v1/jobs",
            self._on_job,
            name="jobs",
            transform=slim.metadata_only,
        )
        self.selectors: dict[str, Mapping[str, Any] | None] = {}
        """ClusterQueue -> its namespaceSelector (set by the KueueSource)."""

    @property
    def enforce_selectors(self) -> bool:
        """Whether ClusterQueues' namespaceSelectors are enforced: Namespaces are watched."""
        return self.namespaces.watched

    @property
    def namespace_labels(self) -> dict[str, dict[str, str]]:
        return self.namespaces.labels

    def _on_job(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = object_key(obj)
        labels = job_labels(obj) if event != "DELETED" else {}
        if labels:
            self.job_labels[key] = labels
        else:
            self.job_labels.pop(key, None)

    def _namespace_changed(self, name: str) -> None:
        super()._namespace_changed(name)
        if self.sched is not None:
            readmit(self)  # a ClusterQueue's selector may match it now

    async def run(self) -> None:
        watched = []
        if await listable(
            self.kube,
            "/apis/batch/v1/jobs",
            "a pod's queue and priority class are read from the pod alone",
        ):
            watched.append(self.job_informer)
        tasks = [asyncio.create_task(i.run()) for i in watched]
        try:
            for i in watched:
                await i.synced.wait()
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
