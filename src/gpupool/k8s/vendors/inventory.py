"""A node's cards of another vendor than NVIDIA, read as HAMi's scheduler reads them.

- a register annotation in HAMi's node-device form (``DecodeNodeDevices``: the colon form,
  Hygon and Iluvatar; ``UnMarshalNodeDevices``: JSON, Ascend and Kunlunxin), parsed by the
  same reader as NVIDIA's (:func:`gpupool.k8s.hami.register.parse_hami_register`);
- MetaX's own JSON list (``metax-tech.com/node-gpu-devices``: ``uuid``, ``model``,
  ``totalDevCount``, ``totalVRam`` MiB, ``healthy``);
- node capacity, for vendors whose device plugin registers no annotation: Cambricon (every
  100 of ``mlu.smlu.vcore`` is a card, ``mlu.smlu.vmemory`` in 256 MiB units shared out
  evenly), Moore Threads (every 16 of ``sgpu-core``, ``sgpu-memory`` in 512 MiB units) and
  Enflame (``enflame.com/gcu`` whole cards). Such cards are named as HAMi names them,
  ``<node>-cambricon-mlu-<i>``, ``<node>-mthreads-<i>``, ``<node>-GCU-<i>``.

Each card carries its vendor's device class (``core/vendors.py``), the split count as
``max_holders``, and is usable only when healthy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpupool.config.quantity import whole_number
from gpupool.core.errors import ConfigError
from gpupool.core.model import Gpu
from gpupool.k8s.hami.errors import TranslateError
from gpupool.k8s.hami.register import parse_hami_register
from gpupool.k8s.vendors import drs
from gpupool.k8s.vendors.protocols import PROTOCOLS, VendorProtocol

__all__ = ["node_protocol", "vendor_gpus"]


def _capacity(status: Mapping[str, Any], name: str, where: str) -> int:
    raw = (status.get("capacity") or {}).get(name, (status.get("allocatable") or {}).get(name))
    if raw is None:
        return 0
    try:
        return whole_number(raw, where)
    except ConfigError as exc:
        raise TranslateError(f"{where}: {exc}") from exc


def node_protocol(obj: Mapping[str, Any]) -> VendorProtocol | None:
    """The first vendor whose inventory the node carries (an annotation or a capacity)."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    status = obj.get("status") or {}
    cap = {**(status.get("allocatable") or {}), **(status.get("capacity") or {})}
    for p in PROTOCOLS:
        if p.register and annotations.get(p.register):
            return p
        source = p.capacity_cores or p.capacity_count
        if source and str(cap.get(source, "0")) not in ("0", ""):
            return p
    return None


def vendor_gpus(obj: Mapping[str, Any]) -> tuple[Gpu, ...]:
    """The node's cards of the first vendor it registers (empty when none)."""
    p = node_protocol(obj)
    if p is None:
        return ()
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    at = f"node {name}"
    if p.register:
        text = str((meta.get("annotations") or {})[p.register])
        if p.vendor == "metax":
            return _metax(text, p, f"{at}: {p.register}")
        if p.register == drs.CAPACITY:
            return drs.drs_gpus(name, text, f"{at}: {p.register}")
        try:
            devices = parse_hami_register(text)
        except TranslateError as exc:
            raise TranslateError(f"{at}: {p.register}: {exc}") from exc
        order = sorted(range(len(devices)), key=lambda i: (devices[i].index, i))
        chip = p.vendor in ("ascend", "iluvatar")  # the protocol is per chip: name it so
        return tuple(
            Gpu(
                index=pos,
                model=p.device_type if chip else (devices[i].type or p.device_type),
                memory_mib=devices[i].devmem,
                uuid=devices[i].id,
                healthy=devices[i].health and devices[i].count > 0,
                max_holders=devices[i].count,
                device=p.device,
            )
            for pos, i in enumerate(order)
        )
    status = obj.get("status") or {}
    if p.capacity_count:
        n = _capacity(status, p.capacity_count, f"{at}: capacity.{p.capacity_count}")
        return tuple(
            Gpu(
                index=i,
                model=p.model,
                memory_mib=0,
                uuid=f"{name}-{p.device_type}-{i}",
                max_holders=1,
                device=p.device,
            )
            for i in range(n)
        )
    cores = _capacity(status, p.capacity_cores, f"{at}: capacity.{p.capacity_cores}")
    memory = _capacity(status, p.capacity_memory, f"{at}: capacity.{p.capacity_memory}")
    cards = -(-cores // p.cores_per_card)
    per_card = memory * p.memory_unit_mib * p.cores_per_card // cores if cores else 0
    word = {"cambricon": "cambricon-mlu", "mthreads": "mthreads"}.get(p.vendor, p.vendor)
    return tuple(
        Gpu(
            index=i,
            model=p.model,
            memory_mib=per_card,
            uuid=f"{name}-{word}-{i}",
            max_holders=100,
            device=p.device,
        )
        for i in range(cards)
    )


def _metax(text: str, p: VendorProtocol, at: str) -> tuple[Gpu, ...]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TranslateError(f"{at}: not JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(items, list):
        raise TranslateError(f"{at}: expected a JSON list of devices")
    out: list[Gpu] = []
    for i, d in enumerate(items):
        if not isinstance(d, Mapping) or not isinstance(d.get("uuid"), str):
            raise TranslateError(f"{at}[{i}]: a device needs a uuid")
        vram = d.get("totalVRam", 0)
        count = d.get("totalDevCount", 0)
        if not isinstance(vram, int) or not isinstance(count, int) or vram < 0 or count < 0:
            raise TranslateError(
                f"{at}[{i}]: totalVRam={vram!r} and totalDevCount={count!r} "
                "must be whole numbers, 0 or more"
            )
        out.append(
            Gpu(
                index=i,
                model=str(d.get("model") or p.device_type),
                memory_mib=vram,
                uuid=d["uuid"],
                healthy=bool(d.get("healthy")) and count > 0,
                max_holders=count,
                device=p.device,
            )
        )
    return tuple(out)
