"""Elastic GPU objects <-> their JSON forms: the one codec of ElasticGPUClass, ElasticGPUClaim
and ElasticGPU.

The JSON form names fields as a Kubernetes object does (camelCase: ``claimRef``,
``reclaimPolicy``, ``bindingMode``, ``elasticGPUs``); docs/elastic.md says which fields are
spec and which status. Pydantic models check a body's shape (unknown fields, wrong types);
the core's objects check their values when built (an unknown provisioner, a slice over one
card), so each rule has one home. A bad class or ElasticGPU is a ConfigError, a bad claim an
InvalidJobError, each naming the field, the value and the rule.

| object | JSON form -> core | core -> JSON form |
|---|---|---|
| class | :func:`class_from_json` | :func:`class_to_json` |
| claim | :func:`claim_from_json` (and its status with ``with_status``) | :func:`claim_to_json` |
| ElasticGPU | :func:`gpu_from_json` | :func:`gpu_to_json` |
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from gpupool.config.documents import first_problem
from gpupool.core.elastic import (
    BindingMode,
    Capacity,
    ClaimPhase,
    ClaimRef,
    ClaimRequests,
    ElasticGPU,
    ElasticGPUClaim,
    ElasticGPUClass,
    GpuPhase,
    ReclaimPolicy,
    ServingModel,
)
from gpupool.core.elastic.objects import object_error
from gpupool.core.errors import InvalidJobError
from gpupool.core.model import WHOLE_GPU_MILLI

__all__ = [
    "claim_from_json",
    "claim_to_json",
    "class_from_json",
    "class_to_json",
    "gpu_from_json",
    "gpu_to_json",
]


class _Wire(BaseModel):
    """camelCase keys, unknown keys refused, no coercion (a string is not a number)."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, strict=True, frozen=True, populate_by_name=True
    )


def _listed(value: object) -> object:
    return [value] if isinstance(value, str) else value


def _or_empty(value: object) -> object:
    return {} if value is None or value == "" else value


# -- the shapes ------------------------------------------------------------------------------


class ClassJson(_Wire):
    name: str = ""
    provisioner: str = ""
    parameters: Annotated[dict[str, Any], BeforeValidator(_or_empty)] = Field(default_factory=dict)
    reclaim_policy: str = ReclaimPolicy.DELETE.value
    binding_mode: str = BindingMode.IMMEDIATE.value


class CapacityJson(_Wire):
    gpu_milli: int = WHOLE_GPU_MILLI
    memory_mib: int = 0
    tflops: float | None = None


class ClaimRefJson(_Wire):
    namespace: str = "default"
    name: str = ""


class GpuJson(_Wire):
    name: str = ""
    source: str = ""
    model: str = ""
    capacity: Annotated[CapacityJson, BeforeValidator(_or_empty)] = CapacityJson()
    node: str = ""
    card: int = -1
    uuid: str = ""
    mig_profile: str | None = None
    pool: str = ""
    endpoint: str = ""
    class_name: str = ""
    reclaim_policy: str = ReclaimPolicy.DELETE.value
    claim_ref: ClaimRefJson | None = None
    phase: str = GpuPhase.AVAILABLE.value
    message: str = ""


class RequestsJson(_Wire):
    cards: int = 0
    gpu_milli: int = 0
    memory_mib: int = 0
    tflops: float = 0.0
    models: Annotated[list[str], BeforeValidator(_listed)] = Field(default_factory=list)


class ServingModelJson(_Wire):
    model: str
    peak_tflops: float
    cards: int
    gpu_milli: int
    mig_profile: str | None = None


class ClaimJson(_Wire):
    name: str = ""
    namespace: str = "default"
    requests: RequestsJson
    class_name: str = ""
    phase: str = ClaimPhase.PENDING.value
    elastic_gpus: list[str] = Field(default_factory=list, alias="elasticGPUs")
    node: str = ""
    serving_models: list[ServingModelJson] = Field(default_factory=list)
    message: str = ""


# -- JSON -> core ----------------------------------------------------------------------------

W = TypeVar("W", bound=_Wire)


def _read(model: type[W], body: Mapping[str, Any], kind: str) -> W:
    """``body`` as ``model``; its first problem as a ConfigError in the object (a claim's
    as an InvalidJobError)."""
    try:
        return model.model_validate(dict(body))
    except ValidationError as exc:
        path, value, rule = first_problem(exc, model)
        if kind == "ElasticGPUClaim":
            raise InvalidJobError(path, value, rule, job=f"{kind} {_claim_key(body)}") from None
        raise object_error(kind, _text(body, "name", ""), path, value, rule) from None


def _text(body: Mapping[str, Any], key: str, default: str) -> str:
    value = body.get(key, default)
    return value if isinstance(value, str) else default


def _claim_key(body: Mapping[str, Any]) -> str:
    return f"{_text(body, 'namespace', 'default')}/{_text(body, 'name', '')}"


def class_from_json(body: Mapping[str, Any]) -> ElasticGPUClass:
    """An ElasticGPUClass from its JSON form; ConfigError naming the field otherwise."""
    c = _read(ClassJson, body, "ElasticGPUClass")
    return ElasticGPUClass(
        name=c.name,
        provisioner=c.provisioner,  # type: ignore[arg-type]
        parameters=dict(c.parameters),
        reclaim_policy=c.reclaim_policy,  # type: ignore[arg-type]
        binding_mode=c.binding_mode,  # type: ignore[arg-type]
    )


def gpu_from_json(body: Mapping[str, Any]) -> ElasticGPU:
    """An ElasticGPU from its JSON form (an operator's pre-provisioned GPU, or one saved with
    its binding); ConfigError naming the field otherwise."""
    g = _read(GpuJson, body, "ElasticGPU")
    ref = g.claim_ref
    return ElasticGPU(
        name=g.name,
        source=g.source,  # type: ignore[arg-type]
        model=g.model,
        capacity=Capacity(g.capacity.gpu_milli, g.capacity.memory_mib, g.capacity.tflops),
        node=g.node,
        card=g.card,
        uuid=g.uuid,
        mig_profile=g.mig_profile,
        pool=g.pool,
        endpoint=g.endpoint,
        class_name=g.class_name,
        reclaim_policy=g.reclaim_policy,  # type: ignore[arg-type]
        claim_ref=ClaimRef(ref.namespace, ref.name) if ref is not None and ref.name else None,
        phase=g.phase,  # type: ignore[arg-type]
        message=g.message,
    )


def claim_from_json(body: Mapping[str, Any], *, with_status: bool = False) -> ElasticGPUClaim:
    """A claim from its JSON form: its spec (``name``, ``namespace``, ``requests``,
    ``className``), and with ``with_status`` what it was bound to (a restore); the status
    fields are checked either way. InvalidJobError naming the field otherwise."""
    if not isinstance(body.get("requests"), Mapping):
        raise InvalidJobError(
            "requests",
            body.get("requests"),
            "must be a mapping with cards, gpuMilli + memoryMib, or tflops",
            job=f"ElasticGPUClaim {_claim_key(body)}",
        )
    c = _read(ClaimJson, body, "ElasticGPUClaim")
    r = c.requests
    requests = ClaimRequests(
        cards=r.cards,
        gpu_milli=r.gpu_milli,
        memory_mib=r.memory_mib,
        tflops=float(r.tflops),
        models=frozenset(r.models),
    )
    if not with_status:
        return ElasticGPUClaim(
            name=c.name, namespace=c.namespace, requests=requests, class_name=c.class_name
        )
    serving = tuple(
        ServingModel(m.model, m.peak_tflops, m.cards, m.gpu_milli, m.mig_profile)
        for m in c.serving_models
    )
    return ElasticGPUClaim(
        name=c.name,
        namespace=c.namespace,
        requests=requests,
        class_name=c.class_name,
        phase=c.phase,  # type: ignore[arg-type]
        elastic_gpus=tuple(c.elastic_gpus),
        node=c.node,
        serving_models=serving,
        message=c.message,
    )


# -- core -> JSON ----------------------------------------------------------------------------


def class_to_json(c: ElasticGPUClass) -> dict[str, Any]:
    return {
        "name": c.name,
        "provisioner": c.provisioner.value,
        "parameters": dict(c.parameters),
        "reclaimPolicy": c.reclaim_policy.value,
        "bindingMode": c.binding_mode.value,
    }


def gpu_to_json(g: ElasticGPU) -> dict[str, Any]:
    return {
        "name": g.name,
        "source": g.source.value,
        "model": g.model,
        "capacity": {
            "gpuMilli": g.capacity.gpu_milli,
            "memoryMib": g.capacity.memory_mib,
            "tflops": g.capacity.tflops,
        },
        "node": g.node,
        "card": g.card,
        "uuid": g.uuid,
        "migProfile": g.mig_profile,
        "pool": g.pool,
        "endpoint": g.endpoint,
        "className": g.class_name,
        "reclaimPolicy": g.reclaim_policy.value,
        "claimRef": None
        if g.claim_ref is None
        else {"namespace": g.claim_ref.namespace, "name": g.claim_ref.name},
        "phase": g.phase.value,
        "message": g.message,
    }


def requests_to_json(r: ClaimRequests) -> dict[str, Any]:
    return {
        "cards": r.cards,
        "gpuMilli": r.gpu_milli,
        "memoryMib": r.memory_mib,
        "tflops": r.tflops,
        "models": sorted(r.models),
    }


def claim_to_json(c: ElasticGPUClaim) -> dict[str, Any]:
    return {
        "name": c.name,
        "namespace": c.namespace,
        "requests": requests_to_json(c.requests),
        "className": c.class_name,
        "phase": c.phase.value,
        "elasticGPUs": list(c.elastic_gpus),
        "node": c.node,
        "servingModels": [
            {
                "model": m.model,
                "peakTflops": m.peak_tflops,
                "cards": m.cards,
                "gpuMilli": m.gpu_milli,
                "migProfile": m.mig_profile,
            }
            for m in c.serving_models
        ],
        "message": c.message,
    }
