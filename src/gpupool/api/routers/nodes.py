"""``/api/v1/nodes``: every card and who holds how much of it; admin: add, cordon, fail,
drain, remove. A tenant sees how much of a card others hold, not who."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, StrictBool
from starlette.concurrency import run_in_threadpool

from gpupool.api.body import body_schema, object_body, validated
from gpupool.api.deps import Admin, Plane, Who
from gpupool.api.models.base import Deleted
from gpupool.api.models.cluster import DrainedNode, NodeList, NodeView
from gpupool.control import views
from gpupool.core.errors import NotFoundError

router = APIRouter(prefix="/api/v1/nodes", tags=["nodes"])
Body = Annotated[dict[str, Any], Depends(object_body)]


class NodePatch(BaseModel):
    """``unschedulable`` cordons (false uncordons); ``failed`` fails the node, its jobs going
    back to their queues whole (false recovers it)."""

    model_config = ConfigDict(extra="forbid")
    unschedulable: StrictBool | None = None
    failed: StrictBool | None = None


class NodePool(BaseModel):
    """One ``nodePools`` item of the cluster spec (docs/configuration.md)."""

    model_config = ConfigDict(extra="allow")


@router.get("", response_model=NodeList)
def nodes(who: Who, plane: Plane) -> dict[str, Any]:
    return {"items": views.nodes_view(plane, who.sees)}


@router.get("/{name}", response_model=NodeView)
def node(name: str, who: Who, plane: Plane) -> dict[str, Any]:
    return views.node_view(plane, name, who.sees)


@router.post(
    "",
    status_code=201,
    response_model=NodeList,
    openapi_extra=body_schema(NodePool.model_json_schema()),
)
async def add_nodes(doc: Body, who: Admin, plane: Plane) -> dict[str, Any]:
    added = await run_in_threadpool(plane.add_nodes, doc)
    return {"items": [views.node_view(plane, n.name) for n in added]}


@router.patch(
    "/{name}", response_model=NodeView, openapi_extra=body_schema(NodePatch.model_json_schema())
)
async def patch_node(name: str, doc: Body, who: Admin, plane: Plane) -> dict[str, Any]:
    patch = validated(NodePatch, doc)

    def run() -> dict[str, Any]:
        plane.set_node(name, unschedulable=patch.unschedulable, failed=patch.failed)
        return views.node_view(plane, name)

    return await run_in_threadpool(run)


@router.post("/{name}/drain", response_model=DrainedNode)
def drain_node(name: str, who: Admin, plane: Plane) -> dict[str, Any]:
    """Cordon the node and send its jobs back to their queues, whole."""
    if name not in plane.node_status:
        raise NotFoundError(f"node {name} not found")
    requeued = plane.drain_node(name)
    return {**views.node_view(plane, name), "requeued": requeued}


@router.delete("/{name}", response_model=Deleted)
def delete_node(name: str, who: Admin, plane: Plane) -> dict[str, Any]:
    plane.delete_node(name)
    return {"deleted": name}
