"""A cluster spec (node pools) -> core ``Node`` objects.

::

    kind: Cluster                  # optional when the document has nodePools
    nodePools:
    - name: a100                   # nodes a100-0 .. a100-3
      count: 4
      cpu: 128                     # CPUs (a quantity: 128, "96500m")
      memory: 1Ti                  # bytes (a quantity)
      labels: {gpupool.io/flavor: a100}
      taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      gpus: {model: A100-80GB, count: 8, memory: 80Gi, nvlink: mesh}
    - name: mig
      cpu: 64
      memory: 512Gi
      gpus:
        model: A100-40GB
        count: 2
        memory: 40Gi
        mig: {profile: 1g.5gb, instances: 7, memory: 5Gi}   # per card; or a list of them
    - name: npu
      cpu: 192
      memory: 1Ti
      gpus:
        model: Ascend910B3
        vendor: ascend             # nvidia (default), hygon, ascend, cambricon, iluvatar,
        count: 8                   # mthreads, metax, enflame, kunlunxin
        memory: 64Gi
        relativeCapacity: 0.5      # one card in normalised units (1.0: the reference card)
        # division: free | templates | fractions | whole (the vendor's rule by default), and
        # computeSteps, memoryStep, templates: [{name, compute: milli, memory}], fractions

A vendor's rule is ``gpupool.core.vendors``'; the fields given override it.

Every node also gets the labels ``kubernetes.io/hostname``, ``gpupool.io/node-pool`` and,
when it has GPUs, those GPU feature discovery sets (``nvidia.com/gpu.product``,
``nvidia.com/gpu.count``, ``nvidia.com/gpu.memory`` in MiB), so flavors written for a real
cluster select the same nodes here (for other vendors ``gpupool.io/accelerator.vendor``,
``gpupool.io/accelerator.product``, ``gpupool.io/accelerator.count`` and
``gpupool.io/accelerator.memory``); a label given in the pool wins. Cards are numbered from 0
and get the UUID ``GPU-<node>-<index>``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from gpupool.config.documents import (
    NAME_RULE,
    Document,
    Metadata,
    Quantity,
    Strict,
    check_api_version,
    is_name,
    parse,
)
from gpupool.config.quantity import Converter, cpu_milli, gpu_memory_mib, memory_mib
from gpupool.core.devices import DeviceClass, Division, Template
from gpupool.core.errors import ConfigError
from gpupool.core.model import WHOLE_GPU_MILLI, Gpu, MigInstance, Node, NodeName, Taint, TaintEffect
from gpupool.core.vendors import VENDOR_CLASSES, vendor_class

__all__ = ["CLUSTER_API_VERSION", "ClusterSpec", "nodes_from_documents", "pool_nodes"]

CLUSTER_API_VERSION = "gpupool.io/v1alpha1"
MIG_SLICES = 7
"""Compute slices of a MIG-capable card (A100, H100, H200): ``<g>g.<mem>`` holds g of 7."""
_MIG_PROFILE = re.compile(r"^(\d+)g\.")


def _as_list(value: object) -> object:
    return [value] if isinstance(value, dict) else value


class TaintSpec(Strict):
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class MigSpec(Strict):
    """One MIG profile a card is partitioned into, per card."""

    profile: str = Field(min_length=1)
    instances: int = Field(ge=1)
    compute_milli: int | None = Field(default=None, ge=1, le=WHOLE_GPU_MILLI)
    memory: Quantity


class TemplateSpec(Strict):
    name: str = Field(min_length=1)
    compute: int = Field(ge=1, le=WHOLE_GPU_MILLI - 1)  # milli of the card
    memory: Quantity


class NodeGpuSpec(Strict):
    """A node's cards in the cluster file (a job's GPU request is ``config.jobs.GpuSpec``)."""

    model: str = Field(min_length=1)
    count: int = Field(ge=1)
    memory: Quantity
    nvlink: Literal["none", "mesh", "pairs"] = "none"
    mig: Annotated[list[MigSpec], BeforeValidator(_as_list)] | None = None
    vendor: str = "nvidia"
    division: Literal["free", "templates", "fractions", "whole"] | None = None
    compute_steps: int | None = Field(default=None, ge=1, le=WHOLE_GPU_MILLI)
    memory_step: Quantity | None = None
    templates: list[TemplateSpec] | None = None
    fractions: list[int] | None = None
    relative_capacity: float | None = Field(default=None, gt=0)
    compute_units: int | None = Field(default=None, ge=0)


class NodePoolSpec(Strict):
    name: str
    count: int = Field(default=1, ge=0)
    cpu: Quantity
    memory: Quantity
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)
    gpus: NodeGpuSpec | None = None
    schedulable: bool = True


class ClusterSpec(Strict):
    api_version: str | None = None
    kind: Literal["Cluster"] | None = None
    metadata: Metadata | None = None
    node_pools: list[NodePoolSpec] = Field(min_length=1)


def nodes_from_documents(docs: Sequence[Document], source: str = "<documents>") -> list[Node]:
    """The nodes of the one Cluster document in ``docs``, in pool order."""
    if not docs:
        raise ConfigError(
            f"{source}: no Cluster document (a document with kind: Cluster, or with nodePools)"
        )
    if len(docs) > 1:
        raise docs[1].problem(
            f"a second Cluster document (the first is document {docs[0].index}); "
            "put every node pool in one"
        )
    doc = docs[0]
    check_api_version(doc, (CLUSTER_API_VERSION,))
    spec = parse(ClusterSpec, doc)
    nodes: list[Node] = []
    pools: dict[str, int] = {}
    names: set[str] = set()
    for i, pool in enumerate(spec.node_pools):
        at = f"nodePools[{i}]"
        if not is_name(pool.name):
            raise doc.error(f"{at}.name", pool.name, NAME_RULE)
        if pool.name in pools:
            raise doc.error(
                f"{at}.name", pool.name, f"is used twice (first by nodePools[{pools[pool.name]}])"
            )
        pools[pool.name] = i
        for node in pool_nodes(doc, at, pool):
            if node.name in names:
                raise doc.error(
                    f"{at}.name", pool.name, f"makes node {node.name}, which another pool makes too"
                )
            names.add(node.name)
            nodes.append(node)
    return nodes


def _convert(doc: Document, fn: Converter, value: object, path: str) -> int:
    try:
        return fn(value, path)
    except ConfigError as exc:
        raise doc.problem(str(exc), exc) from exc


def _positive(doc: Document, fn: Converter, value: object, path: str) -> int:
    amount = _convert(doc, fn, value, path)
    if amount <= 0:
        raise doc.error(path, value, "must be positive")
    return amount


def pool_nodes(doc: Document, at: str, pool: NodePoolSpec) -> list[Node]:
    """The nodes of one pool of ``doc``, whose path there is ``at``; errors name that path."""
    cpu = _positive(doc, cpu_milli, pool.cpu, f"{at}.cpu")
    memory = _positive(doc, memory_mib, pool.memory, f"{at}.memory")
    taints = tuple(Taint(t.key, t.value, TaintEffect(t.effect)) for t in pool.taints)
    labels = {"gpupool.io/node-pool": pool.name}
    gpus = pool.gpus
    model = ""
    card_mib = 0
    peers: list[tuple[int, ...]] = []
    mig: tuple[MigInstance, ...] = ()
    if gpus is not None:
        model = gpus.model
        card_mib = _positive(doc, gpu_memory_mib, gpus.memory, f"{at}.gpus.memory")
        peers = _nvlink(doc, at, gpus)
        mig = _mig(doc, f"{at}.gpus", gpus, card_mib)
        device = _device(doc, f"{at}.gpus", gpus)
        if device.vendor == "nvidia":
            labels |= {
                "nvidia.com/gpu.product": model,
                "nvidia.com/gpu.count": str(gpus.count),
                "nvidia.com/gpu.memory": str(card_mib),
            }
        else:
            labels |= {
                "gpupool.io/accelerator.vendor": device.vendor,
                "gpupool.io/accelerator.product": model,
                "gpupool.io/accelerator.count": str(gpus.count),
                "gpupool.io/accelerator.memory": str(card_mib),
            }
    nodes = []
    for n in range(pool.count):
        name = NodeName(f"{pool.name}-{n}")
        cards = (
            ()
            if gpus is None
            else tuple(
                Gpu(
                    g,
                    model,
                    card_mib,
                    uuid=f"GPU-{name}-{g}",
                    mig=mig,
                    nvlink_peers=peers[g],
                    device=device,
                )
                for g in range(gpus.count)
            )
        )
        node_labels = {"kubernetes.io/hostname": name, **labels, **pool.labels}
        nodes.append(Node(name, cpu, memory, cards, node_labels, taints, pool.schedulable))
    return nodes


def _device(doc: Document, at: str, gpus: NodeGpuSpec) -> DeviceClass:
    """The vendor's default class with the fields the pool states put over it."""
    try:
        base = vendor_class(gpus.vendor)
    except ConfigError:
        known = ", ".join(sorted(VENDOR_CLASSES))
        raise doc.error(
            f"{at}.vendor", gpus.vendor, f"is not a known vendor; known: {known}"
        ) from None
    changes: dict[str, Any] = {}
    if gpus.division is not None:
        changes["division"] = Division(gpus.division)
    if gpus.compute_steps is not None:
        changes["compute_steps"] = gpus.compute_steps
    if gpus.memory_step is not None:
        changes["memory_step_mib"] = _positive(
            doc, gpu_memory_mib, gpus.memory_step, f"{at}.memoryStep"
        )
    if gpus.templates is not None:
        changes["templates"] = tuple(
            Template(
                t.name,
                t.compute,
                _positive(doc, gpu_memory_mib, t.memory, f"{at}.templates[{k}].memory"),
            )
            for k, t in enumerate(gpus.templates)
        )
    if gpus.fractions is not None:
        changes["fractions"] = tuple(sorted(gpus.fractions))
    if gpus.relative_capacity is not None:
        changes["relative_capacity"] = gpus.relative_capacity
    if gpus.compute_units is not None:
        changes["compute_units"] = gpus.compute_units
    device = dataclasses.replace(base, **changes) if changes else base
    problems = device.problems()
    if problems:
        field, _, rest = problems[0].partition("=")
        value, _, rule = rest.partition(" ")
        raise doc.error(f"{at}.{field}", value, rule)
    if gpus.mig and device.vendor != "nvidia":
        raise doc.error(
            f"{at}.mig",
            [m.profile for m in gpus.mig],
            f"is NVIDIA's partitioning; vendor is {device.vendor}",
        )
    return device


def _nvlink(doc: Document, at: str, gpus: NodeGpuSpec) -> list[tuple[int, ...]]:
    count = gpus.count
    if gpus.nvlink == "mesh":
        return [tuple(p for p in range(count) if p != g) for g in range(count)]
    if gpus.nvlink == "pairs":
        if count % 2:
            raise doc.error(
                f"{at}.gpus.nvlink",
                gpus.nvlink,
                f"needs an even number of cards (count is {count})",
            )
        return [(g ^ 1,) for g in range(count)]
    return [() for _ in range(count)]


def _mig(doc: Document, at: str, gpus: NodeGpuSpec, card_mib: int) -> tuple[MigInstance, ...]:
    if not gpus.mig:
        return ()
    out: list[MigInstance] = []
    seen: set[str] = set()
    for k, m in enumerate(gpus.mig):
        mp = f"{at}.mig[{k}]"
        if m.profile in seen:
            raise doc.error(f"{mp}.profile", m.profile, "is listed twice")
        seen.add(m.profile)
        milli = m.compute_milli
        if milli is None:
            slices = _MIG_PROFILE.match(m.profile)
            if slices is None or not 1 <= int(slices[1]) <= MIG_SLICES:
                raise doc.error(
                    f"{mp}.profile",
                    m.profile,
                    f"does not say its compute as <g>g.<memory> with g of "
                    f"{MIG_SLICES}; give computeMilli",
                )
            milli = int(slices[1]) * WHOLE_GPU_MILLI // MIG_SLICES
        mib = _positive(doc, gpu_memory_mib, m.memory, f"{mp}.memory")
        out.append(MigInstance(m.profile, m.instances, milli, mib))
    total_milli = sum(m.count * m.gpu_milli for m in out)
    if total_milli > WHOLE_GPU_MILLI:
        raise doc.error(
            f"{at}.mig",
            [f"{m.count} x {m.profile}" for m in out],
            f"take {total_milli} milli of compute, more than a card's {WHOLE_GPU_MILLI}",
        )
    total_mib = sum(m.count * m.memory_mib for m in out)
    if total_mib > card_mib:
        raise doc.error(
            f"{at}.mig",
            [f"{m.count} x {m.profile}" for m in out],
            f"take {total_mib} MiB, more than the card's {card_mib} MiB",
        )
    return tuple(out)
