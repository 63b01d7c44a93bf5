"""One device model for every accelerator vendor: how a card may be divided, and what it is
worth against the others.

A card (``Gpu``) carries a ``DeviceClass``: its vendor, its division rule, the steps its
compute and memory are handed out in, and a relative capacity for normalised accounting. The
default class is NVIDIA's as HAMi-core shares it (any compute in milli-GPU, any memory in MiB,
capacity 1.0), so a cluster that says nothing about devices behaves exactly as before.

Division rules (what HAMi's device plugins of each vendor can enforce):

- ``free``: the request, rounded up to ``compute_steps`` per card and ``memory_step_mib``
  (NVIDIA and Hygon DCU: 1 %, 1 MiB; Cambricon, Iluvatar: 256 MiB; Moore Threads: 16 core
  groups, 512 MiB; MetaX: 1 GiB);
- ``templates``: the smallest template holding both the compute and the memory asked (Huawei
  Ascend vNPU, Enflame DRS profiles);
- ``fractions``: the smallest listed fraction of the card holding both (Kunlunxin: 1/4, 1/2);
- ``whole``: no slice at all, whole cards only.

A request for one or more whole cards is the same on every rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

WHOLE_MILLI = 1000
"""A whole card is 1000 milli of its own compute (``model.WHOLE_GPU_MILLI``)."""


class Division(StrEnum):
    FREE = "free"
    TEMPLATES = "templates"
    FRACTIONS = "fractions"
    WHOLE = "whole"


@dataclass(frozen=True, slots=True)
class Template:
    """A fixed partition of a card: its compute (milli of the card) and memory. ``ref``: the
    node's own identifier for it, where its device plugin needs one (Enflame's DRS profile
    ID)."""

    name: str
    gpu_milli: int
    memory_mib: int
    ref: str = ""


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """How a card of one vendor and model is divided, and what it is worth.

    ``compute_steps``: equal compute steps per card (1000 is any milli; 100 is HAMi's 1 %
    cores; 16 is Moore Threads' core groups). ``memory_step_mib``: the memory unit.
    ``templates`` (for ``templates``) and ``fractions`` (milli of the card, for ``fractions``)
    list the shapes a slice may take. ``relative_capacity``: one card's worth in normalised
    units (1.0 is the reference card), e.g. its dense FP16/BF16 TFLOPS over the reference's.
    ``compute_units``: the card's SMs, CUs or AI cores, as the vendor counts them (shown only).
    ``whole``: the template the whole card is, where the node names one (Enflame's DRS
    profile of every slice): its name and ``ref`` are written when a whole card is given.
    ``card_ref``: the node's own name for this very card, where its device plugin needs one
    (Enflame's DRS ``minor``); empty for classes shared by many cards.
    """

    vendor: str = "nvidia"
    division: Division = Division.FREE
    compute_steps: int = WHOLE_MILLI
    memory_step_mib: int = 1
    templates: tuple[Template, ...] = ()
    fractions: tuple[int, ...] = ()
    relative_capacity: float = 1.0
    compute_units: int = 0
    whole: Template | None = None
    card_ref: str = ""

    @property
    def is_plain(self) -> bool:
        """Divided as today's NVIDIA cards are: any milli, any MiB."""
        return (
            self.division is Division.FREE
            and self.compute_steps == WHOLE_MILLI
            and self.memory_step_mib == 1
        )

    def problems(self) -> list[str]:
        """What is wrong with this class, each as ``field=value rule``; empty when valid."""
        out: list[str] = []
        if not 1 <= self.compute_steps <= WHOLE_MILLI:
            out.append(f"computeSteps={self.compute_steps} must be 1..{WHOLE_MILLI}")
        if self.memory_step_mib < 1:
            out.append(f"memoryStepMiB={self.memory_step_mib} must be at least 1")
        if not self.relative_capacity > 0:
            out.append(f"relativeCapacity={self.relative_capacity} must be positive")
        if self.division is Division.TEMPLATES and not self.templates:
            out.append("templates=[] must list at least one template for division=templates")
        for t in self.templates:
            if not 0 < t.gpu_milli < WHOLE_MILLI or t.memory_mib < 1:
                out.append(
                    f"templates[{t.name}]=({t.gpu_milli} milli, {t.memory_mib} MiB) "
                    f"must be 1..{WHOLE_MILLI - 1} milli and at least 1 MiB"
                )
        if self.division is Division.FRACTIONS and not self.fractions:
            out.append("fractions=[] must list at least one fraction for division=fractions")
        for f in self.fractions:
            if not 0 < f < WHOLE_MILLI:
                out.append(
                    f"fractions={list(self.fractions)}: {f} must be 1..{WHOLE_MILLI - 1} "
                    "milli of the card"
                )
        return out

    def slice_shape(self, gpu_milli: int, memory_mib: int, card_mib: int) -> tuple[int, int] | None:
        """(milli, MiB) a slice asking ``gpu_milli`` and ``memory_mib`` takes of a card of this
        class with ``card_mib`` of memory; None when no slice of such a card holds it.

        Rounding is always up, so a slice never holds less than it asked for.
        """
        if self.division is Division.WHOLE:
            return None
        if self.division is Division.TEMPLATES:
            fits = [
                t
                for t in self.templates
                if t.gpu_milli >= gpu_milli
                and t.memory_mib >= memory_mib
                and t.memory_mib <= card_mib
            ]
            if not fits:
                return None
            best = min(fits, key=lambda t: (t.memory_mib, t.gpu_milli, t.name))
            return best.gpu_milli, best.memory_mib
        if self.division is Division.FRACTIONS:
            for f in sorted(self.fractions):
                mib = card_mib * f // WHOLE_MILLI
                if f >= gpu_milli and mib >= memory_mib:
                    return f, mib
            return None
        milli = gpu_milli
        if self.compute_steps != WHOLE_MILLI and milli > 0:
            milli = self._step_milli(milli)
        mib = -(-memory_mib // self.memory_step_mib) * self.memory_step_mib
        if milli >= WHOLE_MILLI or mib > card_mib:
            return None
        return milli, mib

    def _step_milli(self, milli: int) -> int:
        """The least step boundary (``ceil(k * 1000 / compute_steps)``) at or above ``milli``;
        a boundary maps to itself, so a shape given once is given again."""
        n = self.compute_steps
        k = -(-milli * n // WHOLE_MILLI)
        while k > 1 and -(-(k - 1) * WHOLE_MILLI // n) >= milli:
            k -= 1
        return -(-k * WHOLE_MILLI // n)

    def allows(self, gpu_milli: int, memory_mib: int, card_mib: int) -> bool:
        """Whether a share of (milli, MiB) of a card of ``card_mib`` is a shape this class can
        give: a whole card always; a slice only as its rule shapes one."""
        if gpu_milli >= WHOLE_MILLI:
            return True
        if self.division is Division.WHOLE:
            return False
        if self.division is Division.TEMPLATES:
            return any(
                t.gpu_milli == gpu_milli and t.memory_mib == memory_mib for t in self.templates
            )
        if self.division is Division.FRACTIONS:
            return any(
                f == gpu_milli and card_mib * f // WHOLE_MILLI == memory_mib for f in self.fractions
            )
        return self.slice_shape(gpu_milli, memory_mib, card_mib) == (gpu_milli, memory_mib)

    def normalized_milli(self, gpu_milli: int) -> int:
        """``gpu_milli`` of this card in normalised milli (1000: one reference card)."""
        return round(gpu_milli * self.relative_capacity)


NVIDIA = DeviceClass()
"""The default: NVIDIA as HAMi-core shares it, the reference card."""
