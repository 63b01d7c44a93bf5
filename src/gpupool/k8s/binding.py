"""Binds and evictions, and the one retry policy they share.

**Binds.** A pod is bound through the Binding subresource. The Binding carries

- ``metadata.uid``, the UID of the pod the decision was made for: the API server refuses it
  (``409``) when the pod of that name is now another one (deleted and made again), so a
  replacement pod is never bound with a stale decision;
- the pod's annotations (gpupool's placement record and HAMi's device annotations), which
  the API server copies onto the pod in the same write that sets ``spec.nodeName``
  (``annotate_first`` patches them in a write of their own first, as HAMi's scheduler does).

A pod that asks for devices is bound only under HAMi's node lock (``k8s/nodelock.py``): one
allocating pod per node, so the device plugin's ``Allocate`` finds the right pod. Binds are
**pipelined across nodes**: each node has its own queue worked one pod at a time (a gang's
pods on one node go one after another: the next waits until the device plugin released the
lock, or it went stale), while every node's queue runs at once. Pods without devices take no
lock and bind at once. A pod whose device plugin takes no lock but finds its pod by the
order pods were given their cards (Enflame's DRS plugin: the oldest
``enflame.com/gcu-assigned-time`` first) is **ordered**: it goes through its node's queue,
one bind after another, without the lock, and its ``stamp`` annotation is given the time of
its own bind (ns), so those times are in the order the node's kubelet receives the pods.

While a node's lock is held nothing else may slow its queue, since every write under it
delays the node's next pod:

- the next pod's lock is written the moment the node watch shows the release (its
  ``resourceVersion`` is the one the informer holds; ``lock_poll_s`` is only a fallback);
- the ``hami.io/vgpu-node`` label (a Binding carries no labels) is patched ahead of the
  lock, not under it (the next pod's while the one before holds the lock, the first one's
  beside its lock write): under the lock there are two writes, the lock and the Binding
  (with ``annotate_first`` the annotations and the label are one patch, written under the
  lock as HAMi's scheduler writes them);
- binds under a lock do not wait for the permits (``concurrency``) that bound the other
  writes: there is at most one per node, and one node's bind must never wait behind
  another's writes.

**The retry policy** (one, for binds and evictions): ``0`` (no answer), ``429`` and ``5xx``
are transient and retried with capped exponential backoff until ``deadline_s``; ``404``
means the pod is gone; ``409`` on a bind is read back: bound to the node chosen counts as
bound, bound to another node is reported (the core lets the card go), and anything else (a
``schedulingGates`` refusal, a UID that no longer matches, a pod being deleted) is a
**refusal**: the lock is released and the pod goes to backoff, never a hot retry. Any other
status fails the bind.

**Evictions** post ``policy/v1`` Evictions, or ``policy/v1beta1`` where the API server's
discovery says ``pods/eviction`` is served only in that version (before Kubernetes 1.22).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from gpupool.k8s.hami.devices import hami_labels
from gpupool.k8s.kube import MERGE_PATCH, Kube, KubeError
from gpupool.k8s.nodelock import LockBusy, NodeLocks
from gpupool.k8s.wakeup import wait_event

__all__ = ["BindItem", "BindOutcome", "BinderHost", "PodBinder", "RetryPolicy"]

log = logging.getLogger("gpupool.k8s.binding")

_UNLIMITED = contextlib.nullcontext()


class BindOutcome(StrEnum):
    BOUND = "bound"
    GONE = "gone"  # the pod (with that UID) no longer exists
    ELSEWHERE = "elsewhere"  # bound to another node meanwhile
    REFUSED = "refused"  # the API server will not bind it now: backoff
    FAILED = "failed"
    NOT_LEADER = "not-leader"


@dataclass(frozen=True)
class RetryPolicy:
    """Which API answers are worth retrying, and how long to wait between tries."""

    deadline_s: float = 90.0  # how long transient errors are retried per write
    base_s: float = 0.05
    max_s: float = 2.0

    @staticmethod
    def transient(exc: KubeError) -> bool:
        return exc.status in (0, 429) or exc.status >= 500

    def delay(self, attempt: int) -> float:
        return float(min(self.base_s * 2**attempt, self.max_s))


@dataclass(frozen=True)
class BindItem:
    """One pod to bind: its key, the UID the decision was made for, the node and the
    annotations to write; ``lock``: whether it asks for devices (takes the node lock)."""

    key: str
    uid: str
    node: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    lock: bool = True
    job: str = ""  # the decision's job, for the host to tell a stale answer
    ordered: bool = False  # through the node's queue even without the lock (above)
    stamp: str = ""  # an annotation written with the time of the bind, in ns
    watched: bool = True  # the informer's copy of the pod fences the bind (below)


class BinderHost(Protocol):
    """What the binder needs from the scheduler it binds for."""

    def is_leader(self) -> bool: ...

    def bind_done(
        self, item: BindItem, outcome: BindOutcome, reason: str, pod: Mapping[str, Any] | None
    ) -> None:
        """Called once per item with its outcome (``pod``: the pod as read back, for
        ``ELSEWHERE``)."""

    def pod_alive(self, key: str, uid: str) -> bool:
        """Whether the pod, with that UID, is still there and has not ended, as the
        informer last saw it."""


class PodBinder:
    """Binds pods for the scheduler: the Binding subresource and HAMi's annotations, one
    allocating pod per node under HAMi's node lock (the core's ``elastic.Binder`` binds
    ElasticGPUClaims, another thing)."""

    def __init__(
        self,
        kube: Kube,
        locks: NodeLocks,
        host: BinderHost,
        *,
        concurrency: int = 64,
        retry: RetryPolicy = RetryPolicy(),
        annotate_first: bool = False,
        lock_poll_s: float = 1.0,
    ) -> None:
        self.kube = kube
        self.locks = locks
        self.host = host
        self.retry = retry
        self.annotate_first = annotate_first
        self.lock_poll_s = lock_poll_s
        self._sem = asyncio.Semaphore(concurrency)
        self._queues: dict[str, deque[BindItem]] = {}
        self._workers: set[str] = set()
        self._node_changed: dict[str, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._labelled: dict[str, tuple[BindItem, asyncio.Task[None]]] = {}
        self._eviction_version: str | None = None
        self.lock_waits = 0  # times a bind waited for a node's lock
        self.max_in_flight: dict[str, int] = {}  # node -> most locked binds at once (tests)
        self._in_flight: dict[str, int] = {}

    # -- life ------------------------------------------------------------------------------

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def drop(self) -> None:
        """Forget every queued and running bind (leadership was lost: the decisions were
        the old term's; a new leader decides afresh). Locks taken for binds not made are
        released in the background."""
        for t in list(self._tasks):
            t.cancel()
        self._queues.clear()
        self._workers.clear()
        self._labelled.clear()

    def queued(self, node: str) -> int:
        return len(self._queues.get(node, ()))

    def in_flight(self) -> dict[str, int]:
        """Per node with locked binds to make: how many (those queued, and the one its
        worker is on)."""
        return {node: len(self._queues.get(node, ())) + 1 for node in self._workers}

    def node_changed(self, node: str) -> None:
        """The node object changed (its lock may be gone): wake its queue."""
        ev = self._node_changed.get(node)
        if ev is not None:
            ev.set()

    # -- binds -----------------------------------------------------------------------------

    def submit(self, item: BindItem) -> None:
        """Bind in the background: behind the node's queue when it takes the lock."""
        if not item.lock and not item.ordered:
            self._spawn(self._finish(item))
            return
        self._queues.setdefault(item.node, deque()).append(item)
        if item.node not in self._workers:
            self._workers.add(item.node)
            self._spawn(self._drain(item.node))

    async def _drain(self, node: str) -> None:
        queue = self._queues[node]
        try:
            while queue:
                item = queue.popleft()
                if queue and queue[0].lock:  # the next pod's label, while this one holds it
                    self._label_ahead(queue[0])
                await self._finish(item)
        finally:
            self._workers.discard(node)
            if not queue:
                self._queues.pop(node, None)

    async def _finish(self, item: BindItem) -> None:
        try:
            outcome, reason, pod = await self._bind(item)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # reported, never lost: the core must hear of it
            log.exception("binding %s to %s", item.key, item.node)
            outcome, reason, pod = BindOutcome.FAILED, f"binding failed: {exc}", None
        self.host.bind_done(item, outcome, reason, pod)

    async def bind(self, item: BindItem, lock_wait_s: float | None = None) -> BindOutcome:
        """Bind now (waiting for the node's lock when needed, at most ``lock_wait_s``: a
        caller such as kube-scheduler's extender call has a deadline; HAMi's scheduler waits
        28 s) and report the outcome."""
        outcome, reason, pod = await self._bind(item, lock_wait_s)
        self.host.bind_done(item, outcome, reason, pod)
        return outcome

    async def _lock(self, item: BindItem, wait_s: float | None) -> BindOutcome | None:
        """Waits for and takes the node's lock; None when taken, else why not (REFUSED
        when another pod still holds it after ``wait_s``)."""
        ns, name = item.key.split("/", 1)
        ev = self._node_changed.setdefault(item.node, asyncio.Event())
        waited = False
        deadline = time.monotonic() + self.retry.deadline_s
        give_up = None if wait_s is None else time.monotonic() + wait_s
        attempt = 0
        while True:
            if not self.host.is_leader():
                return BindOutcome.NOT_LEADER
            if item.watched and not self.host.pod_alive(item.key, item.uid):
                return BindOutcome.GONE
            ev.clear()
            try:
                await self.locks.acquire(item.node, ns, name)
                return None
            except LockBusy:
                if not waited:
                    self.lock_waits += 1
                    waited = True
                if give_up is not None and time.monotonic() > give_up:
                    return BindOutcome.REFUSED
                await wait_event(ev, self.lock_poll_s)
            except KubeError as exc:
                if not self.retry.transient(exc) and exc.status != 409:
                    raise
                attempt += 1
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(self.retry.delay(attempt))

    async def _bind(
        self, item: BindItem, lock_wait_s: float | None = None
    ) -> tuple[BindOutcome, str, Mapping[str, Any] | None]:
        ns, name = item.key.split("/", 1)
        labelled = None
        if item.stamp:
            item = replace(item, annotations={**item.annotations, item.stamp: str(time.time_ns())})
        if item.lock:
            self._label_ahead(item)  # (started already while the one before held the lock)
            labelled = self._take_label(item)
            try:
                why = await self._lock(item, lock_wait_s)
            except KubeError as exc:
                return BindOutcome.FAILED, f"locking node {item.node} failed: {exc}", None
            if why is BindOutcome.REFUSED:
                return why, f"node {item.node} is locked for another pod's allocation", None
            if why is not None:
                return why, "", None
            self._in_flight[item.node] = self._in_flight.get(item.node, 0) + 1
            self.max_in_flight[item.node] = max(
                self.max_in_flight.get(item.node, 0), self._in_flight[item.node]
            )
        try:
            outcome, reason, pod = await self._write(item, ns, name, labelled)
        except asyncio.CancelledError:
            if item.lock:  # the bind may not have been made: give the lock back
                asyncio.get_running_loop().create_task(self._unlock(item, ns, name))
            raise
        finally:
            if item.lock:
                self._in_flight[item.node] -= 1
        if item.lock and outcome is not BindOutcome.BOUND:
            await self._unlock(item, ns, name)
        return outcome, reason, pod

    async def _unlock(self, item: BindItem, ns: str, name: str) -> None:
        try:
            await self.locks.release(item.node, ns, name)
        except KubeError as exc:
            log.warning(
                "releasing the lock of node %s for %s: %s (it expires)", item.node, item.key, exc
            )

    def _pod_patch(self, item: BindItem, *, labels_only: bool = False) -> dict[str, Any] | None:
        """The pod patch a bind writes before its Binding (a Binding carries no labels):
        HAMi's label, and with ``annotate_first`` the annotations; None when none."""
        labels = hami_labels(item.annotations)
        annotate = self.annotate_first and not labels_only
        if not (annotate or labels):
            return None
        patch: dict[str, Any] = {}
        if annotate:
            patch["annotations"] = dict(item.annotations)
        if labels:
            patch["labels"] = labels
        if item.uid:
            patch["uid"] = item.uid  # the API server refuses it for a same-name new pod
        return {"metadata": patch}

    def _label_ahead(self, item: BindItem) -> None:
        """Starts the label patch of a pod next in line for a node's lock, so that it is
        not one more write under the lock (only the next one: a whole queue's labels at once
        would slow the locks' own writes). Not with ``annotate_first`` (then the label goes
        with HAMi's annotations, under the lock)."""
        started = self._labelled.get(item.key)
        if self.annotate_first or (started is not None and started[0] is item):
            return
        patch = self._pod_patch(item, labels_only=True)
        if patch is None:
            return
        ns, name = item.key.split("/", 1)

        async def label() -> None:
            async with self._sem:
                await self.kube.request(
                    "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", patch, content_type=MERGE_PATCH
                )

        task = self._spawn(label())
        # its error is read by the bind that awaits it; one never awaited is let go
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        self._labelled[item.key] = (item, task)

    def _take_label(self, item: BindItem) -> asyncio.Task[None] | None:
        """The label patch started for this very item, if any."""
        started = self._labelled.pop(item.key, None)
        if started is None or started[0] is not item:
            return None
        return started[1]

    async def _write(
        self, item: BindItem, ns: str, name: str, labelled: asyncio.Task[None] | None = None
    ) -> tuple[BindOutcome, str, Mapping[str, Any] | None]:
        """The pod patch (unless ``labelled``, started ahead: awaited instead) and the
        Binding, retried by the policy."""
        metadata: dict[str, Any] = {"name": name, "namespace": ns}
        if item.uid:
            metadata["uid"] = item.uid
        if not self.annotate_first:
            metadata["annotations"] = dict(item.annotations)
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": item.node},
        }
        deadline = time.monotonic() + self.retry.deadline_s
        attempt = 0
        while True:
            attempt += 1
            if not self.host.is_leader():
                log.info("not leader any more: %s not bound", item.key)
                return BindOutcome.NOT_LEADER, "", None
            if attempt == 1 and item.watched and not self.host.pod_alive(item.key, item.uid):
                # deleted, or replaced by a pod of the same name, since the decision: the
                # API server's UID precondition catches this too, where it honours it
                return BindOutcome.GONE, "", None
            try:
                # one bind per node holds a lock: those need no permit (see the top)
                async with _UNLIMITED if item.lock else self._sem:
                    if labelled is not None:
                        ahead, labelled = labelled, None
                        await ahead
                    else:
                        patch = self._pod_patch(item)
                        if patch is not None:
                            await self.kube.request(
                                "PATCH",
                                f"/api/v1/namespaces/{ns}/pods/{name}",
                                patch,
                                content_type=MERGE_PATCH,
                            )
                    await self.kube.request(
                        "POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding
                    )
                return BindOutcome.BOUND, "", None
            except KubeError as exc:
                if exc.status == 409:
                    return await self._conflict(item, ns, name, exc)
                if exc.status == 404:
                    return BindOutcome.GONE, "", None
                if self.retry.transient(exc) and time.monotonic() < deadline:
                    # a bind that had worked answers 409 next time and is recognised
                    await asyncio.sleep(self.retry.delay(attempt))
                    continue
                log.warning("binding %s to %s failed: %s", item.key, item.node, exc)
                return BindOutcome.FAILED, f"binding to {item.node} failed: {exc.message}", None

    async def _conflict(
        self, item: BindItem, ns: str, name: str, exc: KubeError
    ) -> tuple[BindOutcome, str, Mapping[str, Any] | None]:
        """A 409: read the pod back to tell "bound here already" from the rest."""
        try:
            pod = await self.kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        except KubeError as exc2:
            if exc2.status == 404:
                return BindOutcome.GONE, "", None
            return BindOutcome.REFUSED, f"binding to {item.node} refused: {exc.message}", None
        meta = pod.get("metadata") or {}
        if item.uid and meta.get("uid") != item.uid:
            return BindOutcome.GONE, "", None  # a new pod of the same name: not ours
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to == item.node:
            return BindOutcome.BOUND, "", None
        if bound_to:
            return BindOutcome.ELSEWHERE, f"bound to {bound_to} by someone else", pod
        return BindOutcome.REFUSED, f"binding to {item.node} refused: {exc.message}", None

    # -- evictions -------------------------------------------------------------------------

    async def eviction_version(self) -> str:
        """``v1`` unless discovery lists ``pods/eviction`` in ``policy/v1beta1`` only."""
        if self._eviction_version is None:
            version = "v1"
            try:
                body = await self.kube.request("GET", "/api/v1")
            except KubeError as exc:
                log.warning("discovery of pods/eviction failed (%s): using policy/v1", exc)
                return version
            for res in body.get("resources") or ():
                if res.get("name") == "pods/eviction" and res.get("group") == "policy":
                    version = str(res.get("version") or "v1")
            self._eviction_version = version
        return self._eviction_version

    async def evict(self, key: str, reason: str, on_gone: Callable[[str], None]) -> bool:
        """Posts an Eviction for the pod (retried as binds are); ``on_gone(key)`` when the
        pod is already gone. True when the eviction was accepted."""
        ns, name = key.split("/", 1)
        version = await self.eviction_version()
        body = {
            "apiVersion": f"policy/{version}",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns},
        }
        deadline = time.monotonic() + self.retry.deadline_s
        attempt = 0
        while True:
            attempt += 1
            try:
                async with self._sem:
                    await self.kube.request(
                        "POST", f"/api/v1/namespaces/{ns}/pods/{name}/eviction", body
                    )
                return True
            except KubeError as exc:
                if exc.status == 404:
                    on_gone(key)
                    return False
                if self.retry.transient(exc) and time.monotonic() < deadline:
                    await asyncio.sleep(self.retry.delay(attempt))
                    continue
                log.warning("evicting %s (%s) failed: %s", key, reason, exc)
                return False
