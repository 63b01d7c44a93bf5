"""What a pod asks of GPUs in HAMi's terms, per container, and the core request it becomes.

HAMi reads each container on its own (limits first, then requests): a card count, memory in
MiB per card, memory as a percentage of the card, compute in percent of a card
(:class:`ResourceNames`, configurable). Its webhook and ``GenerateResourceRequests`` fill
the gaps, and gpupool applies the same defaults (:class:`HamiDefaults`, HAMi's chart values):

- memory or cores without a count: ``defaultGPUNum`` cards (1);
- no memory and no percentage: ``defaultMemory`` MiB when set, else 100 % of the card;
- no cores: 100 (the whole card's compute) when the container names a percentage of 100, or
  neither memory nor a percentage; else ``defaultCores`` (0);
- a percentage of 0 counts as not given; above 100, or cores above 100, is refused here
  (HAMi would clamp it silently).

Every container asking for GPUs gets its own card(s), as HAMi allocates per container; a
container's ``count`` cards are distinct. The pod becomes one core request over
``cards`` = max(sum over app containers, largest init container) distinct cards, each
holding the most any container asks of a card (compute, MiB, percentage of the card chosen):

- every container's cores 100: ``cards`` whole cards (HAMi gives such a container a card
  nobody else uses, and lets no one else on it after);
- otherwise a slice on each of ``cards`` cards.

Init containers reuse the app containers' first cards, as the kubelet reuses an init
container's devices: HAMi counts such a card once, at the larger of the two
(``CollapseInitContainerUsage``), which is what the core holds. The pod's CPU and memory
are Kubernetes' effective requests: the larger of the sum over containers and the largest
init container.

Pod annotations narrowing the cards: ``nvidia.com/use-gputype`` / ``nouse-gputype``
(comma-separated, a case-insensitive substring of the card's model) and
``nvidia.com/use-gpuuuid`` / ``nouse-gpuuuid`` (comma-separated exact UUIDs); an empty value
is no constraint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupool.config.quantity import cpu_milli, memory_mib, whole_number
from gpupool.core.errors import ConfigError, InvalidJobError
from gpupool.core.model import WHOLE_GPU_MILLI, GpuRequest, TaintEffect, Toleration

__all__ = [
    "NOUSE_GPU_TYPE",
    "NOUSE_GPU_UUID",
    "USE_GPU_TYPE",
    "USE_GPU_UUID",
    "ContainerGpu",
    "HamiDefaults",
    "PodRequest",
    "ResourceNames",
    "gpu_request",
    "pod_request",
]

USE_GPU_TYPE = "nvidia.com/use-gputype"
NOUSE_GPU_TYPE = "nvidia.com/nouse-gputype"
USE_GPU_UUID = "nvidia.com/use-gpuuuid"
NOUSE_GPU_UUID = "nvidia.com/nouse-gpuuuid"
FULL_CORES = 100


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """The extended resource names GPU requests use (HAMi's defaults)."""

    count: str = "nvidia.com/gpu"
    memory: str = "nvidia.com/gpumem"
    memory_percentage: str = "nvidia.com/gpumem-percentage"
    cores: str = "nvidia.com/gpucores"

    def all(self) -> tuple[str, ...]:
        return (self.count, self.memory, self.memory_percentage, self.cores)


@dataclass(frozen=True, slots=True)
class HamiDefaults:
    """HAMi's ``defaultGPUNum``, ``defaultMemory`` (MiB; 0: the whole card) and
    ``defaultCores`` (percent), as its chart sets them."""

    gpu_num: int = 1
    memory_mib: int = 0
    cores: int = 0


@dataclass(frozen=True, slots=True)
class ContainerGpu:
    """What one container asks of each of its ``count`` cards, HAMi's defaults applied.
    ``slot`` counts init containers first; the card's memory is ``memory_mib`` when set,
    else ``memory_percent`` of the card it lands on."""

    slot: int
    count: int
    memory_mib: int = 0
    memory_percent: int | None = None
    cores: int = 0
    init: bool = False

    def used_mib(self, card_mib: int) -> int:
        """The memory HAMi-core limits this container to on a card of ``card_mib``."""
        if self.memory_mib:
            return self.memory_mib
        return card_mib * (self.memory_percent or 100) // 100


@dataclass(frozen=True, slots=True)
class PodRequest:
    """A pod's request in core units, and per container what HAMi's annotations need."""

    cpu_milli: int
    memory_mib: int
    gpu: GpuRequest
    containers: tuple[ContainerGpu, ...]  # only those asking for GPUs
    slots: int  # init containers + containers
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    priority: int = 0

    def key(self) -> tuple[object, ...]:
        """Pods with equal keys can share one pod set."""
        return (
            self.cpu_milli,
            self.memory_mib,
            self.gpu,
            self.containers,
            self.slots,
            tuple(sorted(self.node_selector.items())),
            self.tolerations,
        )


def _resources(c: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    res = c.get("resources") or {}
    return res.get("limits") or {}, res.get("requests") or {}


def _read(c: Mapping[str, Any], name: str) -> object | None:
    limits, requests = _resources(c)
    value: object | None = limits[name] if name in limits else requests.get(name)
    return value


def _whole(value: object, where: str) -> int:
    try:
        return whole_number(value, where)
    except ConfigError as exc:
        raise InvalidJobError(where, value, str(exc)) from exc


def _container_gpu(
    c: Mapping[str, Any],
    slot: int,
    init: bool,
    names: ResourceNames,
    defaults: HamiDefaults,
    where: str,
) -> ContainerGpu | None:
    at = f"{where}.resources.limits"
    raw = _read(c, names.count)
    mem = _read(c, names.memory)
    pct = _read(c, names.memory_percentage)
    cores = _read(c, names.cores)
    if raw is None:
        if mem is None and pct is None and cores is None:
            return None
        count = defaults.gpu_num  # HAMi's webhook adds defaultGPUNum
    else:
        count = _whole(raw, f"{at}[{names.count}]")
    if count == 0:
        return None
    mib = 0 if mem is None else _whole(mem, f"{at}[{names.memory}]")
    percent = None if pct is None else _whole(pct, f"{at}[{names.memory_percentage}]")
    if percent is not None and percent > 100:
        raise InvalidJobError(
            f"{at}[{names.memory_percentage}]", pct, "must be 0..100 (percent of a card's memory)"
        )
    asked_percent = percent
    if percent == 0:
        percent = None  # HAMi ignores a percentage of 0
    if mib == 0 and percent is None:
        if defaults.memory_mib:
            mib = defaults.memory_mib
        else:
            percent = 100
    if cores is None:
        # HAMi's webhook: the whole card's compute for a container that takes all of its
        # memory (a percentage of 100, or no memory named at all)
        exclusive = asked_percent == 100 if pct is not None else mem is None
        core = FULL_CORES if exclusive else defaults.cores
    else:
        core = _whole(cores, f"{at}[{names.cores}]")
        if core > FULL_CORES:
            raise InvalidJobError(
                f"{at}[{names.cores}]", cores, "must be 0..100 (percent of a card's compute)"
            )
    return ContainerGpu(
        slot=slot,
        count=count,
        memory_mib=mib,
        memory_percent=None if mib else percent,
        cores=core,
        init=init,
    )


def _toleration(t: Mapping[str, Any]) -> Toleration:
    effect = t.get("effect") or None
    return Toleration(
        key=str(t.get("key", "")),
        operator=str(t.get("operator", "Equal")),
        value=str(t.get("value", "")),
        effect=TaintEffect(effect) if effect else None,
    )


def _cpu(c: Mapping[str, Any]) -> int:
    return _request(c, "cpu", cpu_milli)


def _mem(c: Mapping[str, Any]) -> int:
    return _request(c, "memory", memory_mib)


def _request(c: Mapping[str, Any], resource: str, parse: Callable[[Any, str], int]) -> int:
    """A container's request of ``resource`` (its limit when it states no request), parsed."""
    limits, requests = _resources(c)
    raw = requests.get(resource, limits.get(resource, 0))
    try:
        return parse(raw, resource)
    except ConfigError as exc:
        raise InvalidJobError(
            f"container {c.get('name')}.resources.requests.{resource}", raw, str(exc)
        ) from exc


def pod_request(
    pod: Mapping[str, Any],
    names: ResourceNames = ResourceNames(),
    *,
    card_memory_mib: int = 0,
    models: Iterable[str] = (),
    defaults: HamiDefaults = HamiDefaults(),
) -> PodRequest:
    """The core request of a pod. ``models``: the GPU models the cluster has, to resolve
    ``nvidia.com/use-gputype`` / ``nouse-gputype`` into the core's allowed models.
    ``card_memory_mib`` is accepted for callers written before percentages were taken of
    the card chosen; it no longer changes the request. InvalidJobError names the field when
    the pod asks for something no node could ever give."""
    del card_memory_mib
    spec = pod.get("spec") or {}
    inits = list(spec.get("initContainers") or ())
    mains = list(spec.get("containers") or ())
    gpus: list[ContainerGpu] = []
    listed = [("initContainers", i, c, True) for i, c in enumerate(inits)] + [
        ("containers", i, c, False) for i, c in enumerate(mains)
    ]
    for slot, (kind, i, c, init) in enumerate(listed):
        g = _container_gpu(c, slot, init, names, defaults, f"spec.{kind}[{i}]")
        if g is not None:
            gpus.append(g)
    cpu = max(sum(_cpu(c) for c in mains), max((_cpu(c) for c in inits), default=0))
    mem = max(sum(_mem(c) for c in mains), max((_mem(c) for c in inits), default=0))
    request = gpu_request(gpus)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if request.kind.value != "none":
        request = _narrowed(request, annotations, models)
    priority = spec.get("priority")
    return PodRequest(
        cpu_milli=cpu,
        memory_mib=mem,
        gpu=request,
        containers=tuple(gpus),
        slots=len(inits) + len(mains),
        node_selector=dict(spec.get("nodeSelector") or {}),
        tolerations=tuple(_toleration(t) for t in spec.get("tolerations") or ()),
        priority=int(priority) if isinstance(priority, int) else 0,
    )


def gpu_request(gpus: Sequence[ContainerGpu]) -> GpuRequest:
    """The one core request that holds every container's cards (see the module's text)."""
    if not gpus:
        return GpuRequest()
    app = sum(g.count for g in gpus if not g.init)
    cards = max(app, max((g.count for g in gpus if g.init), default=0))
    floor = max(g.memory_mib for g in gpus)
    if all(g.cores >= FULL_CORES for g in gpus):
        return GpuRequest(count=cards, memory_mib=floor)
    cores = max(g.cores for g in gpus)
    percent = max((g.memory_percent or 0) for g in gpus)
    if cores >= FULL_CORES:
        # A container wants a card's compute to itself beside others that share: hold the
        # whole of every card, the only core reservation that covers both.
        return GpuRequest(count=cards, memory_mib=floor)
    return GpuRequest(
        gpu_milli=cores * WHOLE_GPU_MILLI // FULL_CORES,
        memory_mib=floor,
        memory_percent=percent,
        cards=cards,
    )


def _csv(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _narrowed(
    request: GpuRequest, annotations: Mapping[str, str], models: Iterable[str]
) -> GpuRequest:
    use, nouse = _csv(annotations.get(USE_GPU_TYPE)), _csv(annotations.get(NOUSE_GPU_TYPE))
    allowed = request.models
    if use or nouse:
        known = sorted(set(models))
        picked = {
            m
            for m in known
            if (not use or any(w.upper() in m.upper() for w in use))
            and not any(w.upper() in m.upper() for w in nouse)
        }
        if not picked:
            key = USE_GPU_TYPE if use else NOUSE_GPU_TYPE
            raise InvalidJobError(
                f"metadata.annotations[{key}]",
                annotations.get(key),
                "matches no GPU model in the cluster; known: " + (", ".join(known) or "none"),
            )
        allowed = frozenset(picked)
    uuids = frozenset(_csv(annotations.get(USE_GPU_UUID)))
    excluded = frozenset(_csv(annotations.get(NOUSE_GPU_UUID)))
    if uuids and uuids <= excluded:
        raise InvalidJobError(
            f"metadata.annotations[{USE_GPU_UUID}]",
            annotations.get(USE_GPU_UUID),
            f"every card it names is excluded by {NOUSE_GPU_UUID}",
        )
    return GpuRequest(
        count=request.count,
        gpu_milli=request.gpu_milli,
        memory_mib=request.memory_mib,
        mig_profile=request.mig_profile,
        models=allowed,
        cards=request.cards,
        memory_percent=request.memory_percent,
        uuids=uuids,
        excluded_uuids=excluded,
    )
