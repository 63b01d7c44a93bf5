"""A node as HAMi's NVIDIA device plugin describes it: its register annotation, and whether its
cards may take new work (handshake, allocatable, per-card cordon, device health).

Register (``hami.io/node-nvidia-register``), in either of its two forms:

- JSON (HAMi >= 2.8): a list of ``{"id", "index", "count", "devmem", "devcore", "type",
  "numa", "mode", "health", "migProfiles"}``; the fields are ``omitempty``, so an absent field
  is zero, empty or false (an absent ``health`` is an unhealthy card, an absent ``count`` a
  card that takes nothing). ``migProfiles[]`` = ``{"name", "memoryMB", "core", "sliceCount",
  "placements": [{"start", "size"}]}``: the *possible* placements of each profile on the card,
  which overlap (a 1g and a 2g profile may both start at slice 0);
- colon-separated (before): ``id,count,devmem,devcore,type,numa,health[,index,mode]:`` once per
  card (9 fields since HAMi 2.4).

``count`` is the card's split count (``deviceSplitCount``, 10 by default): HAMi never gives
a card to more container devices than that at once (``Count <= Used`` rejects it).

When a node's cards take nothing new (HAMi's ``CheckHealth`` and ``Fit``):

- allocatable ``nvidia.com/gpu`` is 0 while the register annotation is there (the device
  plugin stopped advertising; the kubelet keeps the resource at 0; HAMi removes the node's
  devices). A node without that resource at all is not judged by it: its cards are counted
  under another resource name than the one gpupool was given;
- ``hami.io/node-handshake`` is ``Requesting_<time>`` older than 60 s (the scheduler asked and
  nobody answered) with allocatable 0, or ``Deleted_<time>`` (HAMi before 2.5 marked a node
  whose plugin had gone away this way). ``Reported_<time>`` and a fresh ``Requesting_`` are
  healthy. The time is ``YYYY-MM-DD HH:MM:SS`` (Go's ``time.DateTime``), read as UTC;
- per card: ``health`` false, ``count`` 0, or the card's UUID listed in the node annotation
  ``hami.io/device-cordon`` (comma-separated UUIDs: no new allocations, pods already there
  keep running).

MIG-mode cards (``mode: mig``) offer their ``migProfiles`` as MIG instances (see
``k8s/hami/mig.py``: each profile's count is what fits beside the instances already on the
card); a MIG-mode card that registers no profile takes nothing (:func:`card_refusals`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpupool.core.model import Gpu
from gpupool.k8s.hami.errors import TranslateError
from gpupool.k8s.hami.mig import instances

__all__ = [
    "DEVICE_CORDON",
    "HAMI_REGISTER",
    "HANDSHAKE",
    "HANDSHAKE_TIMEOUT_S",
    "MIG_MODE",
    "HamiDevice",
    "HamiMigProfile",
    "RegisterError",
    "card_refusals",
    "cordoned_uuids",
    "hami_gpus",
    "node_refusal",
    "parse_hami_register",
]

HAMI_REGISTER = "hami.io/node-nvidia-register"
HANDSHAKE = "hami.io/node-handshake"
DEVICE_CORDON = "hami.io/device-cordon"
HANDSHAKE_TIMEOUT_S = 60.0
MIG_MODE = "mig"
HAMI_CORE_MODE = "hami-core"


class RegisterError(TranslateError):
    """A register annotation that cannot be read: the message names the field and value."""


@dataclass(frozen=True, slots=True)
class HamiMigProfile:
    """One MIG profile a card in MIG mode offers, and where on the card it may go."""

    name: str
    memory_mib: int
    core: int
    slice_count: int
    placements: tuple[tuple[int, int], ...]  # (start, size) in memory slices; they overlap


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
    mode: str = HAMI_CORE_MODE
    mig_profiles: tuple[HamiMigProfile, ...] = ()


def _int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise RegisterError(f"{where}={value!r} is not an integer")
    try:
        return int(value)
    except ValueError:
        raise RegisterError(f"{where}={value!r} is not an integer") from None


def _count(value: object, where: str) -> int:
    n = _int(value, where)
    if n < 0:
        raise RegisterError(f"{where}={value!r} must be 0 or more")
    return n


def _bool(value: object, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "t", "f"):
        return value.lower() in ("true", "1", "t")
    raise RegisterError(f"{where}={value!r} is not a boolean")


def parse_hami_register(text: str) -> list[HamiDevice]:
    """HAMi's ``hami.io/node-nvidia-register`` in either form (JSON list or colon-separated)."""
    text = text.strip()
    if text.startswith("["):
        return _register_json(text)
    return _register_colon(text)


def _mig_profiles(raw: object, at: str) -> tuple[HamiMigProfile, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise RegisterError(f"{at}.migProfiles={raw!r}: expected a list")
    out = []
    for j, p in enumerate(raw):
        pat = f"{at}.migProfiles[{j}]"
        if not isinstance(p, dict):
            raise RegisterError(f"{pat}={p!r}: expected an object")
        places = []
        for k, pl in enumerate(p.get("placements") or ()):
            if not isinstance(pl, dict):
                raise RegisterError(f"{pat}.placements[{k}]={pl!r}: expected {{start, size}}")
            places.append(
                (
                    _count(pl.get("start", 0), f"{pat}.placements[{k}].start"),
                    _count(pl.get("size", 0), f"{pat}.placements[{k}].size"),
                )
            )
        out.append(
            HamiMigProfile(
                name=str(p.get("name", "")),
                memory_mib=_count(p.get("memoryMB", 0), f"{pat}.memoryMB"),
                core=_count(p.get("core", 0), f"{pat}.core"),
                slice_count=_count(p.get("sliceCount", 0), f"{pat}.sliceCount"),
                placements=tuple(places),
            )
        )
    return tuple(out)


def _register_json(text: str) -> list[HamiDevice]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RegisterError(f"{HAMI_REGISTER}: not valid JSON: {exc}") from exc
    if not isinstance(items, list):
        raise RegisterError(f"{HAMI_REGISTER}: expected a JSON list of devices")
    out: list[HamiDevice] = []
    for i, d in enumerate(items):
        at = f"{HAMI_REGISTER}[{i}]"
        if not isinstance(d, dict):
            raise RegisterError(f"{at}: expected an object, found {d!r}")
        out.append(
            HamiDevice(
                id=str(d.get("id", "")),
                index=_count(d.get("index", 0), f"{at}.index"),
                count=_count(d.get("count", 0), f"{at}.count"),
                devmem=_count(d.get("devmem", 0), f"{at}.devmem"),
                devcore=_count(d.get("devcore", 0), f"{at}.devcore"),
                type=str(d.get("type", "")),
                numa=_int(d.get("numa", 0), f"{at}.numa"),
                health=_bool(d.get("health", False), f"{at}.health"),
                mode=str(d.get("mode") or HAMI_CORE_MODE),
                mig_profiles=_mig_profiles(d.get("migProfiles"), at),
            )
        )
    return out


def _register_colon(text: str) -> list[HamiDevice]:
    if ":" not in text:
        raise RegisterError(
            f"{HAMI_REGISTER}={text!r}: expected a JSON list or "
            "'id,count,devmem,devcore,type,numa,health:' per card"
        )
    out: list[HamiDevice] = []
    for i, part in enumerate(p for p in text.split(":") if p):
        items = part.split(",")
        at = f"{HAMI_REGISTER} card {i}"
        if len(items) not in (7, 9):
            raise RegisterError(
                f"{at}={part!r}: expected 7 or 9 comma-separated fields, found {len(items)}"
            )
        out.append(
            HamiDevice(
                id=items[0],
                count=_count(items[1], f"{at}.count"),
                devmem=_count(items[2], f"{at}.devmem"),
                devcore=_count(items[3], f"{at}.devcore"),
                type=items[4],
                numa=_int(items[5], f"{at}.numa"),
                health=_bool(items[6], f"{at}.health"),
                index=_count(items[7], f"{at}.index") if len(items) == 9 else 0,
                mode=items[8] if len(items) == 9 else HAMI_CORE_MODE,
            )
        )
    return out


def cordoned_uuids(annotations: Mapping[str, str]) -> frozenset[str]:
    """The UUIDs ``hami.io/device-cordon`` lists (blanks and stray commas ignored)."""
    raw = annotations.get(DEVICE_CORDON) or ""
    return frozenset(u.strip() for u in raw.split(",") if u.strip())


def _handshake_time(value: str) -> float | None:
    _, sep, stamp = value.partition("_")
    if not sep:
        return None
    try:
        return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def node_refusal(
    annotations: Mapping[str, str],
    allocatable: Mapping[str, Any],
    count_resource: str = "nvidia.com/gpu",
    now_s: float | None = None,
) -> str | None:
    """Why none of a HAMi node's cards may take new work, or None when they may.
    ``now_s`` (Unix seconds) enables the handshake timeout; without it only the states that
    need no clock are read."""
    handshake = annotations.get(HANDSHAKE) or ""
    if handshake.startswith("Deleted"):
        return f"{HANDSHAKE}={handshake!r}: HAMi removed this node's devices"
    if count_resource not in allocatable:
        # The kubelet keeps a device plugin's resource (at 0) when the plugin goes away; a
        # node without the key at all counts its cards under another resource name than the
        # one gpupool was given, and is not judged by it.
        return None
    raw = allocatable[count_resource]
    try:
        advertised = int(str(raw))
    except ValueError:
        advertised = 0
    if advertised <= 0:
        if handshake.startswith("Requesting") and now_s is not None:
            asked = _handshake_time(handshake)
            if asked is not None and now_s > asked + HANDSHAKE_TIMEOUT_S:
                return (
                    f"{HANDSHAKE}={handshake!r} unanswered for over "
                    f"{HANDSHAKE_TIMEOUT_S:.0f} s and allocatable {count_resource} is 0: "
                    "the device plugin is gone"
                )
        return f"allocatable {count_resource} is {raw!r}: the device plugin advertises no GPU"
    return None


def card_refusals(
    devices: Sequence[HamiDevice], cordoned: frozenset[str] = frozenset(), node: str | None = None
) -> dict[str, str]:
    """UUID -> why that card takes no new work; cards not listed may. ``node``: the
    node-wide refusal (:func:`node_refusal`), which applies to every card."""
    out: dict[str, str] = {}
    for d in devices:
        if node is not None:
            out[d.id] = node
        elif d.mode == MIG_MODE and not d.mig_profiles:
            out[d.id] = (
                "in MIG mode with no migProfiles registered (HAMi 2.10's device "
                "plugin lists each profile's placements)"
            )
        elif not d.health:
            out[d.id] = "reported unhealthy by the device plugin"
        elif d.count <= 0:
            out[d.id] = "split count 0: the card takes no container"
        elif d.id in cordoned:
            out[d.id] = f"cordoned by {DEVICE_CORDON}"
    return out


def hami_gpus(devices: Sequence[HamiDevice], refused: Mapping[str, str]) -> tuple[Gpu, ...]:
    """Core cards for HAMi's devices, ordered by HAMi's index (then by their place in the
    list) and numbered 0..n-1; the split count becomes ``max_holders``, and refused cards
    are not usable."""
    order = sorted(range(len(devices)), key=lambda i: (devices[i].index, i))
    out = []
    for pos, i in enumerate(order):
        d = devices[i]
        mig = (
            instances(d.mig_profiles, (), {}, usable=d.id not in refused)
            if d.mode == MIG_MODE
            else ()
        )
        out.append(
            Gpu(
                index=pos,
                model=d.type,
                memory_mib=d.devmem,
                uuid=d.id,
                healthy=d.id not in refused,
                max_holders=d.count,
                mig=mig,
            )
        )
    return tuple(out)
