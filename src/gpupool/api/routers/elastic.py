"""Elastic GPU objects (docs/elastic.md, "REST endpoints")::

    GET  /api/v1/elasticgpuclasses[/{name}]               everyone
    POST /api/v1/elasticgpuclasses, PUT/DELETE .../{name}  admin
    GET  /api/v1/elasticgpuclaims[?namespace=]             the caller's namespaces
    POST /api/v1/elasticgpuclaims                          a tenant in its namespaces
    GET/DELETE /api/v1/elasticgpuclaims/{namespace}/{name} (404 for another namespace's)
    GET  /api/v1/elasticgpus[/{name}]                      those of the caller's claims, and
                                                           unbound ones
    POST /api/v1/elasticgpus, PATCH/DELETE .../{name}      admin: an ElasticGPU made by hand;
                                                           {"phase": "Available"} for a
                                                           Released one

Bodies are the objects' JSON forms or Kubernetes-style documents (``apiVersion:
elasticgpu.io/v1alpha1``, ``kind``, ``metadata``, ``spec``), JSON or YAML. A bad class or
ElasticGPU is 422 with the field, the value and the rule, as a bad claim is.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool

from gpupool.api.auth import Principal
from gpupool.api.body import body_schema, object_body, validated
from gpupool.api.deps import Admin, Who, seen, writable_namespace
from gpupool.api.models.base import Deleted
from gpupool.api.models.elastic import (
    ClaimDeleted,
    ClaimList,
    ClassList,
    ElasticClaim,
    ElasticClass,
    ElasticGpu,
    ElasticGpuList,
)
from gpupool.config.elastic import claim_to_json, class_to_json, gpu_to_json
from gpupool.control.elastic import API_GROUP, CLAIM, ElasticService
from gpupool.core.elastic import ElasticGPU, ElasticGPUClaim, ElasticGPUClass
from gpupool.core.errors import NotFoundError

router = APIRouter(prefix="/api/v1", tags=["elastic"])
Body = Annotated[dict[str, Any], Depends(object_body)]
_OBJECT = body_schema({"type": "object", "additionalProperties": True})


class MakeAvailable(BaseModel):
    """The one change an ElasticGPU takes: a Released one made bindable again."""

    model_config = ConfigDict(extra="forbid")
    phase: Literal["Available"]


async def elastic_service(request: Request) -> ElasticService:
    service: ElasticService = request.app.state.elastic
    return service


Service = Annotated[ElasticService, Depends(elastic_service)]


def class_view(c: ElasticGPUClass) -> dict[str, Any]:
    return {"apiVersion": API_GROUP, "kind": "ElasticGPUClass", **class_to_json(c)}


def claim_view(c: ElasticGPUClaim) -> dict[str, Any]:
    return {"apiVersion": API_GROUP, "kind": "ElasticGPUClaim", **claim_to_json(c)}


def gpu_view(g: ElasticGPU) -> dict[str, Any]:
    return {"apiVersion": API_GROUP, "kind": "ElasticGPU", **gpu_to_json(g)}


def sees_gpu(who: Principal, g: ElasticGPU) -> bool:
    """A tenant sees the ElasticGPUs of its namespaces' claims and those bound to none."""
    return g.claim_ref is None or who.sees(g.claim_ref.namespace)


# -- classes -------------------------------------------------------------------------------------


@router.get("/elasticgpuclasses", response_model=ClassList)
def list_classes(who: Who, service: Service) -> dict[str, Any]:
    return {"items": [class_view(c) for c in service.classes()]}


@router.get("/elasticgpuclasses/{name}", response_model=ElasticClass)
def get_class(name: str, who: Who, service: Service) -> dict[str, Any]:
    return class_view(service.get_class(name))


@router.post(
    "/elasticgpuclasses", status_code=201, response_model=ElasticClass, openapi_extra=_OBJECT
)
async def create_class(doc: Body, who: Admin, service: Service) -> dict[str, Any]:
    return class_view(await run_in_threadpool(service.put_class, doc, create=True))


@router.put("/elasticgpuclasses/{name}", response_model=ElasticClass, openapi_extra=_OBJECT)
async def replace_class(name: str, doc: Body, who: Admin, service: Service) -> dict[str, Any]:
    return class_view(await run_in_threadpool(service.put_class, doc, create=False, name=name))


@router.delete("/elasticgpuclasses/{name}", response_model=Deleted)
def delete_class(name: str, who: Admin, service: Service) -> dict[str, Any]:
    service.delete_class(name)
    return {"deleted": name}


# -- claims --------------------------------------------------------------------------------------


@router.get("/elasticgpuclaims", response_model=ClaimList)
def list_claims(
    who: Who, service: Service, namespace: Annotated[str | None, Query(max_length=63)] = None
) -> dict[str, Any]:
    return {
        "items": [
            claim_view(c)
            for c in service.claims()
            if who.sees(c.namespace) and (namespace is None or c.namespace == namespace)
        ]
    }


@router.post(
    "/elasticgpuclaims", status_code=201, response_model=ElasticClaim, openapi_extra=_OBJECT
)
async def create_claim(doc: Body, who: Who, service: Service) -> dict[str, Any]:
    ns = writable_namespace(who, doc, "claim in", top_level=True)
    return claim_view(await run_in_threadpool(service.submit, doc, ns))


@router.get("/elasticgpuclaims/{namespace}/{name}", response_model=ElasticClaim)
def get_claim(namespace: str, name: str, who: Who, service: Service) -> dict[str, Any]:
    return claim_view(service.claim(seen(who, CLAIM, namespace, name)))


@router.delete("/elasticgpuclaims/{namespace}/{name}", response_model=ClaimDeleted)
def delete_claim(namespace: str, name: str, who: Who, service: Service) -> dict[str, Any]:
    key = seen(who, CLAIM, namespace, name)
    service.claim(key)
    r = service.delete_claim(key)
    return {
        "deleted": r.claim,
        "elasticGPUs": {"deleted": list(r.deleted), "retained": list(r.retained)},
    }


# -- ElasticGPUs ---------------------------------------------------------------------------------


def _visible_gpu(who: Principal, service: ElasticService, name: str) -> ElasticGPU:
    g = service.gpu(name)
    if not sees_gpu(who, g):
        raise NotFoundError(f"ElasticGPU {name} does not exist")
    return g


@router.get("/elasticgpus", response_model=ElasticGpuList)
def list_gpus(who: Who, service: Service) -> dict[str, Any]:
    return {"items": [gpu_view(g) for g in service.gpus() if sees_gpu(who, g)]}


@router.get("/elasticgpus/{name}", response_model=ElasticGpu)
def get_gpu(name: str, who: Who, service: Service) -> dict[str, Any]:
    return gpu_view(_visible_gpu(who, service, name))


@router.post("/elasticgpus", status_code=201, response_model=ElasticGpu, openapi_extra=_OBJECT)
async def create_gpu(doc: Body, who: Admin, service: Service) -> dict[str, Any]:
    return gpu_view(await run_in_threadpool(service.add_gpu, doc))


@router.patch(
    "/elasticgpus/{name}",
    response_model=ElasticGpu,
    openapi_extra=body_schema(MakeAvailable.model_json_schema()),
)
async def patch_gpu(name: str, doc: Body, who: Admin, service: Service) -> dict[str, Any]:
    validated(MakeAvailable, doc)
    return gpu_view(await run_in_threadpool(service.make_available, name))


@router.delete("/elasticgpus/{name}", response_model=Deleted)
def delete_gpu(name: str, who: Admin, service: Service) -> dict[str, Any]:
    service.delete_gpu(name)
    return {"deleted": name}
