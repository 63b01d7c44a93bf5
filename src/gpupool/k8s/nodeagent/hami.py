"""HAMi's node-side protocol, pure: the node lock, which pod ``Allocate`` serves, and the
per-container device list it decodes and erases.

Written from HAMi's documented behaviour (``pkg/util/nodelock``, ``util.GetPendingPod``, the
NVIDIA device plugin's ``Allocate``, ``PodAllocationTrySuccess`` / ``PodAllocationFailed``):

- **Node lock** ``hami.io/mutex.lock`` on the Node: ``<RFC 3339 time>,<namespace>,<pod>``
  (an older form is the time alone). HAMi's scheduler sets it before it binds a pod; the
  device plugin releases it when that pod's allocation ends, and only if the lock names
  that pod (the suffix ``,<namespace>,<pod>``).
- **Which pod** ``Allocate`` serves (the kubelet does not say: the device-plugin API carries
  device IDs only): the pod the lock names when there is a lock naming one; otherwise the
  *first* pod the API server lists on the node (``spec.nodeName``) that is ``Pending``, has
  ``hami.io/bind-time``, ``hami.io/bind-phase`` ``allocating`` or ``success``, and
  ``hami.io/vgpu-node`` equal to the node. Without the lock, two pods bound close together
  can therefore be served each other's devices: the timing window the lock closes.
- **Devices**: ``hami.io/vgpu-devices-to-allocate`` holds one slot per container, init
  containers first, separated by ``;``; a slot lists ``UUID,NVIDIA,usedmem,usedcores`` entries
  each followed by ``:``. ``Allocate`` takes the first non-empty slot, checks its device count
  against the kubelet's request, blanks that slot (a patch of the annotation), and when no
  NVIDIA entry is left marks ``hami.io/bind-phase: success`` and releases the lock; any
  failure marks ``failed`` and releases it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "ASSIGNED_NODE",
    "BIND_PHASE",
    "BIND_TIME",
    "DEVICES_TO_ALLOCATE",
    "DEVICE_TYPE",
    "HANDSHAKE",
    "NODE_LOCK",
    "REGISTER",
    "Device",
    "LockValue",
    "ProtocolError",
    "allocation_done",
    "decode_slots",
    "encode_slots",
    "erase_next",
    "format_lock",
    "lock_names",
    "next_request",
    "parse_lock",
    "pending_candidate",
]

NODE_LOCK = "hami.io/mutex.lock"
LOCK_SEP = ","
ASSIGNED_NODE = "hami.io/vgpu-node"
BIND_TIME = "hami.io/bind-time"
BIND_PHASE = "hami.io/bind-phase"
DEVICES_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
HANDSHAKE = "hami.io/node-handshake"
REGISTER = "hami.io/node-nvidia-register"
DEVICE_TYPE = "NVIDIA"
ALLOCATING, SUCCESS, FAILED = "allocating", "success", "failed"


class ProtocolError(ValueError):
    """A HAMi annotation that cannot be read; the message names it and the value."""


@dataclass(frozen=True, slots=True)
class LockValue:
    """A parsed ``hami.io/mutex.lock``: when it was taken, and by which pod (may be empty)."""

    taken: datetime
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Device:
    """One card of one container as HAMi's annotation gives it."""

    uuid: str
    type: str
    used_mib: int
    used_cores: int

    def encode(self) -> str:
        return f"{self.uuid},{self.type},{self.used_mib},{self.used_cores}"


def format_lock(now: datetime, namespace: str, name: str) -> str:
    """The lock value HAMi's scheduler writes for pod ``namespace/name``."""
    stamp = now.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return f"{stamp}{LOCK_SEP}{namespace}{LOCK_SEP}{name}"


def parse_lock(value: str) -> LockValue:
    """HAMi's ``ParseNodeLock``: a time alone, or time, namespace and pod name."""
    parts = value.split(LOCK_SEP) if LOCK_SEP in value else [value]
    if len(parts) not in (1, 3):
        raise ProtocolError(
            f"{NODE_LOCK}={value!r} is malformed: expected 3 parts, got {len(parts)}"
        )
    try:
        taken = datetime.fromisoformat(parts[0].replace("Z", "+00:00"))
    except ValueError as exc:
        raise ProtocolError(f"{NODE_LOCK}={value!r}: {parts[0]!r} is not an RFC 3339 time") from exc
    if len(parts) == 1:
        return LockValue(taken, "", "")
    return LockValue(taken, parts[1], parts[2])


def lock_names(value: str, namespace: str, name: str) -> bool:
    """Whether the lock is held for ``namespace/name`` (HAMi's owner check: the suffix)."""
    return value.endswith(f"{LOCK_SEP}{namespace}{LOCK_SEP}{name}")


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def pending_candidate(pod: Mapping[str, Any], node: str) -> bool:
    """Whether ``GetPendingPod``'s scan (no lock) would take this pod on ``node``."""
    if (pod.get("status") or {}).get("phase", "Pending") != "Pending":
        return False
    ann = _annotations(pod)
    if BIND_TIME not in ann:
        return False
    if ann.get(BIND_PHASE) not in (ALLOCATING, SUCCESS):
        return False
    return ann.get(ASSIGNED_NODE) == node


def first_pending(pods: Iterable[Mapping[str, Any]], node: str) -> Mapping[str, Any] | None:
    """The first pod of the list (in the API server's order) the scan would take."""
    for pod in pods:
        if pending_candidate(pod, node):
            return pod
    return None


def decode_slots(text: str) -> list[list[Device]]:
    """``hami.io/vgpu-devices-to-allocate`` -> one device list per container slot."""
    if not text:
        return []
    slots = text.split(";")
    if slots and slots[-1] == "":
        slots = slots[:-1]
    out: list[list[Device]] = []
    for i, slot in enumerate(slots):
        devices: list[Device] = []
        for entry in slot.split(":"):
            if "," not in entry:
                continue
            fields = entry.split(",")
            if len(fields) < 4:
                raise ProtocolError(
                    f"{DEVICES_TO_ALLOCATE} slot {i}: {entry!r} is not UUID,type,usedmem,usedcores"
                )
            try:
                devices.append(Device(fields[0], fields[1], int(fields[2]), int(fields[3])))
            except ValueError as exc:
                raise ProtocolError(
                    f"{DEVICES_TO_ALLOCATE} slot {i}: {entry!r} has a "
                    "non-integer usedmem or usedcores"
                ) from exc
        out.append(devices)
    return out


def encode_slots(slots: Sequence[Sequence[Device]]) -> str:
    return "".join("".join(d.encode() + ":" for d in slot) + ";" for slot in slots)


def next_request(text: str, device_type: str = DEVICE_TYPE) -> tuple[int, list[Device]] | None:
    """``GetNextDeviceRequest``: the first slot holding devices of ``device_type``; None when
    none is left (HAMi's "device request not found")."""
    for i, slot in enumerate(decode_slots(text)):
        mine = [d for d in slot if d.type == device_type]
        if mine:
            return i, mine
    return None


def erase_next(text: str, device_type: str = DEVICE_TYPE) -> str:
    """``EraseNextDeviceTypeFromAnnotation``: the annotation with the first slot holding
    devices of ``device_type`` emptied."""
    slots = decode_slots(text)
    for i, slot in enumerate(slots):
        if any(d.type == device_type for d in slot):
            slots[i] = []
            break
    return encode_slots(slots)


def allocation_done(text: str, device_type: str = DEVICE_TYPE) -> bool:
    """``PodAllocationTrySuccess``'s test: no entry of the device type is left to allocate."""
    return device_type not in text
