"""What a waiting pod is told: its ``PodScheduled`` condition and an Event, written at a
bounded rate.

- A parked pod gets ``PodScheduled=False`` (reason ``Unschedulable``) and an Event
  ``FailedScheduling`` whose message is the core's reason, in numbers; a pod that can never
  run gets the same condition and an Event ``Rejected``; a pod held back by
  ``spec.schedulingGates`` gets reason ``SchedulingGated``, as kube-scheduler writes it, and
  no Event.
- A reason is written only when it changed. Writes wait in one **bounded queue** keyed by
  what they write (a pod's condition, one Event): a newer reason for a pod whose write is
  still queued replaces it in place (the last value wins, the queue does not grow), and a
  repeated Event is counted into the one queued. A few workers (``concurrency``) drain the
  queue, together at most ``writes_per_s`` requests a second (a token bucket), oldest first;
  there is no task per pod. With 10,000 pods whose reasons change every cycle the API server
  sees ``writes_per_s``, and each pod's latest reason arrives within
  ``pending pods / writes_per_s`` seconds.
- When the queue is full (``max_queued``), a new key is not queued and its reason is not
  remembered as written, so the next cycle offers it again (``dropped`` counts these).
- Events are aggregated as Kubernetes' components aggregate them (``k8s/events.py``): a
  repeat PATCHes the existing Event's ``count`` and ``lastTimestamp``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.k8s.events import EventCorrelator, EventWrite
from gpupool.k8s.kube import STRATEGIC_PATCH, Kube, KubeError
from gpupool.k8s.lease import micro_time

__all__ = ["StatusWriter", "WriteStats"]

log = logging.getLogger("gpupool.k8s")


@dataclass(slots=True)
class _Condition:
    key: str  # pod key
    reason: str
    message: str
    event: str  # the Event's reason to record with it ("" for none)
    final: bool = False  # a rejection: written although the pod no longer waits


@dataclass
class WriteStats:
    conditions: int = 0  # PodScheduled condition PATCHes sent
    events_created: int = 0
    events_repeated: int = 0  # PATCHes of count and lastTimestamp
    coalesced: int = 0  # queued writes replaced by a newer one before they were sent
    dropped: int = 0  # writes refused because the queue was full


class StatusWriter:
    def __init__(
        self,
        kube: Kube,
        *,
        component: str,
        identity: str,
        pod: Callable[[str], Mapping[str, Any] | None],
        is_leader: Callable[[], bool],
        still_waiting: Callable[[str], bool],
        writes_per_s: float = 50.0,
        concurrency: int = 4,
        max_queued: int = 20_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.component = component
        self.identity = identity
        self.pod = pod
        self.is_leader = is_leader
        self.still_waiting = still_waiting
        self.writes_per_s = writes_per_s
        self.concurrency = concurrency
        self.max_queued = max_queued
        self.clock = clock
        self.last: dict[str, str] = {}  # pod key -> last reason queued or written
        self.stats = WriteStats()
        self.events = EventCorrelator(component)
        self._queue: OrderedDict[tuple[str, ...], _Condition | EventWrite] = OrderedDict()
        self._wake = asyncio.Event()
        self._tokens = 1.0
        self._refilled = time.monotonic()
        self._workers: list[asyncio.Task[None]] = []
        self._writing = 0
        # Keys being written: one write per pod condition (or Event) at a time, so two
        # PATCHes of one pod's reason never race and the last value queued is the last written.
        self._busy: set[tuple[str, ...]] = set()

    # -- what the controller calls (never blocks, never makes a task) ------------------------

    def forget(self, key: str) -> None:
        self.last.pop(key, None)
        self._queue.pop(("condition", key), None)

    def bound(self, key: str) -> None:
        """The pod is being bound: its queued reason is dropped, its next one written."""
        self.forget(key)

    def park(self, key: str, message: str, reason: str = "Unschedulable") -> None:
        """Says why a pod waits, when the reason changed."""
        if self.last.get(key) == message:
            return
        event = "FailedScheduling" if reason == "Unschedulable" else ""
        if self._put(("condition", key), _Condition(key, reason, message, event)):
            self.last[key] = message

    def reject(self, key: str, reason: str) -> None:
        message = f"rejected: {reason}"
        if self.last.get(key) == message:
            return
        if self._put(
            ("condition", key), _Condition(key, "Unschedulable", message, "Rejected", final=True)
        ):
            self.last[key] = message

    async def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Records an Event for ``obj`` (queued; aggregated with earlier ones)."""
        self.record(obj, type_, reason, message)

    def record(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        write = self.events.correlate(obj, type_, reason, message[:1024], self.clock())
        self._put(("event", *write.key), write)

    def queued(self) -> int:
        """Writes waiting or being written."""
        return len(self._queue) + self._writing

    async def close(self) -> None:
        for t in self._workers:
            t.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()

    # -- the queue ---------------------------------------------------------------------------

    def _put(self, qkey: tuple[str, ...], item: _Condition | EventWrite) -> bool:
        if qkey in self._queue:
            self._queue[qkey] = item  # in place: keeps its turn, the last value wins
            self.stats.coalesced += 1
            return True
        if len(self._queue) >= self.max_queued:
            self.stats.dropped += 1
            return False
        self._queue[qkey] = item
        self._start()
        self._wake.set()
        return True

    def _start(self) -> None:
        if self._workers:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet: the first call from one starts them
        self._workers = [asyncio.create_task(self._work()) for _ in range(self.concurrency)]

    async def _token(self) -> None:
        """Waits for the rate limit (a token bucket of one second's writes)."""
        while True:
            now = time.monotonic()
            self._tokens = min(
                max(1.0, self.writes_per_s),
                self._tokens + (now - self._refilled) * self.writes_per_s,
            )
            self._refilled = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return
            await asyncio.sleep((1.0 - self._tokens) / self.writes_per_s)

    async def _next(self) -> tuple[tuple[str, ...], _Condition | EventWrite]:
        """The oldest queued write whose key no other worker is writing (at most
        ``concurrency`` keys are skipped); waits while there is none."""
        while True:
            for qkey in self._queue:
                if qkey not in self._busy:
                    return qkey, self._queue.pop(qkey)
            self._wake.clear()
            await self._wake.wait()

    async def _work(self) -> None:
        while True:
            qkey, item = await self._next()
            self._busy.add(qkey)
            self._writing += 1
            try:
                if isinstance(item, _Condition):
                    await self._condition(item)
                else:
                    await self._token()
                    await self._event(item)
            finally:
                self._writing -= 1
                self._busy.discard(qkey)
                if self._queue:
                    self._wake.set()  # a write held back behind this key may go now

    async def _condition(self, item: _Condition) -> None:
        pod = self.pod(item.key)
        if pod is None or not self.is_leader() or not (item.final or self.still_waiting(item.key)):
            if self.last.get(item.key) == item.message:
                self.last.pop(item.key, None)  # not written: offered again if still true
            return
        await self._token()
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace"), meta.get("name")
        try:
            await self.kube.request(
                "PATCH",
                f"/api/v1/namespaces/{ns}/pods/{name}/status",
                {
                    "status": {
                        "conditions": [
                            {
                                "type": "PodScheduled",
                                "status": "False",
                                "reason": item.reason,
                                "message": item.message,
                                "lastProbeTime": None,
                                "lastTransitionTime": micro_time()[:19] + "Z",
                            }
                        ]
                    }
                },
                content_type=STRATEGIC_PATCH,
            )
            self.stats.conditions += 1
        except KubeError as exc:
            if exc.status != 404:
                log.warning("pod %s/%s status: %s", ns, name, exc)
        if item.event:
            self.record(pod, "Warning", item.event, item.message)

    async def _event(self, w: EventWrite) -> None:
        now = micro_time(self.clock())[:19] + "Z"
        path = f"/api/v1/namespaces/{w.namespace}/events"
        if w.name:
            try:
                await self.kube.request(
                    "PATCH",
                    f"{path}/{w.name}",
                    {"count": w.count, "lastTimestamp": now, "message": w.message},
                    content_type=STRATEGIC_PATCH,
                )
                self.stats.events_repeated += 1
                return
            except KubeError as exc:
                if exc.status != 404:
                    log.warning("event %s: %s", w.name, exc)
                    return
                self.events.lost(w.key)  # expired (the API server keeps Events 1 h)
        name = f"{w.involved.get('name')}.{time.time_ns():x}"
        first = micro_time(w.first_s)[:19] + "Z"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": w.namespace},
            "involvedObject": dict(w.involved),
            "reason": w.reason,
            "message": w.message,
            "type": w.type,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.identity,
            "firstTimestamp": first,
            "lastTimestamp": now,
            "count": w.count,
        }
        try:
            await self.kube.request("POST", path, body)
            self.events.created(w.key, name)
            self.stats.events_created += 1
        except KubeError as exc:
            log.warning("event for %s: %s", w.involved.get("name"), exc)
