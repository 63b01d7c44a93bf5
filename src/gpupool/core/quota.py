"""Quota objects and the quota tree: flavors, cluster queues, cohorts, local queues.

Names and meanings follow Kueue's where they are the same (``nominalQuota``,
``borrowingLimit``, ``lendingLimit``, cohorts that lend to each other, hierarchical cohorts,
``LocalQueue`` as a namespace's entry point), so Kueue users find what they expect.

Resources are integers in the unit their name says:

| resource | counts |
|---|---|
| ``gpu`` | whole cards (a slice or a MIG instance counts 0 here) |
| ``gpu_milli`` | GPU compute: 1000 per whole card, a slice's milli, a MIG instance's share |
| ``gpu_memory_mib`` | GPU memory: a whole card's memory, a slice's or MIG instance's MiB |
| ``cpu_milli`` | CPU |
| ``memory_mib`` | host memory |
| ``normalized_milli`` | compute in normalised units (1000: one reference card) |

A resource a queue does not list for a flavor is not limited by that queue. Normalised compute
is charged both per flavor and under the flavor name ``*`` (:data:`ACROSS_FLAVORS`), where a
queue's ``normalized`` quota limits what it uses of every accelerator together.

The arithmetic of borrowing is Kueue's hierarchical one (the "available" of a resource node):
a node's *subtree quota* is its own nominal quota plus what its children lend; its
*guaranteed* part is what it does not lend (subtree quota minus lending limit); a cohort's
usage is what its children use beyond their guaranteed parts; and what a queue may still use
is its free guaranteed part plus what its parent has available, capped by its borrowing limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from gpupool.core.errors import ConfigError

if TYPE_CHECKING:
    from gpupool.core.provisioning import AdmissionCheck


class Resource(StrEnum):
    GPU = "gpu"
    GPU_MILLI = "gpu_milli"
    GPU_MEMORY_MIB = "gpu_memory_mib"
    CPU_MILLI = "cpu_milli"
    MEMORY_MIB = "memory_mib"
    NORMALIZED_MILLI = "normalized_milli"


ACROSS_FLAVORS = "*"
"""The flavor name under which normalised compute is charged for every flavor together."""

RESOURCES: tuple[Resource, ...] = tuple(Resource)


@dataclass(frozen=True, slots=True)
class ResourceFlavor:
    """A pool of nodes, chosen by labels (usually one GPU model)."""

    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Quota:
    """``None`` limits mean "no limit" (borrow anything the cohort has, lend everything)."""

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class FlavorQuotas:
    flavor: str
    resources: Mapping[Resource, Quota]


class WithinQueue(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class Reclaim(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    """Kueue's ``preemption`` stanza, plus fair-share preemption across queues."""

    within_cluster_queue: WithinQueue = WithinQueue.LOWER_PRIORITY
    reclaim_within_cohort: Reclaim = Reclaim.ANY
    fair_share: bool = True


class Fungibility(StrEnum):
    """What a queue does when a flavor would take the job only by borrowing (or preempting):
    Kueue's ``flavorFungibility``. ``MayStopSearch`` takes that flavor (Kueue's ``Borrow``,
    ``Preempt``); ``TryNextFlavor`` first tries the later flavors for a fit that needs
    neither, and comes back to it when none has one."""

    STOP = "MayStopSearch"
    TRY_NEXT = "TryNextFlavor"


class Preference(StrEnum):
    """Kueue's ``flavorFungibility.preference``: which flavor wins when every flavor tried
    needs borrowing, preemption or both. ``BorrowingOverPreemption`` (the default) prefers a
    flavor that needs no preemption (then one that reclaims over one that preempts within the
    queue), ties broken by not borrowing; ``PreemptionOverBorrowing`` prefers a flavor that
    needs no borrowing, ties broken by the lighter preemption."""

    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


@dataclass(frozen=True, slots=True)
class FlavorFungibility:
    """Kueue's defaults: borrow in the first flavor that lends; try the next flavor rather
    than preempt; prefer borrowing to preemption."""

    when_can_borrow: Fungibility = Fungibility.STOP
    when_can_preempt: Fungibility = Fungibility.TRY_NEXT
    preference: Preference = Preference.BORROWING_OVER_PREEMPTION

    @property
    def searches_with_preemption(self) -> bool:
        """Whether flavors are walked one by one with preemption tried in each (Kueue's
        flavor assigner); else every flavor is tried without preemption before any with it,
        which is what the defaults amount to."""
        return (
            self.when_can_preempt is Fungibility.STOP
            or self.preference is Preference.PREEMPTION_OVER_BORROWING
        )


class QueueingStrategy(StrEnum):
    BEST_EFFORT_FIFO = "BestEffortFIFO"  # a job that cannot be admitted does not block others
    STRICT_FIFO = "StrictFIFO"  # the head blocks the queue until it is admitted


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    """A tenant's quota.

    ``non_preemptive``: what this queue admits is never evicted; such a queue therefore does
    not borrow (borrowed capacity must be reclaimable) and its quota is only its own.
    ``weight``: its fair-share weight among the queues of its cohort tree.
    ``admission_checks``: names of AdmissionChecks a job must pass before it is admitted
    (Kueue's ``admissionChecks``; see ``gpupool.core.provisioning``).
    """

    name: str
    flavors: tuple[FlavorQuotas, ...]
    cohort: str | None = None
    weight: float = 1.0
    preemption: PreemptionPolicy = PreemptionPolicy()
    non_preemptive: bool = False
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    admission_checks: tuple[str, ...] = ()
    normalized: Quota | None = None
    """Quota of normalised compute across all its flavors together (``normalized_milli``)."""
    fungibility: FlavorFungibility = FlavorFungibility()

    def quota(self, flavor: str, resource: Resource) -> Quota | None:
        for fq in self.flavors:
            if fq.flavor == flavor:
                return fq.resources.get(resource)
        return None


@dataclass(frozen=True, slots=True)
class Cohort:
    """Queues that lend to each other; cohorts nest through ``parent``.

    A cohort may hold quota of its own (``flavors``), shared by everything below it. As in
    Kueue, a cohort named by a queue but not declared exists implicitly, with no quota.
    """

    name: str
    parent: str | None = None
    flavors: tuple[FlavorQuotas, ...] = ()
    weight: float = 1.0
    normalized: Quota | None = None
    """Quota of normalised compute across all flavors, shared by everything below it."""


@dataclass(frozen=True, slots=True)
class LocalQueue:
    """A namespace's (a team's) entry point into a ClusterQueue."""

    name: str
    cluster_queue: str
    namespace: str = "default"


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    description: str = ""


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """Knobs of admission and preemption, with the defaults a shared cluster wants."""

    usage_half_life_s: float = 7 * 24 * 3600.0  # decay of per-user usage inside a queue
    default_runtime_s: float = 3600.0  # charged at admission when a job declares no run limit
    min_runtime_s: float = 300.0  # a job runs at least this long before it can be preempted
    max_preemptions_per_job: int = 3  # after this many, a job is not preempted again
    preemption_cooldown_s: float = 3600.0  # a pair that preempted each other may not repeat
    normalized_shares: bool = False
    """Measure GPU shares in normalised compute (``normalized_milli`` across flavors) rather
    than in cards of any model: a queue on slower cards is not counted as if it ran the
    reference card. Applies to queues whose tree declares a ``normalized`` quota."""


@dataclass(frozen=True)
class QueueConfig:
    """Everything admission needs; validated as a whole by :meth:`validate`."""

    flavors: tuple[ResourceFlavor, ...] = ()
    cluster_queues: tuple[ClusterQueue, ...] = ()
    cohorts: tuple[Cohort, ...] = ()
    local_queues: tuple[LocalQueue, ...] = ()
    priority_classes: tuple[PriorityClass, ...] = ()
    settings: QueueSettings = QueueSettings()
    admission_checks: tuple[AdmissionCheck, ...] = ()

    def validate(self) -> QueueConfig:
        """Raise ConfigError for the first problem found, naming the object and the rule."""
        _unique("ResourceFlavor", (f.name for f in self.flavors))
        _unique("ClusterQueue", (q.name for q in self.cluster_queues))
        _unique("Cohort", (c.name for c in self.cohorts))
        _unique("LocalQueue", (f"{lq.namespace}/{lq.name}" for lq in self.local_queues))
        _unique("PriorityClass", (p.name for p in self.priority_classes))
        flavors = {f.name for f in self.flavors}
        cohorts = {c.name: c for c in self.cohorts}
        queues = {q.name for q in self.cluster_queues}
        clash = queues & set(cohorts)
        if clash:
            raise ConfigError(
                f"ClusterQueue and Cohort share the name {sorted(clash)[0]!r}; "
                "names must be unique across both"
            )
        for owner, fqs in [(f"ClusterQueue {q.name}", q.flavors) for q in self.cluster_queues] + [
            (f"Cohort {c.name}", c.flavors) for c in self.cohorts
        ]:
            doc = _document(owner)
            seen: set[str] = set()
            for fq in fqs:
                if fq.flavor not in flavors:
                    known = f"known: {', '.join(sorted(flavors)) or 'none'}"
                    raise ConfigError(
                        f"{owner}: flavor {fq.flavor!r} is not a ResourceFlavor; {known}",
                        field="flavors",
                        value=fq.flavor,
                        rule=f"is not a ResourceFlavor; {known}",
                        where=owner,
                        document=doc,
                    )
                if fq.flavor in seen:
                    raise ConfigError(
                        f"{owner}: flavor {fq.flavor!r} is listed twice",
                        field="flavors",
                        value=fq.flavor,
                        rule="is listed twice",
                        where=owner,
                        document=doc,
                    )
                seen.add(fq.flavor)
                for res, quota in fq.resources.items():
                    # A cohort lends from its whole subtree, so only a queue's lending limit
                    # is bounded by its own nominal quota.
                    _check_quota(
                        f"{owner}: {fq.flavor}.{res}",
                        quota,
                        own_only=owner.startswith("ClusterQueue"),
                    )
        for owner, norm in [
            (f"ClusterQueue {q.name}", q.normalized) for q in self.cluster_queues
        ] + [(f"Cohort {c.name}", c.normalized) for c in self.cohorts]:
            if norm is not None:
                _check_quota(
                    f"{owner}: normalized", norm, own_only=owner.startswith("ClusterQueue")
                )
        for q in self.cluster_queues:
            if not q.weight > 0:
                raise ConfigError(
                    f"ClusterQueue {q.name}: weight={q.weight} must be positive",
                    field="weight",
                    value=q.weight,
                    rule="must be positive",
                    where=f"ClusterQueue {q.name}",
                    document=("ClusterQueue", q.name),
                )
            if q.non_preemptive:
                for fq in q.flavors:
                    for res, quota in fq.resources.items():
                        if quota.borrowing_limit not in (None, 0):
                            rule = (
                                "a non-preemptive queue cannot borrow, since borrowed "
                                "capacity must be reclaimable"
                            )
                            raise ConfigError(
                                f"ClusterQueue {q.name}: {fq.flavor}.{res} borrowingLimit="
                                f"{quota.borrowing_limit}: {rule}",
                                field=f"{fq.flavor}.{res}.borrowingLimit",
                                value=quota.borrowing_limit,
                                rule=rule,
                                where=f"ClusterQueue {q.name}",
                                document=("ClusterQueue", q.name),
                            )
        for c in self.cohorts:
            if not c.weight > 0:
                raise ConfigError(
                    f"Cohort {c.name}: weight={c.weight} must be positive",
                    field="weight",
                    value=c.weight,
                    rule="must be positive",
                    where=f"Cohort {c.name}",
                    document=("Cohort", c.name),
                )
            seen_path = [c.name]
            parent = c.parent
            while parent is not None:
                if parent in seen_path:
                    cycle = " -> ".join([*seen_path, parent])
                    raise ConfigError(
                        f"Cohort {c.name}: cycle in the cohort tree: {cycle}",
                        field="parent",
                        value=c.parent,
                        rule=f"closes a cycle in the cohort tree: {cycle}",
                        where=f"Cohort {c.name}",
                        document=("Cohort", c.name),
                    )
                seen_path.append(parent)
                parent = cohorts[parent].parent if parent in cohorts else None
        _unique("AdmissionCheck", (c.name for c in self.admission_checks))
        checks = {c.name for c in self.admission_checks}
        for q in self.cluster_queues:
            for name in q.admission_checks:
                if name not in checks:
                    rule = f"is not an AdmissionCheck; known: {', '.join(sorted(checks)) or 'none'}"
                    raise ConfigError(
                        f"ClusterQueue {q.name}: admission check {name!r} {rule}",
                        field="admissionChecks",
                        value=name,
                        rule=rule,
                        where=f"ClusterQueue {q.name}",
                        document=("ClusterQueue", q.name),
                    )
            if len(q.admission_checks) > 1:
                rule = "one provisioning check per queue (a job is provisioned once)"
                raise ConfigError(
                    f"ClusterQueue {q.name}: admissionChecks={list(q.admission_checks)}: {rule}",
                    field="admissionChecks",
                    value=list(q.admission_checks),
                    rule=rule,
                    where=f"ClusterQueue {q.name}",
                    document=("ClusterQueue", q.name),
                )
        for lq in self.local_queues:
            if lq.cluster_queue not in queues:
                rule = f"does not exist; known: {', '.join(sorted(queues)) or 'none'}"
                raise ConfigError(
                    f"LocalQueue {lq.namespace}/{lq.name}: clusterQueue {lq.cluster_queue!r} "
                    f"{rule}",
                    field="clusterQueue",
                    value=lq.cluster_queue,
                    rule=rule,
                    where=f"LocalQueue {lq.namespace}/{lq.name}",
                    document=("LocalQueue", f"{lq.namespace}/{lq.name}"),
                )
        s = self.settings
        for name in ("usage_half_life_s", "default_runtime_s"):
            if not getattr(s, name) > 0:
                raise ConfigError(f"settings.{name}={getattr(s, name)} must be positive")
        for name in ("min_runtime_s", "preemption_cooldown_s"):
            if not getattr(s, name) >= 0:
                raise ConfigError(f"settings.{name}={getattr(s, name)} must be zero or more")
        if s.max_preemptions_per_job < 0:
            raise ConfigError(
                f"settings.max_preemptions_per_job={s.max_preemptions_per_job} must be >= 0"
            )
        return self

    def priority(self, name: str) -> int:
        for p in self.priority_classes:
            if p.name == name:
                return p.value
        known = ", ".join(p.name for p in self.priority_classes) or "none"
        raise ConfigError(
            f"unknown priority class {name!r}; known: {known}",
            field="priorityClassName",
            value=name,
            rule=f"is not a PriorityClass; known: {known}",
        )


def _unique(kind: str, names: Iterable[str]) -> None:
    seen: set[str] = set()
    for n in names:
        if not n:
            raise ConfigError(f"{kind}: name must not be empty")
        if n in seen:
            raise ConfigError(
                f"{kind} {n!r} is defined twice",
                field="metadata.name",
                value=n,
                rule="is defined twice",
                where=f"{kind} {n}",
                document=(kind, n),
            )
        seen.add(n)


def _check_quota(where: str, q: Quota, own_only: bool = True) -> None:
    owner, _, res = where.partition(": ")
    for name, value in (
        ("nominalQuota", q.nominal),
        ("borrowingLimit", q.borrowing_limit),
        ("lendingLimit", q.lending_limit),
    ):
        if value is not None and value < 0:
            raise ConfigError(
                f"{where}: {name}={value} must be zero or more",
                field=f"{res}.{name}",
                value=value,
                rule="must be zero or more",
                where=owner,
                document=_document(owner),
            )
    if own_only and q.lending_limit is not None and q.lending_limit > q.nominal:
        rule = f"is above nominalQuota={q.nominal}; a queue cannot lend more than it has"
        raise ConfigError(
            f"{where}: lendingLimit={q.lending_limit} {rule}",
            field=f"{res}.lendingLimit",
            value=q.lending_limit,
            rule=rule,
            where=owner,
            document=_document(owner),
        )


def _document(owner: str) -> tuple[str, str]:
    """``"ClusterQueue q"`` -> ``("ClusterQueue", "q")``: the object an error is in."""
    kind, _, name = owner.partition(" ")
    return kind, name
