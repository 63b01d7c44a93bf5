"""ClusterQueue and Cohort objects, the two that hold quota and share it: the cohort a queue
belongs to (or a cohort's parent), quotas and normalised quota with their limits, the
fair-sharing weight, the preemption policy and flavor fungibility.

Defaults follow the object's API group. An object of ``kueue.x-k8s.io`` means what it means
to Kueue: a ClusterQueue without ``preemption`` preempts nothing (``withinClusterQueue`` and
``reclaimWithinCohort`` are ``Never``), and it takes part in fair-share preemption across
queues only when ``reclaimWithinCohort`` is not ``Never`` (Kueue preempts in other queues of
the cohort only then). An object of ``gpupool.io`` (or one without ``apiVersion``) takes
gpupool's defaults: it preempts lower priorities within itself, reclaims anything it lent
(``Any``) and takes part in fair-share preemption.
"""

from __future__ import annotations

from typing import Any

from gpupool.config.documents import NAME_RULE, Document, is_name, parse, show
from gpupool.config.quantity import gpu_milli, number
from gpupool.config.queue_assembly import QueueObject
from gpupool.config.queue_kinds import attribute, is_kueue, object_name
from gpupool.config.queue_quotas import convert, quotas
from gpupool.config.queue_shapes import (
    ClusterQueueDoc,
    CohortDoc,
    FairSharingSpec,
    NormalizedQuotaSpec,
)
from gpupool.core.quota import (
    ClusterQueue,
    Cohort,
    FlavorFungibility,
    Fungibility,
    PreemptionPolicy,
    Preference,
    QueueingStrategy,
    Quota,
    Reclaim,
    WithinQueue,
)

__all__ = ["cluster_queue", "cohort"]


def _weight(doc: Document, fair: FairSharingSpec | None) -> float:
    if fair is None or fair.weight is None:
        return 1.0
    path = "spec.fairSharing.weight"
    weight: float = convert(doc, number, fair.weight, path)
    if not weight > 0:
        raise doc.error(path, fair.weight, "must be positive")
    return weight


def _one_of(doc: Document, spec: Any, kueue: str, v1beta2: str) -> tuple[str, str | None]:
    """The field given of two spellings (``cohort`` / ``cohortName``): (path, value). An
    empty string means unset, as in Kueue."""
    a, b = getattr(spec, attribute(kueue)) or None, getattr(spec, attribute(v1beta2)) or None
    if a is not None and b is not None and a != b:
        raise doc.error(f"spec.{v1beta2}", b, f"contradicts spec.{kueue}={show(a)}; give one")
    value = a if a is not None else b
    path = f"spec.{kueue if a is not None else v1beta2}"
    if value is not None and not is_name(value):
        raise doc.error(path, value, NAME_RULE)
    return path, value


def cluster_queue(doc: Document) -> QueueObject:
    d = parse(ClusterQueueDoc, doc)
    spec = d.spec
    name = object_name(doc, d.metadata)
    cohort_path, cohort = _one_of(doc, spec, "cohort", "cohortName")
    limits_rule = (
        None if cohort else "is set but the queue has no spec.cohort to borrow from or lend to"
    )
    flavors, refs = quotas(doc, spec.resource_groups, limits_rule, spec.non_preemptive)
    ignored: list[tuple[str, str]] = []
    checks = list(spec.admission_checks or ())
    for i, check in enumerate(checks):
        if not is_name(check):
            raise doc.error(f"spec.admissionChecks[{i}]", check, NAME_RULE)
    if spec.admission_checks_strategy is not None:
        for i, rule in enumerate(spec.admission_checks_strategy.admission_checks):
            path = f"spec.admissionChecksStrategy.admissionChecks[{i}]"
            if not is_name(rule.name):
                raise doc.error(f"{path}.name", rule.name, NAME_RULE)
            if rule.name in checks:
                raise doc.error(
                    f"{path}.name", rule.name, "is also in spec.admissionChecks; name a check once"
                )
            checks.append(rule.name)
            if rule.on_flavors:
                ignored.append(
                    (
                        f"{path}.onFlavors",
                        "acted on as if empty: the check applies to every flavor of the queue",
                    )
                )
    fungibility, fungibility_ignored = _fungibility(spec)
    ignored.extend(fungibility_ignored)
    queue = ClusterQueue(
        name=name,
        flavors=flavors,
        cohort=cohort,
        weight=_weight(doc, spec.fair_sharing),
        preemption=_preemption(doc, spec, ignored),
        non_preemptive=spec.non_preemptive,
        queueing_strategy=QueueingStrategy(spec.queueing_strategy),
        admission_checks=tuple(checks),
        normalized=_normalized(doc, spec.normalized_quota, limits_rule),
        fungibility=fungibility,
    )
    selector = spec.namespace_selector
    if selector:
        ignored.append(
            (
                "spec.namespaceSelector",
                "not acted on: every namespace's LocalQueues may point at this queue",
            )
        )
    elif selector is None and is_kueue(doc):
        ignored.append(
            (
                "spec.namespaceSelector",
                "unset: Kueue then admits no namespace; "
                "gpupool admits every namespace's LocalQueues",
            )
        )
    if spec.stop_policy not in (None, "None"):
        ignored.append(
            ("spec.stopPolicy", f"{spec.stop_policy} is not acted on: the queue keeps admitting")
        )
    for key in ("admissionScope", "concurrentAdmissionPolicy"):
        if getattr(spec, attribute(key)) is not None:
            ignored.append((f"spec.{key}", "not acted on"))
    return QueueObject(doc, queue, refs, cohort_path, cohort, ignored)


def _fungibility(spec: Any) -> tuple[FlavorFungibility, list[tuple[str, str]]]:
    """Kueue's ``flavorFungibility``, all acted on: ``whenCanBorrow`` and ``whenCanPreempt``
    (``MayStopSearch``, or the older names ``Borrow`` and ``Preempt``, stop at a flavor that
    needs borrowing or preemption; ``TryNextFlavor`` looks further first) and ``preference``
    (which of the flavors tried wins when each needs borrowing, preemption or both)."""
    f = spec.flavor_fungibility
    if f is None:
        return FlavorFungibility(), []
    stop = ("MayStopSearch", "Borrow", "Preempt")
    borrow = Fungibility.STOP if f.when_can_borrow in (None, *stop) else Fungibility.TRY_NEXT
    preempt = Fungibility.STOP if f.when_can_preempt in stop else Fungibility.TRY_NEXT
    preference = (
        Preference(f.preference)
        if f.preference is not None
        else Preference.BORROWING_OVER_PREEMPTION
    )
    return FlavorFungibility(borrow, preempt, preference), []


def _normalized(
    doc: Document, spec: NormalizedQuotaSpec | None, limits_rule: str | None, own_only: bool = True
) -> Quota | None:
    """``spec.normalizedQuota``: compute across all flavors, in reference GPUs (8 -> 8000
    normalised milli; a card of relative capacity 0.5 uses 500 of it)."""
    if spec is None:
        return None
    at = "spec.normalizedQuota"
    nominal = convert(doc, gpu_milli, spec.nominal_quota, f"{at}.nominalQuota")
    out: dict[str, int | None] = {"borrowingLimit": None, "lendingLimit": None}
    for key, raw in (
        ("borrowingLimit", spec.borrowing_limit),
        ("lendingLimit", spec.lending_limit),
    ):
        if raw is None:
            continue
        if limits_rule:
            raise doc.error(f"{at}.{key}", raw, limits_rule)
        out[key] = convert(doc, gpu_milli, raw, f"{at}.{key}")
    lending = out["lendingLimit"]
    if own_only and lending is not None and lending > nominal:
        raise doc.error(
            f"{at}.lendingLimit",
            spec.lending_limit,
            f"is above nominalQuota={show(spec.nominal_quota)}; one cannot lend more than one has",
        )
    return Quota(nominal, out["borrowingLimit"], lending)


def _preemption(doc: Document, spec: Any, ignored: list[tuple[str, str]]) -> PreemptionPolicy:
    """Kueue's defaults for Kueue's objects (Never, Never; fair-share preemption only when
    it may reclaim), gpupool's for its own (LowerPriority, Any, fair-share)."""
    p = spec.preemption
    kueue = is_kueue(doc)
    within = p.within_cluster_queue if p is not None else None
    reclaim = p.reclaim_within_cohort if p is not None else None
    if within is None:
        within = "Never" if kueue else "LowerPriority"
    if reclaim is None:
        reclaim = "Never" if kueue else "Any"
    if within == "LowerOrNewerEqualPriority":
        ignored.append(
            (
                "spec.preemption.withinClusterQueue",
                "LowerOrNewerEqualPriority is "
                "acted on as LowerPriority: newer jobs of equal priority are not "
                "preempted",
            )
        )
        within = "LowerPriority"
    fair = p.fair_share if p is not None else None
    if fair is None:
        fair = reclaim != "Never" if kueue else True
    borrow = p.borrow_within_cohort if p is not None else None
    if borrow is not None and (
        borrow.policy != "Never" or borrow.max_priority_threshold is not None
    ):
        ignored.append(
            (
                "spec.preemption.borrowWithinCohort",
                "not acted on: a queue does not preempt to borrow beyond its nominal quota",
            )
        )
    return PreemptionPolicy(WithinQueue(within), Reclaim(reclaim), fair)


def cohort(doc: Document) -> QueueObject:
    d = parse(CohortDoc, doc)
    spec = d.spec
    name = object_name(doc, d.metadata)
    parent_path, parent = _one_of(doc, spec, "parent", "parentName")
    limits_rule = (
        None if parent else "is set but the cohort has no spec.parent to borrow from or lend to"
    )
    flavors, refs = quotas(doc, spec.resource_groups, limits_rule, False)
    cohort = Cohort(
        name,
        parent,
        flavors,
        _weight(doc, spec.fair_sharing),
        _normalized(doc, spec.normalized_quota, limits_rule, own_only=False),
    )
    return QueueObject(doc, cohort, refs, parent_path, parent)
