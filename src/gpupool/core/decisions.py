"""What a cycle decides, for adapters to carry out and observers to record."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from gpupool.core.model import ClusterQueueName, JobId, Placement
from gpupool.core.placement.framework import Status

if TYPE_CHECKING:
    from gpupool.core.provisioning import ProvisioningRequest


NO_QUEUE = ClusterQueueName("")
"""A bind of a job outside any queue (placement-only cycles)."""


class Preemption(StrEnum):
    """Why a running job is evicted, which is the kind of victim it was (Kueue's three):
    the wire value is what metrics label and events say."""

    WITHIN_QUEUE = "within-queue"
    """A lower-priority job of the preemptor's own ClusterQueue."""
    RECLAIM = "reclaim"
    """A job of another queue running on quota borrowed from the preemptor's."""
    FAIR_SHARE = "fair-share"
    """A job of a queue above its fair share, for one below it."""


@dataclass(frozen=True, slots=True)
class Bind:
    """Bind every placement of a job; they are assumed in the ClusterState already."""

    job: JobId
    placements: tuple[Placement, ...]
    queue: ClusterQueueName = NO_QUEUE
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
    queue: ClusterQueueName
    reason: Preemption
    preemptor: JobId
    message: str = ""


@dataclass(frozen=True, slots=True)
class Hold:
    """Room held for a blocked gang from ``start_s`` on (backfill); only jobs that end before
    may use it. ("Reserve" is kept for quota: a job's quota reserved while its admission check
    runs.)"""

    job: JobId
    nodes: tuple[str, ...]
    start_s: float


@dataclass(slots=True)
class CycleResult:
    cycle: int
    binds: list[Bind] = field(default_factory=list)
    parks: list[Park] = field(default_factory=list)
    evicts: list[Evict] = field(default_factory=list)
    holds: list[Hold] = field(default_factory=list)
    provision: list[ProvisioningRequest] = field(default_factory=list)
    """ProvisioningRequests made this cycle by admission checks: the adapter creates them."""
    deprovision: list[str] = field(default_factory=list)
    """Keys of ProvisioningRequests no longer wanted (deleted, failed, expired, their job
    gone): the adapter cancels them, and their nodes may go when idle."""
