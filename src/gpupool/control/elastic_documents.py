"""Elastic GPU objects as documents: the kinds the state file and the API name, and a body in
the objects' own JSON or in Kubernetes' document form read into one flat form (which
``gpupool.config.elastic`` reads into the core's objects)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from gpupool.config.elastic import class_from_json
from gpupool.core.elastic import ElasticGPUClass
from gpupool.core.errors import ConfigError, InvalidJobError

CLASS = "ElasticGPUClass"
CLAIM = "ElasticGPUClaim"
GPU = "ElasticGPU"
KINDS = (CLASS, CLAIM, GPU)
API_GROUP = "elasticgpu.io/v1alpha1"

Key = tuple[str, str]  # (kind, name)
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


def flat(kind: str, body: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
    """A body in either form: the objects' own JSON (``gpupool.config.elastic``) or a
    Kubernetes-style document (``apiVersion``, ``kind``, ``metadata{name, namespace}``,
    ``spec`` for claims and ElasticGPUs, the class's fields at the top level as a StorageClass
    has them)."""
    out = dict(body)
    given = out.pop("kind", kind)
    if given != kind:
        raise _bad(kind, "kind", given, f"must be {kind} at this endpoint")
    api = out.pop("apiVersion", API_GROUP)
    if api != API_GROUP:
        raise _bad(kind, "apiVersion", api, f"must be {API_GROUP}")
    meta = out.pop("metadata", None)
    if meta is not None:
        _metadata(kind, meta, out)
    spec = out.pop("spec", None)
    if spec is not None:
        if not isinstance(spec, Mapping):
            raise _bad(kind, "spec", spec, "must be an object")
        for k, v in spec.items():
            out.setdefault(k, v)
    out.pop("status", None)
    name = out.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > 253:
        raise _bad(
            kind,
            "metadata.name",
            name,
            "is required: lower-case letters, digits, "
            "'-' and '.', starting and ending with a letter or digit",
        )
    if kind == CLAIM and namespace is not None:
        ns = out.setdefault("namespace", namespace)
        if ns != namespace:
            raise _bad(kind, "metadata.namespace", ns, f"must be {namespace} here")
    ns = out.get("namespace", "default")
    if kind == CLAIM and (not isinstance(ns, str) or not _NAME.fullmatch(ns) or len(ns) > 63):
        raise _bad(
            kind,
            "metadata.namespace",
            ns,
            "must be a namespace name: lower-case letters, digits and '-'",
        )
    return out


def _metadata(kind: str, meta: object, out: dict[str, Any]) -> None:
    """``metadata``'s name (and a claim's namespace) into the flat form; other keys refused."""
    if not isinstance(meta, Mapping):
        raise _bad(kind, "metadata", meta, "must be an object")
    for k in meta:
        if k not in ("name", "namespace", "labels", "annotations"):
            raise _bad(
                kind,
                f"metadata.{k}",
                meta[k],
                "unknown field; known: name, namespace, labels, annotations",
            )
    if "name" in meta:
        out.setdefault("name", meta["name"])
    if "namespace" in meta and kind == CLAIM:
        out.setdefault("namespace", meta["namespace"])


def _bad(kind: str, field: str, value: object, rule: str) -> Exception:
    if kind == CLAIM:
        return InvalidJobError(field, value, rule, job=kind)
    return ConfigError(
        f"{kind}: {field}={value!r}: {rule}", field=field, value=value, rule=rule, where=kind
    )


def parse_classes(docs: Iterable[Mapping[str, Any]]) -> list[ElasticGPUClass]:
    """ElasticGPUClass documents (a seed file), every one checked before any is used."""
    out = []
    for doc in docs:
        if doc.get("kind", CLASS) != CLASS:
            raise ConfigError(
                f"kind={doc.get('kind')!r}: an Elastic GPU seed file holds {CLASS} documents only",
                field="kind",
                value=doc.get("kind"),
                rule=f"an Elastic GPU seed file holds {CLASS} documents only",
            )
        out.append(class_from_json(flat(CLASS, doc)))
    return out
