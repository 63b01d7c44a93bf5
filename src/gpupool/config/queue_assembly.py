"""Queue objects translated one by one, assembled into one validated configuration.

Each document becomes a :class:`QueueObject` on its own (``queues.translate``); here the
references between them are checked (unknown flavors, ClusterQueues, AdmissionChecks and
ProvisioningRequestConfigs, duplicate names, cohort cycles), AdmissionChecks get their
ProvisioningRequestConfig, and the core's rules run over the whole (:func:`assemble`). Every
error names the document of the object at fault, so that a caller holding many objects (the
Kubernetes adapter) can tell which one to mark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpupool.config.documents import Document
from gpupool.core.provisioning import PROVISIONING_CONTROLLER, AdmissionCheck
from gpupool.core.quota import LocalQueue, QueueConfig, QueueSettings

__all__ = ["Ignored", "QueueObject", "QueueRead", "assemble"]

_KINDS = (
    "ResourceFlavor",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
    "PriorityClass",
    "AdmissionCheck",
    "ProvisioningRequestConfig",
)


@dataclass(frozen=True, slots=True)
class Ignored:
    """A field read but not acted on (or acted on only in part), and why."""

    object: str  # "ClusterQueue team-a", "LocalQueue ns/name"
    path: str  # "spec.flavorFungibility"
    reason: str

    def __str__(self) -> str:
        return f"{self.object}: {self.path}: {self.reason}"


@dataclass
class QueueObject:
    """One translated queue object: its document, the core object and the references it
    makes (checked against the other objects by :func:`assemble`), and the fields it holds
    that gpupool does not act on."""

    doc: Document
    obj: Any
    flavor_refs: list[tuple[str, str]] = field(default_factory=list)  # (path, flavor)
    ref_path: str = ""  # spec.cohort / spec.parent / spec.clusterQueue, as written
    ref: str | None = None
    ignored: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    controller: str = ""  # an AdmissionCheck's controllerName

    @property
    def kind(self) -> str:
        return self.doc.kind or ""

    @property
    def label(self) -> str:
        """``Kind name`` (``LocalQueue ns/name``)."""
        return f"{self.kind} {self.doc.name}"


@dataclass(frozen=True, slots=True)
class QueueRead:
    """A validated configuration and the fields in it that gpupool does not act on."""

    config: QueueConfig
    ignored: tuple[Ignored, ...] = ()


def assemble(objects: Sequence[QueueObject], settings: QueueSettings | None = None) -> QueueRead:
    """The configuration of translated objects: references between them checked (unknown
    flavor or cluster queue, duplicate names, cohort cycles), then the core's rules.
    ConfigError for the first problem; its ``where`` names the object's document."""
    found: dict[str, list[QueueObject]] = {kind: [] for kind in _KINDS}
    for item in objects:
        kind = "PriorityClass" if item.kind == "WorkloadPriorityClass" else item.kind
        found[kind].append(item)
    _check_references(found)
    checks, dropped = _resolve_checks(found)
    config = QueueConfig(
        flavors=tuple(f.obj for f in found["ResourceFlavor"]),
        cluster_queues=tuple(f.obj for f in found["ClusterQueue"]),
        cohorts=tuple(f.obj for f in found["Cohort"]),
        local_queues=tuple(f.obj for f in found["LocalQueue"]),
        priority_classes=tuple(f.obj for f in found["PriorityClass"]),
        settings=settings or QueueSettings(),
        admission_checks=checks,
    )
    config.validate()
    ignored = [
        Ignored(item.label, path, reason) for item in objects for path, reason in item.ignored
    ]
    ignored.extend(dropped)
    return QueueRead(config, tuple(ignored))


def _resolve_checks(
    found: Mapping[str, list[QueueObject]],
) -> tuple[tuple[AdmissionCheck, ...], list[Ignored]]:
    """AdmissionChecks with their ProvisioningRequestConfig; every name a ClusterQueue lists
    in ``admissionChecks`` must be an AdmissionCheck of these documents. A check of another
    controller is dropped from the queues that name it (reported)."""
    configs = {f.obj.name: f.obj for f in found["ProvisioningRequestConfig"]}
    checks: dict[str, AdmissionCheck] = {}
    foreign: set[str] = set()
    for item in found["AdmissionCheck"]:
        if item.controller and item.controller != PROVISIONING_CONTROLLER:
            foreign.add(item.obj.name)
        elif item.ref is not None:
            if item.ref not in configs:
                raise item.doc.error(
                    item.ref_path,
                    item.ref,
                    "is not a ProvisioningRequestConfig; known: "
                    + (", ".join(sorted(configs)) or "none"),
                )
            checks[item.obj.name] = AdmissionCheck(item.obj.name, config=configs[item.ref])
        else:
            checks[item.obj.name] = item.obj
    dropped: list[Ignored] = []
    for item in found["ClusterQueue"]:
        names = item.obj.admission_checks
        for i, name in enumerate(names):
            if name not in checks and name not in foreign:
                raise item.doc.error(
                    f"spec.admissionChecks[{i}]",
                    name,
                    "is not an AdmissionCheck; known: "
                    + (", ".join(sorted([*checks, *foreign])) or "none"),
                )
        kept = tuple(n for n in names if n not in foreign)
        if kept != names:
            for name in sorted(set(names) & foreign):
                dropped.append(
                    Ignored(
                        item.label,
                        "spec.admissionChecks",
                        f"{name} is a check gpupool does not run; the queue admits without it",
                    )
                )
            item.obj = replace(item.obj, admission_checks=kept)
    return tuple(checks.values()), dropped


def _check_references(found: Mapping[str, list[QueueObject]]) -> None:
    """Duplicate names, unknown flavors and cluster queues, and cycles among cohorts."""
    first: dict[str, dict[str, QueueObject]] = {}
    for kind, items in found.items():
        seen = first.setdefault(kind, {})
        for item in items:
            key = item.obj.name
            if isinstance(item.obj, LocalQueue):
                key = f"{item.obj.namespace}/{key}"
            if key in seen:
                raise item.doc.error(
                    "metadata.name",
                    item.obj.name,
                    f"is defined twice (first in document {seen[key].doc.index})",
                )
            seen[key] = item
    queues, cohorts = first["ClusterQueue"], first["Cohort"]
    for name, item in cohorts.items():
        if name in queues:
            raise item.doc.error(
                "metadata.name",
                name,
                f"is also a ClusterQueue (document {queues[name].doc.index}); "
                "names must be unique across ClusterQueues and Cohorts",
            )
    flavors = sorted(first["ResourceFlavor"])
    for item in [*found["ClusterQueue"], *found["Cohort"]]:
        for path, flavor in item.flavor_refs:
            if flavor not in first["ResourceFlavor"]:
                raise item.doc.error(
                    path,
                    flavor,
                    "is not a ResourceFlavor; known: " + (", ".join(flavors) or "none"),
                )
        if item.ref is not None and item.ref in queues:
            raise item.doc.error(
                item.ref_path, item.ref, "names a ClusterQueue; it must name a cohort"
            )
    for item in found["LocalQueue"]:
        if item.ref not in queues:
            raise item.doc.error(
                item.ref_path,
                item.ref,
                "is not a ClusterQueue; known: " + (", ".join(sorted(queues)) or "none"),
            )
    for item in found["Cohort"]:
        chain: list[str] = [item.obj.name]
        current = item
        while current.ref is not None:
            if current.ref in chain:
                cycle = " -> ".join([*chain[chain.index(current.ref) :], current.ref])
                raise current.doc.error(
                    current.ref_path, current.ref, f"closes a cycle in the cohort tree: {cycle}"
                )
            chain.append(current.ref)
            if current.ref not in cohorts:
                break  # a cohort named but not declared: a root with no quota of its own
            current = cohorts[current.ref]
