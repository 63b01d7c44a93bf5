"""What a cycle decides, for adapters to carry out and observers to record."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupool.core.model import JobId, Placement
from gpupool.core.placement.framework import Status


@dataclass(frozen=True, slots=True)
class Bind:
    """Bind every placement of a job; they are assumed in the ClusterState already."""

    job: JobId
    placements: tuple[Placement, ...]


@dataclass(frozen=True, slots=True)
class Park:
    """The job stays pending, with the reason in numbers."""

    job: JobId
    status: Status


@dataclass(slots=True)
class CycleResult:
    cycle: int
    binds: list[Bind] = field(default_factory=list)
    parks: list[Park] = field(default_factory=list)
