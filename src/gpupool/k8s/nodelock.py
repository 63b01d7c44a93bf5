"""HAMi's node lock: one pod at a time is being allocated devices on a node.

HAMi's device plugin answers the kubelet's ``Allocate`` without being told which pod it is
for. It finds the pod through the node's ``hami.io/mutex.lock`` annotation, whose value is
``<RFC 3339 time>,<namespace>,<name>`` (the pod whose devices are being allocated), and
falls back to the first pending pod of the node whose ``hami.io/bind-phase`` is
``allocating`` when there is no lock. Two pods bound to one node at once can therefore swap
cards, so HAMi's scheduler takes the lock before it binds a pod that asks for devices and
the device plugin releases it once ``Allocate`` has run (success or failure).

The protocol, as HAMi's ``pkg/util/nodelock`` keeps it:

- **take**: the node must carry no lock; the annotation is written with a merge patch that
  carries the node's ``resourceVersion``, so of two writers racing for a free node exactly
  one wins (the other gets ``409 Conflict`` and looks again).
- **stale**: a lock older than the expiry (5 minutes, HAMi's ``HAMI_NODELOCK_EXPIRE``), or
  one whose pod no longer exists, is released by whoever wants the node next, without the
  owner check, and then taken.
- **release**: the annotation is removed (``null`` in a merge patch, with the
  ``resourceVersion``) only when its value ends with ``,<namespace>,<name>`` of the pod
  releasing it. The device plugin does this after ``Allocate``; the scheduler does it when
  the bind it locked for fails.
- A lock value without commas (an older HAMi's bare time) names no pod: it only expires.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.core.errors import AdapterError
from gpupool.k8s.kube import MERGE_PATCH, Kube, KubeError

__all__ = [
    "LOCK_ANNOTATION",
    "LOCK_EXPIRE_S",
    "LockBusy",
    "NodeLock",
    "NodeLocks",
    "format_lock",
    "parse_lock",
]

LOCK_ANNOTATION = "hami.io/mutex.lock"
LOCK_EXPIRE_S = 300.0
"""HAMi's default ``NodeLockTimeout`` (5 minutes)."""

_SEP = ","


@dataclass(frozen=True, slots=True)
class NodeLock:
    """A lock as read from a node: when it was taken and by which pod ("" when unnamed)."""

    at_s: float
    namespace: str = ""
    name: str = ""

    def held_by(self, namespace: str, name: str) -> bool:
        return (self.namespace, self.name) == (namespace, name)


class LockBusy(AdapterError):
    """The node is locked for another pod's allocation (fresh, and that pod exists)."""

    def __init__(self, node: str, lock: NodeLock) -> None:
        self.node = node
        self.lock = lock
        super().__init__(
            f"node {node} is locked for {lock.namespace}/{lock.name} since {format_time(lock.at_s)}"
        )


def format_time(t: float) -> str:
    """RFC 3339 in UTC to the second, as Go's ``time.RFC3339`` writes it."""
    return dt.datetime.fromtimestamp(int(t), tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_lock(at_s: float, namespace: str, name: str) -> str:
    return f"{format_time(at_s)}{_SEP}{namespace}{_SEP}{name}"


def parse_lock(value: str) -> NodeLock:
    """A lock annotation's value; ValueError naming the value when it is malformed."""
    parts = value.split(_SEP)
    if len(parts) not in (1, 3):
        raise ValueError(
            f"{LOCK_ANNOTATION}={value!r}: expected '<RFC 3339 time>' or "
            f"'<time>,<namespace>,<name>', got {len(parts)} parts"
        )
    try:
        at = dt.datetime.fromisoformat(parts[0].replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(
            f"{LOCK_ANNOTATION}={value!r}: {parts[0]!r} is not an RFC 3339 time"
        ) from exc
    if at.tzinfo is None:
        raise ValueError(f"{LOCK_ANNOTATION}={value!r}: {parts[0]!r} has no time zone")
    if len(parts) == 1:
        return NodeLock(at.timestamp())
    return NodeLock(at.timestamp(), parts[1], parts[2])


def node_lock(node: Mapping[str, Any]) -> NodeLock | None:
    """The lock a node object carries, None when free. A malformed value counts as a lock
    taken at time 0 (so it is stale and gets replaced), as HAMi cannot parse it either."""
    value = ((node.get("metadata") or {}).get("annotations") or {}).get(LOCK_ANNOTATION)
    if value is None:
        return None
    try:
        return parse_lock(str(value))
    except ValueError:
        return NodeLock(0.0)


PodExists = Callable[[str, str], Awaitable[bool]]


class NodeLocks:
    """Takes and releases HAMi's node lock through the API server.

    ``cached(node)`` gives the informer's copy of a node (saving a GET per bind when it is
    current; a stale copy only costs a ``409`` and a fresh read). ``pod_exists(ns, name)``
    says whether a lock's pod still exists (a dangling lock is taken over).
    """

    def __init__(
        self,
        kube: Kube,
        cached: Callable[[str], Mapping[str, Any] | None],
        pod_exists: PodExists,
        *,
        expire_s: float = LOCK_EXPIRE_S,
        clock: Callable[[], float],
        attempts: int = 5,
    ) -> None:
        self.kube = kube
        self.cached = cached
        self.pod_exists = pod_exists
        self.expire_s = expire_s
        self.clock = clock
        self.attempts = attempts
        self.taken = 0  # locks written
        self.stale_released = 0  # expired or dangling locks taken over

    async def _get(self, node: str) -> Mapping[str, Any]:
        return await self.kube.request("GET", f"/api/v1/nodes/{node}")

    async def _patch(self, node: str, version: str, value: str | None) -> None:
        meta: dict[str, Any] = {"annotations": {LOCK_ANNOTATION: value}}
        if version:
            meta["resourceVersion"] = version
        await self.kube.request(
            "PATCH", f"/api/v1/nodes/{node}", {"metadata": meta}, content_type=MERGE_PATCH
        )

    async def acquire(self, node: str, namespace: str, name: str) -> None:
        """Takes the node's lock for pod ``namespace/name``. LockBusy when another pod's
        lock is fresh; KubeError when the API server fails or the race is lost
        ``attempts`` times in a row."""
        obj = self.cached(node) or await self._get(node)
        for _ in range(self.attempts):
            version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            lock = node_lock(obj)
            try:
                if lock is not None and not lock.held_by(namespace, name):
                    if not await self._stale(lock):
                        raise LockBusy(node, lock)
                    # released without the owner check, then taken: HAMi's two writes
                    await self._patch(node, version, None)
                    self.stale_released += 1
                    obj = await self._get(node)
                    continue
                await self._patch(node, version, format_lock(self.clock(), namespace, name))
                self.taken += 1
                return
            except KubeError as exc:
                if exc.status != 409:
                    raise
                obj = await self._get(node)  # someone wrote the node: look again
        raise KubeError(
            409,
            "Conflict",
            f"node lock for {namespace}/{name} lost the race {self.attempts} times",
            f"PATCH /api/v1/nodes/{node}",
        )

    async def _stale(self, lock: NodeLock) -> bool:
        if self.clock() - lock.at_s > self.expire_s:
            return True
        if lock.namespace and lock.name:
            return not await self.pod_exists(lock.namespace, lock.name)
        return False

    async def release(self, node: str, namespace: str, name: str) -> bool:
        """Removes the node's lock if pod ``namespace/name`` holds it; True when removed.
        A lock someone else holds is left alone."""
        for _ in range(self.attempts):
            obj = await self._get(node)
            lock = node_lock(obj)
            if lock is None or not lock.held_by(namespace, name):
                return False
            version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            try:
                await self._patch(node, version, None)
                return True
            except KubeError as exc:
                if exc.status != 409:
                    raise
        return False
