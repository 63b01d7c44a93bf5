"""Who is calling and what they may see, as FastAPI dependencies: the caller from its bearer
token (``Who``), an admin only (``Admin``), the control plane (``Plane``), a job the caller
may see (``VisibleJob``), and the namespace a document may be written to
(:func:`writable_namespace`).

Tenancy lives here, once: a tenant sees its namespaces only, and another tenant's objects do
not exist for it (404, so names do not leak). The dependencies that need no lock are
``async`` and do no I/O, so they cost no hop to a worker thread.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from gpupool.api.auth import Principal, Tokens
from gpupool.api.errors import HttpProblem
from gpupool.control.plane import ControlPlane, JobRecord
from gpupool.core.errors import NotFoundError


async def principal(request: Request) -> Principal:
    """The caller, from its bearer token (401 without one or with an unknown one)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HttpProblem(
            401,
            "Unauthorized",
            "a bearer token is needed: Authorization: Bearer <token>",
            headers={"WWW-Authenticate": "Bearer"},
        )
    tokens: Tokens = request.app.state.tokens
    who = tokens.principal(token.strip())
    if who is None:
        raise HttpProblem(
            401, "Unauthorized", "the token is not known", headers={"WWW-Authenticate": "Bearer"}
        )
    return who


Who = Annotated[Principal, Depends(principal)]


async def admin(who: Who) -> Principal:
    if not who.is_admin:
        raise HttpProblem(403, "Forbidden", f"{who.name} is a tenant; this needs the admin role")
    return who


Admin = Annotated[Principal, Depends(admin)]


async def control_plane(request: Request) -> ControlPlane:
    plane: ControlPlane = request.app.state.plane
    return plane


Plane = Annotated[ControlPlane, Depends(control_plane)]


def seen(who: Principal, kind: str, namespace: str, name: str) -> str:
    """``namespace/name`` when the caller may see that namespace; else the object does not
    exist for it."""
    key = f"{namespace}/{name}"
    if not who.sees(namespace):
        raise NotFoundError(f"{kind} {key} not found")
    return key


def visible_job(namespace: str, name: str, who: Who, plane: Plane) -> JobRecord:
    """The job at ``{namespace}/{name}`` if the caller may see it (404 otherwise). Plain
    ``def``: it waits for the plane's lock on a worker thread, never on the event loop."""
    return plane.job(seen(who, "job", namespace, name))


VisibleJob = Annotated[JobRecord, Depends(visible_job)]


def writable_namespace(
    who: Principal, doc: dict[str, Any], verb: str, *, top_level: bool = False
) -> str | None:
    """The namespace a document is written to: its ``metadata.namespace`` (or, with
    ``top_level``, a top-level ``namespace`` when it has no metadata), else a tenant's only
    namespace. 403 for a namespace the caller does not hold; 422 when a tenant of several
    namespaces names none. None: the admin named none (the document's default applies)."""
    meta = doc.get("metadata")
    ns = (
        meta.get("namespace")
        if isinstance(meta, dict)
        else doc.get("namespace")
        if top_level
        else None
    )
    if ns is None and not who.is_admin:
        if len(who.namespaces) != 1:
            raise HttpProblem(
                422,
                "InvalidRequest",
                "metadata.namespace is required: "
                f"this token covers {', '.join(sorted(who.namespaces))}",
                {
                    "field": "metadata.namespace",
                    "value": None,
                    "rule": "is required: the token covers more than one",
                },
            )
        ns = next(iter(who.namespaces))
    if isinstance(ns, str) and not who.sees(ns):
        raise HttpProblem(403, "Forbidden", f"{who.name} may not {verb} namespace {ns}")
    return ns if isinstance(ns, str) else None
