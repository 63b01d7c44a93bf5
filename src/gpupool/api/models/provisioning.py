"""ProvisioningRequests (``autoscaling.x-k8s.io/v1`` with gpupool's extras) and the simulated
cloud of ``serve --cloud``."""

from __future__ import annotations

from typing import Any

from gpupool.api.models.base import Wire


class ConditionView(Wire):
    schema_name = "Condition"

    type: str
    status: str
    reason: str
    message: str
    last_transition_time: str
    last_transition_time_seconds: float


class RequestMeta(Wire):
    name: str
    namespace: str


class RequestSpec(Wire):
    provisioning_class_name: str
    pod_sets: list[dict[str, Any]]
    parameters: dict[str, str]


class RequestStatus(Wire):
    phase: str
    conditions: list[ConditionView]
    nodes: list[str]
    create_time: str
    create_time_seconds: float
    consume_time: str | None
    consume_time_seconds: float | None
    booking_expiry_time: str | None
    booking_expiry_time_seconds: float | None
    run_end_time: str | None
    run_end_time_seconds: float | None


class ProvisioningRequestView(Wire):
    api_version: str
    kind: str
    metadata: RequestMeta
    spec: RequestSpec
    status: RequestStatus
    job: str
    queue: str


class ProvisioningRequestList(Wire):
    items: list[ProvisioningRequestView]


class Zone(Wire):
    name: str
    nodes: int
    committed: int
    stocked_out: bool


class Pool(Wire):
    name: str
    model: str
    gpus_per_node: int
    max_nodes_per_zone: int
    zones: list[Zone]


class CloudRequest(Wire):
    key: str
    job: str
    pool: str
    zone: str
    nodes: int
    gpus: int
    outcome: str
    reason: str
    create_time: str | None
    create_time_seconds: float | None
    provision_time: str | None
    provision_time_seconds: float | None
    consume_time: str | None
    consume_time_seconds: float | None
    end_time: str | None
    end_time_seconds: float | None
    idle_booking_gpu_seconds: float


class CloudView(Wire):
    schema_name = "Cloud"

    name: str
    region: str
    time: str
    time_seconds: float
    gpu_quota: int | None
    gpus_held: int
    gpus_alive: int
    nodes_made: int
    queued: list[Any]
    pools: list[Pool]
    requests: list[CloudRequest]
