"""YAML files in, core objects out.

A file holds one or more YAML documents (``---`` between them). Each is dispatched by its
``kind``: ``Cluster`` (or a document with ``nodePools`` and no kind) describes the nodes;
ResourceFlavor, ClusterQueue, Cohort, LocalQueue, WorkloadPriorityClass, PriorityClass and
QueueSettings describe the queues. One file may hold both, or they may live in two files.
A ``kind: List`` document (what ``kubectl get -o yaml`` prints) stands for its ``items``.

Every problem is a ``ConfigError`` whose one-line message names the file and line (for YAML
syntax), or the file, the document, the field path and the rule (see ``documents.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, ScalarNode

from gpupool.config.cluster import nodes_from_documents
from gpupool.config.documents import Document, show
from gpupool.config.queues import QUEUE_KINDS, QueueRead, read_queue_documents
from gpupool.core.errors import ConfigError
from gpupool.core.model import Node
from gpupool.core.quota import QueueConfig

__all__ = [
    "KINDS",
    "load_cluster",
    "load_documents",
    "load_queue_config",
    "parse_documents",
    "read_documents",
    "read_queue_config",
]

PathLike = str | os.PathLike[str]
KINDS: tuple[str, ...] = ("Cluster", *QUEUE_KINDS)
"""Every kind a configuration file may hold."""

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[valid-type,misc]
    """YAML's safe loader, refusing a key given twice in one mapping (YAML itself would keep
    the last silently, hiding a typo's twin)."""


def _mapping(loader: _Loader, node: MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            key = loader.construct_object(key_node)
            if key in seen:
                raise ConstructorError(
                    None,
                    None,
                    f"key {show(key)} is given twice in one mapping",
                    key_node.start_mark,
                )
            seen.add(key)
    loader.flatten_mapping(node)
    result: dict[Any, Any] = loader.construct_mapping(node)
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def parse_documents(text: str, source: str = "<string>") -> list[Document]:
    """The non-empty documents of a YAML text, numbered from 1, each with its first line."""
    docs: list[Document] = []
    loader = _Loader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            body = loader.construct_document(node)
            if body is None:
                continue
            line = node.start_mark.line + 1
            index = len(docs) + 1
            if not isinstance(body, Mapping):
                raise ConfigError(
                    f"{source}: document {index} (line {line}): expected a "
                    f"mapping with a kind and its fields, found "
                    f"{_what(body)}"
                )
            if body.get("kind") == "List" and isinstance(body.get("items"), list):
                for item in body["items"]:  # kubectl's List: one document per item
                    if not isinstance(item, Mapping):
                        raise ConfigError(
                            f"{source}: document {len(docs) + 1} (line {line}):"
                            f" a List item should be a mapping, found "
                            f"{_what(item)}"
                        )
                    docs.append(Document(source, len(docs) + 1, item, line))
                continue
            docs.append(Document(source, index, body, line))
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_message(source, exc)) from exc
    finally:
        loader.dispose()
    return docs


def _what(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    return f"the {type(value).__name__} {show(value)}"


def _yaml_message(source: str, exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is None:
        return f"{source}: invalid YAML: {problem}"
    return f"{source}:{mark.line + 1}: invalid YAML: {problem} (column {mark.column + 1})"


def read_documents(path: PathLike) -> list[Document]:
    """The documents of a YAML file (see :func:`parse_documents`)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{os.fspath(path)}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{os.fspath(path)}: not UTF-8 text: {exc.reason}") from exc
    return parse_documents(text, os.fspath(path))


def load_documents(path: PathLike) -> list[dict[str, Any]]:
    """The non-empty documents of a multi-document YAML file, as plain dicts.

    A YAML syntax error is a ConfigError naming the file and line; so is a document that is
    not a mapping, and a key given twice in one mapping.
    """
    return [dict(doc.body) for doc in read_documents(path)]


def _documents(
    path_or_docs: PathLike | Sequence[Mapping[str, Any] | None], source: str | None
) -> tuple[list[Document], str]:
    if isinstance(path_or_docs, str | os.PathLike):
        docs = read_documents(path_or_docs)
        return docs, source or os.fspath(path_or_docs)
    name = source or "<documents>"
    out: list[Document] = []
    for body in path_or_docs:
        if body is None:
            continue
        if not isinstance(body, Mapping):
            raise ConfigError(
                f"{name}: document {len(out) + 1}: expected a mapping with a "
                f"kind and its fields, found {_what(body)}"
            )
        if body.get("kind") == "List" and isinstance(body.get("items"), list):
            out.extend(
                Document(name, len(out) + 1 + i, item)
                for i, item in enumerate(body["items"])
                if isinstance(item, Mapping)
            )
            continue
        out.append(Document(name, len(out) + 1, body))
    return out, name


def _is_cluster(doc: Document) -> bool:
    """Whether a document describes the cluster (else it is a queue object)."""
    kind = doc.body.get("kind")
    if kind is None:
        if "nodePools" in doc.body:
            return True
        raise doc.problem("kind: required field is missing; known kinds: " + ", ".join(KINDS))
    if kind == "Cluster":
        return True
    if kind in QUEUE_KINDS:
        return False
    raise doc.error("kind", kind, "is not a known kind; known: " + ", ".join(KINDS))


def load_cluster(
    path_or_docs: PathLike | Sequence[Mapping[str, Any] | None], *, source: str | None = None
) -> list[Node]:
    """The nodes of the Cluster document in a file (or a list of document dicts).

    Queue objects in the same file are skipped here (``load_queue_config`` reads them), but
    a document of unknown kind is an error. ``source`` names the documents in messages when
    they are not read from a file.
    """
    docs, name = _documents(path_or_docs, source)
    return nodes_from_documents([d for d in docs if _is_cluster(d)], name)


def load_queue_config(
    path_or_docs: PathLike | Sequence[Mapping[str, Any] | None], *, source: str | None = None
) -> QueueConfig:
    """The validated queue configuration in a file (or a list of document dicts).

    The Cluster document, if the file has one, is skipped here; a document of unknown kind
    is an error, and so is a file with no queue objects at all.
    """
    return read_queue_config(path_or_docs, source=source).config


def read_queue_config(
    path_or_docs: PathLike | Sequence[Mapping[str, Any] | None], *, source: str | None = None
) -> QueueRead:
    """As :func:`load_queue_config`, with the fields gpupool does not act on."""
    docs, name = _documents(path_or_docs, source)
    queue_docs = [d for d in docs if not _is_cluster(d)]
    if not queue_docs:
        raise ConfigError(f"{name}: no queue objects (kinds: {', '.join(QUEUE_KINDS)})")
    return read_queue_documents(queue_docs)
