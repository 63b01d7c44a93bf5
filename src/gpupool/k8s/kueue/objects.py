"""Kueue's queue objects as the API server holds them -> the configuration, one bad object at
a time.

:class:`QueueObjects` keeps the objects the informers see and builds the queue configuration
from them. One bad object never takes the rest down: an object whose fields break a rule is
marked with the ConfigError (field, value and rule) and the configuration keeps the version of
it that was last applied, or goes on without it if it never was good. The same holds for a
reference another object cannot satisfy (a flavor that does not exist, a cohort cycle): the
object at fault is marked and reverted, the rest is applied. This module is pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupool.config import Document
from gpupool.config.queues import Ignored, QueueObject, QueueRead, assemble, translate
from gpupool.core.errors import ConfigError
from gpupool.core.quota import QueueConfig

__all__ = ["GROUP", "KINDS", "Built", "Key", "QueueObjects", "document", "key_of"]

GROUP = "kueue.x-k8s.io"
KINDS: Mapping[str, str] = {
    "ResourceFlavor": "resourceflavors",
    "Cohort": "cohorts",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "AdmissionCheck": "admissionchecks",
    "ProvisioningRequestConfig": "provisioningrequestconfigs",
}
"""The Kueue kinds gpupool reads, and their resource names (LocalQueue alone is namespaced)."""

SOURCE = "kueue.x-k8s.io objects"

Key = tuple[str, str]
"""(kind, ``name`` or ``namespace/name``)."""

_KEPT_TOP = ("apiVersion", "kind", "spec", "value", "description")


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    ns = meta.get("namespace")
    return str(obj.get("kind") or ""), f"{ns}/{name}" if ns else name


def document(obj: Mapping[str, Any], index: int = 1) -> Document:
    """An API object as the configuration layer reads it: what the user wrote (spec, or a
    WorkloadPriorityClass's value), without what the API server and controllers add
    (managedFields, status), which gpupool does not read."""
    meta = obj.get("metadata") or {}
    body: dict[str, Any] = {k: obj[k] for k in _KEPT_TOP if k in obj}
    body["metadata"] = {k: meta[k] for k in ("name", "namespace") if meta.get(k)}
    return Document(SOURCE, index, body)


@dataclass(frozen=True, slots=True)
class Built:
    """The configuration built from the objects, and what each object is told."""

    config: QueueConfig
    ignored: Mapping[Key, tuple[Ignored, ...]]
    """Fields each applied object holds that gpupool does not act on."""
    problems: Mapping[Key, ConfigError]
    """Objects not applied as they stand now, and why (field, value, rule)."""
    reverted: frozenset[Key] = frozenset()
    """Bad objects whose last applied version is still in use."""


@dataclass
class QueueObjects:
    """The Kueue objects seen so far, and the versions of them last applied."""

    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    applied: dict[Key, QueueObject] = field(default_factory=dict)
    _translated: dict[Key, tuple[str, QueueObject | ConfigError]] = field(default_factory=dict)

    def put(self, obj: Mapping[str, Any]) -> Key:
        """An object added or changed. Only what the configuration reads is kept."""
        key = key_of(obj)
        meta = obj.get("metadata") or {}
        slim = {k: obj[k] for k in _KEPT_TOP if k in obj}
        slim["metadata"] = {
            k: meta[k]
            for k in ("name", "namespace", "uid", "generation", "resourceVersion")
            if meta.get(k)
        }
        self.objects[key] = slim
        return key

    def delete(self, obj: Mapping[str, Any]) -> Key:
        key = key_of(obj)
        self.objects.pop(key, None)
        self._translated.pop(key, None)
        return key

    def _translate(self, key: Key, index: int) -> QueueObject | ConfigError:
        obj = self.objects[key]
        version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        cached = self._translated.get(key)
        if cached is not None and cached[0] == version and version:
            return cached[1]
        out: QueueObject | ConfigError
        try:
            out = translate(document(obj, index))
        except ConfigError as exc:
            out = exc
        self._translated[key] = (version, out)
        return out

    def build(self, keep: Iterable[Key] = ()) -> Built:
        """The configuration of every good object. A bad object is marked and its last
        applied version used instead (when there is one). ``keep``: objects deleted from the
        API server whose last applied version must stay (a ClusterQueue that still holds
        quota for running jobs). ConfigError only when no subset of the objects is valid
        (then nothing is applied)."""
        problems: dict[Key, ConfigError] = {}
        chosen: dict[Key, QueueObject] = {}
        reverted: set[Key] = set()
        for i, key in enumerate(sorted(self.objects), 1):
            out = self._translate(key, i)
            if isinstance(out, ConfigError):
                problems[key] = out
                if key in self.applied:
                    chosen[key] = self.applied[key]
                    reverted.add(key)
            else:
                chosen[key] = out
        for key in keep:
            if key not in self.objects and key in self.applied:
                chosen[key] = self.applied[key]
        read = self._assemble(chosen, problems, reverted)
        self.applied = chosen
        ignored: dict[Key, list[Ignored]] = {}
        by_label = {obj.label: key for key, obj in chosen.items()}
        for item in read.ignored:
            owner = by_label.get(item.object)
            if owner is not None:
                ignored.setdefault(owner, []).append(item)
        return Built(
            read.config, {k: tuple(v) for k, v in ignored.items()}, problems, frozenset(reverted)
        )

    def _assemble(
        self, chosen: dict[Key, QueueObject], problems: dict[Key, ConfigError], reverted: set[Key]
    ) -> QueueRead:
        """Assemble, reverting (or leaving out) the object each error names, until valid."""
        for _ in range(2 * len(chosen) + 1):
            try:
                return assemble([chosen[k] for k in sorted(chosen)])
            except ConfigError as exc:
                gone = _referenced(exc)
                if (
                    gone is not None
                    and gone not in chosen
                    and gone in self.applied
                    and gone not in self.objects
                ):
                    # deleted while in use: it stays until nothing names it (as Kueue's
                    # resource-in-use finalizer keeps it)
                    chosen[gone] = self.applied[gone]
                    continue
                key = _culprit(exc, chosen)
                if key is None:
                    raise
                problems.setdefault(key, exc)
                last = self.applied.get(key)
                if last is not None and last is not chosen[key]:
                    chosen[key] = last  # its last applied version
                    reverted.add(key)
                else:
                    del chosen[key]
                    reverted.discard(key)
        raise ConfigError("the queue objects do not settle into a valid configuration")


def _referenced(exc: ConfigError) -> Key | None:
    """The object a reference error names as missing, if the error is one."""
    path, value = exc.field or "", exc.value
    if not isinstance(value, str) or "is not a" not in (exc.rule or ""):
        return None
    if ".flavors[" in path and path.endswith(".name"):
        return "ResourceFlavor", value
    if path == "spec.clusterQueue":
        return "ClusterQueue", value
    if "admissionChecks" in path:
        return "AdmissionCheck", value
    if path == "spec.parameters.name":
        return "ProvisioningRequestConfig", value
    return None


def _culprit(exc: ConfigError, chosen: Mapping[Key, QueueObject]) -> Key | None:
    """The object an assembly error is about: the document it names (``where``), or for the
    core's whole-configuration rules the object (``document``: kind, name) it says."""
    for key, obj in chosen.items():
        if exc.where is not None and exc.where == obj.doc.where:
            return key
    if exc.document is None:
        return None
    for key, obj in chosen.items():
        kind = "PriorityClass" if obj.kind == "WorkloadPriorityClass" else obj.kind
        name = obj.doc.name or ""
        if exc.document in ((kind, name), (obj.kind, name)):
            return key
    return None
