"""Kubernetes objects -> core objects, and core decisions -> what gpupool records on a pod.

Everything here works on the plain JSON dicts the API server sends (camelCase keys, as
``kubectl get -o json`` prints them), so it is pure and cheap: no client models, no I/O.
HAMi's own protocol (its register annotation and node health, how it reads a pod's GPU
requests, the device annotations) lives in :mod:`gpupool.k8s.hami`; its names are
importable from here too.

Inventory (DESIGN 3.1)
    A Node's CPU and memory come from ``status.allocatable``. Its GPUs come from HAMi's
    ``hami.io/node-nvidia-register`` annotation when present
    (:mod:`gpupool.k8s.hami.register`: both forms, split count, handshake, allocatable
    ``nvidia.com/gpu``, ``hami.io/device-cordon``, device health, MIG-mode cards refused).
    Without the annotation, GPU feature discovery's labels say the model
    (``nvidia.com/gpu.product``) and memory in MiB (``nvidia.com/gpu.memory``), and
    ``allocatable[nvidia.com/gpu]`` (else the ``nvidia.com/gpu.count`` label) how many cards
    there are; such cards have no UUID and pods placed on them get no HAMi annotations. A
    node is schedulable unless cordoned or its ``Ready`` condition is other than ``True``.

Requests (DESIGN 3.2)
    :mod:`gpupool.k8s.hami.requests`: HAMi's per-container resources and defaults, one card
    set per container, init containers collapsed, UUID and model annotations.

Decisions (DESIGN 3.8)
    :mod:`gpupool.k8s.hami.devices` writes HAMi's annotations and label; here,
    ``gpupool.io/placement`` records what gpupool decided, to take the cards back after a
    restart, and :func:`placement_from_hami` reads a pod HAMi's own scheduler bound.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.config.quantity import cpu_milli, memory_mib, whole_number
from gpupool.core.errors import ConfigError, InvalidJobError
from gpupool.core.model import (
    Gpu,
    GpuShare,
    JobId,
    Node,
    NodeName,
    Placement,
    Taint,
    TaintEffect,
    TaskId,
)
from gpupool.k8s.hami.devices import (
    BIND_PHASE,
    BIND_TIME,
    DEVICES_ALLOCATED,
    DEVICES_TO_ALLOCATE,
    HAMI_DEVICE_TYPE,
    MIG_ALLOCATIONS,
    VGPU_NODE,
    VGPU_TIME,
    card_usage,
    hami_annotations,
    hami_labels,
)
from gpupool.k8s.hami.errors import TranslateError
from gpupool.k8s.hami.register import (
    DEVICE_CORDON,
    HAMI_REGISTER,
    HANDSHAKE,
    HamiDevice,
    card_refusals,
    cordoned_uuids,
    hami_gpus,
    node_refusal,
    parse_hami_register,
)
from gpupool.k8s.hami.requests import (
    NOUSE_GPU_TYPE,
    NOUSE_GPU_UUID,
    USE_GPU_TYPE,
    USE_GPU_UUID,
    ContainerGpu,
    HamiDefaults,
    PodRequest,
    ResourceNames,
    pod_request,
)
from gpupool.k8s.vendors.inventory import vendor_gpus

__all__ = [
    "BIND_PHASE",
    "BIND_TIME",
    "DEVICES_ALLOCATED",
    "DEVICES_TO_ALLOCATE",
    "DEVICE_CORDON",
    "GANG_ANNOTATION",
    "GANG_SIZE_ANNOTATION",
    "HAMI_DEVICE_TYPE",
    "HAMI_REGISTER",
    "HANDSHAKE",
    "MIG_ALLOCATIONS",
    "NOUSE_GPU_TYPE",
    "NOUSE_GPU_UUID",
    "PLACEMENT_ANNOTATION",
    "QUEUE_LABEL",
    "QUEUE_LABELS",
    "USE_GPU_TYPE",
    "USE_GPU_UUID",
    "VGPU_NODE",
    "VGPU_TIME",
    "ContainerGpu",
    "GangRef",
    "HamiDefaults",
    "HamiDevice",
    "PodRequest",
    "RecordedPlacement",
    "ResourceNames",
    "TranslateError",
    "card_floor",
    "gpu_refusals",
    "hami_annotations",
    "hami_labels",
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

QUEUE_LABEL = "gpupool.io/queue"
QUEUE_LABELS = (QUEUE_LABEL, "kueue.x-k8s.io/queue-name")
GANG_ANNOTATION = "gpupool.io/gang"
GANG_SIZE_ANNOTATION = "gpupool.io/gang-size"
PLACEMENT_ANNOTATION = "gpupool.io/placement"

GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_COUNT = "nvidia.com/gpu.count"
GPU_RESOURCE = "nvidia.com/gpu"


# -- nodes ------------------------------------------------------------------------------------


def _quantity(fn: Any, value: object, where: str) -> int:
    try:
        result: int = fn(value, where)
    except ConfigError as exc:
        raise TranslateError(str(exc)) from exc
    return result


def gpu_refusals(
    obj: Mapping[str, Any], *, now_s: float | None = None, count_resource: str = GPU_RESOURCE
) -> dict[str, str]:
    """UUID -> why that card of a HAMi node takes no new work (node health, cordon, device
    health, MIG mode); empty for a node without HAMi's register annotation."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    register = annotations.get(HAMI_REGISTER)
    if not register:
        return {}
    status = obj.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    try:
        devices = parse_hami_register(register)
    except TranslateError as exc:
        raise TranslateError(f"node {meta.get('name', '')}: {exc}") from exc
    return card_refusals(
        devices,
        cordoned_uuids(annotations),
        node_refusal(annotations, alloc, count_resource, now_s),
    )


def node_from_k8s(
    obj: Mapping[str, Any], *, now_s: float | None = None, count_resource: str = GPU_RESOURCE
) -> Node:
    """A core Node from a Kubernetes Node; TranslateError when it cannot be read. ``now_s``
    (Unix seconds) lets HAMi's handshake time out; cards that take no new work
    (:func:`gpu_refusals`) are in the node but not usable."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    labels = dict(meta.get("labels") or {})
    at = f"node {name}"
    cpu = _quantity(cpu_milli, alloc.get("cpu", 0), f"{at}: allocatable.cpu")
    mem = _quantity(memory_mib, alloc.get("memory", 0), f"{at}: allocatable.memory")
    register = (meta.get("annotations") or {}).get(HAMI_REGISTER)
    gpus: tuple[Gpu, ...]
    if register:
        try:
            devices = parse_hami_register(register)
        except TranslateError as exc:
            raise TranslateError(f"{at}: {exc}") from exc
        annotations = meta.get("annotations") or {}
        refused = card_refusals(
            devices,
            cordoned_uuids(annotations),
            node_refusal(annotations, alloc, count_resource, now_s),
        )
        gpus = hami_gpus(devices, refused)
    else:
        # NVIDIA's cards as GPU feature discovery counts them, else another vendor's
        gpus = _gfd_gpus(name, labels, alloc, count_resource) or vendor_gpus(obj)
    taints = tuple(
        _taint(t, f"{at}: spec.taints[{i}]") for i, t in enumerate(spec.get("taints") or ())
    )
    ready = True
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    return Node(
        name=NodeName(name),
        cpu_milli=cpu,
        memory_mib=mem,
        gpus=gpus,
        labels=labels,
        taints=taints,
        schedulable=ready and not spec.get("unschedulable", False),
    )


def _gfd_gpus(
    name: str, labels: Mapping[str, str], alloc: Mapping[str, Any], count_resource: str
) -> tuple[Gpu, ...]:
    raw = alloc.get(count_resource, labels.get(GFD_COUNT, 0))
    count = _quantity(whole_number, raw, f"node {name}: allocatable.{count_resource}")
    if count == 0:
        return ()
    model = labels.get(GFD_PRODUCT, "")
    mem = _quantity(whole_number, labels.get(GFD_MEMORY, 0), f"node {name}: {GFD_MEMORY}")
    return tuple(Gpu(index=i, model=model, memory_mib=mem) for i in range(count))


def _taint(t: Mapping[str, Any], where: str) -> Taint:
    try:
        effect = TaintEffect(t.get("effect", "NoSchedule"))
    except ValueError:
        raise TranslateError(
            f"{where}.effect={t.get('effect')!r} is not NoSchedule, PreferNoSchedule or NoExecute"
        ) from None
    return Taint(key=str(t.get("key", "")), value=str(t.get("value", "")), effect=effect)


# -- pods -------------------------------------------------------------------------------------


def _whole(value: object, where: str) -> int:
    try:
        return whole_number(value, where)
    except ConfigError as exc:
        raise InvalidJobError(where, value, exc.rule or str(exc)) from exc


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
    owner = next(
        (
            o.get("name")
            for o in meta.get("ownerReferences") or ()
            if o.get("kind") == "Job" and o.get("controller")
        ),
        None,
    )
    if raw_size is not None:
        size = _whole(raw_size, f"metadata.annotations[{GANG_SIZE_ANNOTATION}]")
        if size < 1:
            raise InvalidJobError(
                f"metadata.annotations[{GANG_SIZE_ANNOTATION}]", raw_size, "must be 1 or more"
            )
        name = f"job-{owner}" if value == "job" and owner else str(value)
        return GangRef(ns, name, size)
    if owner is None:
        raise InvalidJobError(
            f"metadata.annotations[{GANG_ANNOTATION}]",
            value,
            f"a gang needs {GANG_SIZE_ANNOTATION}, or a Job owning the pod",
        )
    return GangRef(ns, f"job-{owner}", 0, job_owner=str(owner))


def pod_job_id(pod: Mapping[str, Any]) -> JobId:
    meta = pod.get("metadata") or {}
    return JobId(f"{meta.get('namespace', 'default')}/{meta.get('name', '')}")


# -- decisions -> annotations -----------------------------------------------------------------


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
        return Placement(
            task=self.task,
            job=self.job,
            node=self.node,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            shares=self.shares,
        )


def placement_annotation(
    p: Placement, queue: str, flavor: str, start_s: float, gang_size: int = 1
) -> str:
    return json.dumps(
        {
            "job": p.job,
            "task": p.task,
            "queue": queue,
            "flavor": flavor,
            "node": p.node,
            "cpu": p.cpu_milli,
            "mem": p.memory_mib,
            "start": round(start_s, 3),
            "gang": gang_size,
            "cards": [[s.index, s.gpu_milli, s.memory_mib, s.mig_profile] for s in p.shares],
        },
        separators=(",", ":"),
    )


def read_placement(pod: Mapping[str, Any]) -> RecordedPlacement | None:
    """The recorded placement of a pod, None when it has none; TranslateError when it is
    unreadable (the pod is then left alone and reported)."""
    meta = pod.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(PLACEMENT_ANNOTATION)
    if not text:
        return None
    try:
        d = json.loads(text)
        shares = tuple(
            GpuShare(
                index=int(c[0]),
                gpu_milli=int(c[1]),
                memory_mib=int(c[2]),
                mig_profile=c[3] if len(c) > 3 else None,
            )
            for c in d["cards"]
        )
        return RecordedPlacement(
            job=JobId(str(d["job"])),
            task=TaskId(str(d["task"])),
            queue=str(d["queue"]),
            flavor=str(d.get("flavor", "")),
            node=NodeName(str(d["node"])),
            cpu_milli=int(d["cpu"]),
            memory_mib=int(d["mem"]),
            shares=shares,
            start_s=float(d.get("start", 0.0)),
            gang_size=int(d.get("gang", 1)),
        )
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise TranslateError(
            f"pod {meta.get('namespace')}/{meta.get('name')}: "
            f"{PLACEMENT_ANNOTATION}={text!r} cannot be read: {exc}"
        ) from exc


def placement_from_hami(
    pod: Mapping[str, Any], node: Node, queue: str, cpu_milli: int, memory_mib: int
) -> RecordedPlacement | None:
    """The cards a bound pod holds according to HAMi's ``hami.io/vgpu-devices-allocated``
    alone (a pod bound by HAMi's own scheduler, or by gpupool before it recorded
    ``gpupool.io/placement``), counted as HAMi counts them
    (:func:`gpupool.k8s.hami.devices.card_usage`); None when the pod has no such
    annotation. TranslateError for a UUID the node does not have."""
    shares = card_usage(pod, node)
    if not shares:
        return None
    job = pod_job_id(pod)
    return RecordedPlacement(
        job=job,
        task=TaskId(f"{job}/ps0-0"),
        queue=queue,
        flavor="",
        node=node.name,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        shares=shares,
        start_s=0.0,
    )


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
