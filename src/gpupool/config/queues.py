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

Defaults follow the object's API group (Kueue's for ``kueue.x-k8s.io``, gpupool's for
``gpupool.io``; see ``queue_cluster.py``).

This module reads every document and translates ResourceFlavor, LocalQueue, the priority
classes and QueueSettings; ClusterQueue and Cohort are translated in ``queue_cluster.py``,
AdmissionCheck and ProvisioningRequestConfig in ``queue_checks.py``, quotas in
``queue_quotas.py``; the kinds and their apiVersions are in ``queue_kinds.py`` and the
references between objects are checked in ``queue_assembly.py``.

Every field of Kueue's schemas is accepted; those gpupool does not act on (or acts on only in
part) are reported, never refused: :func:`read_queue_documents` returns them with the
configuration as ``Ignored(object, path, reason)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpupool.config.documents import NAME_RULE, Document, check_api_version, is_name, parse
from gpupool.config.quantity import duration_s, number
from gpupool.config.queue_assembly import Ignored, QueueObject, QueueRead, assemble
from gpupool.config.queue_checks import admission_check, provisioning_config
from gpupool.config.queue_cluster import cluster_queue, cohort
from gpupool.config.queue_kinds import (
    GPUPOOL_API_VERSION,
    KUEUE_API_VERSIONS,
    QUEUE_KINDS,
    attribute,
    is_kueue,
    object_name,
)
from gpupool.config.queue_quotas import RESOURCE_NAMES, ResourceName, convert, resource_name
from gpupool.config.queue_shapes import (
    LocalQueueDoc,
    PriorityClassDoc,
    QueueSettingsDoc,
    ResourceFlavorDoc,
    WorkloadPriorityClassDoc,
)
from gpupool.core.errors import ConfigError
from gpupool.core.quota import (
    LocalQueue,
    PriorityClass,
    QueueConfig,
    QueueSettings,
    ResourceFlavor,
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
        return cluster_queue(doc)
    if kind == "Cohort":
        return cohort(doc)
    if kind == "LocalQueue":
        return _local_queue(doc)
    if kind in ("WorkloadPriorityClass", "PriorityClass"):
        return _priority_class(doc)
    if kind == "AdmissionCheck":
        return admission_check(doc)
    if kind == "ProvisioningRequestConfig":
        return provisioning_config(doc)
    raise doc.error("kind", kind, "is not a queue object; known: " + ", ".join(QUEUE_KINDS))


def _flavor(doc: Document) -> QueueObject:
    d = parse(ResourceFlavorDoc, doc)
    out = QueueObject(doc, ResourceFlavor(object_name(doc, d.metadata), dict(d.spec.node_labels)))
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


def _local_queue(doc: Document) -> QueueObject:
    d = parse(LocalQueueDoc, doc)
    name = object_name(doc, d.metadata)
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


def _priority_class(doc: Document) -> QueueObject:
    model: type[WorkloadPriorityClassDoc | PriorityClassDoc] = (
        PriorityClassDoc if doc.kind == "PriorityClass" else WorkloadPriorityClassDoc
    )
    d = parse(model, doc)
    return QueueObject(doc, PriorityClass(object_name(doc, d.metadata), d.value, d.description))


def _settings(doc: Document) -> QueueSettings:
    spec = parse(QueueSettingsDoc, doc).spec
    out = QueueSettings()
    for key, attr, positive in (
        ("usageHalfLife", "usage_half_life_s", True),
        ("defaultRuntime", "default_runtime_s", True),
        ("minRuntime", "min_runtime_s", False),
        ("preemptionCooldown", "preemption_cooldown_s", False),
    ):
        raw = getattr(spec, attribute(key))
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
