"""The base of every response model, and the small shapes shared by several resources."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class Wire(BaseModel):
    """Python names in snake_case, JSON names in camelCase (``time_seconds`` is
    ``timeSeconds``); fields beyond those declared pass through."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")


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
