"""A decision written as HAMi's pod annotations, and HAMi's annotations read back.

Written exactly as HAMi's scheduler writes them (``PatchAnnotations``, then
``util.PatchPodAnnotations``):
``hami.io/vgpu-node`` (node name), ``hami.io/vgpu-time`` and ``hami.io/bind-time`` (Unix
seconds), ``hami.io/bind-phase`` (``allocating``), and ``hami.io/vgpu-devices-to-allocate`` =
``hami.io/vgpu-devices-allocated`` = for every container, init containers first, each of its
cards as ``UUID,NVIDIA,usedmem,usedcores:``, then ``;`` (a container with no GPU leaves an
empty slot, so slot i is container i). HAMi also sets the pod *label* ``hami.io/vgpu-node``
(its monitor lists pods by it): :func:`hami_labels`.

Cards go to containers as :mod:`gpupool.k8s.hami.requests` describes: app containers take
the placement's cards in turn, ``count`` each; init containers take the first cards again.
``usedmem`` is the container's own memory on that card (its MiB, or its percentage of that
card), ``usedcores`` its own cores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpupool.core.model import WHOLE_GPU_MILLI, Gpu, GpuShare, Node, Placement
from gpupool.k8s.hami.errors import TranslateError
from gpupool.k8s.hami.mig import MIG_ALLOCATIONS, MigAllocation, encode_mig_allocations
from gpupool.k8s.hami.requests import ContainerGpu, PodRequest

__all__ = [
    "BIND_PHASE",
    "BIND_TIME",
    "DEVICES_ALLOCATED",
    "DEVICES_TO_ALLOCATE",
    "HAMI_DEVICE_TYPE",
    "MIG_ALLOCATIONS",
    "VGPU_NODE",
    "VGPU_TIME",
    "card_usage",
    "container_cards",
    "hami_annotations",
    "hami_labels",
]

VGPU_NODE = "hami.io/vgpu-node"
VGPU_TIME = "hami.io/vgpu-time"
DEVICES_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"
HAMI_DEVICE_TYPE = "NVIDIA"
SLOT_SEP = ";"
DEVICE_SEP = ":"


def hami_annotations(
    request: PodRequest,
    placement: Placement,
    node: Node,
    now_s: float,
    mig: Sequence[MigAllocation] = (),
) -> dict[str, str]:
    """HAMi's pod annotations for ``placement`` on ``node``; empty when the node's cards
    have no UUID (not registered by HAMi) or the pod asks for no GPU. TranslateError when
    the placement does not hold the cards the containers ask for. A MIG instance is written
    as HAMi writes it: the card's UUID with the profile's memory and core, and ``mig`` (the
    placements chosen for the pod's instances) as ``hami.io/vgpu-mig-allocations``."""
    if not request.containers or not placement.shares:
        return {}
    cards = {g.index: g for g in node.gpus}
    if any(s.index not in cards or not cards[s.index].uuid for s in placement.shares):
        return {}
    if any(s.mig_profile for s in placement.shares) and len(mig) != len(placement.shares):
        raise TranslateError(
            f"placement {placement.task} holds {len(placement.shares)} MIG "
            f"instances; {len(mig)} placements were chosen for them"
        )
    per_slot: dict[int, str] = {}
    for g, mine in container_cards(request, placement):
        per_slot[g.slot] = "".join(
            f"{cards[s.index].uuid},{HAMI_DEVICE_TYPE},{_used(g, cards[s.index], s)}{DEVICE_SEP}"
            for s in mine
        )
    devices = "".join(per_slot.get(slot, "") + SLOT_SEP for slot in range(request.slots))
    stamp = str(int(now_s))
    out = {
        VGPU_NODE: str(node.name),
        VGPU_TIME: stamp,
        DEVICES_TO_ALLOCATE: devices,
        DEVICES_ALLOCATED: devices,
        BIND_PHASE: "allocating",
        BIND_TIME: stamp,
    }
    if mig:
        out[MIG_ALLOCATIONS] = encode_mig_allocations(mig)
    return out


def _used(g: ContainerGpu, card: Gpu, share: GpuShare) -> str:
    """``usedmem,usedcores`` of a container on a card: a MIG instance's profile memory and
    core (HAMi's ``AddResourceUsage``), else what the container asks."""
    if share.mig_profile is not None:
        inst = next((m for m in card.mig if m.profile == share.mig_profile), None)
        if inst is None:
            raise TranslateError(f"card {card.uuid} offers no MIG profile {share.mig_profile}")
        return f"{inst.memory_mib},{inst.gpu_milli * 100 // WHOLE_GPU_MILLI}"
    return f"{g.used_mib(card.memory_mib)},{g.cores}"


def container_cards(
    request: PodRequest, placement: Placement
) -> list[tuple[ContainerGpu, list[GpuShare]]]:
    """Each GPU container of the pod with the cards it gets: app containers take the
    placement's cards in turn, init containers (which run before them, one at a time) the
    first ones again. TranslateError when the placement does not hold the distinct cards the
    containers ask for."""
    shares = list(placement.shares)
    need = max(
        sum(g.count for g in request.containers if not g.init),
        max((g.count for g in request.containers if g.init), default=0),
    )
    distinct = (
        len({s.index for s in shares}) if not any(s.mig_profile for s in shares) else need
    )  # MIG: several instances may share a card
    if len(shares) != need or distinct != need:
        raise TranslateError(
            f"placement {placement.task} holds {len(shares)} cards; the "
            f"pod's containers ask for {need} distinct cards"
        )
    out = []
    pos = 0
    for g in request.containers:
        if g.init:
            out.append((g, shares[: g.count]))
        else:
            out.append((g, shares[pos : pos + g.count]))
            pos += g.count
    return out


def hami_labels(annotations: Mapping[str, str]) -> dict[str, str]:
    """The pod labels HAMi's scheduler writes beside ``annotations`` (the same write):
    ``hami.io/vgpu-node`` = the node, when the annotations assign one."""
    node = annotations.get(VGPU_NODE)
    return {VGPU_NODE: node} if node else {}


def card_usage(pod: Mapping[str, Any], node: Node) -> tuple[GpuShare, ...]:
    """The cards a bound pod holds according to ``hami.io/vgpu-devices-allocated`` alone, as
    HAMi counts them: per card, the larger of the init containers' peak and the sum over the
    app containers (``CollapseInitContainerUsage``). ``usedcores`` 100, or the whole card's
    memory with ``usedcores`` 0 (HAMi's "no core limit"), is the whole card; otherwise
    ``usedcores`` x 10 milli-GPU and ``usedmem`` MiB. TranslateError for an entry that
    cannot be read or a UUID the node does not have; () without the annotation."""
    meta = pod.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(DEVICES_ALLOCATED)
    if not text:
        return ()
    where = f"pod {meta.get('namespace')}/{meta.get('name')}: {DEVICES_ALLOCATED}"
    inits = len((pod.get("spec") or {}).get("initContainers") or ())
    by_uuid = {g.uuid: g for g in node.gpus if g.uuid}
    peak: dict[int, list[int]] = {}
    total: dict[int, list[int]] = {}
    for slot, part in enumerate(text.split(SLOT_SEP)):
        for entry in part.split(DEVICE_SEP):
            if "," not in entry:
                continue
            fields = entry.split(",")
            if len(fields) < 4:
                raise TranslateError(f"{where}: {entry!r} is not UUID,type,usedmem,usedcores")
            card = by_uuid.get(fields[0])
            if card is None:
                raise TranslateError(f"{where}: card {fields[0]} is not on node {node.name}")
            if card.mig:
                continue  # a MIG instance: counted by its placement (k8s/hami/mig.py)
            mem = _number(fields[2], f"{where} usedmem")
            cores = _number(fields[3], f"{where} usedcores")
            whole = cores >= 100 or (mem >= card.memory_mib and cores == 0)
            milli = WHOLE_GPU_MILLI if whole else cores * WHOLE_GPU_MILLI // 100
            mib = card.memory_mib if whole else mem
            if slot < inits:
                acc = peak.setdefault(card.index, [0, 0])
                acc[0], acc[1] = max(acc[0], milli), max(acc[1], mib)
            else:
                acc = total.setdefault(card.index, [0, 0])
                acc[0], acc[1] = acc[0] + milli, acc[1] + mib
    out = []
    for index in sorted(set(peak) | set(total)):
        card = next(g for g in node.gpus if g.index == index)
        p, t = peak.get(index, [0, 0]), total.get(index, [0, 0])
        out.append(
            GpuShare(
                index, min(WHOLE_GPU_MILLI, max(p[0], t[0])), min(card.memory_mib, max(p[1], t[1]))
            )
        )
    return tuple(out)


def _number(value: str, where: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise TranslateError(f"{where}={value!r} is not an integer") from None
