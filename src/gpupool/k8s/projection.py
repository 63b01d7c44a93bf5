"""List pages parsed lazily, keeping only the fields gpupool reads.

Parsing, not holding, is what a list of 100,000 pods costs: ``json.loads`` builds every
dict, list and string of every object (about 1,500 per realistic pod) only for the informer's
transform to throw most of them away. simdjson (``pysimdjson``) parses a page into its own
compact form at GB/s; :func:`project` then builds Python objects only for the parts a
:data:`Shape` names, and the transform (``k8s/slim.py``, ``k8s/podview.py``) runs on that.

Dict keys and short strings are interned as they are built, so the many pods that share
keys, label values and quantities share one string object each.

A :data:`Shape` is a dict of keys to keep: ``True`` takes the value whole; a dict projects
an object; a one-element list projects each element of an array with its shape. ``"*": True``
takes every key the shape does not name, whole. Keys absent from the object are left out.
Without simdjson installed the informers parse pages with ``json`` as before. Watch events
are one object each: :func:`event` parses them with ``json`` and projects only other
schedulers' pods (:func:`project_plain`, the same shapes on parsed dicts).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

try:  # pragma: no cover - the import itself
    import simdjson
except ImportError:  # pragma: no cover
    simdjson = None  # type: ignore[assignment]

__all__ = [
    "NODE",
    "POD_BOUND",
    "POD_OTHER",
    "POD_PENDING",
    "Shape",
    "available",
    "items",
    "pod_shape",
    "project",
    "project_plain",
]

Shape = dict[str, Any]

_META: Shape = {
    "*": True,
    "managedFields": False,
    "ownerReferences": [{"apiVersion": True, "kind": True, "name": True, "controller": True}],
}
NODE: Shape = {
    "kind": True,
    "apiVersion": True,
    "metadata": _META,
    "spec": {"taints": True, "unschedulable": True, "providerID": True},
    "status": {
        "allocatable": True,
        "capacity": True,
        "conditions": [{"type": True, "status": True, "reason": True}],
    },
}
_CONTAINERS = ("containers", "initContainers")
POD_PENDING: Shape = {
    "kind": True,
    "apiVersion": True,
    "metadata": _META,
    "spec": {
        "*": True,
        **{
            k: [
                {
                    "name": True,
                    "image": True,
                    "resources": True,
                    "ports": True,
                    "securityContext": True,
                    "restartPolicy": True,
                }
            ]
            for k in _CONTAINERS
        },
    },
    "status": {"phase": True},
}
POD_BOUND: Shape = {
    "kind": True,
    "apiVersion": True,
    "metadata": _META,
    "spec": {
        "*": True,
        "volumes": False,
        **{k: [{"name": True, "resources": True}] for k in _CONTAINERS},
    },
    "status": {"phase": True},
}
POD_OTHER: Shape = {
    "kind": True,
    "apiVersion": True,
    "metadata": {
        **{
            k: True
            for k in ("name", "namespace", "uid", "resourceVersion", "labels", "deletionTimestamp")
        },
        # the MIG instances such a pod holds (HAMi's scheduler placed it)
        "annotations": {"hami.io/vgpu-mig-allocations": True},
    },
    "spec": {
        "nodeName": True,
        "schedulerName": True,
        "affinity": True,
        "overhead": True,
        **{k: [{"resources": True}] for k in _CONTAINERS},
    },
    "status": {"phase": True},
}


def available() -> bool:
    return simdjson is not None


def pod_shape(watched: frozenset[str]) -> Callable[[Any], Shape]:
    """The shape of a pod: its scheduler's pods (``watched``) pending or bound, or another
    scheduler's pod (what ``podview.reduce`` reads)."""

    def shape(pod: Any) -> Shape:
        spec = pod.get("spec") or {}
        if spec.get("schedulerName") not in watched:
            return POD_OTHER
        return POD_BOUND if spec.get("nodeName") else POD_PENDING

    return shape


def _shared(value: Any) -> Any:
    """Dict keys and short strings made shared (``sys.intern``): 100,000 pods repeat the same
    few hundred keys and label values, each otherwise a string object of its own."""
    if isinstance(value, dict):
        return {_intern(k): _shared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shared(v) for v in value]
    if isinstance(value, str) and len(value) <= _SHORT:
        return _intern(value)
    return value


_SHORT = 48
_intern = sys.intern


def _whole(value: Any) -> Any:
    if hasattr(value, "as_dict"):
        return _shared(value.as_dict())
    if hasattr(value, "as_list"):
        return _shared(value.as_list())
    if isinstance(value, str) and len(value) <= _SHORT:
        return _intern(value)
    return value


def project(value: Any, shape: Any) -> Any:
    """``value`` (a simdjson proxy or plain value) cut to ``shape``, as Python objects."""
    if shape is True:
        return _whole(value)
    if isinstance(shape, list):
        if not hasattr(value, "as_list"):
            return _whole(value)
        return [project(v, shape[0]) for v in value]
    if not hasattr(value, "as_dict"):
        return _whole(value)
    rest = shape.get("*") is True
    out: dict[str, Any] = {}
    for key in value.keys() if rest else shape:
        if key == "*":
            continue
        sub = shape.get(key, True if rest else None)
        if sub is None or sub is False or key not in value:
            continue
        out[_intern(key)] = project(value[key], sub)
    return out


def items(
    raw: bytes, shape: Callable[[Any], Shape | None]
) -> Iterator[dict[str, Any] | tuple[str, str, str]]:
    """Parses a list page: first ``(kind, resourceVersion, continue)``, then each item
    projected to ``shape(item)`` (``None``: the item whole)."""
    assert simdjson is not None
    parser: Any = simdjson.Parser()
    doc: Any = parser.parse(raw)
    meta = doc.get("metadata") or {}
    yield (
        str(doc.get("kind") or ""),
        str(meta.get("resourceVersion") or ""),
        str(meta.get("continue") or ""),
    )
    listed = doc.get("items") or []
    for i in range(len(listed)):
        item = listed[i]
        s = shape(item)
        yield _whole(item) if s is None else project(item, s)
        del item  # no proxy may outlive the parse


def project_plain(value: Any, shape: Any) -> Any:
    """:func:`project` for a value already parsed by ``json`` (dicts and lists)."""
    if shape is True:
        return _shared(value)
    if isinstance(shape, list):
        if not isinstance(value, list):
            return _shared(value)
        return [project_plain(v, shape[0]) for v in value]
    if not isinstance(value, dict):
        return _shared(value)
    rest = shape.get("*") is True
    out: dict[str, Any] = {}
    for key in value if rest else shape:
        if key == "*":
            continue
        sub = shape.get(key, True if rest else None)
        if sub is None or sub is False or key not in value:
            continue
        out[_intern(key)] = project_plain(value[key], sub)
    return out


def event(raw: bytes, shape: Callable[[Any], Shape | None]) -> dict[str, Any]:
    """One watch event (a JSON line), its object as the informer's transform will cut it:
    another scheduler's pod projected to :data:`POD_OTHER` with its keys and short strings
    shared (the many pods held long), any other object as parsed.

    An event is one object of a few KiB, built whole at once by ``json`` (C); the
    informer's transform (``k8s/slim.py``, ``k8s/podview.py``) keeps only what gpupool
    reads, so projecting gpupool's own pods and the nodes first would build each kept
    field twice (a pod event cost about 110 µs that way, against 30 µs parsed)."""
    doc = json.loads(raw)
    kind = str(doc.get("type") or "")
    obj = doc.get("object")
    if kind in ("ADDED", "MODIFIED", "DELETED") and obj is not None:
        s = shape(obj)
        if s is POD_OTHER:
            obj = project_plain(obj, s)
    return {"type": kind, "object": obj}
