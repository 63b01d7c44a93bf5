"""ElasticGPU, ElasticGPUClaim and ElasticGPUClass: GPUs in the PV / PVC / StorageClass pattern.

- an **ElasticGPU** is one real GPU resource: a whole card, a slice of one (compute + memory,
  enforced by HAMi-core), a MIG instance or a GPU of a remote pool. Like a PersistentVolume it
  exists on its own, holds its capacity, and is bound to at most one claim (``claim_ref``);
- an **ElasticGPUClaim** is a tenant's request: whole ``cards``, a slice (``gpu_milli`` +
  ``memory_mib``) or ``tflops`` (converted per GPU model with its published peak). Like a
  PersistentVolumeClaim it binds to a set of ElasticGPUs (``elastic_gpus``) and keeps them;
- an **ElasticGPUClass** (``classes.py``) says how ElasticGPUs are made (``provisioner``),
  with ``parameters``, a ``reclaim_policy`` (what happens to them when the claim goes) and a
  ``binding_mode``.

Every object is a frozen dataclass of plain fields that validates itself when built: a bad
value raises ``InvalidJobError`` (claims) or ``ConfigError`` (classes and ElasticGPUs) naming
the field, the value and the rule. Their JSON forms (camelCase, as a Kubernetes object's
fields) are the configuration layer's (``gpupool.config.elastic``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpupool.core.errors import ConfigError, InvalidJobError
from gpupool.core.model import WHOLE_GPU_MILLI


class Source(StrEnum):
    """What an ElasticGPU is."""

    PHYSICAL = "physical"  # a whole card of a node
    SLICE = "slice"  # compute + memory of one card, enforced by HAMi-core
    MIG = "mig"  # one MIG instance of a partitioned card
    REMOTE = "remote"  # a GPU of a remote pool, reached over the network


class GpuPhase(StrEnum):
    AVAILABLE = "Available"  # exists, holds its capacity, bound to no claim
    BOUND = "Bound"
    RELEASED = "Released"  # its claim is gone and the policy is Retain: kept, not rebindable
    FAILED = "Failed"  # its node or card is gone


class ClaimPhase(StrEnum):
    PENDING = "Pending"
    BOUND = "Bound"
    LOST = "Lost"  # an ElasticGPU it was bound to failed


class Provisioner(StrEnum):
    PHYSICAL = "physical"
    HAMI_CORE = "hami-core"
    MIG = "mig"
    REMOTE = "remote"


class ReclaimPolicy(StrEnum):
    RETAIN = "Retain"
    DELETE = "Delete"


class BindingMode(StrEnum):
    IMMEDIATE = "Immediate"
    WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


SOURCE_OF: Mapping[Provisioner, Source] = {
    Provisioner.PHYSICAL: Source.PHYSICAL,
    Provisioner.HAMI_CORE: Source.SLICE,
    Provisioner.MIG: Source.MIG,
    Provisioner.REMOTE: Source.REMOTE,
}
"""The kind of ElasticGPU each provisioner makes."""

CLASS_PARAMETERS: Mapping[Provisioner, tuple[str, ...]] = {
    Provisioner.PHYSICAL: ("models",),
    Provisioner.HAMI_CORE: ("models",),
    Provisioner.MIG: ("models", "profiles"),
    Provisioner.REMOTE: ("pool", "model", "memoryMib", "count", "endpoint"),
}
"""The parameters each provisioner reads; any other is a ConfigError. ``models`` and
``profiles`` are comma-separated lists; a remote pool needs ``pool``, ``model``, ``memoryMib``
and ``count`` (how many GPUs it has)."""

MAX_CARDS = 64
MAX_TFLOPS = 1_000_000.0


def _enum(cls: type[StrEnum], value: object, fail: Any) -> Any:
    if isinstance(value, cls):
        return value
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        return cls(value)
    except ValueError:
        raise fail(value, "must be one of " + ", ".join(m.value for m in cls)) from None


def split_list(text: str) -> tuple[str, ...]:
    """A comma-separated parameter as a tuple, blanks dropped."""
    return tuple(p.strip() for p in text.split(",") if p.strip())


# -- references and capacities ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """Which claim an ElasticGPU is bound to (a PersistentVolume's ``claimRef``)."""

    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Capacity:
    """What one ElasticGPU offers: compute (1000 milli a card), memory, and TFLOPS where the
    model's peak is known (its share of the peak)."""

    gpu_milli: int
    memory_mib: int
    tflops: float | None = None


# -- ElasticGPU ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ElasticGPU:
    """One real GPU resource and its binding.

    ``node`` and ``card`` locate a physical card, slice or MIG instance (``card`` is the GPU
    index on the node); a remote GPU has no node, ``pool`` names its pool and ``card`` its
    index there. ``class_name`` is the class that made it ("" for one an operator created).
    """

    name: str
    source: Source
    model: str
    capacity: Capacity
    node: str = ""
    card: int = -1
    uuid: str = ""
    mig_profile: str | None = None
    pool: str = ""
    endpoint: str = ""
    class_name: str = ""
    reclaim_policy: ReclaimPolicy = ReclaimPolicy.DELETE
    claim_ref: ClaimRef | None = None
    phase: GpuPhase = GpuPhase.AVAILABLE
    message: str = ""

    def __post_init__(self) -> None:
        def fail(path: str) -> Any:
            return lambda value, rule: object_error("ElasticGPU", self.name, path, value, rule)

        if not self.name:
            raise fail("name")(self.name, "must not be empty")
        object.__setattr__(self, "source", _enum(Source, self.source, fail("source")))
        object.__setattr__(self, "phase", _enum(GpuPhase, self.phase, fail("phase")))
        object.__setattr__(
            self, "reclaim_policy", _enum(ReclaimPolicy, self.reclaim_policy, fail("reclaimPolicy"))
        )
        cap = self.capacity
        if not 1 <= cap.gpu_milli <= WHOLE_GPU_MILLI:
            raise fail("capacity.gpuMilli")(cap.gpu_milli, "must be 1..1000 (one card at most)")
        if cap.memory_mib < 0:
            raise fail("capacity.memoryMib")(cap.memory_mib, "must be zero or more")
        if self.source is Source.REMOTE:
            if not self.pool:
                raise fail("pool")(self.pool, "a remote ElasticGPU names its pool")
        elif not self.node or self.card < 0:
            raise fail("node")(
                f"{self.node}#{self.card}",
                "a physical card, slice or MIG instance names its node and card",
            )
        if self.source is Source.MIG and not self.mig_profile:
            raise fail("migProfile")(self.mig_profile, "a MIG ElasticGPU names its profile")
        if self.source is Source.PHYSICAL and cap.gpu_milli != WHOLE_GPU_MILLI:
            raise fail("capacity.gpuMilli")(cap.gpu_milli, "a physical card is 1000 milli")
        if self.phase is GpuPhase.BOUND and self.claim_ref is None:
            raise fail("claimRef")(None, "a Bound ElasticGPU names its claim")


# -- ElasticGPUClaim ---------------------------------------------------------------------------


class RequestKind(StrEnum):
    CARDS = "cards"
    SLICE = "slice"
    TFLOPS = "tflops"


@dataclass(frozen=True, slots=True)
class ClaimRequests:
    """What a claim asks for, in exactly one of three forms:

    - ``cards``: whole cards on one node (``memory_mib``, when set, is the least memory each
      card must have);
    - ``gpu_milli`` (1..999) and/or ``memory_mib``: a slice of one card;
    - ``tflops``: compute converted per model by its published peak (``memory_mib``, when set,
      is the GPU memory wanted beside it).

    ``models`` lists the GPU models allowed (empty: any).
    """

    cards: int = 0
    gpu_milli: int = 0
    memory_mib: int = 0
    tflops: float = 0.0
    models: frozenset[str] = frozenset()

    @property
    def kind(self) -> RequestKind:
        if self.tflops > 0:
            return RequestKind.TFLOPS
        if self.cards > 0:
            return RequestKind.CARDS
        return RequestKind.SLICE


@dataclass(frozen=True, slots=True)
class ServingModel:
    """A GPU model that can serve a TFLOPS claim, and what the claim takes on it."""

    model: str
    peak_tflops: float
    cards: int  # whole cards, or 0 for a slice
    gpu_milli: int  # the slice of one card, or 0 for whole cards
    mig_profile: str | None = None  # for a mig class: the smallest profile that holds it


@dataclass(frozen=True, slots=True)
class ElasticGPUClaim:
    """A tenant's claim on GPUs (spec: ``requests``, ``class_name``; status: the rest).

    ``elastic_gpus`` is the set it is bound to, all on ``node`` (or in one remote pool);
    ``serving_models`` says, for a TFLOPS claim, which models can serve it and how much of a
    card it takes on each; ``message`` says why it is pending or lost.
    """

    name: str
    requests: ClaimRequests
    namespace: str = "default"
    class_name: str = ""
    phase: ClaimPhase = ClaimPhase.PENDING
    elastic_gpus: tuple[str, ...] = ()
    node: str = ""
    serving_models: tuple[ServingModel, ...] = ()
    message: str = ""

    def __post_init__(self) -> None:
        key = self.key

        def bad(path: str, value: object, rule: str) -> InvalidJobError:
            return InvalidJobError(path, value, rule, job=f"ElasticGPUClaim {key}")

        if not self.name:
            raise bad("name", self.name, "a claim needs a name")
        if not self.namespace:
            raise bad("namespace", self.namespace, "a claim needs a namespace")
        object.__setattr__(
            self, "phase", _enum(ClaimPhase, self.phase, lambda v, r: bad("phase", v, r))
        )
        object.__setattr__(self, "requests", _check_requests(self.requests, bad))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _check_requests(r: ClaimRequests, bad: Any) -> ClaimRequests:
    if not isinstance(r, ClaimRequests):
        raise bad("requests", r, "must be cards, gpu_milli + memory_mib, or tflops")
    forms = [
        name
        for name, on in (
            ("cards", r.cards != 0),
            ("tflops", r.tflops != 0),
            ("gpu_milli", r.gpu_milli != 0),
        )
        if on
    ]
    if len(forms) > 1:
        raise bad(
            f"requests.{forms[1]}",
            getattr(r, forms[1]),
            f"cannot be combined with requests.{forms[0]}: a claim asks for cards, "
            "a slice (gpu_milli + memory_mib) or tflops",
        )
    if r.cards < 0 or r.cards > MAX_CARDS:
        raise bad("requests.cards", r.cards, f"must be 1..{MAX_CARDS} whole cards")
    if not 0 <= r.gpu_milli < WHOLE_GPU_MILLI:
        raise bad(
            "requests.gpu_milli",
            r.gpu_milli,
            "a slice is 1..999 milli-GPU of one card; ask for whole cards with cards",
        )
    if r.memory_mib < 0:
        raise bad("requests.memory_mib", r.memory_mib, "must be zero or more MiB")
    if r.tflops != 0 and not (math.isfinite(r.tflops) and 0 < r.tflops <= MAX_TFLOPS):
        raise bad("requests.tflops", r.tflops, f"must be a number in (0, {MAX_TFLOPS:g}]")
    if not forms and r.memory_mib == 0:
        raise bad(
            "requests",
            {
                "cards": r.cards,
                "gpuMilli": r.gpu_milli,
                "memoryMib": r.memory_mib,
                "tflops": r.tflops,
                "models": sorted(r.models),
            },
            "asks for nothing: give cards, gpu_milli and/or memory_mib, or tflops",
        )
    if any(not m for m in r.models):
        raise bad("requests.models", sorted(r.models), "model names must not be empty")
    return r


# -- helpers -------------------------------------------------------------------------------------


def object_error(kind: str, name: str, path: str, value: object, rule: str) -> ConfigError:
    """A ConfigError in the object ``kind name``, reading ``Kind name: path=value: rule``."""
    where = f"{kind} {name or '?'}"
    return ConfigError(
        f"{where}: {path}={value!r}: {rule}",
        field=path,
        value=value,
        rule=rule,
        where=where,
        document=(kind, name),
    )
