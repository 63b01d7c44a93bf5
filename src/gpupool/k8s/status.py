"""What a waiting pod is told: its ``PodScheduled`` condition and an Event.

- A parked pod gets ``PodScheduled=False`` (reason ``Unschedulable``) and an Event
  ``FailedScheduling`` whose message is the core's reason, in numbers; written again only
  when the message changes, and at most once per ``interval_s`` per pod (a wake-up re-parks
  every waiting pod with new numbers; the latest reason is written when the interval ends).
- A pod that can never run gets the same condition and an Event ``Rejected``.
- A pod held back by ``spec.schedulingGates`` gets reason ``SchedulingGated``, as
  kube-scheduler writes it, and no Event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpupool.k8s.kube import STRATEGIC_PATCH, ApiError, Kube
from gpupool.k8s.lease import micro_time

__all__ = ["StatusWriter"]

log = logging.getLogger("gpupool.k8s")


class StatusWriter:
    def __init__(self, kube: Kube, *, component: str, identity: str,
                 pod: Callable[[str], Mapping[str, Any] | None],
                 is_leader: Callable[[], bool], still_waiting: Callable[[str], bool],
                 interval_s: float = 5.0, concurrency: int = 8) -> None:
        self.kube = kube
        self.component = component
        self.identity = identity
        self.pod = pod
        self.is_leader = is_leader
        self.still_waiting = still_waiting
        self.interval_s = interval_s
        self.last: dict[str, str] = {}  # pod key -> last reason written
        self._at: dict[str, float] = {}
        self._due: dict[str, str] = {}
        self._sem = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[Any]] = set()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def forget(self, key: str) -> None:
        for d in (self.last, self._at, self._due):
            d.pop(key, None)

    def bound(self, key: str) -> None:
        """The pod is being bound: its next reason, if any, is written afresh."""
        self.last.pop(key, None)

    def park(self, key: str, message: str, reason: str = "Unschedulable") -> None:
        """Says why a pod waits, when the reason changed (throttled per pod)."""
        if self.last.get(key) == message:
            self._due.pop(key, None)
            return
        now = time.monotonic()
        wait = self._at.get(key, -1e9) + self.interval_s - now
        if wait > 0:
            if key not in self._due:
                self._spawn(self._later(key, wait, reason))
            self._due[key] = message
            return
        self._due.pop(key, None)
        self.last[key] = message
        self._at[key] = now
        pod = self.pod(key)
        if pod is not None and self.is_leader():
            event = "FailedScheduling" if reason == "Unschedulable" else ""
            self._spawn(self.pending(pod, reason, event, message))

    async def _later(self, key: str, wait: float, reason: str) -> None:
        await asyncio.sleep(wait)
        message = self._due.pop(key, None)
        if message is not None and self.still_waiting(key):
            self.park(key, message, reason)

    def reject(self, key: str, reason: str) -> None:
        pod = self.pod(key)
        if pod is not None and self.is_leader():
            self._spawn(self.pending(pod, "Unschedulable", "Rejected", f"rejected: {reason}"))

    async def pending(self, pod: Mapping[str, Any], reason: str, event_reason: str,
                      message: str) -> None:
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace"), meta.get("name")
        async with self._sem:
            try:
                await self.kube.request(
                    "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status",
                    {"status": {"conditions": [{
                        "type": "PodScheduled", "status": "False", "reason": reason,
                        "message": message, "lastProbeTime": None,
                        "lastTransitionTime": micro_time()[:19] + "Z"}]}},
                    content_type=STRATEGIC_PATCH)
            except ApiError as exc:
                if exc.status != 404:
                    log.warning("pod %s/%s status: %s", ns, name, exc)
            if event_reason:
                await self.event(pod, "Warning", event_reason, message)

    async def event(self, obj: Mapping[str, Any], type_: str, reason: str,
                    message: str) -> None:
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        now = micro_time()[:19] + "Z"
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": ns},
            "involvedObject": {"apiVersion": obj.get("apiVersion", "v1"),
                               "kind": obj.get("kind", "Pod"), "name": meta.get("name"),
                               "namespace": meta.get("namespace"), "uid": meta.get("uid")},
            "reason": reason, "message": message[:1024], "type": type_,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.identity,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            await self.kube.request("POST", f"/api/v1/namespaces/{ns}/events", body)
        except ApiError as exc:
            log.warning("event for %s: %s", meta.get("name"), exc)
