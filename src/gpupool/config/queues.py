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

Where Kueue's defaults and gpupool's differ, an omitted field takes gpupool's: a ClusterQueue
without ``preemption`` preempts lower priorities within itself and reclaims anything it lent
(Kueue's default is ``Never`` for both).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import Field

from gpupool.config.documents import (
    NAME_RULE,
    Document,
    Duration,
    Metadata,
    Quantity,
    Strict,
    check_api_version,
    field_text,
    is_name,
    parse,
    show,
)
from gpupool.config.quantity import (
    cpu_milli,
    duration_s,
    gpu_memory_mib,
    gpu_milli,
    memory_mib,
    number,
    whole_number,
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
    FlavorQuotas,
    LocalQueue,
    PreemptionPolicy,
    PriorityClass,
    QueueConfig,
    QueueingStrategy,
    QueueSettings,
    Quota,
    Reclaim,
    Resource,
    ResourceFlavor,
    WithinQueue,
)

__all__ = [
    "GPUPOOL_API_VERSION", "KUEUE_API_VERSIONS", "QUEUE_KINDS", "RESOURCE_NAMES",
    "ResourceName", "queue_config_from_documents", "resource_name",
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


@dataclass(frozen=True, slots=True)
class ResourceName:
    """How a resource name in a quota maps to a core resource, and in what unit."""

    resource: Resource
    convert: Callable[[object, str], int]
    unit: str


_GPUS = ResourceName(Resource.GPU_MILLI, gpu_milli,
                     "GPUs of compute, whole or fractional (8 -> 8000, \"0.5\" -> 500)")
_MILLI = ResourceName(Resource.GPU_MILLI, whole_number, "milli-GPU, 1000 a whole GPU")
_GPU_MEMORY = ResourceName(Resource.GPU_MEMORY_MIB, gpu_memory_mib,
                           "GPU memory: MiB when bare, bytes with a suffix (80Gi)")
RESOURCE_NAMES: Mapping[str, ResourceName] = {
    "nvidia.com/gpu": _GPUS,
    "gpu": _GPUS,
    "gpupool.io/gpu-milli": _MILLI,
    "gpu_milli": _MILLI,
    "gpupool.io/cards": ResourceName(Resource.GPU, whole_number, "whole cards"),
    "nvidia.com/gpumem": _GPU_MEMORY,
    "gpu_memory": _GPU_MEMORY,
    "cpu": ResourceName(Resource.CPU_MILLI, cpu_milli, "CPUs (2, \"500m\")"),
    "memory": ResourceName(Resource.MEMORY_MIB, memory_mib, "bytes (\"64Gi\")"),
}
"""Quota resource names. ``nvidia.com/gpu`` counts GPUs of compute: a queue's 8 GPUs are
8000 milli-GPU, used as whole cards or as slices; ``gpupool.io/cards`` counts whole cards."""


def resource_name(name: str, path: str = "name") -> ResourceName:
    """The core resource and unit of a quota resource name; ConfigError for any other."""
    try:
        return RESOURCE_NAMES[name]
    except KeyError:
        raise ConfigError(field_text(path, name, "is not a known resource; known: "
                                     + ", ".join(RESOURCE_NAMES))) from None


def _resource(name: object, path: str) -> ResourceName:
    if not isinstance(name, str):
        raise ConfigError(field_text(path, name, "should be a resource name"))
    return resource_name(name, path)


# -- the shape of the documents ---------------------------------------------------------------


class ResourceQuotaSpec(Strict):
    name: str
    nominal_quota: Quantity
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class FlavorQuotasSpec(Strict):
    name: str
    resources: list[ResourceQuotaSpec] = Field(min_length=1)


class ResourceGroupSpec(Strict):
    covered_resources: list[str] | None = None
    flavors: list[FlavorQuotasSpec] = Field(min_length=1)


class FairSharingSpec(Strict):
    weight: Quantity | None = None


class BorrowWithinCohortSpec(Strict):
    policy: Literal["Never"] = "Never"
    max_priority_threshold: int | None = None


class PreemptionSpec(Strict):
    within_cluster_queue: Literal["Never", "LowerPriority"] = "LowerPriority"
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = "Any"
    borrow_within_cohort: BorrowWithinCohortSpec | None = None
    fair_share: bool = True
    """gpupool's extension: whether fair-share preemption across queues may take from it."""


class ClusterQueueSpec(Strict):
    resource_groups: list[ResourceGroupSpec] = Field(default_factory=list)
    cohort: str | None = None
    cohort_name: str | None = None  # the spelling of v1beta2 and v1
    queueing_strategy: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"
    preemption: PreemptionSpec = PreemptionSpec()
    fair_sharing: FairSharingSpec | None = None
    non_preemptive: bool = False  # gpupool's extension
    namespace_selector: dict[str, Any] | None = None  # accepted; every namespace may submit
    flavor_fungibility: dict[str, Any] | None = None  # accepted; no effect
    admission_checks: list[str] | None = None  # AdmissionCheck names (provisioning)


class CohortSpec(Strict):
    parent: str | None = None
    parent_name: str | None = None  # the spelling of v1beta2 and v1
    resource_groups: list[ResourceGroupSpec] = Field(default_factory=list)
    fair_sharing: FairSharingSpec | None = None


class ResourceFlavorSpec(Strict):
    node_labels: dict[str, str] = Field(default_factory=dict)


class LocalQueueSpec(Strict):
    cluster_queue: str


class QueueSettingsSpec(Strict):
    usage_half_life: Duration | None = None
    default_runtime: Duration | None = None
    min_runtime: Duration | None = None
    max_preemptions_per_job: int | None = None
    preemption_cooldown: Duration | None = None


class AdmissionCheckParametersSpec(Strict):
    api_group: str = "kueue.x-k8s.io"
    kind: str = "ProvisioningRequestConfig"
    name: str


class AdmissionCheckSpec(Strict):
    controller_name: str
    parameters: AdmissionCheckParametersSpec | None = None
    retry_delay_minutes: int | None = None  # accepted (deprecated in Kueue); no effect


class RetryStrategySpec(Strict):
    backoff_limit_count: int | None = None
    backoff_base_seconds: int | None = None
    backoff_max_seconds: int | None = None


class ProvisioningRequestConfigSpec(Strict):
    provisioning_class_name: str
    parameters: dict[str, str] = Field(default_factory=dict)
    managed_resources: list[str] | None = None  # accepted; every resource is managed
    retry_strategy: RetryStrategySpec | None = None


class _Object(Strict):
    api_version: str | None = None
    kind: str
    metadata: Metadata
    status: Any = None  # accepted and ignored, so that kubectl output loads


class ResourceFlavorDoc(_Object):
    spec: ResourceFlavorSpec = ResourceFlavorSpec()


class ClusterQueueDoc(_Object):
    spec: ClusterQueueSpec = ClusterQueueSpec()


class CohortDoc(_Object):
    spec: CohortSpec = CohortSpec()


class LocalQueueDoc(_Object):
    spec: LocalQueueSpec


class AdmissionCheckDoc(_Object):
    spec: AdmissionCheckSpec


class ProvisioningRequestConfigDoc(_Object):
    spec: ProvisioningRequestConfigSpec


class WorkloadPriorityClassDoc(_Object):
    value: int
    description: str = ""


class PriorityClassDoc(_Object):
    value: int
    description: str = ""
    global_default: bool = False  # accepted; no effect
    preemption_policy: Literal["PreemptLowerPriority", "Never"] | None = None  # accepted


class QueueSettingsDoc(Strict):
    api_version: str | None = None
    kind: Literal["QueueSettings"]
    metadata: Metadata | None = None
    spec: QueueSettingsSpec = QueueSettingsSpec()


# -- translation ------------------------------------------------------------------------------


@dataclass
class _Found:
    """An object and where it came from: its document and the references it makes."""

    doc: Document
    obj: Any
    flavor_refs: list[tuple[str, str]] = field(default_factory=list)  # (path, flavor)
    ref_path: str = ""  # spec.cohort / spec.parent / spec.clusterQueue, as written
    ref: str | None = None


def queue_config_from_documents(docs: Sequence[Document]) -> QueueConfig:
    """Translate and validate the queue documents among ``docs`` (other kinds are an error)."""
    found: dict[str, list[_Found]] = {kind: [] for kind in QUEUE_KINDS}
    settings: tuple[Document, QueueSettings] | None = None
    for doc in docs:
        kind = doc.kind
        if kind is not None and kind in QUEUE_KINDS:
            check_api_version(doc, QUEUE_KINDS[kind])
        if kind == "ResourceFlavor":
            found[kind].append(_flavor(doc))
        elif kind == "ClusterQueue":
            found[kind].append(_cluster_queue(doc))
        elif kind == "Cohort":
            found[kind].append(_cohort(doc))
        elif kind == "LocalQueue":
            found[kind].append(_local_queue(doc))
        elif kind in ("WorkloadPriorityClass", "PriorityClass"):
            found["PriorityClass"].append(_priority_class(doc))
        elif kind == "AdmissionCheck":
            found[kind].append(_admission_check(doc))
        elif kind == "ProvisioningRequestConfig":
            found[kind].append(_provisioning_config(doc))
        elif kind == "QueueSettings":
            if settings is not None:
                raise doc.problem(f"a second QueueSettings document (the first is document "
                                  f"{settings[0].index}); put every setting in one")
            settings = (doc, _settings(doc))
        else:
            raise doc.problem(f"kind={show(kind)} is not a queue object; known: "
                              + ", ".join(QUEUE_KINDS))
    _check_references(found)
    checks = _resolve_checks(found)
    config = QueueConfig(
        flavors=tuple(f.obj for f in found["ResourceFlavor"]),
        cluster_queues=tuple(f.obj for f in found["ClusterQueue"]),
        cohorts=tuple(f.obj for f in found["Cohort"]),
        local_queues=tuple(f.obj for f in found["LocalQueue"]),
        priority_classes=tuple(f.obj for f in found["PriorityClass"]),
        settings=settings[1] if settings else QueueSettings(),
        admission_checks=checks,
    )
    try:
        return config.validate()
    except ConfigError as exc:
        source = docs[0].source if docs else "<documents>"
        raise ConfigError(f"{source}: {exc}") from exc


def _name(doc: Document, meta: Metadata) -> str:
    if not is_name(meta.name):
        raise doc.error("metadata.name", meta.name, NAME_RULE)
    return meta.name


def _flavor(doc: Document) -> _Found:
    d = parse(ResourceFlavorDoc, doc)
    return _Found(doc, ResourceFlavor(_name(doc, d.metadata), dict(d.spec.node_labels)))


def _weight(doc: Document, fair: FairSharingSpec | None) -> float:
    if fair is None or fair.weight is None:
        return 1.0
    path = "spec.fairSharing.weight"
    weight: float = _convert(doc, number, fair.weight, path)
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


def _cluster_queue(doc: Document) -> _Found:
    d = parse(ClusterQueueDoc, doc)
    spec = d.spec
    name = _name(doc, d.metadata)
    cohort_path, cohort = _one_of(doc, spec, "cohort", "cohortName")
    limits_rule = None if cohort else \
        "is set but the queue has no spec.cohort to borrow from or lend to"
    flavors, refs = _quotas(doc, spec.resource_groups, limits_rule, spec.non_preemptive)
    p = spec.preemption
    checks = tuple(spec.admission_checks or ())
    for i, check in enumerate(checks):
        if not is_name(check):
            raise doc.error(f"spec.admissionChecks[{i}]", check, NAME_RULE)
    queue = ClusterQueue(
        name=name,
        flavors=flavors,
        cohort=cohort,
        weight=_weight(doc, spec.fair_sharing),
        preemption=PreemptionPolicy(WithinQueue(p.within_cluster_queue),
                                    Reclaim(p.reclaim_within_cohort), p.fair_share),
        non_preemptive=spec.non_preemptive,
        queueing_strategy=QueueingStrategy(spec.queueing_strategy),
        admission_checks=checks,
    )
    return _Found(doc, queue, refs, cohort_path, cohort)


def _cohort(doc: Document) -> _Found:
    d = parse(CohortDoc, doc)
    spec = d.spec
    name = _name(doc, d.metadata)
    parent_path, parent = _one_of(doc, spec, "parent", "parentName")
    limits_rule = None if parent else \
        "is set but the cohort has no spec.parent to borrow from or lend to"
    flavors, refs = _quotas(doc, spec.resource_groups, limits_rule, False)
    cohort = Cohort(name, parent, flavors, _weight(doc, spec.fair_sharing))
    return _Found(doc, cohort, refs, parent_path, parent)


def _local_queue(doc: Document) -> _Found:
    d = parse(LocalQueueDoc, doc)
    name = _name(doc, d.metadata)
    namespace = d.metadata.namespace or "default"
    if not is_name(namespace):
        raise doc.error("metadata.namespace", namespace, NAME_RULE)
    target = d.spec.cluster_queue
    return _Found(doc, LocalQueue(name, target, namespace), [], "spec.clusterQueue", target)


def _admission_check(doc: Document) -> _Found:
    d = parse(AdmissionCheckDoc, doc)
    name = _name(doc, d.metadata)
    spec = d.spec
    if spec.controller_name != PROVISIONING_CONTROLLER:
        raise doc.error("spec.controllerName", spec.controller_name,
                        f"is not supported; gpupool decides {PROVISIONING_CONTROLLER}")
    ref: str | None = None
    if spec.parameters is not None:
        if spec.parameters.kind != "ProvisioningRequestConfig":
            raise doc.error("spec.parameters.kind", spec.parameters.kind,
                            "must be ProvisioningRequestConfig")
        ref = spec.parameters.name
    found = _Found(doc, AdmissionCheck(name), [], "spec.parameters.name", ref)
    return found


def _provisioning_config(doc: Document) -> _Found:
    d = parse(ProvisioningRequestConfigDoc, doc)
    name = _name(doc, d.metadata)
    spec = d.spec
    retry = RetryStrategy()
    rs = spec.retry_strategy
    if rs is not None:
        for path, value in (("backoffLimitCount", rs.backoff_limit_count),
                            ("backoffBaseSeconds", rs.backoff_base_seconds),
                            ("backoffMaxSeconds", rs.backoff_max_seconds)):
            if value is not None and value < (0 if path == "backoffLimitCount" else 1):
                raise doc.error(f"spec.retryStrategy.{path}", value,
                                "must be zero or more" if path == "backoffLimitCount"
                                else "must be positive")
        retry = RetryStrategy(
            rs.backoff_limit_count if rs.backoff_limit_count is not None
            else retry.backoff_limit_count,
            float(rs.backoff_base_seconds) if rs.backoff_base_seconds is not None
            else retry.backoff_base_s,
            float(rs.backoff_max_seconds) if rs.backoff_max_seconds is not None
            else retry.backoff_max_s)
    if not spec.provisioning_class_name:
        raise doc.error("spec.provisioningClassName", "", "must not be empty")
    try:
        config = ProvisioningRequestConfig(name, spec.provisioning_class_name,
                                           dict(spec.parameters), retry)
    except ConfigError as exc:
        raise doc.problem(str(exc)) from exc
    return _Found(doc, config)


def _resolve_checks(found: Mapping[str, list[_Found]]) -> tuple[AdmissionCheck, ...]:
    """AdmissionChecks with their ProvisioningRequestConfig; every name a ClusterQueue lists
    in ``admissionChecks`` must be an AdmissionCheck of these documents."""
    configs = {f.obj.name: f.obj for f in found["ProvisioningRequestConfig"]}
    checks: dict[str, AdmissionCheck] = {}
    for item in found["AdmissionCheck"]:
        if item.ref is not None:
            if item.ref not in configs:
                raise item.doc.error(item.ref_path, item.ref,
                                     "is not a ProvisioningRequestConfig; known: "
                                     + (", ".join(sorted(configs)) or "none"))
            checks[item.obj.name] = AdmissionCheck(item.obj.name, config=configs[item.ref])
        else:
            checks[item.obj.name] = item.obj
    for item in found["ClusterQueue"]:
        for i, name in enumerate(item.obj.admission_checks):
            if name not in checks:
                raise item.doc.error(f"spec.admissionChecks[{i}]", name,
                                     "is not an AdmissionCheck; known: "
                                     + (", ".join(sorted(checks)) or "none"))
    return tuple(checks.values())


def _priority_class(doc: Document) -> _Found:
    model: type[WorkloadPriorityClassDoc | PriorityClassDoc] = (
        PriorityClassDoc if doc.kind == "PriorityClass" else WorkloadPriorityClassDoc)
    d = parse(model, doc)
    return _Found(doc, PriorityClass(_name(doc, d.metadata), d.value, d.description))


def _settings(doc: Document) -> QueueSettings:
    spec = parse(QueueSettingsDoc, doc).spec
    out = QueueSettings()
    for key, attr, positive in (("usageHalfLife", "usage_half_life_s", True),
                                ("defaultRuntime", "default_runtime_s", True),
                                ("minRuntime", "min_runtime_s", False),
                                ("preemptionCooldown", "preemption_cooldown_s", False)):
        raw = getattr(spec, _snake(key))
        if raw is None:
            continue
        seconds = _convert(doc, duration_s, raw, f"spec.{key}")
        if positive and not seconds > 0:
            raise doc.error(f"spec.{key}", raw, "must be positive")
        out = replace(out, **{attr: seconds})
    if spec.max_preemptions_per_job is not None:
        if spec.max_preemptions_per_job < 0:
            raise doc.error("spec.maxPreemptionsPerJob", spec.max_preemptions_per_job,
                            "must be zero or more")
        out = replace(out, max_preemptions_per_job=spec.max_preemptions_per_job)
    return out


def _convert(doc: Document, fn: Callable[[object, str], Any], value: object, path: str) -> Any:
    try:
        return fn(value, path)
    except ConfigError as exc:
        raise doc.problem(str(exc)) from exc


def _quotas(doc: Document, groups: list[ResourceGroupSpec], limits_rule: str | None,
            non_preemptive: bool) -> tuple[tuple[FlavorQuotas, ...], list[tuple[str, str]]]:
    """The flavors' quotas of a ClusterQueue or Cohort, and (path, flavor) references.

    Kueue's rules: a flavor, and a resource, belong to one resource group; every flavor of a
    group lists the group's ``coveredResources``. ``limits_rule``, when set, is why borrowing
    and lending limits are not allowed here.
    """
    out: list[FlavorQuotas] = []
    refs: list[tuple[str, str]] = []
    flavor_at: dict[str, str] = {}
    resource_group: dict[str, int] = {}
    for g, group in enumerate(groups):
        gp = f"spec.resourceGroups[{g}]"
        covered = group.covered_resources
        for f, fq in enumerate(group.flavors):
            fp = f"{gp}.flavors[{f}]"
            if fq.name in flavor_at:
                raise doc.error(f"{fp}.name", fq.name,
                                f"is listed twice (first at {flavor_at[fq.name]}); a flavor "
                                "belongs to one resource group and appears once in it")
            flavor_at[fq.name] = fp
            refs.append((f"{fp}.name", fq.name))
            quotas: dict[Resource, Quota] = {}
            given: dict[Resource, int] = {}
            names: list[str] = []
            for r, rq in enumerate(fq.resources):
                rp = f"{fp}.resources[{r}]"
                unit: ResourceName = _convert(doc, _resource, rq.name, f"{rp}.name")
                if unit.resource in quotas:
                    raise doc.error(f"{rp}.name", rq.name,
                                    f"counts {unit.resource} as resources[{given[unit.resource]}]"
                                    " does already; give each resource once")
                given[unit.resource] = r
                other = resource_group.setdefault(rq.name, g)
                if other != g:
                    raise doc.error(f"{rp}.name", rq.name,
                                    f"is already covered by spec.resourceGroups[{other}]; a "
                                    "resource belongs to one resource group")
                names.append(rq.name)
                quotas[unit.resource] = _quota(doc, rp, rq, unit, limits_rule, non_preemptive)
            if covered is not None and sorted(names) != sorted(covered):
                raise doc.error(f"{fp}.resources", names,
                                f"do not match {gp}.coveredResources={show(covered)}; every "
                                "flavor of a group lists the resources the group covers")
            out.append(FlavorQuotas(fq.name, quotas))
    return tuple(out), refs


def _quota(doc: Document, rp: str, rq: ResourceQuotaSpec, unit: ResourceName,
           limits_rule: str | None, non_preemptive: bool) -> Quota:
    nominal = _convert(doc, unit.convert, rq.nominal_quota, f"{rp}.nominalQuota")
    borrowing = lending = None
    if rq.borrowing_limit is not None:
        path = f"{rp}.borrowingLimit"
        borrowing = _convert(doc, unit.convert, rq.borrowing_limit, path)
        if limits_rule:
            raise doc.error(path, rq.borrowing_limit, limits_rule)
        if non_preemptive and borrowing > 0:
            raise doc.error(path, rq.borrowing_limit,
                            "is not allowed: spec.nonPreemptive=true, and a non-preemptive "
                            "queue cannot borrow, since borrowed capacity must be reclaimable")
    if rq.lending_limit is not None:
        path = f"{rp}.lendingLimit"
        lending = _convert(doc, unit.convert, rq.lending_limit, path)
        if limits_rule:
            raise doc.error(path, rq.lending_limit, limits_rule)
        if lending > nominal:
            raise doc.error(path, rq.lending_limit,
                            f"is above nominalQuota={show(rq.nominal_quota)}; one cannot lend "
                            "more than one has")
    return Quota(nominal, borrowing, lending)


def _check_references(found: Mapping[str, list[_Found]]) -> None:
    """Duplicate names, unknown flavors and cluster queues, and cycles among cohorts."""
    first: dict[str, dict[str, _Found]] = {}
    for kind, items in found.items():
        seen = first.setdefault(kind, {})
        for item in items:
            key = item.obj.name
            if isinstance(item.obj, LocalQueue):
                key = f"{item.obj.namespace}/{key}"
            if key in seen:
                raise item.doc.error("metadata.name", item.obj.name,
                                     f"is defined twice (first in document "
                                     f"{seen[key].doc.index})")
            seen[key] = item
    queues, cohorts = first["ClusterQueue"], first["Cohort"]
    for name, item in cohorts.items():
        if name in queues:
            raise item.doc.error("metadata.name", name,
                                 f"is also a ClusterQueue (document {queues[name].doc.index}); "
                                 "names must be unique across ClusterQueues and Cohorts")
    flavors = sorted(first["ResourceFlavor"])
    for item in [*found["ClusterQueue"], *found["Cohort"]]:
        for path, flavor in item.flavor_refs:
            if flavor not in first["ResourceFlavor"]:
                raise item.doc.error(path, flavor, "is not a ResourceFlavor; known: "
                                     + (", ".join(flavors) or "none"))
        if item.ref is not None and item.ref in queues:
            raise item.doc.error(item.ref_path, item.ref,
                                 "names a ClusterQueue; it must name a cohort")
    for item in found["LocalQueue"]:
        if item.ref not in queues:
            raise item.doc.error(item.ref_path, item.ref, "is not a ClusterQueue; known: "
                                 + (", ".join(sorted(queues)) or "none"))
    for item in found["Cohort"]:
        chain: list[str] = [item.obj.name]
        current = item
        while current.ref is not None:
            if current.ref in chain:
                cycle = " -> ".join([*chain[chain.index(current.ref):], current.ref])
                raise current.doc.error(current.ref_path, current.ref,
                                        f"closes a cycle in the cohort tree: {cycle}")
            chain.append(current.ref)
            if current.ref not in cohorts:
                break  # a cohort named but not declared: a root with no quota of its own
            current = cohorts[current.ref]
