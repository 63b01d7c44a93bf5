"""HAMi's Dynamic MIG (v2.10): a card in MIG mode offers profiles, each at *possible*
placements that overlap; the scheduler reserves one exact placement per MIG device and writes
it to the pod, and the device plugin creates exactly that instance.

- The card (``hami.io/node-nvidia-register``, ``mode: mig``): ``migProfiles[]`` = ``{name,
  memoryMB, core, sliceCount, placements: [{start, size}]}``. A placement holds the slices
  ``[start, start + size)``; two instances may not overlap.
- The choice (HAMi's ``selectMigCandidate``, per card): profiles by memory, then slice
  count; the first whose memory holds the container's ``gpumem`` *and* has a free
  placement, at the first free placement in HAMi's order (``orderedMigPlacements``: ``1g.``
  and ``3g.`` profiles from the highest start, the others from the lowest). gpupool gives
  the pod the smallest of the cards' choices (:func:`mig_request`) and chooses again when
  instances come or go.
- The record (``hami.io/vgpu-mig-allocations``): a JSON list, one entry per MIG device,
  ``{containerIndex, deviceIndex, gpuUUID, profile, placement: {start, size}}``; the device
  plugin adds ``migUUID``, ``gpuInstanceID`` and ``computeInstanceID`` once the instance
  exists (all three or none). The device annotation carries the card's UUID with the
  profile's memory and core (HAMi's ``AddResourceUsage``).
- ``nvidia.com/vgpu-mode`` (HAMi's ``checkType``): ``mig`` only MIG-mode cards,
  ``hami-core`` only the others, absent any card; gpupool sends a pod without it to MIG
  only when no card outside MIG mode of a model it allows exists.

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
    "MigCard",
    "allows",
    "choose_placement",
    "decode_mig_allocations",
    "encode_mig_allocations",
    "instances",
    "mig_request",
    "overlaps",
    "select_profile",
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
            "containerIndex": self.container,
            "deviceIndex": self.device,
            "gpuUUID": self.uuid,
            "profile": self.profile,
            "placement": {"start": self.start, "size": self.size},
        }
        if self.mig_uuid:
            out.update(
                migUUID=self.mig_uuid,
                gpuInstanceID=self.gpu_instance,
                computeInstanceID=self.compute_instance,
            )
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
            _int(e.get("deviceIndex", 0), f"{at}.deviceIndex"),
            str(e.get("gpuUUID") or ""),
            str(e.get("profile") or ""),
            _int(place.get("start", 0), f"{at}.placement.start"),
            _int(place.get("size", 0), f"{at}.placement.size"),
            str(e.get("migUUID") or ""),
            e.get("gpuInstanceID"),
            e.get("computeInstanceID"),
        )
        if not a.uuid or not a.profile or a.size == 0:
            raise TranslateError(
                f"{at}: incomplete (gpuUUID, profile and a placement of size > 0 are required)"
            )
        given = sum(
            1 for v in (e.get("migUUID"), a.gpu_instance, a.compute_instance) if v not in (None, "")
        )
        if given not in (0, 3):
            raise TranslateError(
                f"{at}: partial runtime identity (migUUID, gpuInstanceID "
                "and computeInstanceID go together)"
            )
        if (a.container, a.device) in seen:
            raise TranslateError(
                f"{at}: a second allocation for container {a.container} device {a.device}"
            )
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
    return next((p for p in _ordered(profile) if not any(overlaps(p, o) for o in taken)), None)


def _more(profile: HamiMigProfile, occupied: Sequence[Span]) -> int:
    """How many more instances of ``profile`` fit beside ``occupied``, placed in turn as
    HAMi places them."""
    taken = list(occupied)
    n = 0
    while (p := choose_placement(profile, taken)) is not None:
        taken.append(p)
        n += 1
    return n


def instances(
    profiles: Sequence[HamiMigProfile],
    occupied: Sequence[Span],
    held: dict[str, int],
    usable: bool = True,
) -> tuple[MigInstance, ...]:
    """The core's instances of a MIG-mode card: per profile, the instances the core holds
    (``held``) plus the more that fit beside everything on the card (none when the card
    takes no new work)."""
    return tuple(
        MigInstance(
            p.name,
            held.get(p.name, 0) + (_more(p, occupied) if usable else 0),
            p.core * WHOLE_GPU_MILLI // 100,
            p.memory_mib,
        )
        for p in profiles
    )


@dataclass(frozen=True, slots=True)
class MigCard:
    """A MIG-mode card as the choice of a profile sees it: the card, the profiles it
    registers, and the placements the instances on it take (whoever placed them)."""

    gpu: Gpu
    profiles: tuple[HamiMigProfile, ...]
    occupied: tuple[Span, ...] = ()


def _order(p: HamiMigProfile) -> tuple[int, int, str]:
    return (p.memory_mib, p.slice_count, p.name)


def select_profile(
    profiles: Sequence[HamiMigProfile], occupied: Sequence[Span], need_mib: int
) -> HamiMigProfile | None:
    """HAMi's ``selectMigCandidate`` on one card: profiles by memory, then slice count;
    the first that holds ``need_mib`` and has a free placement beside ``occupied`` (a
    larger profile when the smaller ones have no room); None when none has."""
    return next(
        (
            p
            for p in sorted(profiles, key=_order)
            if p.memory_mib >= need_mib and choose_placement(p, occupied) is not None
        ),
        None,
    )


def allows(mode: str | None, card_mode: str) -> bool:
    """Whether a pod whose ``nvidia.com/vgpu-mode`` is ``mode`` may take a card in
    ``card_mode``: any card when the annotation is absent, else the cards whose mode the
    value contains (HAMi's ``checkType``: ``strings.Contains(mode, card.Mode)``)."""
    return mode is None or card_mode in mode


def _mig_shape_refusal(req: PodRequest) -> str | None:
    if len(req.containers) != 1 or req.containers[0].init:
        return (
            "gpupool gives MIG instances to one container of a pod: one container "
            "asking for GPUs, no init container asking for them"
        )
    return None


def mig_request(
    req: PodRequest,
    annotations: Mapping[str, str],
    cards: Iterable[MigCard],
    core_models: frozenset[str] = frozenset(),
) -> PodRequest:
    """The pod's request on MIG-mode cards, or unchanged.

    Which cards a pod may take follows ``nvidia.com/vgpu-mode`` (:func:`allows`): ``mig``
    only MIG-mode cards, ``hami-core`` only the others, absent either. A pod that may take
    both keeps its request while the cluster has a card not in MIG mode of a model it
    allows (``core_models``); else, with one container asking for GPUs, it goes to MIG.

    The profile is chosen per card, when the core places the pod, as HAMi's
    ``selectMigCandidate`` chooses it on the node being scored (:func:`select_profile`):
    the pod is given every profile that holds the container's memory (in MiB, or its
    percentage of each card) on the cards it may use, smallest first by memory then slice
    count (``mig_profile`` and ``mig_fallbacks``), and each card gives the first of them it
    has a free instance of (the core's counts are the placements free beside every
    instance on the card). So the node is chosen by gpupool's policy among every node with
    room for *some* profile that holds the pod, and a card whose smaller profiles are taken
    gives a larger one. The list depends only on the cards' profiles, not on what is free,
    so it is made again only when MIG-mode nodes change. A name that is too small on some
    card offering it (the memory a percentage of cards of different sizes) is left out.

    A container asking ``nvidia.com/gpu: n`` gets n instances (HAMi's ``Fit`` takes a
    MIG-mode card again for the next device until it has no room, then the next card); a
    card gives them of the profile it chooses for the first (HAMi chooses each device's
    profile in turn, so its later devices may take a larger profile when the first's has
    no room left; gpupool then places them on further cards).

    InvalidJobError naming the field for a pod gpupool cannot give MIG (several containers
    asking for GPUs, no MIG-mode card, or memory no profile holds)."""
    mode = annotations.get(VGPU_MODE)
    if not allows(mode, "mig") or req.gpu.kind.value == "none":
        return req
    field = f"metadata.annotations[{VGPU_MODE}]"
    refusal = _mig_shape_refusal(req)
    allowed_core = core_models & req.gpu.models if req.gpu.models else core_models
    if allows(mode, "hami-core") and (allowed_core or refusal is not None):
        return req  # the cards not in MIG mode take it as written
    if refusal is not None:
        raise InvalidJobError(field, mode, refusal)
    g = next(c for c in req.containers if not c.init)
    usable = [
        c
        for c in cards
        if (not req.gpu.models or c.gpu.model in req.gpu.models)
        and (not req.gpu.uuids or c.gpu.uuid in req.gpu.uuids)
        and c.gpu.uuid not in req.gpu.excluded_uuids
    ]
    if not usable:
        raise InvalidJobError(
            field, mode or "(absent)", "no card of the cluster the pod may use is in MIG mode"
        )
    needs = [g.used_mib(c.gpu.memory_mib) for c in usable]
    holds: dict[str, HamiMigProfile] = {}
    short: set[str] = set()  # a name too small on some card that offers it
    for c, need in zip(usable, needs, strict=True):
        for p in c.profiles:
            if p.memory_mib >= need:
                holds.setdefault(p.name, p)
            else:
                short.add(p.name)
    choices = sorted((p for name, p in holds.items() if name not in short), key=_order)
    if not choices:
        largest = max((p for c in usable for p in c.profiles), key=_order)
        raise InvalidJobError(
            "spec.containers[].resources.limits[nvidia.com/gpumem]",
            max(needs),
            f"no MIG profile holds it; the largest holds {largest.memory_mib} MiB ({largest.name})",
        )
    names = {p.name for p in choices}
    models = frozenset(c.gpu.model for c in usable if any(p.name in names for p in c.profiles))
    return replace(
        req,
        gpu=replace(
            req.gpu,
            count=0,
            gpu_milli=0,
            memory_mib=0,
            memory_percent=0,
            cards=1,
            mig_profile=choices[0].name,
            mig_fallbacks=tuple(p.name for p in choices[1:]),
            models=models,
            mig_instances=g.count,
        ),
    )
