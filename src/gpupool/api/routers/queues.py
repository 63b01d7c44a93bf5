"""Kueue's queue objects: ``/api/v1/flavors``, ``/clusterqueues``, ``/cohorts`` (cluster-wide)
and ``/api/v1/localqueues/{namespace}/{name}`` (a tenant sees its own). Everyone may read;
an admin creates, replaces and deletes. Every change is checked with all the other queue
objects (``ControlPlane.put_queue_object``)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from gpupool.api.body import body_schema, model_schema, object_body
from gpupool.api.deps import Admin, Plane, Who, seen
from gpupool.api.errors import HttpProblem
from gpupool.api.models.base import Deleted, KubeObject
from gpupool.api.models.queues import STATUS_MODELS, Written
from gpupool.control import views
from gpupool.control.plane import ControlPlane

router = APIRouter(prefix="/api/v1", tags=["queues"])
Body = Annotated[dict[str, Any], Depends(object_body)]
CLUSTER_WIDE = {"flavors": "ResourceFlavor", "clusterqueues": "ClusterQueue", "cohorts": "Cohort"}
_STATUS = {
    "ResourceFlavor": views.flavor_status,
    "ClusterQueue": views.cluster_queue_status,
    "Cohort": views.cohort_status,
    "LocalQueue": views.local_queue_status,
}
_BODY = body_schema(model_schema(KubeObject, {}))


def with_status(plane: ControlPlane, kind: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "status": _STATUS[kind](plane, name)}


def same_name(doc: dict[str, Any], name: str, namespace: str | None = None) -> None:
    """The body's metadata names the object of the path (filled in where it names none)."""
    meta = doc.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise HttpProblem(
            422,
            "InvalidRequest",
            "metadata must be an object",
            {"field": "metadata", "value": meta, "rule": "must be an object"},
        )
    if meta.setdefault("name", name) != name:
        raise HttpProblem(
            422,
            "InvalidRequest",
            f"metadata.name={meta['name']!r} does not match the path ({name})",
            {
                "field": "metadata.name",
                "value": meta["name"],
                "rule": f"must match the path ({name})",
            },
        )
    if namespace is not None and meta.setdefault("namespace", namespace) != namespace:
        raise HttpProblem(
            422,
            "InvalidRequest",
            f"metadata.namespace={meta['namespace']!r} does not match the path ({namespace})",
            {
                "field": "metadata.namespace",
                "value": meta["namespace"],
                "rule": f"must match the path ({namespace})",
            },
        )


def _cluster_wide(route: str, kind: str) -> None:
    """GET list/one, POST, PUT, DELETE for one kind of cluster-wide queue object."""
    base = f"/{route}"
    one, many = STATUS_MODELS[kind]

    def list_(who: Who, plane: Plane) -> dict[str, Any]:
        with plane.lock:  # a queue deleted meanwhile is not half-seen
            return {"items": [with_status(plane, kind, n, b) for n, b in plane.queue_objects(kind)]}

    def get(name: str, who: Who, plane: Plane) -> dict[str, Any]:
        return with_status(plane, kind, name, plane.queue_object(kind, name))

    async def create(doc: Body, who: Admin, plane: Plane) -> dict[str, Any]:
        return dict(await run_in_threadpool(plane.put_queue_object, kind, doc, create=True))

    async def replace(name: str, doc: Body, who: Admin, plane: Plane) -> dict[str, Any]:
        same_name(doc, name)
        return dict(await run_in_threadpool(plane.put_queue_object, kind, doc, create=False))

    def delete(name: str, who: Admin, plane: Plane) -> dict[str, Any]:
        plane.delete_queue_object(kind, name)
        return {"deleted": name}

    tags: list[str | Enum] = ["queues"]
    router.add_api_route(
        base, list_, methods=["GET"], tags=tags, name=f"list_{route}", response_model=many
    )
    router.add_api_route(
        f"{base}/{{name}}", get, methods=["GET"], tags=tags, name=f"get_{route}", response_model=one
    )
    router.add_api_route(
        base,
        create,
        methods=["POST"],
        tags=tags,
        status_code=201,
        name=f"create_{route}",
        openapi_extra=_BODY,
        response_model=Written,
    )
    router.add_api_route(
        f"{base}/{{name}}",
        replace,
        methods=["PUT"],
        tags=tags,
        name=f"replace_{route}",
        openapi_extra=_BODY,
        response_model=Written,
    )
    router.add_api_route(
        f"{base}/{{name}}",
        delete,
        methods=["DELETE"],
        tags=tags,
        name=f"delete_{route}",
        response_model=Deleted,
    )


for _route, _kind in CLUSTER_WIDE.items():
    _cluster_wide(_route, _kind)

_LocalQueue, _LocalQueues = STATUS_MODELS["LocalQueue"]


@router.get("/localqueues", response_model=_LocalQueues)
def local_queues(who: Who, plane: Plane) -> dict[str, Any]:
    with plane.lock:  # a queue deleted meanwhile is not half-seen
        return {
            "items": [
                with_status(plane, "LocalQueue", n, b)
                for n, b in plane.queue_objects("LocalQueue")
                if who.sees(n.split("/", 1)[0])
            ]
        }


@router.get("/localqueues/{namespace}/{name}", response_model=_LocalQueue)
def local_queue(namespace: str, name: str, who: Who, plane: Plane) -> dict[str, Any]:
    key = seen(who, "LocalQueue", namespace, name)
    return with_status(plane, "LocalQueue", key, plane.queue_object("LocalQueue", key))


@router.post("/localqueues", status_code=201, response_model=Written, openapi_extra=_BODY)
async def create_local_queue(doc: Body, who: Admin, plane: Plane) -> dict[str, Any]:
    return dict(await run_in_threadpool(plane.put_queue_object, "LocalQueue", doc, create=True))


@router.put("/localqueues/{namespace}/{name}", response_model=Written, openapi_extra=_BODY)
async def replace_local_queue(
    namespace: str, name: str, doc: Body, who: Admin, plane: Plane
) -> dict[str, Any]:
    same_name(doc, name, namespace)
    return dict(await run_in_threadpool(plane.put_queue_object, "LocalQueue", doc, create=False))


@router.delete("/localqueues/{namespace}/{name}", response_model=Deleted)
def delete_local_queue(namespace: str, name: str, who: Admin, plane: Plane) -> dict[str, Any]:
    plane.delete_queue_object("LocalQueue", f"{namespace}/{name}")
    return {"deleted": f"{namespace}/{name}"}
