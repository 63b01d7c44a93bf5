"""kubectl's ways of choosing and shaping what ``gpupool get`` prints: label selectors
(``-l``), ``--sort-by``, ``-o jsonpath=...``, ``-o custom-columns=...`` and ``--no-headers``,
over the API's objects as ``-o json`` prints them.

The JSONPath is kubectl's subset: ``{.a.b}``, ``[n]``, ``[*]``, ``['key.with.dots']``, and in
templates ``{range EXPR}...{end}`` and quoted literals (``{"\\n"}``); several results of one
expression are joined by a space, as kubectl joins them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gpupool.core.errors import ConfigError

FORMATS = ("json", "yaml", "wide", "name")
TEMPLATES = ("jsonpath", "custom-columns")


def output_format(allowed: Sequence[str]) -> Callable[[str], str]:
    """An argparse type for ``-o``: one of ``allowed``, or ``jsonpath=T`` /
    ``custom-columns=SPEC`` where ``allowed`` includes them."""
    import argparse

    def parse(text: str) -> str:
        kind, eq, rest = text.partition("=")
        if kind in allowed and kind in TEMPLATES:
            if not eq or not rest:
                raise argparse.ArgumentTypeError(f"{text!r}: give {kind}=...")
            return text
        if text in allowed:
            return text
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an output format; one of "
            + ", ".join(f"{a}=..." if a in TEMPLATES else a for a in allowed)
        )

    return parse


# -- JSONPath --------------------------------------------------------------------------------

_STEP = re.compile(r"\.([A-Za-z0-9_\-]+)|\[(\*|-?\d+)\]|\['([^']*)'\]|\.\[")


def _steps(expr: str) -> list[str | int | None]:
    """``.a.b[0][*]`` as steps: names, indexes, None for every element."""
    expr = expr.strip()
    if expr.startswith("$"):
        expr = expr[1:]
    if expr and not expr.startswith((".", "[")):
        expr = "." + expr
    steps: list[str | int | None] = []
    pos = 0
    while pos < len(expr):
        if expr[pos] == "." and pos + 1 == len(expr):  # "." alone: the object itself
            break
        m = _STEP.match(expr, pos)
        if m is None or m.group(0) == ".[":
            raise ConfigError(f"JSONPath {expr!r}: cannot read it at {expr[pos:]!r}")
        if m.group(1) is not None:
            steps.append(m.group(1))
        elif m.group(2) is not None:
            steps.append(None if m.group(2) == "*" else int(m.group(2)))
        else:
            steps.append(m.group(3))
        pos = m.end()
    return steps


def jsonpath(obj: Any, expr: str) -> list[Any]:
    """Every value ``expr`` reaches in ``obj`` (none where a step is missing)."""
    values = [obj]
    for step in _steps(expr):
        nxt: list[Any] = []
        for v in values:
            if step is None:
                if isinstance(v, list):
                    nxt.extend(v)
                elif isinstance(v, Mapping):
                    nxt.extend(v.values())
            elif isinstance(step, int):
                if isinstance(v, list) and -len(v) <= step < len(v):
                    nxt.append(v[step])
            elif isinstance(v, Mapping) and step in v:
                nxt.append(v[step])
        values = nxt
    return values


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        import json

        return json.dumps(value, separators=(",", ":"))
    return str(value)


_PART = re.compile(r"\{((?:[^{}\"]|\"(?:[^\"\\]|\\.)*\")*)\}")


def template(obj: Any, text: str) -> str:
    """A kubectl JSONPath template applied to ``obj``."""
    parts: list[tuple[str, str]] = []  # ("text", s) | ("expr", e)
    pos = 0
    for m in _PART.finditer(text):
        if m.start() > pos:
            parts.append(("text", text[pos : m.start()]))
        parts.append(("expr", m.group(1).strip()))
        pos = m.end()
    if pos < len(text):
        parts.append(("text", text[pos:]))
    out, _ = _render(parts, 0, obj, stop_at_end=False)
    return out


def _render(parts: list[tuple[str, str]], i: int, obj: Any, stop_at_end: bool) -> tuple[str, int]:
    out = []
    while i < len(parts):
        kind, value = parts[i]
        if kind == "text":
            out.append(value)
        elif value == "end":
            if not stop_at_end:
                raise ConfigError("JSONPath template: {end} without {range ...}")
            return "".join(out), i
        elif value.startswith("range "):
            items = jsonpath(obj, value[6:])
            end = i
            for item in items:
                text, end = _render(parts, i + 1, item, stop_at_end=True)
                out.append(text)
            if not items:  # find the matching end without output
                _, end = _render(parts, i + 1, {}, stop_at_end=True)
            i = end
        elif value.startswith('"') and value.endswith('"') and len(value) >= 2:
            out.append(value[1:-1].encode().decode("unicode_escape"))
        else:
            out.append(" ".join(_text(v) for v in jsonpath(obj, value)))
        i += 1
    if stop_at_end:
        raise ConfigError("JSONPath template: {range ...} without {end}")
    return "".join(out), i


def custom_columns(spec: str) -> list[tuple[str, str]]:
    """``NAME:.metadata.name,PHASE:.status.phase`` as (header, JSONPath) pairs."""
    columns = []
    for part in spec.split(","):
        header, colon, expr = part.partition(":")
        if not colon or not header or not expr:
            raise ConfigError(f"custom-columns: {part!r} is not HEADER:JSONPATH")
        columns.append((header, expr.strip("{}")))
    return columns


def column_rows(items: Iterable[Any], columns: Sequence[tuple[str, str]]) -> list[list[str]]:
    return [
        [",".join(_text(v) for v in jsonpath(item, expr)) or "<none>" for _, expr in columns]
        for item in items
    ]


# -- label selectors -------------------------------------------------------------------------

_REQ = re.compile(
    r"\s*(!?)([A-Za-z0-9./_-]+)(?:\s*(==|=|!=)\s*([A-Za-z0-9._-]*)|"
    r"\s+(in|notin)\s*\(([^)]*)\))?\s*"
)


def selector(text: str) -> Callable[[Mapping[str, str]], bool]:
    """kubectl's label selector (``a=b,c!=d,e,!f,g in (x,y),h notin (z)``) as a test of a
    labels mapping."""
    tests: list[Callable[[Mapping[str, str]], bool]] = []
    pos = 0
    while pos < len(text):
        m = _REQ.match(text, pos)
        if m is None or m.end() == pos:
            raise ConfigError(f"-l {text!r}: cannot read the selector at {text[pos:]!r}")
        neg, key, op, value, setop, values = m.groups()
        if neg and (op or setop):
            raise ConfigError(f"-l {text!r}: '!' goes with a key alone (!{key})")
        tests.append(
            _requirement(
                key,
                "!" if neg else op or setop or "",
                value or "",
                {c.strip() for c in (values or "").split(",") if c.strip()},
            )
        )
        pos = m.end()
        if pos < len(text):
            if text[pos] != ",":
                raise ConfigError(f"-l {text!r}: expected ',' at {text[pos:]!r}")
            pos += 1
    return lambda labels: all(t(labels) for t in tests)


def _requirement(
    key: str, op: str, value: str, choices: set[str]
) -> Callable[[Mapping[str, str]], bool]:
    def test(labels: Mapping[str, str]) -> bool:
        if op == "!":
            return key not in labels
        if op in ("=", "=="):
            return labels.get(key) == value
        if op == "!=":
            return labels.get(key) != value
        if op == "in":
            return labels.get(key) in choices
        if op == "notin":
            return labels.get(key) not in choices
        return key in labels

    return test


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """An API object's labels (a node's are at the top, the others' in metadata)."""
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else obj.get("labels")
    return labels if isinstance(labels, Mapping) else {}


def sort_by(items: list[dict[str, Any]], expr: str) -> list[dict[str, Any]]:
    """``items`` ordered by the value ``expr`` reaches (missing values last), numbers as
    numbers."""

    def key(item: dict[str, Any]) -> tuple[int, Any]:
        found = jsonpath(item, expr.strip("{}"))
        if not found or found[0] is None:
            return (2, "")
        v = found[0]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return (0, v)
        return (1, _text(v))

    return sorted(items, key=key)
