"""ElasticGPUClass: how ElasticGPUs are made (the StorageClass of the pattern): a
``provisioner`` with its ``parameters``, a ``reclaim_policy`` and a ``binding_mode``. It
validates itself when built (ConfigError naming the field, the value and the rule)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpupool.core.elastic.objects import (
    CLASS_PARAMETERS,
    SOURCE_OF,
    BindingMode,
    Provisioner,
    ReclaimPolicy,
    Source,
    _enum,
    object_error,
    split_list,
)
from gpupool.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ElasticGPUClass:
    """How ElasticGPUs are made: the provisioner and its parameters (see
    ``CLASS_PARAMETERS``), what happens to them when their claim goes (``reclaim_policy``), and
    when a claim is bound (``binding_mode``: at once, or when its first pod is placed)."""

    name: str
    provisioner: Provisioner
    parameters: Mapping[str, str] = field(default_factory=dict)
    reclaim_policy: ReclaimPolicy = ReclaimPolicy.DELETE
    binding_mode: BindingMode = BindingMode.IMMEDIATE

    def __post_init__(self) -> None:
        def fail(path: str) -> Callable[[object, str], ConfigError]:
            return lambda value, rule: object_error("ElasticGPUClass", self.name, path, value, rule)

        if not self.name:
            raise fail("name")(self.name, "must not be empty")
        prov = _enum(Provisioner, self.provisioner, fail("provisioner"))
        object.__setattr__(self, "provisioner", prov)
        object.__setattr__(
            self, "reclaim_policy", _enum(ReclaimPolicy, self.reclaim_policy, fail("reclaimPolicy"))
        )
        object.__setattr__(
            self, "binding_mode", _enum(BindingMode, self.binding_mode, fail("bindingMode"))
        )
        allowed = CLASS_PARAMETERS[prov]
        params = dict(self.parameters)
        for k, v in params.items():
            if k not in allowed:
                raise fail(f"parameters.{k}")(
                    v, f"is not a parameter of provisioner {prov}; known: {', '.join(allowed)}"
                )
            if not isinstance(v, str):
                raise fail(f"parameters.{k}")(v, "parameters are strings")
        if prov is Provisioner.REMOTE:
            for k in ("pool", "model", "memoryMib", "count"):
                if not params.get(k):
                    raise fail(f"parameters.{k}")(
                        params.get(k), "a remote class needs pool, model, memoryMib and count"
                    )
            for k in ("memoryMib", "count"):
                if not params[k].isdigit() or int(params[k]) < 1:
                    raise fail(f"parameters.{k}")(params[k], "must be a positive whole number")
            if int(params["count"]) > 100_000:
                raise fail("parameters.count")(params["count"], "at most 100000 GPUs a pool")
        object.__setattr__(self, "parameters", params)

    @property
    def source(self) -> Source:
        return SOURCE_OF[self.provisioner]

    @property
    def models(self) -> frozenset[str]:
        if self.provisioner is Provisioner.REMOTE:
            return frozenset({self.parameters["model"]})
        return frozenset(split_list(self.parameters.get("models", "")))

    @property
    def profiles(self) -> frozenset[str]:
        return frozenset(split_list(self.parameters.get("profiles", "")))
