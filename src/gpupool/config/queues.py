"""Kueue-shaped queue objects -> a validated core ``QueueConfig``.

Two spellings load the same way: Kueue's own objects (``apiVersion: kueue.x-k8s.io/v1beta1``,
``v1beta2`` or ``v1``; also ``v1alpha1`` for Cohort) and gpupool's (``apiVersion:
gpupool.io/v1alpha1``, the same kinds plus ``QueueSettings``). Kinds: ResourceFlavor,
ClusterQueue, Cohort, LocalQueue, WorkloadPriorityClass, ``scheduling.k8s.io/v1``
PriorityClass, QueueSettings, and for queued provisioning AdmissionCheck and
ProvisioningRequestConfig (a ClusterQueue names its checks in ``admissionChecks``).

Checking happens in three steps, each error naming file, document, field path and rule:
pydantic checks each document's shape (unknown fields and wrong types are errors); the
translation below checks each field's value (quantities, limits, names) and references
between objects (unknown flavor, unknown cluster queue, duplicate names, cohort cycles);
last, ``QueueConfig.validate()`` applies the core's rules to the whole.

Defaults follow the object's API group. An object of ``kueue.x-k8s.io`` means what it means
to Kueue: a ClusterQueue without ``preemption`` preempts nothing (``withinClusterQueue`` and
``reclaimWithinCohort`` are ``Never``), and it takes part in fair-share preemption across
queues only when ``reclaimWithinCohort`` is not ``Never`` (Kueue preempts in other queues of
the cohort only then). An object of ``gpupool.io`` (or one without ``apiVersion``) takes
gpupool's defaults: it preempts lower priorities within itself, reclaims anything it lent
(``Any``) and takes part in fair-share preemption.

Every field of Kueue's schemas is accepted; those gpupool does not act on (or acts on only in
part) are reported, never refused: :func:`read_queue_documents` returns them with the
configuration as ``Ignored(object, path, reason)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gpupool.config.documents import (
    NAME_RULE,
    Document,
    Metadata,
    check_api_version,
    is_name,
    parse,
    show,
)
from gpupool.config.quantity import (
    duration_s,
    gpu_milli,
    number,
)
from gpupool.config.queue_assembly import Ignored, QueueObject, QueueRead, assemble
from gpupool.config.queue_quotas import (
    RESOURCE_NAMES,
    ResourceName,
    convert,
    quotas,
    resource_name,
)
from gpupool.config.queue_shapes import (
    AdmissionCheckDoc,
    ClusterQueueDoc,
    CohortDoc,
    FairSharingSpec,
    LocalQueueDoc,
    NormalizedQuotaSpec,
    PriorityClassDoc,
    ProvisioningRequestConfigDoc,
    QueueSettingsDoc,
    ResourceFlavorDoc,
    WorkloadPriorityClassDoc,
)
from gpupool.core.errors import ConfigError
from gpupool.core.provisioning import (
    PROVISIONING_CONTROLLER,
    AdmissionCheck,
    ProvisioningRequestConfig,
    RetryStrategy,
)
from gpupool.core.quota import (
    ClusterQueue,
    Cohort,
    FlavorFungibility,
    Fungibility,
    LocalQueue,
    PreemptionPolicy,
    Preference,
    PriorityClass,
    QueueConfig,
    QueueingStrategy,
    QueueSettings,
    Quota,
    Reclaim,
    ResourceFlavor,
    WithinQueue,
)

__all__ = [
    "GPUPOOL_API_VERSION",
    "KUEUE_API_VERSIONS",
    "QUEUE_KINDS",
    "RESOURCE_NAMES",
    "Ignored",
    "QueueObject",
    "QueueRead",
    "ResourceName",
    "assemble",
    "is_kueue",
    "queue_config_from_documents",
    "read_queue_documents",
    "resource_name",
    "translate",
]

GPUPOOL_API_VERSION = "gpupool.io/v1alpha1"
KUEUE_API_VERSIONS = ("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1")
_KUEUE = (*KUEUE_API_VERSIONS, GPUPOOL_API_VERSION)
QUEUE_KINDS: Mapping[str, tuple[str, ...]] = {
    "ResourceFlavor": _KUEUE,
    "ClusterQueue": _KUEUE,
    "Cohort": ("kueue.x-k8s.io/v1alpha1", *_KUEUE),
    "LocalQueue": _KUEUE,
    "WorkloadPriorityClass": _KUEUE,
    "PriorityClass": ("scheduling.k8s.io/v1",),
    "QueueSettings": (GPUPOOL_API_VERSION,),
    "AdmissionCheck": _KUEUE,
    "ProvisioningRequestConfig": _KUEUE,
}
"""Each queue kind and the apiVersions it is read under (a missing apiVersion is accepted)."""


# -- translation ------------------------------------------------------------------------------


def is_kueue(doc: Document) -> bool:
    """Whether a document is an object of Kueue's API group (its defaults apply)."""
    version = doc.body.get("apiVersion")
    return isinstance(version, str) and version.startswith("kueue.x-k8s.io/")


def queue_config_from_documents(docs: Sequence[Document]) -> QueueConfig:
    """Translate and validate the queue documents among ``docs`` (other kinds are an error)."""
    return read_queue_documents(docs).config


def read_queue_documents(docs: Sequence[Document]) -> QueueRead:
    """Translate and validate the queue documents among ``docs``; the configuration and the
    fields gpupool does not act on. ConfigError for the first problem."""
    objects: list[QueueObject] = []
    settings: tuple[Document, QueueSettings] | None = None
    for doc in docs:
        if doc.kind == "QueueSettings":
            if settings is not None:
                raise doc.problem(
                    f"a second QueueSettings document (the first is document "
                    f"{settings[0].index}); put every setting in one"
                )
            check_api_version(doc, QUEUE_KINDS["QueueSettings"])
            settings = (doc, _settings(doc))
        else:
            objects.append(translate(doc))
    try:
        return assemble(objects, settings[1] if settings else QueueSettings())
    except ConfigError as exc:
        source = docs[0].source if docs else "<documents>"
        if exc.where is not None and exc.where.startswith(f"{source}:"):
            raise  # names its document already
        raise ConfigError(
            f"{source}: {exc}",
            field=exc.field,
            value=exc.value,
            rule=exc.rule,
            where=exc.where or source,
            document=exc.document,
        ) from exc


def translate(doc: Document) -> QueueObject:
    """One queue object, its fields checked and translated on its own (references to other
    objects are checked by :func:`assemble`). ConfigError naming the field and rule."""
    kind = doc.kind
    if kind is not None and kind in QUEUE_KINDS:
        check_api_version(doc, QUEUE_KINDS[kind])
    if kind == "ResourceFlavor":
        return _flavor(doc)
    if kind == "ClusterQueue":
        return _cluster_queue(doc)
    if kind == "Cohort":
        return _cohort(doc)
    if kind == "LocalQueue":
        return _local_queue(doc)
    if kind in ("WorkloadPriorityClass", "PriorityClass"):
        return _priority_class(doc)
    if kind == "AdmissionCheck":
        return _admission_check(doc)
    if kind == "ProvisioningRequestConfig":
        return _provisioning_config(doc)
    raise doc.error("kind", kind, "is not a queue object; known: " + ", ".join(QUEUE_KINDS))


def _name(doc: Document, meta: Metadata) -> str:
    if not is_name(meta.name):
        raise doc.error("metadata.name", meta.name, NAME_RULE)
    return meta.name


def _flavor(doc: Document) -> QueueObject:
    d = parse(ResourceFlavorDoc, doc)
    out = QueueObject(doc, ResourceFlavor(_name(doc, d.metadata), dict(d.spec.node_labels)))
    spec = d.spec
    if spec.node_taints:
        out.ignored.append(
            (
                "spec.nodeTaints",
                "not acted on: gpupool reads taints from the "
                "nodes themselves and does not add the flavor's to them",
            )
        )
    if spec.tolerations:
        out.ignored.append(
            (
                "spec.tolerations",
                "not acted on: gpupool does not add the flavor's tolerations to the pods it admits",
            )
        )
    if spec.topology_name:
        out.ignored.append(
            (
                "spec.topologyName",
                "not acted on: gpupool does not do "
                "topology-aware scheduling of Kueue's Topology objects",
            )
        )
    return out


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
    a, b = getattr(spec, _snake(kueue)) or None, getattr(spec, _snake(v1beta2)) or None
    if a is not None and b is not None and a != b:
        raise doc.error(f"spec.{v1beta2}", b, f"contradicts spec.{kueue}={show(a)}; give one")
    value = a if a is not None else b
    path = f"spec.{kueue if a is not None else v1beta2}"
    if value is not None and not is_name(value):
        raise doc.error(path, value, NAME_RULE)
    return path, value


def _snake(camel: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)


def _cluster_queue(doc: Document) -> QueueObject:
    d = parse(ClusterQueueDoc, doc)
    spec = d.spec
    name = _name(doc, d.metadata)
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
        if getattr(spec, _snake(key)) is not None:
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


def _cohort(doc: Document) -> QueueObject:
    d = parse(CohortDoc, doc)
    spec = d.spec
    name = _name(doc, d.metadata)
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


def _local_queue(doc: Document) -> QueueObject:
    d = parse(LocalQueueDoc, doc)
    name = _name(doc, d.metadata)
    namespace = d.metadata.namespace or "default"
    if not is_name(namespace):
        raise doc.error("metadata.namespace", namespace, NAME_RULE)
    target = d.spec.cluster_queue
    out = QueueObject(doc, LocalQueue(name, target, namespace), [], "spec.clusterQueue", target)
    if d.spec.stop_policy not in (None, "None"):
        out.ignored.append(
            ("spec.stopPolicy", f"{d.spec.stop_policy} is not acted on: the queue keeps admitting")
        )
    weight = d.spec.fair_sharing.weight if d.spec.fair_sharing is not None else None
    if weight is not None and convert(doc, number, weight, "spec.fairSharing.weight") != 1:
        out.ignored.append(
            (
                "spec.fairSharing",
                "not acted on: inside a ClusterQueue gpupool shares by user, not by LocalQueue",
            )
        )
    return out


def _admission_check(doc: Document) -> QueueObject:
    d = parse(AdmissionCheckDoc, doc)
    name = _name(doc, d.metadata)
    spec = d.spec
    ref: str | None = None
    out = QueueObject(
        doc, AdmissionCheck(name), [], "spec.parameters.name", None, controller=spec.controller_name
    )
    if spec.retry_delay_minutes not in (None, 15):  # 15: v1beta1's default
        out.ignored.append(
            (
                "spec.retryDelayMinutes",
                "not acted on: retries follow the ProvisioningRequestConfig's retryStrategy",
            )
        )
    if spec.controller_name != PROVISIONING_CONTROLLER:
        out.ignored.append(
            (
                "spec.controllerName",
                f"{spec.controller_name} is not run by "
                f"gpupool (it runs {PROVISIONING_CONTROLLER}); queues naming "
                "this check admit without it",
            )
        )
        return out
    if spec.parameters is not None:
        if spec.parameters.kind != "ProvisioningRequestConfig":
            raise doc.error(
                "spec.parameters.kind", spec.parameters.kind, "must be ProvisioningRequestConfig"
            )
        ref = spec.parameters.name
    out.ref = ref
    return out


def _provisioning_config(doc: Document) -> QueueObject:
    d = parse(ProvisioningRequestConfigDoc, doc)
    name = _name(doc, d.metadata)
    spec = d.spec
    retry = RetryStrategy()
    rs = spec.retry_strategy
    if rs is not None:
        for path, value in (
            ("backoffLimitCount", rs.backoff_limit_count),
            ("backoffBaseSeconds", rs.backoff_base_seconds),
            ("backoffMaxSeconds", rs.backoff_max_seconds),
        ):
            if value is not None and value < (0 if path == "backoffLimitCount" else 1):
                raise doc.error(
                    f"spec.retryStrategy.{path}",
                    value,
                    "must be zero or more" if path == "backoffLimitCount" else "must be positive",
                )
        retry = RetryStrategy(
            rs.backoff_limit_count
            if rs.backoff_limit_count is not None
            else retry.backoff_limit_count,
            float(rs.backoff_base_seconds)
            if rs.backoff_base_seconds is not None
            else retry.backoff_base_s,
            float(rs.backoff_max_seconds)
            if rs.backoff_max_seconds is not None
            else retry.backoff_max_s,
        )
    if not spec.provisioning_class_name:
        raise doc.error("spec.provisioningClassName", "", "must not be empty")
    try:
        config = ProvisioningRequestConfig(
            name, spec.provisioning_class_name, dict(spec.parameters), retry
        )
    except ConfigError as exc:
        raise doc.problem(str(exc), exc) from exc
    out = QueueObject(doc, config)
    for key, reason in (
        ("managedResources", "not acted on: every resource of the pod set is managed"),
        ("podSetUpdates", "not acted on by the queue configuration"),
        ("podSetMergePolicy", "not acted on: a request holds one pod set"),
    ):
        if getattr(spec, _snake(key)) is not None:
            out.ignored.append((f"spec.{key}", reason))
    return out


def _priority_class(doc: Document) -> QueueObject:
    model: type[WorkloadPriorityClassDoc | PriorityClassDoc] = (
        PriorityClassDoc if doc.kind == "PriorityClass" else WorkloadPriorityClassDoc
    )
    d = parse(model, doc)
    return QueueObject(doc, PriorityClass(_name(doc, d.metadata), d.value, d.description))


def _settings(doc: Document) -> QueueSettings:
    spec = parse(QueueSettingsDoc, doc).spec
    out = QueueSettings()
    for key, attr, positive in (
        ("usageHalfLife", "usage_half_life_s", True),
        ("defaultRuntime", "default_runtime_s", True),
        ("minRuntime", "min_runtime_s", False),
        ("preemptionCooldown", "preemption_cooldown_s", False),
    ):
        raw = getattr(spec, _snake(key))
        if raw is None:
            continue
        seconds = convert(doc, duration_s, raw, f"spec.{key}")
        if positive and not seconds > 0:
            raise doc.error(f"spec.{key}", raw, "must be positive")
        out = replace(out, **{attr: seconds})
    if spec.max_preemptions_per_job is not None:
        if spec.max_preemptions_per_job < 0:
            raise doc.error(
                "spec.maxPreemptionsPerJob", spec.max_preemptions_per_job, "must be zero or more"
            )
        out = replace(out, max_preemptions_per_job=spec.max_preemptions_per_job)
    if spec.normalized_shares is not None:
        out = replace(out, normalized_shares=spec.normalized_shares)
    return out
