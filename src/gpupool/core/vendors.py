"""Each vendor's default division rule, as HAMi's device plugin for it enforces slices.

A node pool naming a vendor gets that vendor's class; any field it states (steps, templates,
relative capacity) overrides the default. The figures come from HAMi's device packages and its
chart's device configuration (``pkg/device/<vendor>/``, ``device-configmap.yaml``):

- ``nvidia``, ``hygon``: HAMi-core limits memory in MiB and compute in % of the card's cores.
  NVIDIA keeps gpupool's finer milli-GPU (the OpenB traces ask in milli).
- ``ascend``: vNPU templates; the 910B3's ``vir05_1c_16g`` (5 of 20 AI cores, 16 GiB) and
  ``vir10_3c_32g`` (10 of 20, 32 GiB). A memory request is trimmed up to the smallest template.
- ``cambricon``, ``iluvatar``: memory in 256 MiB units, compute in %.
- ``mthreads``: 16 core groups per card, memory in 512 MiB units.
- ``metax``: memory in 1 GiB units, compute in %.
- ``enflame``: hardware DRS profiles; a quarter and a half of a card are modelled as templates.
- ``kunlunxin``: a quarter, a half or a whole card.

Relative capacity defaults to 1.0 for every vendor: what a card is worth against another is a
site's choice (dense FP16/BF16 TFLOPS, or measured throughput), stated per node pool.
"""

from __future__ import annotations

from gpupool.core.devices import NVIDIA, DeviceClass, Division, Template
from gpupool.core.errors import ConfigError

VENDOR_CLASSES: dict[str, DeviceClass] = {
    "nvidia": NVIDIA,
    "hygon": DeviceClass("hygon", Division.FREE, compute_steps=100),
    "ascend": DeviceClass(
        "ascend",
        Division.TEMPLATES,
        templates=(Template("vir05_1c_16g", 250, 16384), Template("vir10_3c_32g", 500, 32768)),
    ),
    "cambricon": DeviceClass("cambricon", Division.FREE, compute_steps=100, memory_step_mib=256),
    "iluvatar": DeviceClass("iluvatar", Division.FREE, compute_steps=100, memory_step_mib=256),
    "mthreads": DeviceClass("mthreads", Division.FREE, compute_steps=16, memory_step_mib=512),
    "metax": DeviceClass("metax", Division.FREE, compute_steps=100, memory_step_mib=1024),
    "enflame": DeviceClass(
        "enflame",
        Division.TEMPLATES,
        templates=(Template("quarter", 250, 16384), Template("half", 500, 32768)),
    ),
    "kunlunxin": DeviceClass("kunlunxin", Division.FRACTIONS, fractions=(250, 500)),
}
"""Vendor name -> default device class."""


def vendor_class(vendor: str) -> DeviceClass:
    """The default class of ``vendor``; ConfigError naming the known vendors otherwise."""
    try:
        return VENDOR_CLASSES[vendor]
    except KeyError:
        raise ConfigError(
            f"vendor={vendor!r} is not known; known: {', '.join(sorted(VENDOR_CLASSES))}",
            field="vendor",
            value=vendor,
            rule=f"is not known; known: {', '.join(sorted(VENDOR_CLASSES))}",
        ) from None
