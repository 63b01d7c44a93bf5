"""A pod's request for another vendor's cards, read as HAMi's ``GenerateResourceRequests`` of
that vendor reads it (limits first, then requests):

- the count resource gives the cards (absent with memory or cores named: one card);
- memory is in the vendor's unit (MiB; 256 MiB for Cambricon, 512 MiB for Moore Threads);
  absent, the container takes all of each card's memory (HAMi's 100 %);
- cores are percent of a card (Moore Threads: core groups, 16 a card); absent, the whole
  card's compute, as HAMi's Hygon package sets it, except for vendors without a cores
  resource (Ascend, Kunlunxin), whose template or fraction decides the compute.

A container asking for every card's compute holds whole cards; otherwise it is a slice, which
the card's division rule shapes (``core/devices.py``). The request is limited to the models
of that vendor the cluster has, so a ``hygon.com/dcunum`` pod never lands on another card.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.config.quantity import whole_number
from gpupool.core.errors import ConfigError, InvalidJobError
from gpupool.core.model import GpuRequest, Node
from gpupool.k8s.hami.requests import FULL_CORES, ContainerGpu, PodRequest, gpu_request
from gpupool.k8s.vendors import drs
from gpupool.k8s.vendors.protocols import PROTOCOLS, VendorProtocol

__all__ = ["card_memory", "pod_protocol", "vendor_pod_request"]


def _read(c: Mapping[str, Any], name: str, where: str) -> int | None:
    res = c.get("resources") or {}
    raw = (res.get("limits") or {}).get(name, (res.get("requests") or {}).get(name))
    if raw is None:
        return None
    try:
        return whole_number(raw, where)
    except ConfigError as exc:
        raise InvalidJobError(where, raw, str(exc)) from exc


def pod_protocol(pod: Mapping[str, Any]) -> VendorProtocol | None:
    """The vendor whose resources the pod's containers name (the first listed)."""
    spec = pod.get("spec") or {}
    for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
        res = c.get("resources") or {}
        named = {*(res.get("limits") or {}), *(res.get("requests") or {})}
        for p in PROTOCOLS:
            if named.intersection(p.resources()):
                return p
    return None


@dataclass(frozen=True, slots=True)
class _Drs:
    """The cluster's DRS cards, for reading a DRS request: a whole card's slices, and each
    card model's memory (MiB)."""

    whole: int = 0
    card_mib: tuple[int, ...] = ()


def _container(
    c: Mapping[str, Any],
    slot: int,
    init: bool,
    p: VendorProtocol,
    where: str,
    drs_cards: _Drs = _Drs(),
) -> ContainerGpu | None:
    at = f"{where}.resources.limits"
    count = _read(c, p.count, f"{at}[{p.count}]")
    mem = _read(c, p.memory, f"{at}[{p.memory}]") if p.memory else None
    cores = _read(c, p.cores, f"{at}[{p.cores}]") if p.cores else None
    if p.device_type == drs.DEVICE_TYPE:  # slices of one card, or memory and cores
        if count is not None and count > 0:
            cores, mem = drs.direct_percent(count, drs_cards.whole, f"{at}[{p.count}]"), None
        elif mem is not None:
            mem = drs.memory_gb(mem, drs_cards.card_mib)
        if cores is None and mem is not None:
            cores = 1  # memory alone: the smallest profile holding it, whatever its cores
        count = None
    if count is None:
        if mem is None and cores is None:
            return None
        count = 1
    if count == 0:
        return None
    if cores is not None and cores > p.cores_per_card:
        raise InvalidJobError(
            f"{at}[{p.cores}]", cores, f"must be 0..{p.cores_per_card} (a card's compute)"
        )
    if cores is None:
        percent = FULL_CORES if (p.cores or mem is None) else 0
    else:
        percent = cores * FULL_CORES // p.cores_per_card
    mib = (mem or 0) * p.memory_unit_mib
    # DRS: the profile decides the memory a request does not name
    whole_memory = not mib and p.device_type != drs.DEVICE_TYPE
    return ContainerGpu(
        slot=slot,
        count=count,
        memory_mib=mib,
        memory_percent=100 if whole_memory else None,
        cores=percent,
        init=init,
    )


def _models(p: VendorProtocol, models: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """The models of ``p``'s cards among the cluster's (Enflame's whole GCUs and its DRS cards
    are one vendor's, two protocols)."""
    have = models.get(p.vendor, frozenset())
    if p.vendor == "enflame":
        drs_cards = frozenset(m for m in have if m.startswith(drs.MODEL_PREFIX))
        return (
            drs_cards
            if p.device_type == drs.DEVICE_TYPE
            else (have - drs_cards) or frozenset({p.model})
        )
    return have or frozenset({p.device_type})


def card_memory(nodes: Iterable[Node]) -> dict[str, int]:
    """Card model -> the least memory (MiB) a card of that model has among ``nodes``."""
    out: dict[str, int] = {}
    for n in nodes:
        for g in n.gpus:
            out[g.model] = min(out.get(g.model, g.memory_mib), g.memory_mib)
    return out


def vendor_pod_request(
    pod: Mapping[str, Any],
    base: PodRequest,
    models: Mapping[str, frozenset[str]],
    card_mib: Mapping[str, int] | None = None,
) -> PodRequest | None:
    """``base`` (the pod as read for NVIDIA) with the GPU request of the vendor it names;
    None when it names no vendor's resources. ``models``: vendor -> the card models of that
    vendor the cluster has; ``card_mib``: model -> its cards' memory (:func:`card_memory`),
    which decides whether a DRS memory request is GB or MiB."""
    p = pod_protocol(pod)
    if p is None:
        return None
    spec = pod.get("spec") or {}
    inits = spec.get("initContainers") or ()
    listed = [("initContainers", i, c, True) for i, c in enumerate(inits)]
    listed += [("containers", i, c, False) for i, c in enumerate(spec.get("containers") or ())]
    mine = _models(p, models)
    cards = _Drs(
        drs.drs_slices(mine),
        tuple((card_mib or {}).get(m, 0) for m in sorted(mine) if m.startswith(drs.MODEL_PREFIX)),
    )
    gpus = [
        g
        for slot, (kind, i, c, init) in enumerate(listed)
        if (g := _container(c, slot, init, p, f"spec.{kind}[{i}]", cards)) is not None
    ]
    request: GpuRequest = gpu_request(gpus)
    request = dataclasses.replace(request, models=mine)
    return dataclasses.replace(base, gpu=request, containers=tuple(gpus))
