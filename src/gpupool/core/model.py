"""The nouns of scheduling: nodes, GPUs, requests, jobs, tasks and placements.

Every value here is a frozen dataclass; quantities are integers in the unit their name says
(``cpu_milli``, ``memory_mib``, ``gpu_milli`` where 1000 is one whole GPU). Adapters convert
foreign units once, at their edge, before building these.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NewType

from gpupool.core.affinity import NodeAffinityTerm, PodAffinityTerm, PodMeta, SpreadConstraint
from gpupool.core.devices import NVIDIA, DeviceClass

NodeName = NewType("NodeName", str)
JobId = NewType("JobId", str)
TaskId = NewType("TaskId", str)
QueueName = NewType("QueueName", str)
"""The queue a job names: a LocalQueue (``namespace/name`` or ``name``) or a ClusterQueue."""
ClusterQueueName = NewType("ClusterQueueName", str)
"""A ClusterQueue, the queue that holds quota: what ``Scheduler.resolve_queue`` gives for a
``QueueName``, and what decisions, pending jobs and quota questions speak of."""

WHOLE_GPU_MILLI = 1000
"""A whole GPU is 1000 milli-GPU; a slice asks for 1..999 of one card."""


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


@dataclass(frozen=True, slots=True)
class Toleration:
    """Tolerates taints with ``key`` (any key when empty) and, for ``Equal``, ``value``."""

    key: str = ""
    operator: str = "Equal"  # "Equal" | "Exists"
    value: str = ""
    effect: TaintEffect | None = None  # None tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A MIG profile a partitioned GPU offers, and how many instances of it."""

    profile: str  # e.g. "1g.10gb"
    count: int
    gpu_milli: int  # the compute share one instance stands for, for accounting
    memory_mib: int


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    model: str
    memory_mib: int
    uuid: str = ""
    healthy: bool = True
    mig: tuple[MigInstance, ...] = ()  # empty: not partitioned
    nvlink_peers: tuple[int, ...] = ()  # indices of cards on the same node linked by NVLink
    max_holders: int = 0
    """The most placements that may hold part of this card at once (HAMi's per-card split
    count, ``deviceSplitCount``); 0: no limit. A whole-card holder counts as one."""
    device: DeviceClass = NVIDIA
    """Vendor, division rule and relative capacity (``core/devices.py``); NVIDIA's by default."""

    @property
    def vendor(self) -> str:
        return self.device.vendor

    @property
    def is_mig(self) -> bool:
        return bool(self.mig)


@dataclass(frozen=True, slots=True)
class Node:
    name: NodeName
    cpu_milli: int
    memory_mib: int
    gpus: tuple[Gpu, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    schedulable: bool = True  # False when cordoned or not ready

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)


class GpuKind(StrEnum):
    NONE = "none"
    WHOLE = "whole"
    SLICE = "slice"
    MIG = "mig"


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What one task asks of GPUs.

    - whole GPUs: ``count`` >= 1 cards, each entirely free; ``memory_mib``, when set, is the
      least memory each card must have (ask for 80 GiB cards);
    - a slice: ``count`` 0, ``gpu_milli`` 0..999 and/or memory, on each of ``cards``
      distinct cards (usually one). The memory of a card is ``memory_mib``, or
      ``memory_percent`` of that card's own memory, whichever is larger; a slice asking no
      compute (``gpu_milli`` 0) still needs a card whose compute is not all taken;
    - MIG instances: ``mig_profile``, ``mig_instances`` instances of that profile (1 by
      default), on one card or several of one node. ``mig_fallbacks``: larger profiles, in
      order, that a card with no free ``mig_profile`` instance gives instead (each card
      gives the first of ``mig_profile, *mig_fallbacks`` it has free, as HAMi's
      ``selectMigCandidate`` chooses per card).

    ``models`` lists the GPU models allowed (empty: any); ``uuids``, when not empty, the only
    cards allowed, and ``excluded_uuids`` cards never to use.
    """

    count: int = 0
    gpu_milli: int = 0
    memory_mib: int = 0
    mig_profile: str | None = None
    models: frozenset[str] = frozenset()
    cards: int = 1
    memory_percent: int = 0
    uuids: frozenset[str] = frozenset()
    excluded_uuids: frozenset[str] = frozenset()
    mig_instances: int = 1
    mig_fallbacks: tuple[str, ...] = ()

    @property
    def mig_choices(self) -> tuple[str, ...]:
        """The MIG profiles a card may give, in the order it tries them."""
        return (self.mig_profile, *self.mig_fallbacks) if self.mig_profile else ()

    @property
    def kind(self) -> GpuKind:
        if self.mig_profile:
            return GpuKind.MIG
        if self.count > 0:
            return GpuKind.WHOLE
        if self.gpu_milli > 0 or self.memory_mib > 0 or self.memory_percent > 0:
            return GpuKind.SLICE
        return GpuKind.NONE

    def slice_mib(self, card_mib: int) -> int:
        """MiB a slice takes of a card with ``card_mib`` of memory."""
        return max(self.memory_mib, card_mib * self.memory_percent // 100)

    @property
    def total_milli(self) -> int:
        """GPU compute asked for, in milli-GPU (MIG requests count as zero here)."""
        kind = self.kind
        if kind is GpuKind.WHOLE:
            return self.count * WHOLE_GPU_MILLI
        if kind is GpuKind.SLICE:
            return self.gpu_milli * self.cards
        return 0


@dataclass(frozen=True, slots=True)
class PodSet:
    """``count`` identical replicas."""

    name: str
    count: int = 1
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu: GpuRequest = GpuRequest()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    node_affinity: tuple[NodeAffinityTerm, ...] = ()
    """Required node affinity: terms ORed (none: any node); see ``core/affinity.py``."""
    preferred_node_affinity: tuple[tuple[int, NodeAffinityTerm], ...] = ()
    """Preferred node affinity: (weight 1..100, term), a score, never a filter."""
    pod: PodMeta = field(default_factory=PodMeta)
    """The replicas' namespace, labels and anti-affinity terms, as other pods' rules see them."""
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    """Required pod affinity: every term must find a matching pod in the node's domain."""
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    """Required pod anti-affinity: no term may find a matching pod in the node's domain."""
    spread: tuple[SpreadConstraint, ...] = ()
    """Topology spread constraints that must hold (``DoNotSchedule``)."""
    soft_spread: tuple[SpreadConstraint, ...] = ()
    """Topology spread constraints to keep when it can be done (``ScheduleAnyway``): a score."""
    preferred_affinity: tuple[tuple[int, PodAffinityTerm], ...] = ()
    """Preferred pod affinity: (weight 1..100, term), a score, never a filter."""
    preferred_anti_affinity: tuple[tuple[int, PodAffinityTerm], ...] = ()
    """Preferred pod anti-affinity: (weight 1..100, term), a score, never a filter."""
    extended: tuple[tuple[str, int], ...] = ()
    """Other resources each replica asks for, as (name, whole units) sorted by name (on
    Kubernetes: extended resources such as ``rdma/hca``). The core keeps no account of them;
    an adapter's filter plugin checks them against its nodes."""


@dataclass(frozen=True, slots=True)
class Alternative:
    """Another way to run a job: the GPU request each GPU pod set makes instead (on another
    vendor's cards, usually), with the container settings that go with it (an image built
    for that accelerator, its environment). Tried in the queue's flavor order."""

    name: str
    gpu: GpuRequest
    image: str = ""
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Job:
    """What a user submits: one or more pod sets.

    A job is a gang: at least ``min_member`` of its tasks start together or none does.
    ``min_member`` None means every task.
    """

    id: JobId
    pod_sets: tuple[PodSet, ...]
    queue: QueueName = QueueName("default")
    priority: int = 0
    submit_time_s: float = 0.0
    duration_s: float | None = None
    min_member: int | None = None
    user: str = ""
    run_limit_s: float | None = None
    """Declared run limit: the job is stopped when it is reached. Lets it backfill capacity
    held for a waiting gang when it will end before the gang could start."""
    alternatives: tuple[Alternative, ...] = ()
    """Other requests the job may run with, each tried after the job's own in every flavor
    (``core/alternatives.py``)."""

    @property
    def task_count(self) -> int:
        return sum(ps.count for ps in self.pod_sets)

    @property
    def gang_size(self) -> int:
        return self.task_count if self.min_member is None else self.min_member

    def tasks(self) -> Iterator[Task]:
        for ps_index, ps in enumerate(self.pod_sets):
            for i in range(ps.count):
                yield Task(
                    id=TaskId(f"{self.id}/{ps.name}-{i}"),
                    job=self.id,
                    pod_set=ps,
                    pod_set_index=ps_index,
                    priority=self.priority,
                    run_limit_s=self.run_limit_s,
                )


@dataclass(frozen=True, slots=True)
class Task:
    """One replica of a pod set."""

    id: TaskId
    job: JobId
    pod_set: PodSet
    pod_set_index: int = 0
    priority: int = 0
    run_limit_s: float | None = None

    @property
    def request(self) -> GpuRequest:
        return self.pod_set.gpu

    @property
    def cpu_milli(self) -> int:
        return self.pod_set.cpu_milli

    @property
    def memory_mib(self) -> int:
        return self.pod_set.memory_mib


@dataclass(frozen=True, slots=True)
class GpuShare:
    """The part of one card a placement holds."""

    index: int
    gpu_milli: int
    memory_mib: int
    mig_profile: str | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """Task -> node, the cards and how much of each."""

    task: TaskId
    job: JobId
    node: NodeName
    cpu_milli: int
    memory_mib: int
    shares: tuple[GpuShare, ...] = ()
    pod: PodMeta | None = field(default=None, compare=False)
    """The placed pod as others' pod affinity and topology spread count it."""

    @property
    def gpu_milli(self) -> int:
        return sum(s.gpu_milli for s in self.shares)
