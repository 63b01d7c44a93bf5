"""Leader election on a ``coordination.k8s.io/v1`` Lease, so that two replicas never both bind.

The rules are client-go's: the holder renews ``spec.renewTime`` every ``renew_s``; another
replica takes the lease over only after it has seen the same ``renewTime`` for a whole
``leaseDurationSeconds`` on its own clock (so clock skew between machines does not matter);
every write carries the ``resourceVersion`` it read, so of two replicas racing for an expired
lease exactly one wins (the other gets ``409 Conflict``). A holder considers itself leader
only until ``lease_s - margin_s`` after its last successful renewal, which is before any other
replica may take over; the controller checks :meth:`LeaderElector.is_leader` before each bind.

Each request has a deadline of a third of the lease (at most 5 s, as client-go's renew
deadline bounds a renewal): an answer that is slow to come (an API server under load) is
given up and the renewal tried again, instead of waiting out the default 30 s while the lease
runs out.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gpupool.k8s.kube import Kube, KubeError

__all__ = ["LeaderElector", "micro_time"]

log = logging.getLogger("gpupool.k8s.lease")


def micro_time(t: float | None = None) -> str:
    """Kubernetes' MicroTime: RFC 3339 with microseconds, UTC."""
    when = dt.datetime.fromtimestamp(time.time() if t is None else t, tz=dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_s: float = 15.0,
        renew_s: float = 2.0,
        margin_s: float = 2.0,
        on_started: Callable[[], Awaitable[None]] | None = None,
        on_stopped: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_s = lease_s
        self.renew_s = renew_s
        self.margin_s = min(margin_s, lease_s / 3)
        self.timeout_s = max(0.5, min(5.0, lease_s / 3))
        self.on_started = on_started
        self.on_stopped = on_stopped
        self._valid_until = 0.0
        self._leading = False
        self._seen: tuple[str, str] | None = None  # (holder, renewTime) last observed
        self._seen_at = 0.0
        self.transitions = 0

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    def is_leader(self) -> bool:
        return self._leading and time.monotonic() < self._valid_until

    async def run(self) -> None:
        try:
            while True:
                try:
                    await self._try()
                except KubeError as exc:
                    log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
                if self._leading and not self.is_leader():
                    await self._stop()
                await asyncio.sleep(
                    self.renew_s if self._leading else max(self.renew_s, self.lease_s / 4)
                )
        finally:
            if self._leading:
                await self._stop()

    async def release(self) -> None:
        """Give the lease up now (clean shutdown), so another replica need not wait."""
        if not self._leading:
            return
        try:
            lease = await self.kube.request("GET", self.path, timeout_s=self.timeout_s)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") == self.identity:
                spec["holderIdentity"] = ""
                spec["leaseDurationSeconds"] = 1
                await self.kube.request("PUT", self.path, lease, timeout_s=self.timeout_s)
        except KubeError as exc:
            log.warning("lease release: %s", exc)
        await self._stop()

    async def _stop(self) -> None:
        self._leading = False
        self._valid_until = 0.0
        log.info("%s stopped leading %s/%s", self.identity, self.namespace, self.name)
        if self.on_stopped is not None:
            await self.on_stopped()

    async def _start(self) -> None:
        self._leading = True
        self.transitions += 1
        log.info("%s leads %s/%s", self.identity, self.namespace, self.name)
        if self.on_started is not None:
            await self.on_started()

    def _spec(self, acquire: str, transitions: int) -> dict[str, Any]:
        now = micro_time()
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_s),
            "acquireTime": acquire or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def _try(self) -> None:
        started = time.monotonic()
        try:
            lease = await self.kube.request("GET", self.path, timeout_s=self.timeout_s)
        except KubeError as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec("", 0),
            }
            try:
                await self.kube.request(
                    "POST",
                    f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases",
                    body,
                    timeout_s=self.timeout_s,
                )
            except KubeError as exc2:
                if exc2.status == 409:
                    return
                raise
            self._valid_until = started + self.lease_s - self.margin_s
            if not self._leading:
                await self._start()
            return
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        renew = str(spec.get("renewTime") or "")
        duration = float(spec.get("leaseDurationSeconds") or self.lease_s)
        now = time.monotonic()
        if holder == self.identity:
            lease["spec"] = {
                **spec,
                **self._spec(
                    str(spec.get("acquireTime") or ""), int(spec.get("leaseTransitions") or 0)
                ),
            }
        else:
            if self._seen != (holder, renew):
                self._seen, self._seen_at = (holder, renew), now
            if holder and now - self._seen_at < duration:
                return  # someone else holds it and has renewed within its duration
            lease["spec"] = self._spec("", int(spec.get("leaseTransitions") or 0) + 1)
        try:
            await self.kube.request("PUT", self.path, lease, timeout_s=self.timeout_s)
        except KubeError as exc:
            if exc.status == 409:
                return  # another replica wrote first; look again next round
            raise
        self._valid_until = started + self.lease_s - self.margin_s
        if not self._leading:
            await self._start()
