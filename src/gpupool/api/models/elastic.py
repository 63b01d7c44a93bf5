"""Elastic GPU objects: classes, claims, and the ElasticGPUs bound to claims (docs/elastic.md)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gpupool.api.models.base import Wire


class ElasticObject(Wire):
    api_version: str
    kind: str
    name: str


class ElasticClass(ElasticObject):
    provisioner: str
    parameters: dict[str, Any]
    reclaim_policy: str
    binding_mode: str


class CapacityView(Wire):
    schema_name = "Capacity"

    gpu_milli: int
    memory_mib: int
    tflops: float | None


class ClaimRefView(Wire):
    schema_name = "ClaimRef"

    namespace: str
    name: str


class ElasticGpu(ElasticObject):
    source: str
    model: str
    capacity: CapacityView
    node: str
    card: int
    uuid: str
    mig_profile: str | None
    pool: str
    endpoint: str
    class_name: str
    reclaim_policy: str
    claim_ref: ClaimRefView | None
    phase: str
    message: str


class ClaimRequestsView(Wire):
    schema_name = "ClaimRequests"

    cards: int
    gpu_milli: int
    memory_mib: int
    tflops: float
    models: list[str]


class ServingModelView(Wire):
    schema_name = "ServingModel"

    model: str
    peak_tflops: float
    cards: int
    gpu_milli: int
    mig_profile: str | None


class ElasticClaim(ElasticObject):
    namespace: str
    requests: ClaimRequestsView
    class_name: str
    phase: str
    elastic_gpus: list[str] = Field(alias="elasticGPUs")
    node: str
    serving_models: list[ServingModelView]
    message: str


class ClassList(Wire):
    items: list[ElasticClass]


class ClaimList(Wire):
    items: list[ElasticClaim]


class ElasticGpuList(Wire):
    items: list[ElasticGpu]


class Released(Wire):
    deleted: list[str]
    retained: list[str]


class ClaimDeleted(Wire):
    """The claim deleted, and what became of its ElasticGPUs (its class's reclaim policy)."""

    deleted: str
    elastic_gpus: Released = Field(alias="elasticGPUs")
