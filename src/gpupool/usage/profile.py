"""Actual-use profiles: what a job really does with its cards, distinct from its request.

In ``serve`` and ``sim`` nothing runs on a card, so each job carries a :class:`UseProfile`:
declared with the job (``actualUse: {compute: 30%, memory: 60%}``) or in a scenario, or drawn
from a distribution (``compute: [10%, 40%]``: uniform between the two, by a seeded generator).
From the placements and the profiles, :func:`card_use` says what every card does, and the
virtual cluster's exporter serves that in DCGM's format.

``compute`` is a percentage of the *requested* compute: a slice of 500 milli at 30 % keeps its
card 15 % busy. It may exceed 100 for a slice, whose compute share HAMi-core enforces only when
the pod sets a core limit (``nvidia.com/gpucores``; without one a container may use the whole
card): a fine-tuning job asking 500 milli that keeps the card 95 % busy has ``compute: 190%``.
A card's demand is the sum over its holders and may exceed the card (it is then *hot*: its
holders slow each other down). ``memory`` is a percentage of the requested framebuffer.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpupool.core.errors import ConfigError, InvalidJobError
from gpupool.core.model import WHOLE_GPU_MILLI, NodeName, Placement
from gpupool.core.usage import TaskSample

MAX_COMPUTE_PCT = 1000.0
"""A slice may use at most ten times its requested compute (and never more than a card)."""


@dataclass(frozen=True, slots=True)
class UseProfile:
    compute_pct: float = 100.0
    memory_pct: float = 100.0

    def demand(self, gpu_milli: int) -> float:
        """The compute this job wants of one card it holds ``gpu_milli`` of, milli-GPU."""
        return min(float(WHOLE_GPU_MILLI), gpu_milli * self.compute_pct / 100.0)

    def memory(self, memory_mib: int) -> float:
        return memory_mib * self.memory_pct / 100.0


FULL = UseProfile()
"""Uses exactly what it requests (the assumption of request-only placement)."""


def _pct(where: str, field: str, value: object, hi: float) -> float:
    raw = value
    if isinstance(value, str):
        text = value.strip()
        text = text[:-1] if text.endswith("%") else text
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(
                f"{where}.{field}: {raw!r} is not a percentage (e.g. 30% or 30)"
            ) from None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= hi
    ):
        raise ConfigError(f"{where}.{field}: {raw!r} must be a percentage from 0 to {hi:g}")
    return float(value)


def parse_profile(
    doc: object, where: str = "actualUse", rng: random.Random | None = None
) -> UseProfile:
    """``{compute: 30%, memory: 60%}``; a field given as ``[lo, hi]`` is drawn uniformly
    between them with ``rng`` (required then). Missing fields are 100 %."""
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: {doc!r} must be a mapping with compute and/or memory")
    unknown = set(doc) - {"compute", "memory"}
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}; "
            "known: compute, memory"
        )
    out = {}
    for field, hi in (("compute", MAX_COMPUTE_PCT), ("memory", 100.0)):
        value = doc.get(field, 100.0)
        if isinstance(value, list | tuple):
            if len(value) != 2:
                raise ConfigError(
                    f"{where}.{field}: {value!r} must be one percentage or a range [low, high]"
                )
            lo, up = (_pct(where, field, v, hi) for v in value)
            if lo > up:
                raise ConfigError(f"{where}.{field}: range {value!r} has low above high")
            if rng is None:
                raise ConfigError(f"{where}.{field}: a range needs a seeded generator")
            out[field] = rng.uniform(lo, up)
        else:
            out[field] = _pct(where, field, value, hi)
    return UseProfile(out["compute"], out["memory"])


@dataclass(frozen=True, slots=True)
class ActualCardUse:
    """What one card does: its holders' summed demand and memory, and what runs outside."""

    node: NodeName
    gpu: int
    demand_milli: float
    """Summed compute demand; above 1000 the card is hot."""
    memory_mib: float

    @property
    def util_pct(self) -> float:
        """What DCGM reports: the busy share of time, at most 100."""
        return min(100.0, self.demand_milli / 10.0)


def card_use(
    placements: Iterable[Placement],
    profiles: Mapping[str, UseProfile],
    outside: Mapping[tuple[NodeName, int], tuple[float, float]] | None = None,
) -> dict[tuple[NodeName, int], ActualCardUse]:
    """Every card some placement or outside work uses: ``profiles`` by job id (FULL when
    absent), ``outside``: (demand milli, memory MiB) of work no request accounts for."""
    demand: dict[tuple[NodeName, int], list[float]] = {}
    for (node, gpu), (d, m) in (outside or {}).items():
        demand[(node, gpu)] = [d, m]
    for p in placements:
        prof = profiles.get(p.job, FULL)
        for s in p.shares:
            if s.mig_profile is not None:
                continue
            cell = demand.setdefault((p.node, s.index), [0.0, 0.0])
            cell[0] += prof.demand(s.gpu_milli)
            cell[1] += prof.memory(s.memory_mib)
    return {k: ActualCardUse(k[0], k[1], v[0], v[1]) for k, v in demand.items()}


@dataclass(frozen=True, slots=True)
class ShareUse:
    """What one placement does with one card it holds: its part of the card's busy time and
    of the card's used memory, as the card's own readings split among its holders."""

    placement: Placement
    position: int
    """The share's place in the placement's shares (the container's device index)."""
    util_pct: int
    memory_mib: int


def share_use(
    placements: Iterable[Placement],
    profiles: Mapping[str, UseProfile],
    card_mib: Mapping[tuple[NodeName, int], int],
) -> dict[tuple[NodeName, int], list[ShareUse]]:
    """Each holder's part of every card in ``card_mib`` (its memory, MiB) that a placement
    uses, consistent with :func:`card_use` of the same placements: the holders' busy shares
    add up to the card's utilisation as DCGM writes it (``round(util_pct)``), and their memory
    to the card's used memory (``min(capacity, round(memory_mib))``). A hot card's time is
    split in proportion to demand (the holders slow each other down); so is memory past the
    card. MIG instances are left out, as in :func:`card_use`."""
    held: dict[tuple[NodeName, int], list[tuple[Placement, int, float, float]]] = {}
    for p in placements:
        prof = profiles.get(p.job, FULL)
        for i, s in enumerate(p.shares):
            key = (p.node, s.index)
            if s.mig_profile is None and key in card_mib:
                held.setdefault(key, []).append(
                    (p, i, prof.demand(s.gpu_milli), prof.memory(s.memory_mib))
                )
    out: dict[tuple[NodeName, int], list[ShareUse]] = {}
    for key, rows in held.items():
        demand = [r[2] for r in rows]
        memory = [r[3] for r in rows]
        util = _apportion(round(min(100.0, sum(demand) / 10.0)), demand)
        used = _apportion(min(card_mib[key], round(sum(memory))), memory)
        out[key] = [ShareUse(r[0], r[1], u, m) for r, u, m in zip(rows, util, used, strict=True)]
    return out


def task_samples(
    placements: Iterable[Placement],
    profiles: Mapping[str, UseProfile],
    card_mib: Mapping[tuple[NodeName, int], int],
    time_s: float,
) -> list[TaskSample]:
    """Each running pod's own use of each card it holds at ``time_s``, as HAMi's monitor
    reports it per container (:func:`share_use`: the holders' busy shares add up to the
    card's reading): what ``sim`` and ``bench measured-use`` hand the load model beside the
    card samples, so the per-pod learning of ``gpupool k8s`` and ``serve`` runs there too."""
    return [
        TaskSample(key[0], key[1], h.placement.task, time_s, float(h.util_pct), float(h.memory_mib))
        for key, holders in share_use(placements, profiles, card_mib).items()
        for h in holders
    ]


def _apportion(total: int, weights: list[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` into integers that add up to it (largest
    remainders first, ties to the first)."""
    whole = sum(weights)
    if total <= 0 or whole <= 0:
        return [0] * len(weights)
    quotas = [total * w / whole for w in weights]
    parts = [int(q) for q in quotas]
    order = sorted(range(len(weights)), key=lambda i: (parts[i] - quotas[i], i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


ANNOTATION = "gpupool.io/actual-use"
"""A job's actual-use profile in ``serve``: ``compute=30%,memory=60%``; a field may be a
range, ``compute=10%-40%``, drawn once per job (seeded by the job's key)."""


def parse_annotation(text: str, key: str) -> UseProfile:
    """The profile an ``ANNOTATION`` value declares; ConfigError naming the annotation, the
    value and the rule."""
    where = f"{key}: metadata.annotations[{ANNOTATION}]"
    doc: dict[str, object] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, eq, value = part.partition("=")
        if not eq:
            raise ConfigError(
                f"{where}: {text!r}: {part!r} is not field=percentage "
                "(e.g. compute=30%,memory=60% or compute=10%-40%)"
            )
        lo, dash, hi = value.strip().partition("-")
        doc[name.strip()] = [lo, hi] if dash else value.strip()
    return parse_profile(doc, where, random.Random(key))


def check_annotation(body: object) -> None:
    """Refuse a Job document whose ``ANNOTATION`` does not parse, before it is accepted:
    InvalidJobError naming the annotation, the value and the rule (the API's 422)."""
    meta = body.get("metadata") if isinstance(body, Mapping) else None
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    text = notes.get(ANNOTATION) if isinstance(notes, Mapping) else None
    if text is None:
        return
    field = f"metadata.annotations[{ANNOTATION}]"
    if not isinstance(text, str):
        raise InvalidJobError(field, text, "must be a string such as compute=30%,memory=60%")
    try:
        parse_annotation(text, "")
    except ConfigError as exc:
        # the message is "<field>[.compute|.memory]: <rule>"; the rule keeps the subfield
        rule = (
            str(exc)
            .removeprefix(f": {field}")
            .removeprefix(".")
            .removeprefix(": ")
            .removeprefix(f"{text!r}: ")
        )
        raise InvalidJobError(field, text, rule) from None
