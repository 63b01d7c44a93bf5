"""Kubernetes objects -> core objects, and core decisions -> the annotations HAMi reads.

Everything here works on the plain JSON dicts the API server sends (camelCase keys, as
``kubectl get -o json`` prints them), so it is pure and cheap: no client models, no I/O.

Inventory (DESIGN 3.1)
    A Node's CPU and memory come from ``status.allocatable``. Its GPUs come from HAMi's
    ``hami.io/node-nvidia-register`` annotation when present, in either of its two forms:

    - JSON (HAMi >= 2.8): a list of ``{"id", "index", "count", "devmem", "devcore", "type",
      "numa", "mode", "health", "migProfiles"}``; the fields are ``omitempty``, so an absent
      field is zero, empty or false (an absent ``health`` is an unhealthy card);
    - colon-separated (before): ``id,count,devmem,devcore,type,numa,health[,index,mode]:``
      once per card.

    Cards are ordered by HAMi's index (then by their place in the list) and numbered 0..n-1
    for the core; the card's UUID is what the pod annotations name. Without the annotation,
    GPU feature discovery's labels say the model (``nvidia.com/gpu.product``) and memory in MiB
    (``nvidia.com/gpu.memory``), and ``allocatable[nvidia.com/gpu]`` (else the
    ``nvidia.com/gpu.count`` label) how many cards there are; such cards have no UUID and pods
    placed on them get no HAMi annotations. A node is schedulable unless cordoned or its
    ``Ready`` condition is other than ``True``.

Requests (DESIGN 3.2)
    HAMi's per-container resources (names configurable, :class:`ResourceNames`): a card count,
    memory in MiB per card, memory as a percentage of the card, and compute in percent of
    the card. Limits are read first, then requests, as HAMi does. How they map to the core:

    - ``gpu: n`` alone: ``n`` whole cards;
    - ``gpu: 1`` with ``gpucores`` below 100 or memory below a whole card: a slice,
      ``gpu_milli`` = cores x 10 and ``memory_mib`` the memory asked;
    - ``gpu: 1`` with cores 100 (or none) and no memory limit: a whole card;
    - ``gpu: n > 1`` with cores or memory: ``n`` whole cards (the core does not place n
      slices of n cards); the annotations still carry the limits asked, which HAMi-core
      enforces.

    A memory percentage becomes MiB of the smallest card the pod may use (rounded down, to
    stay within every card); a slice's memory without cores is a slice with ``gpu_milli`` 0. When
    several containers ask for GPUs, whole-card counts add up; slices in more than one
    container are refused (one slice per pod). CPU and memory are the pod's effective
    requests: the larger of the sum over containers and the largest init container.

HAMi annotations (DESIGN 3.8), written exactly as HAMi's scheduler writes them:
``hami.io/vgpu-node`` (node name), ``hami.io/vgpu-time`` and ``hami.io/bind-time`` (Unix
seconds), ``hami.io/bind-phase`` (``allocating``), and ``hami.io/vgpu-devices-to-allocate`` =
``hami.io/vgpu-devices-allocated`` = for every container, init containers first, each of its
cards as ``UUID,NVIDIA,usedmem,usedcores:`` followed by ``;`` (a container with no GPU leaves
an empty ``;`` slot, so slot i is container i).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupool.config.quantity import cpu_milli, memory_mib, whole_number
from gpupool.core.errors import ConfigError, GpupoolError, InvalidJobError
from gpupool.core.model import (
    WHOLE_GPU_MILLI,
    Gpu,
    GpuRequest,
    GpuShare,
    JobId,
    MigInstance,
    Node,
    NodeName,
    Placement,
    Taint,
    TaintEffect,
    TaskId,
    Toleration,
)

__all__ = [
    "BIND_PHASE",
    "BIND_TIME",
    "DEVICES_ALLOCATED",
    "DEVICES_TO_ALLOCATE",
    "GANG_ANNOTATION",
    "GANG_SIZE_ANNOTATION",
    "HAMI_REGISTER",
    "PLACEMENT_ANNOTATION",
    "QUEUE_LABEL",
    "QUEUE_LABELS",
    "VGPU_NODE",
    "VGPU_TIME",
    "ContainerGpu",
    "GangRef",
    "HamiDevice",
    "PodRequest",
    "RecordedPlacement",
    "ResourceNames",
    "TranslateError",
    "card_floor",
    "hami_annotations",
    "is_terminal",
    "node_from_k8s",
    "parse_hami_register",
    "placement_annotation",
    "placement_from_hami",
    "pod_gang",
    "pod_job_id",
    "pod_queue",
    "pod_request",
    "read_placement",
]

HAMI_REGISTER = "hami.io/node-nvidia-register"
VGPU_NODE = "hami.io/vgpu-node"
VGPU_TIME = "hami.io/vgpu-time"
DEVICES_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"
HAMI_DEVICE_TYPE = "NVIDIA"
USE_GPU_TYPE = "nvidia.com/use-gputype"
NOUSE_GPU_TYPE = "nvidia.com/nouse-gputype"

QUEUE_LABEL = "gpupool.io/queue"
QUEUE_LABELS = (QUEUE_LABEL, "kueue.x-k8s.io/queue-name")
GANG_ANNOTATION = "gpupool.io/gang"
GANG_SIZE_ANNOTATION = "gpupool.io/gang-size"
PLACEMENT_ANNOTATION = "gpupool.io/placement"

GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_COUNT = "nvidia.com/gpu.count"


class TranslateError(GpupoolError):
    """A Kubernetes object gpupool cannot read: the message names the object and field."""


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """The extended resource names GPU requests use (HAMi's defaults)."""

    count: str = "nvidia.com/gpu"
    memory: str = "nvidia.com/gpumem"
    memory_percentage: str = "nvidia.com/gpumem-percentage"
    cores: str = "nvidia.com/gpucores"

    def all(self) -> tuple[str, ...]:
        return (self.count, self.memory, self.memory_percentage, self.cores)


# -- nodes ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HamiDevice:
    """One card of HAMi's register annotation, as HAMi wrote it."""

    id: str
    index: int
    count: int
    devmem: int
    devcore: int
    type: str
    numa: int
    health: bool
    mode: str = "hami-core"
    mig_profiles: tuple[MigInstance, ...] = ()


def _int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TranslateError(f"{where}={value!r} is not an integer")
    try:
        return int(value)
    except ValueError:
        raise TranslateError(f"{where}={value!r} is not an integer") from None


def _bool(value: object, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "t", "f"):
        return value.lower() in ("true", "1", "t")
    raise TranslateError(f"{where}={value!r} is not a boolean")


def parse_hami_register(text: str) -> list[HamiDevice]:
    """HAMi's ``hami.io/node-nvidia-register`` in either form (JSON list or colon-separated)."""
    text = text.strip()
    if text.startswith("["):
        return _register_json(text)
    return _register_colon(text)


def _register_json(text: str) -> list[HamiDevice]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TranslateError(f"{HAMI_REGISTER}: not valid JSON: {exc}") from exc
    if not isinstance(items, list):
        raise TranslateError(f"{HAMI_REGISTER}: expected a JSON list of devices")
    out: list[HamiDevice] = []
    for i, d in enumerate(items):
        at = f"{HAMI_REGISTER}[{i}]"
        if not isinstance(d, dict):
            raise TranslateError(f"{at}: expected an object, found {d!r}")
        migs: list[MigInstance] = []
        for j, p in enumerate(d.get("migProfiles") or ()):
            pat = f"{at}.migProfiles[{j}]"
            places = p.get("placements") or ()
            migs.append(MigInstance(
                profile=str(p.get("name", "")), count=max(1, len(places)),
                gpu_milli=_int(p.get("core", 0), f"{pat}.core") * 10,
                memory_mib=_int(p.get("memoryMB", 0), f"{pat}.memoryMB")))
        mode = str(d.get("mode") or "hami-core")
        out.append(HamiDevice(
            id=str(d.get("id", "")), index=_int(d.get("index", 0), f"{at}.index"),
            count=_int(d.get("count", 0), f"{at}.count"),
            devmem=_int(d.get("devmem", 0), f"{at}.devmem"),
            devcore=_int(d.get("devcore", 0), f"{at}.devcore"),
            type=str(d.get("type", "")), numa=_int(d.get("numa", 0), f"{at}.numa"),
            health=_bool(d.get("health", False), f"{at}.health"), mode=mode,
            mig_profiles=tuple(migs) if mode == "mig" else ()))
    return out


def _register_colon(text: str) -> list[HamiDevice]:
    if ":" not in text:
        raise TranslateError(f"{HAMI_REGISTER}={text!r}: expected a JSON list or "
                             "'id,count,devmem,devcore,type,numa,health:' per card")
    out: list[HamiDevice] = []
    for i, part in enumerate(p for p in text.split(":") if p):
        items = part.split(",")
        at = f"{HAMI_REGISTER} card {i}"
        if len(items) not in (7, 9):
            raise TranslateError(f"{at}={part!r}: expected 7 or 9 comma-separated fields, "
                                 f"found {len(items)}")
        out.append(HamiDevice(
            id=items[0], count=_int(items[1], f"{at}.count"),
            devmem=_int(items[2], f"{at}.devmem"), devcore=_int(items[3], f"{at}.devcore"),
            type=items[4], numa=_int(items[5], f"{at}.numa"),
            health=_bool(items[6], f"{at}.health"),
            index=_int(items[7], f"{at}.index") if len(items) == 9 else 0,
            mode=items[8] if len(items) == 9 else "hami-core"))
    return out


def _quantity(fn: Any, value: object, where: str) -> int:
    try:
        result: int = fn(value, where)
    except ConfigError as exc:
        raise TranslateError(str(exc)) from exc
    return result


def node_from_k8s(obj: Mapping[str, Any]) -> Node:
    """A core Node from a Kubernetes Node; TranslateError when it cannot be read."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    labels = dict(meta.get("labels") or {})
    annotations = meta.get("annotations") or {}
    at = f"node {name}"
    cpu = _quantity(cpu_milli, alloc.get("cpu", 0), f"{at}: allocatable.cpu")
    mem = _quantity(memory_mib, alloc.get("memory", 0), f"{at}: allocatable.memory")
    register = annotations.get(HAMI_REGISTER)
    gpus: tuple[Gpu, ...]
    if register:
        try:
            devices = parse_hami_register(register)
        except TranslateError as exc:
            raise TranslateError(f"{at}: {exc}") from exc
        gpus = _hami_gpus(devices)
    else:
        gpus = _gfd_gpus(name, labels, alloc)
    taints = tuple(_taint(t, f"{at}: spec.taints[{i}]")
                   for i, t in enumerate(spec.get("taints") or ()))
    ready = True
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    return Node(name=NodeName(name), cpu_milli=cpu, memory_mib=mem, gpus=gpus, labels=labels,
                taints=taints, schedulable=ready and not spec.get("unschedulable", False))


def _hami_gpus(devices: Sequence[HamiDevice]) -> tuple[Gpu, ...]:
    order = sorted(range(len(devices)), key=lambda i: (devices[i].index, i))
    return tuple(Gpu(index=pos, model=devices[i].type, memory_mib=devices[i].devmem,
                     uuid=devices[i].id, healthy=devices[i].health,
                     mig=devices[i].mig_profiles)
                 for pos, i in enumerate(order))


def _gfd_gpus(name: str, labels: Mapping[str, str],
              alloc: Mapping[str, Any]) -> tuple[Gpu, ...]:
    raw = alloc.get("nvidia.com/gpu", labels.get(GFD_COUNT, 0))
    count = _quantity(whole_number, raw, f"node {name}: allocatable.nvidia.com/gpu")
    if count == 0:
        return ()
    model = labels.get(GFD_PRODUCT, "")
    mem = _quantity(whole_number, labels.get(GFD_MEMORY, 0), f"node {name}: {GFD_MEMORY}")
    return tuple(Gpu(index=i, model=model, memory_mib=mem) for i in range(count))


def _taint(t: Mapping[str, Any], where: str) -> Taint:
    try:
        effect = TaintEffect(t.get("effect", "NoSchedule"))
    except ValueError:
        raise TranslateError(f"{where}.effect={t.get('effect')!r} is not NoSchedule, "
                             "PreferNoSchedule or NoExecute") from None
    return Taint(key=str(t.get("key", "")), value=str(t.get("value", "")), effect=effect)


# -- pods -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerGpu:
    """What one container asks of GPUs, as HAMi reads it; ``slot`` counts init containers
    first. ``memory_mib`` 0 with ``memory_percent`` None means "the whole card"."""

    slot: int
    count: int
    memory_mib: int = 0
    memory_percent: int | None = None
    cores: int = 0


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
        return (self.cpu_milli, self.memory_mib, self.gpu,
                tuple(sorted(self.node_selector.items())), self.tolerations)


def _resources(c: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    res = c.get("resources") or {}
    return res.get("limits") or {}, res.get("requests") or {}


def _read(c: Mapping[str, Any], name: str) -> object | None:
    limits, requests = _resources(c)
    value: object | None = limits[name] if name in limits else requests.get(name)
    return value


def _container_gpu(c: Mapping[str, Any], slot: int, names: ResourceNames,
                   where: str) -> ContainerGpu | None:
    raw = _read(c, names.count)
    if raw is None:
        other = [n for n in names.all()[1:] if _read(c, n) is not None]
        if other:
            raise InvalidJobError(f"{where}.resources.limits", other[0],
                                  f"asks for {other[0]} without {names.count}: "
                                  f"say how many cards ({names.count}: 1)")
        return None
    count = _whole(raw, f"{where}.resources.limits[{names.count}]")
    if count == 0:
        return None
    mem = _read(c, names.memory)
    pct = _read(c, names.memory_percentage)
    cores = _read(c, names.cores)
    percent = None if pct is None else _whole(pct, f"{where}[{names.memory_percentage}]")
    if percent is not None and not 1 <= percent <= 100:
        raise InvalidJobError(f"{where}.resources.limits[{names.memory_percentage}]", pct,
                              "must be 1..100 (percent of a card's memory)")
    core = 0 if cores is None else _whole(cores, f"{where}[{names.cores}]")
    if not 0 <= core <= 100:
        raise InvalidJobError(f"{where}.resources.limits[{names.cores}]", cores,
                              "must be 0..100 (percent of a card's compute)")
    return ContainerGpu(slot=slot, count=count,
                        memory_mib=0 if mem is None else _whole(mem, f"{where}[{names.memory}]"),
                        memory_percent=percent, cores=core)


def _whole(value: object, where: str) -> int:
    try:
        return whole_number(value, where)
    except ConfigError as exc:
        raise InvalidJobError(where, value, str(exc)) from exc


def _toleration(t: Mapping[str, Any]) -> Toleration:
    effect = t.get("effect") or None
    return Toleration(key=str(t.get("key", "")), operator=str(t.get("operator", "Equal")),
                      value=str(t.get("value", "")),
                      effect=TaintEffect(effect) if effect else None)


def pod_request(pod: Mapping[str, Any], names: ResourceNames = ResourceNames(), *,
                card_memory_mib: int = 0, models: Iterable[str] = ()) -> PodRequest:
    """The core request of a pod. ``card_memory_mib``: the smallest card the pod may use,
    to turn a memory percentage into MiB; ``models``: the GPU models the cluster has, to
    resolve HAMi's ``nvidia.com/use-gputype`` / ``nouse-gputype`` (substring, any case)
    into the core's allowed models. InvalidJobError names the field when the pod asks for
    something no node could ever give."""
    spec = pod.get("spec") or {}
    inits = list(spec.get("initContainers") or ())
    mains = list(spec.get("containers") or ())
    gpus: list[ContainerGpu] = []
    for slot, (kind, i, c) in enumerate([("initContainers", i, c) for i, c in enumerate(inits)]
                                        + [("containers", i, c) for i, c in enumerate(mains)]):
        g = _container_gpu(c, slot, names, f"spec.{kind}[{i}]")
        if g is not None:
            gpus.append(g)
    cpu = max(sum(_cpu(c) for c in mains), max((_cpu(c) for c in inits), default=0))
    mem = max(sum(_mem(c) for c in mains), max((_mem(c) for c in inits), default=0))
    request = _gpu_request(gpus, card_memory_mib)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    allowed = _allowed_models(annotations, models)
    if allowed is not None:
        if not allowed:
            raise InvalidJobError(f"metadata.annotations[{USE_GPU_TYPE}]",
                                  annotations.get(USE_GPU_TYPE, annotations.get(NOUSE_GPU_TYPE)),
                                  "matches no GPU model in the cluster; known: "
                                  + ", ".join(sorted(set(models))))
        request = GpuRequest(count=request.count, gpu_milli=request.gpu_milli,
                             memory_mib=request.memory_mib, mig_profile=request.mig_profile,
                             models=allowed)
    priority = spec.get("priority")
    return PodRequest(
        cpu_milli=cpu, memory_mib=mem, gpu=request, containers=tuple(gpus),
        slots=len(inits) + len(mains), node_selector=dict(spec.get("nodeSelector") or {}),
        tolerations=tuple(_toleration(t) for t in spec.get("tolerations") or ()),
        priority=int(priority) if isinstance(priority, int) else 0)


def _cpu(c: Mapping[str, Any]) -> int:
    limits, requests = _resources(c)
    raw = requests.get("cpu", limits.get("cpu", 0))
    try:
        return cpu_milli(raw, "cpu")
    except ConfigError as exc:
        raise InvalidJobError(f"container {c.get('name')}.resources.requests.cpu", raw,
                              str(exc)) from exc


def _mem(c: Mapping[str, Any]) -> int:
    limits, requests = _resources(c)
    raw = requests.get("memory", limits.get("memory", 0))
    try:
        return memory_mib(raw, "memory")
    except ConfigError as exc:
        raise InvalidJobError(f"container {c.get('name')}.resources.requests.memory", raw,
                              str(exc)) from exc


def _slice_memory(g: ContainerGpu, card_memory_mib: int) -> int | None:
    """MiB of one card the container asks for; None for the whole card."""
    if g.memory_mib > 0:
        return g.memory_mib
    if g.memory_percent is not None and g.memory_percent < 100:
        if card_memory_mib <= 0:
            return None
        return max(1, card_memory_mib * g.memory_percent // 100)
    return None


def _gpu_request(gpus: Sequence[ContainerGpu], card_memory_mib: int) -> GpuRequest:
    if not gpus:
        return GpuRequest()
    if len(gpus) == 1 and gpus[0].count == 1:
        g = gpus[0]
        mem = _slice_memory(g, card_memory_mib)
        if mem is None and g.cores in (0, 100):
            return GpuRequest(count=1)
        if mem is None and card_memory_mib > 0:
            mem = card_memory_mib
        milli = g.cores * WHOLE_GPU_MILLI // 100
        if milli >= WHOLE_GPU_MILLI and (mem is None or mem >= card_memory_mib > 0):
            return GpuRequest(count=1)
        return GpuRequest(gpu_milli=min(milli, WHOLE_GPU_MILLI - 1), memory_mib=mem or 0)
    shared = [g for g in gpus if g.memory_mib or (g.memory_percent or 100) < 100
              or g.cores not in (0, 100)]
    if shared and len(gpus) > 1:
        slots = ", ".join(str(g.slot) for g in gpus)
        raise InvalidJobError("spec.containers", f"containers {slots}",
                              "only one container of a pod may ask for a slice of a GPU; "
                              "whole cards may be spread over several containers")
    total = sum(g.count for g in gpus)
    floor = max((g.memory_mib for g in gpus), default=0)
    return GpuRequest(count=total, memory_mib=floor)


def _allowed_models(annotations: Mapping[str, str],
                    models: Iterable[str]) -> frozenset[str] | None:
    use = annotations.get(USE_GPU_TYPE)
    nouse = annotations.get(NOUSE_GPU_TYPE)
    if not use and not nouse:
        return None
    known = set(models)
    allowed = set(known)
    if use:
        wanted = [w.strip().upper() for w in use.split(",") if w.strip()]
        allowed = {m for m in allowed if any(w in m.upper() for w in wanted)}
    if nouse:
        banned = [w.strip().upper() for w in nouse.split(",") if w.strip()]
        allowed = {m for m in allowed if not any(w in m.upper() for w in banned)}
    return frozenset(allowed)


def pod_queue(pod: Mapping[str, Any], default: str | None = None) -> str | None:
    """The queue a pod names: ``gpupool.io/queue``, else Kueue's ``queue-name`` label."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    for key in QUEUE_LABELS:
        value = labels.get(key)
        if value:
            return str(value)
    return default


@dataclass(frozen=True, slots=True)
class GangRef:
    """Pods that start together: ``size`` pods of ``namespace`` sharing ``name``.
    ``job_owner``: the Job whose parallelism gives the size, when ``size`` is 0."""

    namespace: str
    name: str
    size: int
    job_owner: str | None = None

    @property
    def job_id(self) -> JobId:
        return JobId(f"{self.namespace}/gang:{self.name}")


def pod_gang(pod: Mapping[str, Any]) -> GangRef | None:
    """The gang a pod belongs to, if any.

    ``gpupool.io/gang: NAME`` with ``gpupool.io/gang-size: N`` groups pods by NAME;
    ``gpupool.io/gang: job`` (or a size-less annotation on a pod a Job owns) makes the owning
    Job's pods one gang of the Job's parallelism, which the caller looks up."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    value = annotations.get(GANG_ANNOTATION)
    if not value:
        return None
    ns = str(meta.get("namespace", "default"))
    raw_size = annotations.get(GANG_SIZE_ANNOTATION)
    owner = next((o.get("name") for o in meta.get("ownerReferences") or ()
                  if o.get("kind") == "Job" and o.get("controller")), None)
    if raw_size is not None:
        size = _whole(raw_size, f"metadata.annotations[{GANG_SIZE_ANNOTATION}]")
        if size < 1:
            raise InvalidJobError(f"metadata.annotations[{GANG_SIZE_ANNOTATION}]", raw_size,
                                  "must be 1 or more")
        name = f"job-{owner}" if value == "job" and owner else str(value)
        return GangRef(ns, name, size)
    if owner is None:
        raise InvalidJobError(f"metadata.annotations[{GANG_ANNOTATION}]", value,
                              f"a gang needs {GANG_SIZE_ANNOTATION}, or a Job owning the pod")
    return GangRef(ns, f"job-{owner}", 0, job_owner=str(owner))


def pod_job_id(pod: Mapping[str, Any]) -> JobId:
    meta = pod.get("metadata") or {}
    return JobId(f"{meta.get('namespace', 'default')}/{meta.get('name', '')}")


# -- decisions -> annotations -----------------------------------------------------------------


def _device_usage(g: ContainerGpu, share: GpuShare, card: Gpu) -> tuple[int, int]:
    """(usedmem MiB, usedcores percent) HAMi-core enforces for one card of a container."""
    if g.count == 1 and share.gpu_milli < WHOLE_GPU_MILLI:
        return share.memory_mib, g.cores
    if g.memory_mib:
        mem = g.memory_mib
    elif g.memory_percent is not None:
        mem = card.memory_mib * g.memory_percent // 100
    else:
        mem = card.memory_mib
    return mem, g.cores


def hami_annotations(request: PodRequest, placement: Placement, node: Node,
                     now_s: float) -> dict[str, str]:
    """HAMi's pod annotations for ``placement`` on ``node``; empty when the node's cards
    have no UUID (not registered by HAMi) or the pod asks for no GPU."""
    if not request.containers or not placement.shares:
        return {}
    cards = {g.index: g for g in node.gpus}
    if any(not cards[s.index].uuid for s in placement.shares if s.index in cards):
        return {}
    shares = list(placement.shares)
    per_slot: dict[int, list[str]] = {}
    pos = 0
    for g in request.containers:
        mine = shares[pos:pos + g.count]
        pos += g.count
        if len(mine) != g.count:
            asked = sum(c.count for c in request.containers)
            raise TranslateError(f"placement {placement.task} holds {len(shares)} cards; the "
                                 f"pod's containers ask for {asked}")
        devs = []
        for s in mine:
            card = cards[s.index]
            mem, cores = _device_usage(g, s, card)
            devs.append(f"{card.uuid},{HAMI_DEVICE_TYPE},{mem},{cores}:")
        per_slot[g.slot] = devs
    devices = "".join("".join(per_slot.get(slot, ())) + ";" for slot in range(request.slots))
    stamp = str(int(now_s))
    return {
        VGPU_NODE: str(node.name), VGPU_TIME: stamp, DEVICES_TO_ALLOCATE: devices,
        DEVICES_ALLOCATED: devices, BIND_PHASE: "allocating", BIND_TIME: stamp,
    }


@dataclass(frozen=True, slots=True)
class RecordedPlacement:
    """What ``gpupool.io/placement`` records on a bound pod, enough to take its cards and
    quota back after a restart without a new decision."""

    job: JobId
    task: TaskId
    queue: str
    flavor: str
    node: NodeName
    cpu_milli: int
    memory_mib: int
    shares: tuple[GpuShare, ...]
    start_s: float
    gang_size: int = 1

    def placement(self) -> Placement:
        return Placement(task=self.task, job=self.job, node=self.node, cpu_milli=self.cpu_milli,
                         memory_mib=self.memory_mib, shares=self.shares)


def placement_annotation(p: Placement, queue: str, flavor: str, start_s: float,
                         gang_size: int = 1) -> str:
    return json.dumps({
        "job": p.job, "task": p.task, "queue": queue, "flavor": flavor, "node": p.node,
        "cpu": p.cpu_milli, "mem": p.memory_mib, "start": round(start_s, 3),
        "gang": gang_size,
        "cards": [[s.index, s.gpu_milli, s.memory_mib, s.mig_profile] for s in p.shares],
    }, separators=(",", ":"))


def read_placement(pod: Mapping[str, Any]) -> RecordedPlacement | None:
    """The recorded placement of a pod, None when it has none; TranslateError when it is
    unreadable (the pod is then left alone and reported)."""
    meta = pod.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(PLACEMENT_ANNOTATION)
    if not text:
        return None
    try:
        d = json.loads(text)
        shares = tuple(GpuShare(index=int(c[0]), gpu_milli=int(c[1]), memory_mib=int(c[2]),
                                mig_profile=c[3] if len(c) > 3 else None)
                       for c in d["cards"])
        return RecordedPlacement(
            job=JobId(str(d["job"])), task=TaskId(str(d["task"])), queue=str(d["queue"]),
            flavor=str(d.get("flavor", "")), node=NodeName(str(d["node"])),
            cpu_milli=int(d["cpu"]), memory_mib=int(d["mem"]), shares=shares,
            start_s=float(d.get("start", 0.0)), gang_size=int(d.get("gang", 1)))
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise TranslateError(f"pod {meta.get('namespace')}/{meta.get('name')}: "
                             f"{PLACEMENT_ANNOTATION}={text!r} cannot be read: {exc}") from exc


def placement_from_hami(pod: Mapping[str, Any], node: Node, queue: str,
                        cpu_milli: int, memory_mib: int) -> RecordedPlacement | None:
    """The cards a bound pod holds according to HAMi's ``hami.io/vgpu-devices-allocated``
    alone (a pod bound by HAMi's own scheduler, or by gpupool before it recorded
    ``gpupool.io/placement``); None when the pod has no such annotation.

    Each ``UUID,type,usedmem,usedcores`` entry is a share of the card with that UUID on the
    pod's node: ``usedcores`` x 10 milli-GPU (0, HAMi's "no core limit", counts as the whole
    card's compute when the memory is the whole card's, else as none) and ``usedmem`` MiB.
    Entries of several containers on one card add up. TranslateError for a UUID the node
    does not have."""
    meta = pod.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(DEVICES_ALLOCATED)
    if not text:
        return None
    where = f"pod {meta.get('namespace')}/{meta.get('name')}: {DEVICES_ALLOCATED}"
    by_uuid = {g.uuid: g for g in node.gpus if g.uuid}
    held: dict[int, list[int]] = {}
    for slot in text.split(";"):
        for entry in slot.split(":"):
            if "," not in entry:
                continue
            fields = entry.split(",")
            if len(fields) < 4:
                raise TranslateError(f"{where}: {entry!r} is not UUID,type,usedmem,usedcores")
            card = by_uuid.get(fields[0])
            if card is None:
                raise TranslateError(f"{where}: card {fields[0]} is not on node {node.name}")
            mem = _int(fields[2], f"{where} usedmem")
            cores = _int(fields[3], f"{where} usedcores")
            whole = mem >= card.memory_mib and cores in (0, 100)
            milli = WHOLE_GPU_MILLI if whole else min(cores, 100) * WHOLE_GPU_MILLI // 100
            acc = held.setdefault(card.index, [0, 0])
            acc[0] = min(WHOLE_GPU_MILLI, acc[0] + milli)
            acc[1] = min(card.memory_mib, acc[1] + mem)
    if not held:
        return None
    job = pod_job_id(pod)
    return RecordedPlacement(
        job=job, task=TaskId(f"{job}/ps0-0"), queue=queue, flavor="", node=node.name,
        cpu_milli=cpu_milli, memory_mib=memory_mib,
        shares=tuple(GpuShare(i, m, b) for i, (m, b) in sorted(held.items())), start_s=0.0)


def is_terminal(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed")


def card_floor(nodes: Iterable[Node], models: frozenset[str] = frozenset()) -> int:
    """The smallest card memory among usable cards (of ``models`` when given); 0 if none."""
    low = math.inf
    for n in nodes:
        for g in n.gpus:
            if g.healthy and not g.mig and (not models or g.model in models):
                low = min(low, g.memory_mib)
    return 0 if low is math.inf else int(low)
