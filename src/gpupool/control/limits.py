"""Kubernetes' limits on a Job document's metadata, and gpupool's on ``spec.user``, checked
before a job is accepted by ``serve``: what a tenant writes is kept in the state file, sent
to every reader of the job and drawn by the dashboard, so its size is bounded as the API
server bounds an object's metadata (k8s.io/apimachinery ``ValidateLabels`` and
``ValidateAnnotations``):

- a label or annotation key is a qualified name: an optional DNS-subdomain prefix (at most
  253 characters) and ``/``, then a name of at most 63 characters, alphanumeric at both ends
  with ``-``, ``_`` and ``.`` between;
- a label value is at most 63 characters, empty or of the same shape as a name;
- annotations, keys and values together, are at most 256 KiB;
- ``spec.user`` (whose usage fair sharing charges) is at most 253 printable characters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpupool.core.errors import InvalidJobError

NAME_MAX = 63
PREFIX_MAX = 253
VALUE_MAX = 63
ANNOTATIONS_MAX_BYTES = 256 * 1024
USER_MAX = 253
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _shown(value: object) -> object:
    """``value`` as an error may quote it: long strings are cut, with their length."""
    if isinstance(value, str) and len(value) > 80:
        return f"{value[:40]}... ({len(value)} characters)"
    return value


def _bad(field: str, value: object, rule: str) -> InvalidJobError:
    return InvalidJobError(field, _shown(value), rule)


def key_problem(key: str) -> str | None:
    """What is wrong with a label or annotation key, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return "the prefix before '/' must not be empty"
    if len(name) > NAME_MAX:
        return f"the name part must be at most {NAME_MAX} characters (it has {len(name)})"
    if not _NAME.fullmatch(name):
        return (
            "the name part must be alphanumeric at both ends, with '-', '_' or '.' "
            "between (a Kubernetes qualified name)"
        )
    if slash:
        if len(prefix) > PREFIX_MAX:
            return f"the prefix must be at most {PREFIX_MAX} characters (it has {len(prefix)})"
        if not _SUBDOMAIN.fullmatch(prefix):
            return "the prefix must be a DNS subdomain (lowercase, e.g. example.com)"
    return None


def check_metadata(doc: object) -> None:
    """InvalidJobError naming the first field of a Job document over these limits; a
    document of the wrong shape is left to the full check that follows."""
    if not isinstance(doc, Mapping):
        return
    meta = doc.get("metadata")
    if isinstance(meta, Mapping):
        labels = meta.get("labels")
        if isinstance(labels, Mapping):
            for key, value in labels.items():
                if not isinstance(key, str):
                    continue
                why = key_problem(key)
                if why:
                    raise _bad(f"metadata.labels[{_shown(key)!r}]", key, f"label key: {why}")
                if not isinstance(value, str):
                    continue
                if len(value) > VALUE_MAX:
                    raise _bad(
                        f"metadata.labels[{key!r}]",
                        value,
                        f"a label value must be at most {VALUE_MAX} characters "
                        f"(it has {len(value)})",
                    )
                if value and not _NAME.fullmatch(value):
                    raise _bad(
                        f"metadata.labels[{key!r}]",
                        value,
                        "a label value must be empty or alphanumeric at both ends, "
                        "with '-', '_' or '.' between",
                    )
        annotations = meta.get("annotations")
        if isinstance(annotations, Mapping):
            total = 0
            for key, value in annotations.items():
                if not isinstance(key, str):
                    continue
                why = key_problem(key)
                if why:
                    raise _bad(
                        f"metadata.annotations[{_shown(key)!r}]", key, f"annotation key: {why}"
                    )
                total += len(key.encode()) + len(_text(value).encode())
            if total > ANNOTATIONS_MAX_BYTES:
                raise _bad(
                    "metadata.annotations",
                    f"{total} bytes",
                    f"annotations, keys and values, must be at most "
                    f"{ANNOTATIONS_MAX_BYTES} bytes (256 KiB) in all",
                )
    spec = doc.get("spec")
    user = spec.get("user") if isinstance(spec, Mapping) else None
    if isinstance(user, str):
        if len(user) > USER_MAX:
            raise _bad(
                "spec.user", user, f"must be at most {USER_MAX} characters (it has {len(user)})"
            )
        if not user.isprintable():
            raise _bad("spec.user", user, "must be printable characters only")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)
