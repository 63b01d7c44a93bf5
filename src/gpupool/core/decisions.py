"""What a cycle decides, for adapters to carry out and observers to record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpupool.core.model import JobId, Placement
from gpupool.core.placement.framework import Status

if TYPE_CHECKING:
    from gpupool.core.provisioning import ProvisioningRequest


@dataclass(frozen=True, slots=True)
class Bind:
    """Bind every placement of a job; they are assumed in the ClusterState already."""

    job: JobId
    placements: tuple[Placement, ...]
    queue: str = ""
    flavor: str = ""
    alternative: str = ""
    """The form admitted: "" the job's own request, else the name of its alternative whose
    request and container settings (image, environment) the adapter applies."""


@dataclass(frozen=True, slots=True)
class Park:
    """The job stays pending, with the reason in numbers."""

    job: JobId
    status: Status


@dataclass(frozen=True, slots=True)
class Evict:
    """Stop a running job to make room for ``preemptor``; it goes back to its queue."""

    job: JobId
    queue: str
    reason: str  # "within-queue" | "reclaim" | "fair-share"
    preemptor: JobId
    message: str = ""


@dataclass(frozen=True, slots=True)
class Reserve:
    """Room held for a blocked gang from ``start_s`` on; only jobs that end before may use it."""

    job: JobId
    nodes: tuple[str, ...]
    start_s: float


@dataclass(slots=True)
class CycleResult:
    cycle: int
    binds: list[Bind] = field(default_factory=list)
    parks: list[Park] = field(default_factory=list)
    evicts: list[Evict] = field(default_factory=list)
    reservations: list[Reserve] = field(default_factory=list)
    provision: list[ProvisioningRequest] = field(default_factory=list)
    """ProvisioningRequests made this cycle by admission checks: the adapter creates them."""
    deprovision: list[str] = field(default_factory=list)
    """Keys of ProvisioningRequests no longer wanted (deleted, failed, expired, their job
    gone): the adapter cancels them, and their nodes may go when idle."""
