"""The scheduler controller where Kueue's objects are the queues: pods read as Kueue reads them.

:class:`KueueController` is gpupool's :class:`~gpupool.k8s.controller.Controller` with two
answers changed (see ``workloads.py``): a pod's queue is a LocalQueue of its own namespace,
named on the pod or on the Job that owns it, and ``kueue.x-k8s.io/priority-class`` sets its
priority. It watches Jobs for those two labels (only they are kept per Job) and starts
scheduling once it has seen them all. A pod that names no queue goes where gpupool sends
such pods (``--default-queue``), as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpupool.k8s.controller import Controller
from gpupool.k8s.informer import Informer, object_key
from gpupool.k8s.kube import ApiError
from gpupool.k8s.kueue.workloads import (
    job_labels,
    local_queue,
    workload_labels,
    workload_priority,
)
from gpupool.k8s.translate import PodRequest

__all__ = ["KueueController"]

log = logging.getLogger("gpupool.k8s.kueue")


class KueueController(Controller):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.job_labels: dict[str, dict[str, str]] = {}
        self.job_informer = Informer(self.kube, "/apis/batch/v1/jobs", self._on_job,
                                     name="jobs")

    def _on_job(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = object_key(obj)
        labels = job_labels(obj) if event != "DELETED" else {}
        if labels:
            self.job_labels[key] = labels
        else:
            self.job_labels.pop(key, None)

    async def run(self) -> None:
        try:  # may this service account list Jobs? (RBAC: deploy/)
            await self.kube.request("GET", "/apis/batch/v1/jobs", params={"limit": "1"})
        except ApiError as exc:
            if exc.status != 403:
                raise
            log.warning("Jobs are not listable (%s): a pod's queue and priority class are "
                        "read from the pod alone", exc)
            await super().run()
            return
        jobs = asyncio.create_task(self.job_informer.run())
        try:
            await self.job_informer.synced.wait()
            await super().run()
        finally:
            jobs.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await jobs

    def resolve_queue(self, pod: Mapping[str, Any]) -> str:
        """``namespace/name`` of the pod's LocalQueue; NotFoundError when its namespace has no
        LocalQueue of that name."""
        assert self.sched is not None
        queue, _ = workload_labels(pod, self.job_labels)
        if queue is None:
            return super().resolve_queue(pod)
        ns = str((pod.get("metadata") or {}).get("namespace", "default"))
        return local_queue(self.sched.config, ns, queue)

    def read_request(self, pod: Mapping[str, Any]) -> PodRequest:
        """The pod's request; its priority is its WorkloadPriorityClass's value when it (or
        its Job) names one. InvalidJobError for a name that is no WorkloadPriorityClass."""
        req = super().read_request(pod)
        if self.sched is None:
            return req
        _, name = workload_labels(pod, self.job_labels)
        value = workload_priority(self.sched.config, name)
        return req if value is None else replace(req, priority=value)
