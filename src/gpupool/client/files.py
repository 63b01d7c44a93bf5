"""The documents of the files given with ``-f`` (``submit``, ``apply``): YAML or JSON, several
per file, ``-`` for stdin; a job's namespace checked against ``--namespace``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from gpupool.core.errors import ConfigError


def read_documents(
    sources: Sequence[str], stdin: TextIO | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """``(where, document)`` for every document of every file, in order. A file is YAML
    (documents separated by ``---``) or JSON (an object, or an array of them); a ``List``
    document's ``items`` count one by one. ``-`` reads stdin."""
    docs: list[tuple[str, dict[str, Any]]] = []
    for source in sources:
        name = "stdin" if source == "-" else source
        try:
            text = (stdin or sys.stdin).read() if source == "-" else Path(source).read_text()
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read: {exc.strerror or exc}") from exc
        loaded = _parse(text, name)
        flat: list[Any] = []
        for doc in loaded:
            if isinstance(doc, list):
                flat.extend(doc)
            elif (
                isinstance(doc, Mapping)
                and doc.get("kind") == "List"
                and isinstance(doc.get("items"), list)
            ):
                flat.extend(doc["items"])
            elif doc is not None:
                flat.append(doc)
        for i, doc in enumerate(flat):
            where = name if len(flat) == 1 else f"{name} document {i + 1}"
            if not isinstance(doc, Mapping):
                raise ConfigError(
                    f"{where}: expected a Job document (a mapping), found {type(doc).__name__}"
                )
            docs.append((where, dict(doc)))
        if not flat:
            raise ConfigError(f"{name}: no documents")
    return docs


def _parse(text: str, name: str) -> list[Any]:
    """The documents of a file: JSON when it reads as JSON, else YAML (which also reads
    flow-style ``{name: x}``); the error names the format the file seems to be in."""
    import yaml

    json_error: json.JSONDecodeError | None = None
    if text.lstrip().startswith(("{", "[")):
        try:
            return [json.loads(text)]
        except json.JSONDecodeError as exc:
            json_error = exc
    try:
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        if json_error is not None:
            raise ConfigError(f"{name}: not valid JSON: {json_error}") from json_error
        raise ConfigError(f"{name}: not valid YAML: {' '.join(str(exc).split())}") from exc


def with_namespace(doc: dict[str, Any], namespace: str | None, where: str) -> dict[str, Any]:
    if namespace is None:
        return doc
    meta = doc.get("metadata")
    if not isinstance(meta, Mapping):
        return doc  # the server names what is wrong with it
    given = meta.get("namespace")
    if given is not None and given != namespace:
        raise ConfigError(
            f"{where}: metadata.namespace={given!r} does not match --namespace {namespace}"
        )
    return {**doc, "metadata": {**meta, "namespace": namespace}}
