"""The pod annotations another vendor's HAMi device plugin allocates from.

As HAMi's scheduler writes them for every vendor (``PatchAnnotations`` of the vendor's
package, then ``util.PatchPodAnnotations``): ``hami.io/vgpu-node``, ``hami.io/vgpu-time``,
``hami.io/bind-phase`` (``allocating``), ``hami.io/bind-time``, and the vendor's pair
``hami.io/<x>-devices-to-allocate`` = ``hami.io/<x>-devices-allocated`` = per container slot
(init containers first) each of its cards as ``UUID,TYPE,usedmem,usedcores:``, then ``;``.
``usedmem`` is the memory the card gives the container in MiB (the shape of the slice on
that card: its template, fraction or rounded amount), ``usedcores`` its compute in the
vendor's unit (percent; core groups for Moore Threads).

Vendor extras: Ascend's runtime reads ``huawei.com/<chip>``, a JSON list of ``{"UUID",
"temp", "memory", "core"}`` (``temp`` the vNPU template's name for a slice); Moore Threads'
plugin reads ``mthreads.com/gpu-index`` (the cards' indices, comma-separated); Enflame's DRS
cards get ``hami.io/enflame-vgpu-devices-allocated`` alone (no ``-to-allocate``) and Enflame's
own annotations (``k8s/vendors/drs.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpupool.core.devices import Division
from gpupool.core.model import WHOLE_GPU_MILLI, Gpu, Node, Placement
from gpupool.k8s.hami.devices import (
    BIND_PHASE,
    BIND_TIME,
    VGPU_NODE,
    VGPU_TIME,
    container_cards,
)
from gpupool.k8s.hami.requests import PodRequest
from gpupool.k8s.vendors import drs
from gpupool.k8s.vendors.protocols import PROTOCOLS, VendorProtocol

__all__ = ["card_protocol", "vendor_annotations"]


def card_protocol(card: Gpu) -> VendorProtocol | None:
    """The protocol of a card read from a vendor's inventory (None for NVIDIA's)."""
    mine = [p for p in PROTOCOLS if p.vendor == card.vendor]
    if not mine or card.vendor == "nvidia":
        return None
    if card.model.startswith(drs.MODEL_PREFIX):
        return next(p for p in mine if p.device_type == drs.DEVICE_TYPE)
    return next(
        (p for p in mine if p.device_type == card.model),
        next((p for p in mine if p.model and p.model == card.model), mine[0]),
    )


def vendor_annotations(
    request: PodRequest,
    placement: Placement,
    node: Node,
    now_s: float,
    pod: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The vendor's allocation annotations for ``placement``; empty when its cards are
    NVIDIA's (``gpupool.k8s.hami`` writes those) or it holds none. TranslateError when the
    placement does not hold the cards the containers ask for. ``pod``: the pod, for vendors
    whose annotations name its containers (Enflame's DRS)."""
    if not request.containers or not placement.shares:
        return {}
    cards = {g.index: g for g in node.gpus}
    first = cards.get(placement.shares[0].index)
    p = card_protocol(first) if first is not None else None
    if p is None:
        return {}
    per_slot: dict[int, str] = {}
    runtime: list[dict[str, object]] = []
    partitions: list[tuple[int, Gpu, int, int]] = []
    for g, mine in container_cards(request, placement):
        text = ""
        for s in mine:
            card = cards[s.index]
            whole = s.gpu_milli >= WHOLE_GPU_MILLI
            mem = card.memory_mib if whole else s.memory_mib
            cores = (
                p.cores_per_card if whole else -(-s.gpu_milli * p.cores_per_card // WHOLE_GPU_MILLI)
            )
            text += f"{card.uuid},{p.device_type},{mem},{cores}:"
            if not any(slot == g.slot for slot, _, _, _ in partitions):
                partitions.append((g.slot, card, min(s.gpu_milli, WHOLE_GPU_MILLI), mem))
            if p.vendor == "ascend":
                info: dict[str, object] = {"UUID": card.uuid, "memory": mem}
                if not whole and card.device.division is Division.TEMPLATES:
                    info["temp"] = next(
                        (t.name for t in card.device.templates if t.memory_mib == mem), ""
                    )
                info["core"] = cores
                runtime.append(info)
        per_slot[g.slot] = text
    devices = "".join(per_slot.get(slot, "") + ";" for slot in range(request.slots))
    stamp = str(int(now_s))
    out = {
        VGPU_NODE: str(node.name),
        VGPU_TIME: stamp,
        p.allocated: devices,
        BIND_PHASE: "allocating",
        BIND_TIME: stamp,
    }
    if p.to_allocate:
        out[p.to_allocate] = devices
    if p.device_type == drs.DEVICE_TYPE:
        out.update(drs.drs_extras(pod or {}, partitions, int(now_s * 1e9)))
    if p.vendor == "ascend":
        out[f"huawei.com/{p.device_type}"] = json.dumps(runtime, separators=(",", ":"))
    if p.vendor == "mthreads":
        out["mthreads.com/gpu-index"] = ",".join(str(s.index) for s in placement.shares)
    return out
