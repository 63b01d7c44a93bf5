"""Each vendor's protocol with HAMi, as its device package and HAMi's chart define it.

- hygon: type ``DCU``; ``hygon.com/dcunum``, ``dcumem`` (MiB), ``dcucores`` (%); inventory
  ``hami.io/node-dcu-register`` (colon form); ``hami.io/dcu-devices-to-allocate``/``-allocated``;
- ascend: type the chip (``Ascend910B3``); ``huawei.com/Ascend910B3``, ``-memory`` (MiB,
  trimmed up to a template); ``hami.io/node-register-Ascend910B3`` (JSON);
  ``hami.io/Ascend910B3-devices-to-allocate``/``-allocated`` and ``huawei.com/Ascend910B3``;
- cambricon: type ``MLU``; ``cambricon.com/vmlu``, ``mlu.smlu.vmemory`` (256 MiB units),
  ``mlu.smlu.vcore`` (%); node capacity of ``vcore`` (100 a card) and ``vmemory``;
  ``hami.io/cambricon-mlu-devices-to-allocate``/``-allocated``;
- iluvatar: type the chip (``BI-V150``); ``iluvatar.ai/BI-V150-vgpu``, ``.vMem``, ``.vCore``;
  ``hami.io/node-BI-V150-register`` (colon form); ``hami.io/BI-V150-devices-to-allocate``;
- mthreads: type ``Mthreads``; ``mthreads.com/vgpu``, ``sgpu-memory`` (512 MiB units),
  ``sgpu-core`` (16 a card); node capacity of ``sgpu-core`` and ``sgpu-memory``;
  ``hami.io/mthreads-vgpu-devices-allocated`` (and ``-to-allocate``);
- metax: type ``Metax-SGPU``; ``metax-tech.com/sgpu``, ``vmemory`` (MiB), ``vcore`` (%);
  ``metax-tech.com/node-gpu-devices`` (its own JSON); ``hami.io/metax-sgpu-devices-...``;
- enflame: type ``GCU``; ``enflame.com/gcu`` whole cards, counted from node capacity;
  ``hami.io/enflame-gcu-devices-to-allocate``/``-allocated``; and its DRS partitions, type
  ``Enflame``: ``enflame.com/drs-gcu`` (a profile's slices), ``gcu-memory`` (GB), ``gcu-core``
  (%); ``enflame.com/gcu-drs-capacity`` (its own JSON); ``hami.io/enflame-vgpu-devices-allocated``
  and Enflame's own annotations (``k8s/vendors/drs.py``);
- kunlunxin: type ``XPU``; ``kunlunxin.com/vxpu``, ``vxpu-memory`` (MiB, trimmed to a quarter,
  half or whole card); ``hami.io/node-register-xpu`` (JSON); ``hami.io/xpu-devices-...``.

Allocations use HAMi's ``EncodePodSingleDevice``: per container slot, each card as
``UUID,TYPE,usedmem,usedcores:``, then ``;``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gpupool.core.devices import DeviceClass
from gpupool.core.vendors import VENDOR_CLASSES

__all__ = ["PROTOCOLS", "VendorProtocol", "ascend", "iluvatar", "protocol_for"]


@dataclass(frozen=True, slots=True)
class VendorProtocol:
    """How one vendor's cards are registered, requested and allocated under HAMi."""

    vendor: str
    device_type: str
    count: str
    memory: str = ""
    cores: str = ""
    memory_unit_mib: int = 1
    cores_per_card: int = 100
    register: str = ""  # node annotation listing the cards (HAMi's colon form or JSON)
    capacity_cores: str = ""  # else: node capacity resource the cards are counted from
    capacity_memory: str = ""
    capacity_count: str = ""
    to_allocate: str = ""
    allocated: str = ""
    model: str = ""  # the card model when the inventory does not name one
    device: DeviceClass = dataclasses.field(default_factory=DeviceClass)

    def resources(self) -> tuple[str, ...]:
        return tuple(r for r in (self.count, self.memory, self.cores) if r)


def ascend(chip: str = "Ascend910B3", ai_cores: int = 20) -> VendorProtocol:
    """Ascend's protocol for one chip (HAMi's ``commonWord``, e.g. ``Ascend910B3``); cores
    are the chip's AI cores (``aiCore`` of HAMi's chart: 20 on a 910B3, 24 on a 910B2)."""
    return VendorProtocol(
        "ascend",
        chip,
        f"huawei.com/{chip}",
        f"huawei.com/{chip}-memory",
        cores_per_card=ai_cores,
        register=f"hami.io/node-register-{chip}",
        to_allocate=f"hami.io/{chip}-devices-to-allocate",
        allocated=f"hami.io/{chip}-devices-allocated",
        device=VENDOR_CLASSES["ascend"],
    )


def iluvatar(chip: str = "BI-V150") -> VendorProtocol:
    """Iluvatar's protocol for one chip (HAMi's ``commonWord``, e.g. ``BI-V150``)."""
    return VendorProtocol(
        "iluvatar",
        chip,
        f"iluvatar.ai/{chip}-vgpu",
        f"iluvatar.ai/{chip}.vMem",
        f"iluvatar.ai/{chip}.vCore",
        register=f"hami.io/node-{chip}-register",
        to_allocate=f"hami.io/{chip}-devices-to-allocate",
        allocated=f"hami.io/{chip}-devices-allocated",
        device=VENDOR_CLASSES["iluvatar"],
    )


PROTOCOLS: tuple[VendorProtocol, ...] = (
    VendorProtocol(
        "hygon",
        "DCU",
        "hygon.com/dcunum",
        "hygon.com/dcumem",
        "hygon.com/dcucores",
        register="hami.io/node-dcu-register",
        to_allocate="hami.io/dcu-devices-to-allocate",
        allocated="hami.io/dcu-devices-allocated",
        device=VENDOR_CLASSES["hygon"],
    ),
    ascend("Ascend910B3", 20),
    ascend("Ascend910B2", 24),
    ascend("Ascend910B4", 20),
    VendorProtocol(
        "cambricon",
        "MLU",
        "cambricon.com/vmlu",
        "cambricon.com/mlu.smlu.vmemory",
        "cambricon.com/mlu.smlu.vcore",
        memory_unit_mib=256,
        capacity_cores="cambricon.com/mlu.smlu.vcore",
        capacity_memory="cambricon.com/mlu.smlu.vmemory",
        to_allocate="hami.io/cambricon-mlu-devices-to-allocate",
        allocated="hami.io/cambricon-mlu-devices-allocated",
        model="MLU",
        device=VENDOR_CLASSES["cambricon"],
    ),
    iluvatar("BI-V150"),
    iluvatar("BI-V100"),
    VendorProtocol(
        "mthreads",
        "Mthreads",
        "mthreads.com/vgpu",
        "mthreads.com/sgpu-memory",
        "mthreads.com/sgpu-core",
        memory_unit_mib=512,
        cores_per_card=16,
        capacity_cores="mthreads.com/sgpu-core",
        capacity_memory="mthreads.com/sgpu-memory",
        to_allocate="hami.io/mthreads-vgpu-devices-to-allocate",
        allocated="hami.io/mthreads-vgpu-devices-allocated",
        model="Mthreads",
        device=VENDOR_CLASSES["mthreads"],
    ),
    VendorProtocol(
        "metax",
        "Metax-SGPU",
        "metax-tech.com/sgpu",
        "metax-tech.com/vmemory",
        "metax-tech.com/vcore",
        register="metax-tech.com/node-gpu-devices",
        to_allocate="hami.io/metax-sgpu-devices-to-allocate",
        allocated="hami.io/metax-sgpu-devices-allocated",
        device=VENDOR_CLASSES["metax"],
    ),
    VendorProtocol(
        "enflame",
        "Enflame",
        "enflame.com/drs-gcu",
        "enflame.com/gcu-memory",
        "enflame.com/gcu-core",
        memory_unit_mib=1024,
        register="enflame.com/gcu-drs-capacity",
        allocated="hami.io/enflame-vgpu-devices-allocated",
        device=VENDOR_CLASSES["enflame"],
    ),
    VendorProtocol(
        "enflame",
        "GCU",
        "enflame.com/gcu",
        capacity_count="enflame.com/gcu",
        to_allocate="hami.io/enflame-gcu-devices-to-allocate",
        allocated="hami.io/enflame-gcu-devices-allocated",
        model="GCU",
        device=dataclasses.replace(
            VENDOR_CLASSES["enflame"],
            division=VENDOR_CLASSES["enflame"].division.WHOLE,
            templates=(),
        ),
    ),
    VendorProtocol(
        "kunlunxin",
        "XPU",
        "kunlunxin.com/vxpu",
        "kunlunxin.com/vxpu-memory",
        register="hami.io/node-register-xpu",
        to_allocate="hami.io/xpu-devices-to-allocate",
        allocated="hami.io/xpu-devices-allocated",
        device=VENDOR_CLASSES["kunlunxin"],
    ),
)
"""The protocols gpupool reads and writes, HAMi's defaults (its chart and flags)."""


def protocol_for(device_type: str) -> VendorProtocol | None:
    """The protocol whose cards carry HAMi's device type ``device_type``."""
    return next((p for p in PROTOCOLS if p.device_type == device_type), None)
