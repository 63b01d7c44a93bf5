"""Enflame's DRS (hard-partitioned GCU) protocol, as HAMi's ``pkg/device/enflame`` reads and
writes it.

- **Inventory**: the node annotation ``enflame.com/gcu-drs-capacity``, JSON
  ``{"devices": [{"index", "minor", "capacity"}], "profiles": {NAME: ID}}``. A profile's name
  says its slices and memory, ``<slices>g.<GB>gb`` (``3g.20gb``); the largest slice count is
  a whole card, the largest memory the card's. Each device is a card ``<node>-enflame-drs-<i>``
  with ``capacity`` slices; each profile smaller than the whole card is a template of its
  memory and of ``ceil(slices * 100 / largest)`` % of the card's compute, HAMi's core
  percent for it, so a card never holds more profiles than HAMi's core check lets it.
  The card's model is ``Enflame-DRS-<largest slices>``.
- **Requests**: ``enflame.com/drs-gcu: N`` asks for the profile of N slices on one card;
  ``enflame.com/gcu-memory`` and ``enflame.com/gcu-core`` (%) ask for the smallest profile
  holding both (HAMi's unified API); either way one card per container. The memory is GB,
  unless it is over twice the largest profile's GB: then it is MiB, rounded up to whole GB
  (HAMi's ``normalizeMemoryRequestToGB``; its own example asks ``gcu-memory: 20480``).
- **Allocation**: ``hami.io/enflame-vgpu-devices-allocated`` (HAMi's ``EncodePodSingleDevice``
  of type ``Enflame``, the profile's MiB and core percent), ``enflame.com/gcu-assigned``
  (``false``: for the device plugin to set), ``enflame.com/gcu-assigned-time`` (ns),
  ``enflame.com/gcu-assigned-index`` and ``-id`` (the first card's index),
  ``enflame.com/gcu-assigned-minor`` (the card's ``minor`` in the capacity annotation, its
  index when none is given), ``enflame.com/gcu-request-size`` (its slices) and
  ``assigned-containers`` (per container name ``{"allocated": false, "request": slices,
  "profileID", "profileName"}``). HAMi writes no ``-to-allocate`` annotation for DRS.

Where gpupool differs: HAMi judges GB or MiB against the largest profile of the node it
tries; gpupool reads a request once for the cluster, against the smallest card's largest
profile when DRS cards differ.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from gpupool.core.devices import DeviceClass, Division, Template
from gpupool.core.errors import InvalidJobError
from gpupool.core.model import WHOLE_GPU_MILLI, Gpu
from gpupool.k8s.hami.errors import TranslateError

__all__ = [
    "CAPACITY",
    "DEVICE_TYPE",
    "MODEL_PREFIX",
    "drs_extras",
    "drs_gpus",
    "drs_slices",
    "memory_gb",
    "profile_of",
]

CAPACITY = "enflame.com/gcu-drs-capacity"
DEVICE_TYPE = "Enflame"
MODEL_PREFIX = "Enflame-DRS-"
ASSIGNED = "enflame.com/gcu-assigned"
ASSIGNED_TIME = "enflame.com/gcu-assigned-time"
ASSIGNED_INDEX = "enflame.com/gcu-assigned-index"
ASSIGNED_ID = "enflame.com/gcu-assigned-id"
ASSIGNED_MINOR = "enflame.com/gcu-assigned-minor"
REQUEST_SIZE = "enflame.com/gcu-request-size"
ASSIGNED_CONTAINERS = "assigned-containers"

_PROFILE = re.compile(r"^\s*(\d+)g\.(\d+)gb\s*$", re.IGNORECASE)


def _profile(name: str) -> tuple[int, int] | None:
    m = _PROFILE.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def drs_gpus(node: str, text: str, at: str) -> tuple[Gpu, ...]:
    """The cards of ``enflame.com/gcu-drs-capacity``; TranslateError naming what is wrong."""
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TranslateError(f"{at}: not JSON ({exc.msg} at {exc.pos})") from None
    if (
        not isinstance(spec, Mapping)
        or not isinstance(spec.get("devices"), list)
        or not isinstance(spec.get("profiles"), Mapping)
    ):
        raise TranslateError(f'{at}: expected {{"devices": [...], "profiles": {{...}}}}')
    profiles = {
        str(n): (str(i), shape)
        for n, i in spec["profiles"].items()
        if (shape := _profile(str(n))) is not None and shape[0] > 0 and shape[1] > 0
    }
    if not profiles:
        raise TranslateError(
            f"{at}.profiles={dict(spec['profiles'])}: no profile named <slices>g.<GB>gb"
        )
    largest = max(size for _, (size, _) in profiles.values())
    card_mib = max(gb for _, (_, gb) in profiles.values()) * 1024
    templates = tuple(
        sorted(
            (
                Template(name, math.ceil(size * 100 / largest) * 10, gb * 1024, ref)
                for name, (ref, (size, gb)) in profiles.items()
                if size < largest
            ),
            key=lambda t: (t.gpu_milli, t.memory_mib, t.name),
        )
    )
    whole = next(
        (
            Template(name, WHOLE_GPU_MILLI, gb * 1024, ref)
            for name, (ref, (size, gb)) in sorted(profiles.items())
            if size == largest
        ),
        None,
    )
    device = DeviceClass(
        "enflame",
        Division.TEMPLATES if templates else Division.WHOLE,
        templates=templates,
        whole=whole,
    )
    out: list[Gpu] = []
    for pos, d in enumerate(spec["devices"]):
        where = f"{at}.devices[{pos}]"
        if not isinstance(d, Mapping):
            raise TranslateError(f"{where}: expected an object with index and capacity")
        try:
            index = int(str(d.get("index", pos)).strip())
        except ValueError:
            index = pos
        try:
            capacity = int(str(d.get("capacity")).strip())
        except ValueError:
            capacity = 0
        if capacity <= 0:
            raise TranslateError(
                f"{where}.capacity={d.get('capacity')!r}: must be a whole "
                "number of slices, 1 or more"
            )
        minor = str(d.get("minor") or "").strip() or str(index)
        out.append(
            Gpu(
                index=index,
                model=f"{MODEL_PREFIX}{largest}",
                memory_mib=card_mib,
                uuid=f"{node}-enflame-drs-{index}",
                max_holders=capacity,
                device=dataclasses.replace(device, card_ref=minor),
            )
        )
    return tuple(sorted(out, key=lambda g: g.index))


def drs_slices(models: frozenset[str]) -> int:
    """The slices of a whole DRS card among ``models`` (the smallest, when cards differ);
    0 when the cluster has none."""
    sizes = [
        int(m[len(MODEL_PREFIX) :])
        for m in models
        if m.startswith(MODEL_PREFIX) and m[len(MODEL_PREFIX) :].isdigit()
    ]
    return min(sizes, default=0)


def memory_gb(raw: int, card_mib: Iterable[int]) -> int:
    """``enflame.com/gcu-memory: raw`` in GB: ``raw`` itself, or, when it is over twice the
    largest profile's GB (a card's memory), ``raw`` MiB rounded up to whole GB (HAMi's
    ``normalizeMemoryRequestToGB``). ``card_mib``: the DRS cards' memory in the cluster;
    the smallest decides when they differ."""
    largest_gb = min((m // 1024 for m in card_mib if m > 0), default=0)
    if raw <= 0 or largest_gb <= 0 or raw <= 2 * largest_gb:
        return raw
    return math.ceil(raw / 1024)


def direct_percent(slices: int, whole: int, where: str) -> int:
    """``enflame.com/drs-gcu: slices`` as percent of a card (HAMi's core percent of the
    profile of that many slices)."""
    if whole <= 0:
        raise InvalidJobError(
            where, slices, f"asks for DRS slices, but no node registers {CAPACITY}"
        )
    if not 1 <= slices <= whole:
        raise InvalidJobError(where, slices, f"must be 1..{whole} (the slices of a DRS card)")
    return math.ceil(slices * 100 / whole)


def profile_of(card: Gpu, milli: int, memory_mib: int) -> tuple[str, str, int]:
    """(profile name, its ID, its slices) of the slice ``(milli, memory_mib)`` on ``card``."""
    whole = int(card.model[len(MODEL_PREFIX) :]) if card.model.startswith(MODEL_PREFIX) else 1
    for t in card.device.templates:
        if t.gpu_milli == milli and t.memory_mib == memory_mib:
            shape = _profile(t.name)
            return t.name, t.ref, shape[0] if shape else 1
    if milli >= WHOLE_GPU_MILLI:
        w = card.device.whole
        if w is not None:
            return w.name, w.ref, whole
        return f"{whole}g.{card.memory_mib // 1024}gb", "", whole
    return "", "", 1


def drs_extras(
    pod: Mapping[str, Any], used: list[tuple[int, Gpu, int, int]], now_ns: int
) -> dict[str, str]:
    """Enflame's own annotations for the DRS cards given: ``used`` is (container slot,
    card, milli, MiB) per container, its first card."""
    spec = pod.get("spec") or {}
    names = [
        str(c.get("name", ""))
        for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    ]
    out = {ASSIGNED: "false", ASSIGNED_TIME: str(now_ns)}
    assigned: dict[str, dict[str, object]] = {}
    for slot, card, milli, mib in used:
        name, ref, slices = profile_of(card, milli, mib)
        info: dict[str, object] = {"allocated": False, "request": slices}
        if ref:
            info["profileID"] = ref
        if name:
            info["profileName"] = name
        assigned[names[slot] if slot < len(names) else f"container-{slot}"] = info
        out.setdefault(ASSIGNED_INDEX, str(card.index))
        out.setdefault(ASSIGNED_ID, str(card.index))
        out.setdefault(ASSIGNED_MINOR, card.device.card_ref or str(card.index))
        out.setdefault(REQUEST_SIZE, str(slices))
    if assigned:
        out[ASSIGNED_CONTAINERS] = json.dumps(assigned, sort_keys=True, separators=(",", ":"))
    return out
