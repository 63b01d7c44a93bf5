"""The simulated cloud's seams and records: the Host its nodes join (the control plane, or a
bare Scheduler in the simulator), and what a run of it records per ProvisioningRequest."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gpupool.cloud.spec import CloudSpec
from gpupool.core.model import (
    JobId,
    Node,
    NodeName,
)

if TYPE_CHECKING:
    from gpupool.core.scheduler import Scheduler


class Host(Protocol):
    """Where the cloud's nodes join and leave: the cluster's scheduler and whatever keeps it."""

    @property
    def scheduler(self) -> Scheduler: ...

    def add_node(self, node: Node, now_s: float) -> None: ...

    def remove_node(self, name: NodeName, now_s: float) -> list[JobId]:
        """The node is gone; returns the jobs that ran there (requeued whole)."""
        ...


class SchedulerHost:
    """A Host that is a Scheduler and nothing else (the simulator's)."""

    def __init__(self, sched: Scheduler) -> None:
        self.scheduler = sched

    def add_node(self, node: Node, now_s: float) -> None:
        self.scheduler.add_node(node)

    def remove_node(self, name: NodeName, now_s: float) -> list[JobId]:
        return self.scheduler.remove_node(name, now_s)


# -- the run ------------------------------------------------------------------------------------


@dataclass(slots=True)
class RequestRecord:
    """What happened to one ProvisioningRequest in the cloud."""

    key: str
    job: str
    pool: str
    nodes: int
    gpus: int
    manual: bool
    created_s: float
    zone: str = ""
    committed_s: float | None = None
    provisioned_s: float | None = None
    consumed_s: float | None = None
    ended_s: float | None = None
    label: str = ""  # REQUEST_LABEL's value on its nodes
    outcome: str = "queued"  # queued | provisioning | booked | consumed | expired | failed |
    #                          cancelled | revoked | done
    reason: str = ""
    node_names: tuple[str, ...] = ()
    nodes_added_s: tuple[float, ...] = ()

    @property
    def idle_booking_gpu_s(self) -> float:
        """GPU-seconds its nodes were booked and unused: from Provisioned to the first pod, or
        to the end of the booking when no pod came."""
        if self.provisioned_s is None:
            return 0.0
        until = self.consumed_s if self.consumed_s is not None else self.ended_s
        return 0.0 if until is None else self.gpus * max(0.0, until - self.provisioned_s)

    def end(self, outcome: str, now: float, reason: str = "") -> None:
        """The request is done with: ``outcome`` (and why), ended at ``now`` unless it already
        had."""
        if self.ended_s is None:
            self.ended_s = now
        self.outcome = outcome
        if reason:
            self.reason = reason

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, r: dict[str, Any]) -> RequestRecord:
        """From ``to_json()``'s output (its tuples came back as lists)."""
        tuples = ("node_names", "nodes_added_s")
        fields: dict[str, Any] = {k: tuple(v) if k in tuples else v for k, v in r.items()}
        return cls(**fields)


@dataclass(slots=True)
class CloudRun:
    """The cloud's side of one scenario run, for the report."""

    spec: CloudSpec
    requests: dict[str, RequestRecord] = field(default_factory=dict)
    capacity_t: list[float] = field(default_factory=list)  # cloud GPUs alive from time t on
    capacity_gpus: list[int] = field(default_factory=list)
    nodes_made: int = 0
    stockouts: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def note_capacity(self, now: float, alive_gpus: int) -> None:
        """Cloud GPUs alive from ``now`` on (a second note at the same instant replaces it)."""
        if self.capacity_t and self.capacity_t[-1] == now:
            self.capacity_gpus[-1] = alive_gpus
        else:
            self.capacity_t.append(now)
            self.capacity_gpus.append(alive_gpus)

    def gpu_seconds(self, a: float, b: float) -> float:
        """Cloud GPU-seconds alive within [a, b]."""
        total = 0.0
        t = [*self.capacity_t, math.inf]
        for i, g in enumerate(self.capacity_gpus):
            lo, hi = max(a, t[i]), min(b, t[i + 1])
            if hi > lo:
                total += g * (hi - lo)
        return total
