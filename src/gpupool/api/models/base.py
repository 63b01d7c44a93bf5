"""The base of every response model, and the small shapes shared by several resources."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class Wire(BaseModel):
    """Python names in snake_case, JSON names in camelCase (``time_seconds`` is
    ``timeSeconds``); fields beyond those declared pass through."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    schema_name: ClassVar[str] = ""
    """The model's name in ``/openapi.json`` where it is not the class's own: a class named
    apart from the core's class it shows (``JobView``, the core's ``Job``) keeps the name the
    document has always given it (``Job``). Set per class, not inherited."""


class Used(Wire):
    """An amount in use out of a total, in the unit the field's name says."""

    total: int
    used: int


class Deleted(Wire):
    """What a DELETE answers: the name or ``namespace/name`` deleted."""

    deleted: str


class Health(Wire):
    status: str
    cycles: int


class Identity(Wire):
    """The caller: its name, role, and namespaces (null for an admin, who sees all)."""

    name: str
    role: str
    namespaces: list[str] | None


class KubeObject(Wire):
    """A Kubernetes-shaped object (``apiVersion``, ``kind``, ``metadata``, ``spec``) as it
    was written, with the server's ``status`` where it keeps one."""

    api_version: str | None = None
    kind: str | None = None
    metadata: dict[str, Any]
    spec: dict[str, Any] = {}


SCHEMAS = "#/components/schemas/"


def schema_names() -> dict[str, str]:
    """Class name -> its name in the OpenAPI document, for every model named apart."""
    out: dict[str, str] = {}
    todo: list[type[Wire]] = [Wire]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        name = cls.__dict__.get("schema_name", "")
        if name and name != cls.__name__:
            out[cls.__name__] = name
    return out


def name_schemas(spec: dict[str, Any]) -> None:
    """Gives the models named apart their document names in ``spec`` (an OpenAPI document,
    changed in place): the keys of ``components.schemas``, the schemas' titles and every
    ``$ref``. Two schemas meant to carry one name are an error."""
    names = schema_names()
    schemas: dict[str, Any] = spec.get("components", {}).get("schemas", {})
    renamed: dict[str, Any] = {}
    for key, body in schemas.items():
        new = names.get(key, key)
        if new in renamed:
            raise ValueError(
                f"components.schemas: {key!r} would be named {new!r}, a name "
                "another schema has; a schema name must be unique"
            )
        if new != key and body.get("title") == key:
            body["title"] = new
        renamed[new] = body
    if schemas:
        spec["components"]["schemas"] = dict(sorted(renamed.items()))
    refs = {SCHEMAS + old: SCHEMAS + new for old, new in names.items()}
    _rename_refs(spec, refs)


def _rename_refs(value: object, refs: dict[str, str]) -> None:
    if isinstance(value, dict):
        ref = value.get("$ref")
        if isinstance(ref, str) and ref in refs:
            value["$ref"] = refs[ref]
        for v in value.values():
            _rename_refs(v, refs)
    elif isinstance(value, list):
        for v in value:
            _rename_refs(v, refs)
