"""The ledger of ProvisioningRequests: every request and its conditions, the per-project limit,
and the booking's expiry (``BOOKING_S`` after ``Provisioned``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

from gpupool.core.errors import ConflictError, NotFoundError
from gpupool.core.provisioning.history import CapacityHistory, ClassCapacity
from gpupool.core.provisioning.request import (
    BOOKING_S,
    MAX_ACTIVE_PER_PROJECT,
    ConditionType,
    ProvisioningRequest,
)

_ENDS = (ConditionType.FAILED, ConditionType.BOOKING_EXPIRED, ConditionType.CAPACITY_REVOKED)


class RequestLedger:
    """Every ProvisioningRequest and its conditions. The cloud's answers come in as facts
    (``accept``, ``provisioned``, ``fail``, ``revoke``), pods starting on the nodes as
    ``consume``; the booking's expiry is derived from the time given to ``expire``."""

    def __init__(
        self, max_active_per_project: int = MAX_ACTIVE_PER_PROJECT, booking_s: float = BOOKING_S
    ) -> None:
        self.max_active_per_project = max_active_per_project
        self.booking_s = booking_s
        self._reqs: dict[str, ProvisioningRequest] = {}
        self._history = CapacityHistory()

    def __contains__(self, key: str) -> bool:
        return key in self._reqs

    def __iter__(self) -> Iterator[ProvisioningRequest]:
        return iter(list(self._reqs.values()))

    def __len__(self) -> int:
        return len(self._reqs)

    def get(self, key: str) -> ProvisioningRequest:
        try:
            return self._reqs[key]
        except KeyError:
            raise NotFoundError(f"ProvisioningRequest {key!r} does not exist") from None

    def find(self, key: str) -> ProvisioningRequest | None:
        return self._reqs.get(key)

    def active(self, namespace: str) -> int:
        """Requests of a project (namespace) that are not ended: they count to its limit."""
        return sum(1 for r in self._reqs.values() if r.namespace == namespace and not r.ended)

    def at_limit(self, namespace: str) -> bool:
        return self.active(namespace) >= self.max_active_per_project

    def create(self, req: ProvisioningRequest, now_s: float) -> ProvisioningRequest:
        """Store a new request. The same request again is a no-op; another one under a taken
        name a ConflictError. Past the project's limit it is stored refused: Accepted=False,
        Failed=True, with the reason."""
        old = self._reqs.get(req.key)
        if old is not None:
            if replace(old, conditions=(), nodes=(), consumed_s=None, created_s=0.0) == replace(
                req, conditions=(), nodes=(), consumed_s=None, created_s=0.0
            ):
                return old
            raise ConflictError(f"ProvisioningRequest {req.key} exists already")
        req = replace(req, created_s=now_s, conditions=(), nodes=(), consumed_s=None)
        if self.at_limit(req.namespace):
            why = (
                f"project {req.namespace} has {self.active(req.namespace)} active "
                f"ProvisioningRequests, the most allowed ({self.max_active_per_project})"
            )
            req = req.with_condition(ConditionType.ACCEPTED, False, "TooManyRequests", why, now_s)
            req = req.with_condition(ConditionType.FAILED, True, "TooManyRequests", why, now_s)
        else:
            self._history.made(req, now_s)
        self._reqs[req.key] = req
        return req

    def restore(self, req: ProvisioningRequest) -> None:
        """A request as it stood before a restart, conditions and all (no rule is applied:
        it was accepted then). A provisioned one counts to its class's learned time, and its
        nodes to what the class holds."""
        self._reqs[req.key] = req
        if req.ended:
            return
        h = self._history
        h.made(req, req.created_s)
        if req.provisioned_s is not None:
            h.provisioned(req.key, req.nodes, req.provisioned_s, req.max_run_duration_s)

    def _set(self, req: ProvisioningRequest) -> ProvisioningRequest:
        self._reqs[req.key] = req
        return req

    def accept(self, key: str, now_s: float) -> ProvisioningRequest:
        req = self.get(key)
        if req.ended or req.is_true(ConditionType.ACCEPTED):
            return req
        return self._set(
            req.with_condition(
                ConditionType.ACCEPTED, True, "Accepted", "queued for capacity", now_s
            )
        )

    def provisioned(self, key: str, nodes: Iterable[str], now_s: float) -> ProvisioningRequest:
        """Every node of the request exists (the adapter added them to the cluster)."""
        req = self.get(key)
        if req.ended:
            raise ConflictError(f"ProvisioningRequest {key} has ended; it cannot be provisioned")
        if req.provisioned_s is not None:
            return req
        req = replace(req, nodes=tuple(nodes))
        if not req.is_true(ConditionType.ACCEPTED):
            req = req.with_condition(
                ConditionType.ACCEPTED, True, "Accepted", "queued for capacity", now_s
            )
        self._history.provisioned(req.key, req.nodes, now_s, req.max_run_duration_s)
        return self._set(
            req.with_condition(
                ConditionType.PROVISIONED,
                True,
                "Provisioned",
                f"{len(req.nodes)} nodes provisioned; booked for {self.booking_s:.0f}s",
                now_s,
            )
        )

    def fail(
        self, key: str, message: str, now_s: float, reason: str = "ProvisioningFailed"
    ) -> ProvisioningRequest:
        req = self.get(key)
        if req.ended:
            return req
        self._history.released(key, now_s, failed=True)
        return self._set(req.with_condition(ConditionType.FAILED, True, reason, message, now_s))

    def revoke(
        self, key: str, message: str, now_s: float, reason: str = "CapacityRevoked"
    ) -> ProvisioningRequest:
        req = self.get(key)
        if req.is_true(ConditionType.CAPACITY_REVOKED):
            return req
        self._history.released(key, now_s, revoked=True)
        return self._set(
            req.with_condition(ConditionType.CAPACITY_REVOKED, True, reason, message, now_s)
        )

    def consume(self, key: str, now_s: float) -> ProvisioningRequest:
        req = self.get(key)
        if req.consumed_s is not None:
            return req
        if not req.booked:
            raise ConflictError(f"ProvisioningRequest {key} holds no booking to consume")
        self._history.consumed(req.job, req.namespace)
        return self._set(replace(req, consumed_s=now_s))

    def delete(self, key: str, now_s: float | None = None) -> ProvisioningRequest:
        """Delete (cancel) a request; what it asked for is no longer wanted. ``now_s``: when
        (its nodes, if any, are let go then; unknown: when it ended, or at creation)."""
        req = self.get(key)
        del self._reqs[key]
        if now_s is None:
            ends = [c.time_s for c in req.conditions if c.status and c.type in _ENDS]
            now_s = min(ends, default=req.created_s)
        self._history.released(key, now_s)
        return req

    def node_left(self, name: str, now_s: float) -> None:
        """A node left the cluster (a provisioned request's, or any other: then nothing)."""
        self._history.node_left(name, now_s)

    def first_made_s(self, key: str) -> float | None:
        """When the job of request ``key`` made its first request: a request made again after
        a failure keeps its place in the cloud's queue (None: not known)."""
        return self._history.first_s(key)

    def capacity(self, provisioning_class_name: str) -> ClassCapacity:
        """What the class's requests have shown of the cloud (``history``)."""
        return self._history.learned(provisioning_class_name)

    def expire(self, now_s: float) -> list[ProvisioningRequest]:
        """Bookings not consumed ``booking_s`` after Provisioned: BookingExpired now."""
        out = []
        for req in list(self._reqs.values()):
            t = req.provisioned_s
            if req.booked and t is not None and now_s >= t + self.booking_s:
                self._history.released(req.key, now_s)
                out.append(
                    self._set(
                        req.with_condition(
                            ConditionType.BOOKING_EXPIRED,
                            True,
                            "BookingExpired",
                            f"no pod consumed the booking within {self.booking_s:.0f}s of "
                            "provisioning",
                            now_s,
                        )
                    )
                )
        return out

    def next_deadline(self) -> float | None:
        """The earliest time a booking expires, if any waits."""
        times = [
            r.provisioned_s + self.booking_s
            for r in self._reqs.values()
            if r.booked and r.provisioned_s is not None
        ]
        return min(times, default=None)
