"""A job with its status, a page of jobs, and events."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gpupool.api.models.base import Wire


class CardShare(Wire):
    index: int
    gpu_milli: int
    memory_mib: int
    mig_profile: str | None


class PlacementView(Wire):
    task: str
    node: str
    cpu_milli: int
    memory_mib: int
    gpus: list[CardShare]


class JobStatus(Wire):
    """Times are RFC 3339 with their cluster seconds beside them (``...Seconds``); a time
    that does not apply (a pending job's start) is null."""

    phase: str
    cluster_queue: str
    flavor: str
    submit_time: str
    submit_time_seconds: float
    start_time: str | None
    start_time_seconds: float | None
    finish_time: str | None
    finish_time_seconds: float | None
    preemptions: int
    message: str
    alternative: str = Field(
        "", description='the alternative form the job runs in ("": its own request)'
    )
    wait_seconds: float | None = Field(
        description="pending: how long it has waited so far; else how long it waited"
    )
    pending_reason: str | None = Field(description="why a pending job waits; null otherwise")
    queue_position: int | None
    estimated_start_time: str | None
    estimated_start_time_seconds: float | None
    estimated_start_in_seconds: float | None
    expected_end_time: str | None
    expected_end_time_seconds: float | None
    placements: list[PlacementView]


class JobView(Wire):
    """The document as submitted (``metadata`` gains ``uid``) and the server's status."""

    schema_name = "Job"

    api_version: str | None
    kind: str
    metadata: dict[str, Any]
    spec: dict[str, Any]
    status: JobStatus


class JobList(Wire):
    """One page; ``continue`` is the ``after`` of the next page, null on the last."""

    items: list[JobView]
    continue_: int | None = Field(alias="continue")
    remaining_item_count: int
    time: str
    time_seconds: float


class EventView(Wire):
    """``time``: when it was written (RFC 3339); ``timeSeconds``: the cluster's clock then."""

    seq: int
    time: str
    time_seconds: float
    type: str
    reason: str
    kind: str
    object: str
    namespace: str
    message: str


class EventList(Wire):
    items: list[EventView]
