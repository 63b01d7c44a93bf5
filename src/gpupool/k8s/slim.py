"""What the informers keep of each object: only the fields gpupool reads.

A Pod as the API server sends it is about 30 KB of JSON at scale (``managedFields``, the
``last-applied-configuration`` annotation, container images, env, probes, volumes, status of
every container); as Python dicts that is several times more. gpupool reads a handful of
those fields, so each informer keeps a cut-down copy (``transform`` of
:class:`~gpupool.k8s.informer.Informer`):

- every object: no ``metadata.managedFields``, no
  ``kubectl.kubernetes.io/last-applied-configuration`` annotation (:func:`strip`);
- Nodes: metadata (labels and annotations carry GPU feature discovery's and HAMi's
  inventory, and HAMi's node lock), ``spec.taints``/``unschedulable``/``providerID``, and of
  the status only ``allocatable``, ``capacity`` and each condition's type, status and reason
  (no images, addresses, nodeInfo, volumes) (:func:`node`);
- gpupool's own pods (:func:`own_pod`): a pending pod keeps its spec (its PodTemplate for
  queued provisioning is made from it) but of each container only name, image, resources,
  ports, securityContext and restartPolicy (no env, mounts, probes or commands: the
  autoscaler's simulation does not read them); a bound one keeps, of each container, only
  its name and resources, and no volumes; of the status only the phase;
- other schedulers' pods are reduced further in ``k8s/podview.py``;
- Jobs and Namespaces: name, namespace, UID, version, labels, owners (:func:`metadata_only`).

Parsing is the larger cost: ``managedFields`` are a third of a Pod's bytes and most of its
small objects. :func:`drop_managed_fields` cuts them out of the raw JSON before it is parsed
(a byte search, no parse), where the API server's field order makes that exact: Go encodes
``ObjectMeta`` fields in declaration order, ``managedFields`` last, and a Pod, Node, Job or
custom object's ``spec`` comes right after ``metadata``. Where the pattern is not found the
object is parsed whole and :func:`strip` drops the field afterwards.

:func:`deep_size` measures what an object costs in memory (the figures in
``docs/kubernetes.md`` come from it).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

__all__ = [
    "LAST_APPLIED",
    "deep_size",
    "drop_managed_fields",
    "metadata_only",
    "node",
    "own_pod",
    "strip",
]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

_META = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "ownerReferences",
    "deletionTimestamp",
    "creationTimestamp",
    "generation",
)
_OWNER = ("apiVersion", "kind", "name", "controller")
_NODE_SPEC = ("taints", "unschedulable", "providerID")
_CONTAINER = ("name", "resources")
_TEMPLATE_CONTAINER = ("name", "image", "resources", "ports", "securityContext", "restartPolicy")
"""Of a pending pod's containers, what a ProvisioningRequest's PodTemplate needs for the
autoscaler's scheduling simulation (no env, mounts, probes, commands)."""


def _meta(meta: Mapping[str, Any], keep: tuple[str, ...] | None = None) -> dict[str, Any]:
    if keep is None:
        out = {k: v for k, v in meta.items() if k != "managedFields"}
    else:
        out = {k: meta[k] for k in keep if k in meta}
    notes = meta.get("annotations")
    if keep is None and notes and LAST_APPLIED in notes:
        out["annotations"] = {k: v for k, v in notes.items() if k != LAST_APPLIED}
    owners = out.get("ownerReferences")
    if owners:  # who controls it is read, not the owner's UID
        out["ownerReferences"] = [{k: o[k] for k in _OWNER if k in o} for o in owners]
    return out


_MANAGED = b',"managedFields":['
_AFTER = b']},"spec":'


def drop_managed_fields(raw: bytes) -> bytes:
    """``raw`` JSON without ``metadata.managedFields`` of the objects it holds (see above).

    A cut is made only from ``,"managedFields":[`` to the ``]},"spec":`` that closes it, and
    only when that comes before the next object's ``managedFields``. Inside managedFields
    neither can occur unescaped: its keys are ``f:``/``k:``/``v:``-prefixed or ``"."``, and
    a quote inside a string is escaped."""
    pos = raw.find(_MANAGED)
    if pos < 0:
        return raw
    out = []
    start = 0
    while pos >= 0:
        nxt = raw.find(_MANAGED, pos + len(_MANAGED))
        end = raw.find(_AFTER, pos)
        if end < 0:
            break
        if nxt >= 0 and end > nxt:  # this object's metadata is not followed by a spec
            pos = nxt
            continue
        out.append(raw[start:pos])
        start = end + 1  # keep "}," of the metadata's end
        pos = nxt
    out.append(raw[start:])
    return b"".join(out)


def strip(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without ``managedFields`` and the last-applied annotation (in place)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and (
        "managedFields" in meta or LAST_APPLIED in (meta.get("annotations") or {})
    ):
        obj["metadata"] = _meta(meta)
    return obj


def metadata_only(obj: dict[str, Any]) -> dict[str, Any]:
    """Name, namespace, UID, version, labels and owners: all a Job or Namespace is read for."""
    out: dict[str, Any] = {"metadata": _meta(obj.get("metadata") or {}, _META)}
    if "kind" in obj:
        out["kind"] = obj["kind"]
    return out


def node(obj: dict[str, Any]) -> dict[str, Any]:
    """A Node cut to what inventory, taints, readiness and HAMi's node lock need."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    small_status: dict[str, Any] = {
        k: status[k] for k in ("allocatable", "capacity") if k in status
    }
    conds = status.get("conditions")
    if conds:
        small_status["conditions"] = [
            {k: c[k] for k in ("type", "status", "reason") if k in c}
            for c in conds
            if isinstance(c, Mapping)
        ]
    out = {
        "metadata": _meta(obj.get("metadata") or {}),
        "spec": {k: spec[k] for k in _NODE_SPEC if k in spec},
        "status": small_status,
    }
    for k in ("kind", "apiVersion"):
        if k in obj:
            out[k] = obj[k]
    return out


def own_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """One of gpupool's pods: what placing it and its PodTemplate need while pending, only
    what counting it needs once bound."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    bound = bool(spec.get("nodeName"))
    keep = _CONTAINER if bound else _TEMPLATE_CONTAINER
    spec = {k: v for k, v in spec.items() if not (bound and k == "volumes")}
    for kind in ("containers", "initContainers"):
        if kind in spec:
            spec[kind] = [{k: c[k] for k in keep if k in c} for c in spec[kind]]
    out = {
        "metadata": _meta(obj.get("metadata") or {}),
        "spec": spec,
        "status": {k: status[k] for k in ("phase",) if k in status},
    }
    for k in ("kind", "apiVersion"):
        if k in obj:
            out[k] = obj[k]
    return out


def deep_size(obj: object, _seen: set[int] | None = None) -> int:
    """Bytes an object and everything it holds take (shared objects counted once)."""
    seen = set() if _seen is None else _seen
    stack = [obj]
    total = 0
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, list | tuple | set | frozenset):
            stack.extend(o)
        elif hasattr(o, "__slots__") and not isinstance(o, str | bytes | int | float):
            stack.extend(getattr(o, s) for s in o.__slots__ if hasattr(o, s))
    return total
