"""Request bodies: read on the event loop under the size limit, JSON or YAML, bounded in depth
and size, and checked against a pydantic request model where the route has one.

Bodies are read by hand rather than by FastAPI's body parameters because YAML is accepted as
well as JSON (``Content-Type: application/yaml``), as ``kubectl`` users send it; each route
still declares its request model in the OpenAPI document (:func:`body_schema`).
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import yaml
from fastapi import Request
from pydantic import BaseModel, ValidationError

from gpupool.api.errors import HttpProblem

MAX_BODY_BYTES = 1 << 20
MAX_DEPTH = 64  # nesting of a request body
MAX_VALUES = 1_000_000  # values in a request body, counting each reference a YAML alias makes
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")

M = TypeVar("M", bound=BaseModel)


class _YamlLoader(yaml.SafeLoader):
    """YAML read as Kubernetes reads it into JSON: a timestamp stays the string it was."""


_YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _bounded(value: Any) -> Any:
    """Refuse a body nested deeper than MAX_DEPTH, or holding more than MAX_VALUES values once
    YAML's aliases are counted as what they stand for (a few lines of aliases can stand for
    billions: each later step walks, prints or stores them all)."""
    stack = [(value, 1)]
    count = 0
    while stack:
        item, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH or count > MAX_VALUES:
            raise HttpProblem(
                400,
                "BadRequest",
                f"the body is nested more than {MAX_DEPTH} deep "
                f"or holds more than {MAX_VALUES:,} values (aliases expanded)",
            )
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return value


def _json_form(value: Any) -> Any:
    """A YAML body as JSON would have it (keys as strings); binary values, sets and the like
    have no JSON form and are refused."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise HttpProblem(400, "BadRequest", f"YAML with no JSON form: {exc}") from None


async def read_body(request: Request) -> Any:
    """The body, parsed; 413 past the app's limit (``app.state.max_body_bytes``)."""
    limit: int = request.app.state.max_body_bytes
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limit:
            raise HttpProblem(413, "PayloadTooLarge", f"body is over the limit of {limit} bytes")
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip()
    if not raw.strip():
        raise HttpProblem(400, "BadRequest", "the request has no body")
    try:
        if ctype in YAML_TYPES:
            return _json_form(_bounded(yaml.load(raw, Loader=_YamlLoader)))
        if ctype in ("application/json", "") or ctype.endswith("+json"):
            return _bounded(json.loads(raw))
    except RecursionError:  # the parser's own stack ran out first
        raise HttpProblem(
            400, "BadRequest", f"the body is nested more than {MAX_DEPTH} deep"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HttpProblem(400, "BadRequest", f"malformed JSON: {exc}") from None
    except yaml.YAMLError as exc:
        raise HttpProblem(400, "BadRequest", f"malformed YAML: {exc}") from None
    raise HttpProblem(
        415,
        "UnsupportedMediaType",
        f"content type {ctype!r}: send application/json or application/yaml",
    )


def mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise HttpProblem(
            422, "InvalidRequest", f"the body must be a JSON object, not {type(value).__name__}"
        )
    return value


async def object_body(request: Request) -> dict[str, Any]:
    """A body that must be a JSON object (a dependency)."""
    return mapping(await read_body(request))


def validated(model: type[M], doc: dict[str, Any]) -> M:
    """``doc`` as ``model``; 422 naming the first bad field, its value and the rule."""
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "(body)"
        value = first.get("input")
        if first.get("type") == "extra_forbidden":
            known = ", ".join(f.alias or n for n, f in model.model_fields.items())
            rule = f"unknown field; known fields: {known}"
        else:
            rule = first.get("msg", "invalid")
        raise HttpProblem(
            422,
            "InvalidRequest",
            f"{where}={json.dumps(value, default=str)}: {rule}",
            {"field": where, "value": value, "rule": rule},
        ) from None


def body_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra`` declaring a request body of ``schema``, as JSON or YAML."""
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": schema},
                "application/yaml": {"schema": schema},
            },
        }
    }


def model_schema(model: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    """``model``'s JSON schema for a request body; the models it refers to go into
    ``components`` (the OpenAPI document's ``components.schemas``)."""
    schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
    components.update(schema.pop("$defs", {}))
    return schema
