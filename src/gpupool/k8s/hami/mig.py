"""HAMi's Dynamic MIG (v2.10): a card in MIG mode offers profiles, each at *possible*
placements that overlap; the scheduler reserves one exact placement per MIG device and writes
it to the pod, and the device plugin creates exactly that instance.

- The card (``hami.io/node-nvidia-register``, ``mode: mig``): ``migProfiles[]`` = ``{name,
  memoryMB, core, sliceCount, placements: [{start, size}]}``. A placement holds the slices
  ``[start, start + size)``; two instances may not overlap.
- The choice (HAMi's ``selectMigCandidate``): profiles by memory, then slice count; the first
  whose memory holds the container's ``gpumem``, at the first free placement in HAMi's order
  (``orderedMigPlacements``: ``1g.`` and ``3g.`` profiles from the highest start, the others
  from the lowest). gpupool settles the profile when it reads the pod (the smallest that
  holds the memory on any MIG-mode card of the cluster) and waits for it; HAMi would take a
  larger profile when the smallest has no free placement.
- The record (``hami.io/vgpu-mig-allocations``): a JSON list, one entry per MIG device,
  ``{containerIndex, deviceIndex, gpuUUID, profile, placement: {start, size}}``; the device
  plugin adds ``migUUID``, ``gpuInstanceID`` and ``computeInstanceID`` once the instance
  exists (all three or none). The device annotation carries the card's UUID with the
  profile's memory and core (HAMi's ``AddResourceUsage``).
- A pod asks for MIG with the annotation ``nvidia.com/vgpu-mode: mig`` (HAMi's); only such
  pods go to MIG-mode cards here.

The core counts instances per profile; :func:`instances` gives each profile's count as the
instances of it the core holds plus how many more fit beside every instance on the card
(whoever placed it), so the core never sees room that overlapping placements have taken.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpupool.core.errors import InvalidJobError
from gpupool.core.model import WHOLE_GPU_MILLI, Gpu, MigInstance
from gpupool.k8s.hami.errors import TranslateError
from gpupool.k8s.hami.requests import PodRequest

if TYPE_CHECKING:
    from gpupool.k8s.hami.register import HamiMigProfile

__all__ = [
    "MIG_ALLOCATIONS",
    "VGPU_MODE",
    "MigAllocation",
    "choose_placement",
    "decode_mig_allocations",
    "encode_mig_allocations",
    "instances",
    "mig_request",
    "overlaps",
]

MIG_ALLOCATIONS = "hami.io/vgpu-mig-allocations"
VGPU_MODE = "nvidia.com/vgpu-mode"

Span = tuple[int, int]  # (start, size) in memory slices


@dataclass(frozen=True, slots=True)
class MigAllocation:
    """One MIG device of one container, as HAMi records it."""

    container: int
    device: int
    uuid: str
    profile: str
    start: int
    size: int
    mig_uuid: str = ""
    gpu_instance: int | None = None
    compute_instance: int | None = None

    @property
    def span(self) -> Span:
        return (self.start, self.size)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "containerIndex": self.container, "deviceIndex": self.device,
            "gpuUUID": self.uuid, "profile": self.profile,
            "placement": {"start": self.start, "size": self.size}}
        if self.mig_uuid:
            out.update(migUUID=self.mig_uuid, gpuInstanceID=self.gpu_instance,
                       computeInstanceID=self.compute_instance)
        return out


def encode_mig_allocations(allocations: Sequence[MigAllocation]) -> str:
    return json.dumps([a.to_json() for a in allocations], separators=(",", ":"))


def _int(raw: object, where: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise TranslateError(f"{where}={raw!r} must be an integer of at least 0")
    return raw


def decode_mig_allocations(text: str, where: str = MIG_ALLOCATIONS) -> list[MigAllocation]:
    """The annotation read as HAMi's ``DecodeMigAllocations`` does: every entry complete
    (UUID, profile, a placement of size > 0), runtime identity all or nothing, no two
    entries for one container device. TranslateError naming the entry otherwise."""
    if not text:
        return []
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TranslateError(f"{where}: not valid JSON: {exc}") from exc
    if not isinstance(raw, list):
        raise TranslateError(f"{where}: expected a JSON list of allocations")
    out: list[MigAllocation] = []
    seen: set[tuple[int, int]] = set()
    for i, e in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(e, dict):
            raise TranslateError(f"{at}={e!r}: expected an object")
        place = e.get("placement")
        if not isinstance(place, dict):
            raise TranslateError(f"{at}.placement={place!r}: expected {{start, size}}")
        a = MigAllocation(
            _int(e.get("containerIndex", 0), f"{at}.containerIndex"),
            _int(e.get("deviceIndex", 0), f"{at}.deviceIndex"), str(e.get("gpuUUID") or ""),
            str(e.get("profile") or ""), _int(place.get("start", 0), f"{at}.placement.start"),
            _int(place.get("size", 0), f"{at}.placement.size"), str(e.get("migUUID") or ""),
            e.get("gpuInstanceID"), e.get("computeInstanceID"))
        if not a.uuid or not a.profile or a.size == 0:
            raise TranslateError(f"{at}: incomplete (gpuUUID, profile and a placement of "
                                 "size > 0 are required)")
        given = sum(1 for v in (e.get("migUUID"), a.gpu_instance, a.compute_instance)
                    if v not in (None, ""))
        if given not in (0, 3):
            raise TranslateError(f"{at}: partial runtime identity (migUUID, gpuInstanceID "
                                 "and computeInstanceID go together)")
        if (a.container, a.device) in seen:
            raise TranslateError(f"{at}: a second allocation for container {a.container} "
                                 f"device {a.device}")
        seen.add((a.container, a.device))
        out.append(a)
    return out


def overlaps(a: Span, b: Span) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def _ordered(profile: HamiMigProfile) -> list[Span]:
    high = profile.name.startswith(("1g.", "3g."))
    spans = [p for p in profile.placements if p[1] > 0]
    return sorted(spans, key=lambda p: -p[0] if high else p[0])


def choose_placement(profile: HamiMigProfile, occupied: Iterable[Span]) -> Span | None:
    """The placement HAMi takes for one more instance of ``profile`` beside ``occupied``."""
    taken = list(occupied)
    return next((p for p in _ordered(profile) if not any(overlaps(p, o) for o in taken)),
                None)


def _more(profile: HamiMigProfile, occupied: Sequence[Span]) -> int:
    """How many more instances of ``profile`` fit beside ``occupied``, placed in turn as
    HAMi places them."""
    taken = list(occupied)
    n = 0
    while (p := choose_placement(profile, taken)) is not None:
        taken.append(p)
        n += 1
    return n


def instances(profiles: Sequence[HamiMigProfile], occupied: Sequence[Span],
              held: dict[str, int], usable: bool = True) -> tuple[MigInstance, ...]:
    """The core's instances of a MIG-mode card: per profile, the instances the core holds
    (``held``) plus the more that fit beside everything on the card (none when the card
    takes no new work)."""
    return tuple(
        MigInstance(p.name, held.get(p.name, 0) + (_more(p, occupied) if usable else 0),
                    p.core * WHOLE_GPU_MILLI // 100, p.memory_mib)
        for p in profiles)


def mig_request(req: PodRequest, annotations: Mapping[str, str],
                cards: Iterable[Gpu]) -> PodRequest:
    """The pod's request when it asks for MIG (``nvidia.com/vgpu-mode: mig``): one instance
    of the smallest profile (by memory, then compute) that any MIG-mode card of ``cards``
    offers with the memory its container asks (MiB, or its percentage of the card); the
    request unchanged otherwise. InvalidJobError naming the field for a pod gpupool cannot
    give MIG (more than one MIG device, or memory no profile holds)."""
    mode = annotations.get(VGPU_MODE)
    if mode != "mig":
        return req
    field = f"metadata.annotations[{VGPU_MODE}]"
    gpus = [g for g in req.containers if not g.init]
    if len(gpus) != 1 or gpus[0].count != 1 or len(req.containers) != 1:
        raise InvalidJobError(field, mode, "gpupool gives a MIG pod one instance: one "
                              "container asking nvidia.com/gpu: 1")
    mig_cards = [c for c in cards if c.mig]
    if not mig_cards:
        raise InvalidJobError(field, mode, "no card of the cluster is in MIG mode")
    g = gpus[0]
    need = g.used_mib(mig_cards[0].memory_mib)
    offered = sorted({(m.memory_mib, m.gpu_milli, m.profile) for c in mig_cards
                      for m in c.mig})
    pick = next((name for mib, _, name in offered if mib >= need), None)
    if pick is None:
        raise InvalidJobError("spec.containers[].resources.limits[nvidia.com/gpumem]", need,
                              "no MIG profile holds it; the largest holds "
                              f"{offered[-1][0]} MiB ({offered[-1][2]})")
    return replace(req, gpu=replace(req.gpu, count=0, gpu_milli=0, memory_mib=0,
                                    memory_percent=0, cards=1, mig_profile=pick))
