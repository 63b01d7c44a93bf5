"""REST endpoints of the Elastic GPU objects (docs/elastic.md, "REST endpoints")::

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

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from starlette.concurrency import run_in_threadpool

from gpupool.api.app import Admin, Who, _body_schema
from gpupool.api.auth import Principal
from gpupool.api.errors import ApiError
from gpupool.control.elastic import API_GROUP, CLAIM, ElasticService, config_details
from gpupool.control.plane import ControlPlane
from gpupool.core.elastic import ElasticGPU, ElasticGPUClaim, ElasticGPUClass
from gpupool.core.errors import ConfigError, NotFoundError

_OBJECT = {"type": "object", "additionalProperties": True}


def _checked(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn`` with a ConfigError as a 422 naming the field, the value and the rule."""
    try:
        return fn(*args, **kwargs)
    except ConfigError as exc:
        raise ApiError(422, "ConfigError", str(exc), config_details(exc)) from None


def class_view(c: ElasticGPUClass) -> dict[str, Any]:
    return {"apiVersion": API_GROUP, "kind": "ElasticGPUClass", **c.to_dict()}


def claim_view(c: ElasticGPUClaim) -> dict[str, Any]:
    return {"apiVersion": API_GROUP, "kind": "ElasticGPUClaim", **c.to_dict()}


def gpu_view(g: ElasticGPU) -> dict[str, Any]:
    return {"apiVersion": API_GROUP, "kind": "ElasticGPU", **g.to_dict()}


def sees_gpu(who: Principal, g: ElasticGPU) -> bool:
    """A tenant sees the ElasticGPUs of its namespaces' claims and those bound to none."""
    return g.claim_ref is None or who.sees(g.claim_ref.namespace)


def install_elastic_routes(app: FastAPI, plane: ControlPlane, read_body: Any,
                           mapping: Callable[[Any], dict[str, Any]]) -> ElasticService:
    """Add the routes; the plane's ElasticService is made (restored from the state file) if
    it has none yet."""
    service = ElasticService.of(plane)
    tags: list[Any] = ["elastic"]
    base = "/api/v1/elasticgpuclasses"

    # -- classes -------------------------------------------------------------------------------

    @app.get(base, tags=tags)
    def list_classes(who: Who) -> dict[str, Any]:
        return {"items": [class_view(c) for c in service.classes()]}

    @app.get(base + "/{name}", tags=tags)
    def get_class(name: str, who: Who) -> dict[str, Any]:
        return class_view(service.get_class(name))

    @app.post(base, tags=tags, status_code=201, openapi_extra=_body_schema(_OBJECT))
    async def create_class(request: Request, who: Admin) -> dict[str, Any]:
        doc = mapping(await read_body(request))
        c = await run_in_threadpool(_checked, service.put_class, doc, create=True)
        return class_view(c)

    @app.put(base + "/{name}", tags=tags, openapi_extra=_body_schema(_OBJECT))
    async def replace_class(name: str, request: Request, who: Admin) -> dict[str, Any]:
        doc = mapping(await read_body(request))
        c = await run_in_threadpool(_checked, service.put_class, doc, create=False, name=name)
        return class_view(c)

    @app.delete(base + "/{name}", tags=tags)
    def delete_class(name: str, who: Admin) -> dict[str, Any]:
        service.delete_class(name)
        return {"deleted": name}

    # -- claims --------------------------------------------------------------------------------

    claims = "/api/v1/elasticgpuclaims"

    def visible_claim(who: Principal, namespace: str, name: str) -> ElasticGPUClaim:
        key = f"{namespace}/{name}"
        if not who.sees(namespace):
            raise NotFoundError(f"{CLAIM} {key} does not exist")
        return service.claim(key)

    @app.get(claims, tags=tags)
    def list_claims(who: Who, namespace: Annotated[str | None, Query(max_length=63)] = None
                    ) -> dict[str, Any]:
        return {"items": [claim_view(c) for c in service.claims()
                          if who.sees(c.namespace)
                          and (namespace is None or c.namespace == namespace)]}

    @app.post(claims, tags=tags, status_code=201, openapi_extra=_body_schema(_OBJECT))
    async def create_claim(request: Request, who: Who) -> dict[str, Any]:
        doc = mapping(await read_body(request))
        meta = doc.get("metadata")
        ns = meta.get("namespace") if isinstance(meta, dict) else doc.get("namespace")
        if ns is None and not who.is_admin:
            if len(who.namespaces) != 1:
                raise ApiError(422, "InvalidRequest", "metadata.namespace is required: "
                               f"this token covers {', '.join(sorted(who.namespaces))}",
                               {"field": "metadata.namespace", "value": None,
                                "rule": "is required: the token covers more than one"})
            ns = next(iter(who.namespaces))
        if isinstance(ns, str) and not who.sees(ns):
            raise ApiError(403, "Forbidden", f"{who.name} may not claim in namespace {ns}")
        c = await run_in_threadpool(service.submit, doc, ns if isinstance(ns, str) else None)
        return claim_view(c)

    @app.get(claims + "/{namespace}/{name}", tags=tags)
    def get_claim(namespace: str, name: str, who: Who) -> dict[str, Any]:
        return claim_view(visible_claim(who, namespace, name))

    @app.delete(claims + "/{namespace}/{name}", tags=tags)
    def delete_claim(namespace: str, name: str, who: Who) -> dict[str, Any]:
        visible_claim(who, namespace, name)
        r = service.delete_claim(f"{namespace}/{name}")
        return {"deleted": r.claim, "elasticGPUs": {"deleted": list(r.deleted),
                                                    "retained": list(r.retained)}}

    # -- ElasticGPUs ---------------------------------------------------------------------------

    gpus = "/api/v1/elasticgpus"

    def visible_gpu(who: Principal, name: str) -> ElasticGPU:
        g = service.gpu(name)
        if not sees_gpu(who, g):
            raise NotFoundError(f"ElasticGPU {name} does not exist")
        return g

    @app.get(gpus, tags=tags)
    def list_gpus(who: Who) -> dict[str, Any]:
        return {"items": [gpu_view(g) for g in service.gpus() if sees_gpu(who, g)]}

    @app.get(gpus + "/{name}", tags=tags)
    def get_gpu(name: str, who: Who) -> dict[str, Any]:
        return gpu_view(visible_gpu(who, name))

    @app.post(gpus, tags=tags, status_code=201, openapi_extra=_body_schema(_OBJECT))
    async def create_gpu(request: Request, who: Admin) -> dict[str, Any]:
        doc = mapping(await read_body(request))
        return gpu_view(await run_in_threadpool(_checked, service.add_gpu, doc))

    @app.patch(gpus + "/{name}", tags=tags, openapi_extra=_body_schema({
        "type": "object", "additionalProperties": False,
        "properties": {"phase": {"enum": ["Available"]}}}))
    async def patch_gpu(name: str, request: Request, who: Admin) -> dict[str, Any]:
        patch = mapping(await read_body(request))
        if patch != {"phase": "Available"}:
            raise ApiError(422, "InvalidRequest", "the one change an ElasticGPU takes is "
                           '{"phase": "Available"} (a Released one made bindable again)',
                           {"field": next(iter(patch), "phase"),
                            "value": next(iter(patch.values()), None),
                            "rule": 'only {"phase": "Available"}'})
        return gpu_view(await run_in_threadpool(service.make_available, name))

    @app.delete(gpus + "/{name}", tags=tags)
    def delete_gpu(name: str, who: Admin) -> dict[str, Any]:
        service.delete_gpu(name)
        return {"deleted": name}

    return service

