"""The REST API of ``gpupool serve`` (FastAPI; the spec is at ``/openapi.json``).

Resources, JSON in and out (YAML accepted in, with ``Content-Type: application/yaml``)::

    GET  /healthz                                   no token needed
    GET  /metrics                                   Prometheus text
    GET  /api/v1/whoami
    GET  /api/v1/cluster, /api/v1/cluster/history   totals, allocation, fragmentation; shares
    GET  /api/v1/nodes[/{name}]                     every card and who holds how much of it
    POST /api/v1/nodes                              admin: add nodes (a node-pool spec)
    PATCH/DELETE /api/v1/nodes/{name}               admin: cordon, fail, recover, remove
    GET/POST /api/v1/{flavors,clusterqueues,cohorts}, GET/PUT/DELETE .../{name}
    GET/POST /api/v1/localqueues, GET/PUT/DELETE /api/v1/localqueues/{namespace}/{name}
    GET/POST /api/v1/jobs, GET/DELETE /api/v1/jobs/{namespace}/{name}
    GET  /api/v1/events

Handlers that touch the control plane are plain functions (run on the worker threads), so a
scheduling cycle holding the plane's lock never stalls the event loop; bodies are read on the
loop first, with the size limit applied.
"""

from __future__ import annotations

import json
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import yaml
from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpupool.api.auth import Principal, Tokens
from gpupool.api.errors import RESPONSES, ApiError, install
from gpupool.api.headers import SecurityHeaders
from gpupool.config.jobs import JobDocument
from gpupool.control import views
from gpupool.control.plane import ControlPlane, JobRecord
from gpupool.core.errors import NotFoundError
from gpupool.metrics import CONTENT_TYPE, Metrics

MAX_BODY_BYTES = 1 << 20
STATIC = Path(__file__).parent / "static"
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
QUEUE_ROUTES = {"flavors": "ResourceFlavor", "clusterqueues": "ClusterQueue",
                "cohorts": "Cohort"}
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Cancelled")

_OBJECT = {"type": "object", "additionalProperties": True}


class _YamlLoader(yaml.SafeLoader):
    """YAML read as Kubernetes reads it into JSON: a timestamp stays the string it was."""


_YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


MAX_DEPTH = 64  # nesting of a request body
MAX_VALUES = 1_000_000  # values in a request body, counting each reference a YAML alias makes


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
            raise ApiError(400, "BadRequest", f"the body is nested more than {MAX_DEPTH} deep "
                           f"or holds more than {MAX_VALUES:,} values (aliases expanded)")
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
        raise ApiError(400, "BadRequest", f"YAML with no JSON form: {exc}") from None


def _body_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": schema}, "application/yaml": {"schema": schema}}}}


def principal(request: Request) -> Principal:
    """The caller, from its bearer token (401 without one or with an unknown one)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "Unauthorized", "a bearer token is needed: "
                       "Authorization: Bearer <token>", headers={"WWW-Authenticate": "Bearer"})
    tokens: Tokens = request.app.state.tokens
    who = tokens.principal(token.strip())
    if who is None:
        raise ApiError(401, "Unauthorized", "the token is not known",
                       headers={"WWW-Authenticate": "Bearer"})
    return who


Who = Annotated[Principal, Depends(principal)]


def admin(who: Who) -> Principal:
    if not who.is_admin:
        raise ApiError(403, "Forbidden", f"{who.name} is a tenant; this needs the admin role")
    return who


Admin = Annotated[Principal, Depends(admin)]


def create_app(plane: ControlPlane, tokens: Tokens, *,
               max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    app = FastAPI(title="gpupool", version="v1", docs_url=None, redoc_url=None,
                  openapi_url=None, responses=RESPONSES,
                  description="GPU scheduler control plane: queues, jobs, nodes and cards.")
    app.state.tokens = tokens
    install(app)
    metrics = plane.metrics
    job_schema = JobDocument.model_json_schema(by_alias=True,
                                               ref_template="#/components/schemas/{model}")
    job_parts = job_schema.pop("$defs", {})  # what its $refs point at: the spec's components
    spec_of = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec_of().setdefault("components", {}).setdefault("schemas", {}).update(job_parts)
        return app.openapi_schema or spec_of()

    app.openapi = openapi  # type: ignore[method-assign]

    # -- plumbing ----------------------------------------------------------------------------

    app.add_middleware(_Observe, metrics=metrics, max_body_bytes=max_body_bytes)
    app.add_middleware(SecurityHeaders)

    async def read_body(request: Request) -> Any:
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > max_body_bytes:
                raise ApiError(413, "PayloadTooLarge", f"body is over the limit of "
                               f"{max_body_bytes} bytes")
        ctype = request.headers.get("content-type", "application/json").split(";")[0].strip()
        if not raw.strip():
            raise ApiError(400, "BadRequest", "the request has no body")
        try:
            if ctype in YAML_TYPES:
                return _json_form(_bounded(yaml.load(raw, Loader=_YamlLoader)))
            if ctype in ("application/json", "") or ctype.endswith("+json"):
                return _bounded(json.loads(raw))
        except RecursionError:  # the parser's own stack ran out first
            raise ApiError(400, "BadRequest", f"the body is nested more than {MAX_DEPTH} "
                           "deep") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(400, "BadRequest", f"malformed JSON: {exc}") from None
        except yaml.YAMLError as exc:
            raise ApiError(400, "BadRequest", f"malformed YAML: {exc}") from None
        raise ApiError(415, "UnsupportedMediaType", f"content type {ctype!r}: send "
                       "application/json or application/yaml")

    def mapping(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ApiError(422, "InvalidRequest", f"the body must be a JSON object, not "
                           f"{type(value).__name__}")
        return value

    # -- health, metrics, identity -----------------------------------------------------------

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "cycles": plane.cycles}

    @app.get("/metrics", tags=["service"], response_class=PlainTextResponse)
    def prometheus(who: Who) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/openapi.json", include_in_schema=False)
    def spec(who: Who) -> dict[str, Any]:
        return app.openapi()

    @app.get("/api/v1/whoami", tags=["service"])
    def whoami(who: Who) -> dict[str, Any]:
        return who.to_json()

    # -- cluster and nodes -------------------------------------------------------------------

    @app.get("/api/v1/cluster", tags=["cluster"])
    def cluster(who: Who) -> dict[str, Any]:
        return views.cluster_view(plane)

    @app.get("/api/v1/cluster/history", tags=["cluster"])
    def history(who: Who) -> dict[str, Any]:
        with plane.lock:
            return {"samples": list(plane.history)}

    @app.get("/api/v1/nodes", tags=["nodes"])
    def nodes(who: Who) -> dict[str, Any]:
        return {"items": views.nodes_view(plane, who.sees)}

    @app.get("/api/v1/nodes/{name}", tags=["nodes"])
    def node(name: str, who: Who) -> dict[str, Any]:
        if name not in plane.node_status:
            raise NotFoundError(f"node {name} not found")
        return views.node_view(plane, name, who.sees)

    @app.post("/api/v1/nodes", tags=["nodes"], status_code=201,
              openapi_extra=_body_schema(_OBJECT))
    async def add_nodes(request: Request, who: Admin) -> dict[str, Any]:
        pool = mapping(await read_body(request))
        added = await run_in_threadpool(plane.add_nodes, pool)
        return {"items": [views.node_view(plane, n.name) for n in added]}

    @app.patch("/api/v1/nodes/{name}", tags=["nodes"], openapi_extra=_body_schema({
        "type": "object", "additionalProperties": False, "properties": {
            "unschedulable": {"type": "boolean"}, "failed": {"type": "boolean"}}}))
    async def patch_node(name: str, request: Request, who: Admin) -> dict[str, Any]:
        patch = mapping(await read_body(request))
        unknown = sorted(set(patch) - {"unschedulable", "failed"})
        if unknown:
            raise ApiError(422, "InvalidRequest", f"{unknown[0]}: unknown field; known "
                           "fields: unschedulable, failed", {
                               "field": unknown[0], "value": patch[unknown[0]],
                               "rule": "unknown field; known: unschedulable, failed"})
        for k, v in patch.items():
            if not isinstance(v, bool):
                raise ApiError(422, "InvalidRequest", f"{k}={json.dumps(v)} should be true "
                               "or false", {"field": k, "value": v, "rule": "a boolean"})
        await run_in_threadpool(lambda: plane.set_node(
            name, unschedulable=patch.get("unschedulable"), failed=patch.get("failed")))
        return views.node_view(plane, name)

    @app.post("/api/v1/nodes/{name}/drain", tags=["nodes"])
    def drain_node(name: str, who: Admin) -> dict[str, Any]:
        """Cordon the node and send its jobs back to their queues, whole."""
        if name not in plane.node_status:
            raise NotFoundError(f"node {name} not found")
        requeued = plane.drain_node(name)
        return {**views.node_view(plane, name), "requeued": requeued}

    @app.delete("/api/v1/nodes/{name}", tags=["nodes"])
    def delete_node(name: str, who: Admin) -> dict[str, Any]:
        plane.delete_node(name)
        return {"deleted": name}

    # -- queue objects -----------------------------------------------------------------------

    def queue_item(kind: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        status = {"ResourceFlavor": views.flavor_status, "ClusterQueue":
                  views.cluster_queue_status, "Cohort": views.cohort_status,
                  "LocalQueue": views.local_queue_status}[kind](plane, name)
        return {**body, "status": status}

    for route, kind in QUEUE_ROUTES.items():
        _queue_routes(app, route, kind, plane, read_body, mapping, queue_item)

    @app.get("/api/v1/localqueues", tags=["queues"])
    def local_queues(who: Who) -> dict[str, Any]:
        with plane.lock:  # a queue deleted meanwhile is not half-seen
            items = [queue_item("LocalQueue", n, b) for n, b in
                     plane.queue_objects("LocalQueue") if who.sees(n.split("/", 1)[0])]
        return {"items": items}

    @app.get("/api/v1/localqueues/{namespace}/{name}", tags=["queues"])
    def local_queue(namespace: str, name: str, who: Who) -> dict[str, Any]:
        key = f"{namespace}/{name}"
        if not who.sees(namespace):
            raise NotFoundError(f"LocalQueue {key} not found")
        return queue_item("LocalQueue", key, plane.queue_object("LocalQueue", key))

    @app.post("/api/v1/localqueues", tags=["queues"], status_code=201,
              openapi_extra=_body_schema(_OBJECT))
    async def create_local_queue(request: Request, who: Admin) -> dict[str, Any]:
        doc = mapping(await read_body(request))
        return await run_in_threadpool(plane.put_queue_object, "LocalQueue", doc, create=True)

    @app.put("/api/v1/localqueues/{namespace}/{name}", tags=["queues"],
             openapi_extra=_body_schema(_OBJECT))
    async def replace_local_queue(namespace: str, name: str, request: Request,
                                  who: Admin) -> dict[str, Any]:
        doc = mapping(await read_body(request))
        _same_name(doc, name, namespace)
        return await run_in_threadpool(plane.put_queue_object, "LocalQueue", doc,
                                       create=False)

    @app.delete("/api/v1/localqueues/{namespace}/{name}", tags=["queues"])
    def delete_local_queue(namespace: str, name: str, who: Admin) -> dict[str, Any]:
        plane.delete_queue_object("LocalQueue", f"{namespace}/{name}")
        return {"deleted": f"{namespace}/{name}"}

    # -- jobs --------------------------------------------------------------------------------

    def visible_job(who: Principal, namespace: str, name: str) -> JobRecord:
        key = f"{namespace}/{name}"
        if not who.sees(namespace):
            raise NotFoundError(f"job {key} not found")
        return plane.job(key)

    @app.post("/api/v1/jobs", tags=["jobs"], status_code=201,
              openapi_extra=_body_schema(job_schema))
    async def submit(request: Request, who: Who) -> dict[str, Any]:
        doc = mapping(await read_body(request))
        meta = doc.get("metadata")
        ns = meta.get("namespace") if isinstance(meta, dict) else None
        if ns is None and not who.is_admin:
            if len(who.namespaces) != 1:
                raise ApiError(422, "InvalidRequest", "metadata.namespace is required: "
                               f"this token covers {', '.join(sorted(who.namespaces))}",
                               {"field": "metadata.namespace", "value": None,
                                "rule": "is required: the token covers more than one"})
            ns = next(iter(who.namespaces))
        if isinstance(ns, str) and not who.sees(ns):
            raise ApiError(403, "Forbidden", f"{who.name} may not submit to namespace {ns}")

        def run() -> dict[str, Any]:
            with plane.lock:  # the view in the same hold: no second wait behind a cycle
                rec = plane.submit(doc, namespace=ns if isinstance(ns, str) else None,
                                   sync=False)
                view = views.job_view(plane, rec, {})
            plane.sync()  # on disk before the 201, outside the lock (one fsync for many)
            return view

        return await run_in_threadpool(run)

    @app.get("/api/v1/jobs", tags=["jobs"])
    def list_jobs(who: Who,
                  namespace: Annotated[str | None, Query(max_length=63)] = None,
                  queue: Annotated[str | None, Query(max_length=127)] = None,
                  phase: Annotated[str | None, Query(pattern="^(" + "|".join(PHASES) +
                                                     r")(,(" + "|".join(PHASES) + "))*$")
                                   ] = None,
                  limit: Annotated[int, Query(ge=1, le=5000)] = 500,
                  after: Annotated[int, Query(ge=0, description="uid to continue after")] = 0,
                  ) -> dict[str, Any]:
        phases = set(phase.split(",")) if phase else None
        with plane.lock:
            recs: list[JobRecord] = []
            matched = 0  # all of them, for remainingItemCount (Kubernetes' ListMeta field)
            for rec in plane.jobs.values():
                ns = rec.request.namespace
                if rec.uid <= after or not who.sees(ns) or (namespace and ns != namespace):
                    continue
                if queue and queue not in (rec.request.queue, rec.cluster_queue,
                                           rec.request.queue.split("/", 1)[-1]):
                    continue
                if phases and rec.phase not in phases:
                    continue
                matched += 1
                if len(recs) <= limit:
                    recs.append(rec)
            more = len(recs) > limit
            recs = recs[:limit]
            return {"items": views.jobs_view(plane, recs),
                    "continue": recs[-1].uid if more and recs else None,
                    "remainingItemCount": matched - len(recs),
                    "time_s": round(plane.clock.now(), 3)}

    @app.get("/api/v1/jobs/{namespace}/{name}", tags=["jobs"])
    def get_job(namespace: str, name: str, who: Who) -> dict[str, Any]:
        return views.job_view(plane, visible_job(who, namespace, name))

    @app.post("/api/v1/jobs/{namespace}/{name}/cancel", tags=["jobs"])
    def cancel_job(namespace: str, name: str, who: Who) -> dict[str, Any]:
        """Cancel a pending or running job; a job that has ended is answered as it is."""
        visible_job(who, namespace, name)
        return views.job_view(plane, plane.cancel(f"{namespace}/{name}"), {})

    @app.delete("/api/v1/jobs/{namespace}/{name}", tags=["jobs"])
    def delete_job(namespace: str, name: str, who: Who) -> dict[str, Any]:
        """Delete a job (cancelled first if it has not ended): its record goes, its name may
        be used again. Answers the job as it was last."""
        visible_job(who, namespace, name)
        return views.job_view(plane, plane.delete(f"{namespace}/{name}"), {})

    # -- events ------------------------------------------------------------------------------

    @app.get("/api/v1/events", tags=["events"])
    def events(who: Who, since: Annotated[int, Query(ge=0)] = 0,
               limit: Annotated[int, Query(ge=1, le=5000)] = 200,
               namespace: Annotated[str | None, Query(max_length=63)] = None
               ) -> dict[str, Any]:
        spaces: list[str] | None = None if who.is_admin else sorted(who.namespaces)
        if namespace is not None:
            if not who.sees(namespace):
                return {"items": []}
            spaces = [namespace]
        rows = (plane.store.events(since, limit, spaces) if since else
                plane.store.last_events(limit, spaces))
        return {"items": [e.to_json() for e in rows]}

    from gpupool.api.elastic import install_elastic_routes  # its module imports this one

    install_elastic_routes(app, plane, read_body, mapping)

    from gpupool.api.provisioning import install_provisioning_routes

    install_provisioning_routes(app, plane)

    # -- the dashboard -----------------------------------------------------------------------

    if STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC), name="static")

        @app.get("/", include_in_schema=False)
        def dashboard() -> FileResponse:
            return FileResponse(STATIC / "index.html")

    return app


class _Observe:
    """Refuses a body declared over the size limit (413) and times every request into the
    metrics. Plain ASGI: no task group or streams per request, which Starlette's
    ``BaseHTTPMiddleware`` costs on every call."""

    def __init__(self, app: ASGIApp, metrics: Metrics, max_body_bytes: int) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        size = Headers(scope=scope).get("content-length")
        if size is not None and size.isdigit() and int(size) > self.max_body_bytes:
            response = JSONResponse({"error": "PayloadTooLarge", "message":
                                     f"body of {int(size)} bytes is over the limit of "
                                     f"{self.max_body_bytes} bytes", "details": {}}, 413)
            await response(scope, receive, send)
            return
        status = 500

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            path = getattr(scope.get("route"), "path", "(unmatched)")
            self.metrics.request(scope["method"], path, status, time.perf_counter() - t0)


def _same_name(doc: dict[str, Any], name: str, namespace: str | None = None) -> None:
    meta = doc.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise ApiError(422, "InvalidRequest", "metadata must be an object",
                       {"field": "metadata", "value": meta, "rule": "must be an object"})
    if meta.setdefault("name", name) != name:
        raise ApiError(422, "InvalidRequest", f"metadata.name={meta['name']!r} does not match "
                       f"the path ({name})", {"field": "metadata.name", "value": meta["name"],
                                              "rule": f"must match the path ({name})"})
    if namespace is not None and meta.setdefault("namespace", namespace) != namespace:
        raise ApiError(422, "InvalidRequest", f"metadata.namespace={meta['namespace']!r} does "
                       f"not match the path ({namespace})", {
                           "field": "metadata.namespace", "value": meta["namespace"],
                           "rule": f"must match the path ({namespace})"})


def _queue_routes(app: FastAPI, route: str, kind: str, plane: ControlPlane, read_body: Any,
                  mapping: Any, queue_item: Any) -> None:
    """GET list/one, POST, PUT, DELETE for one kind of cluster-scoped queue object."""
    base = f"/api/v1/{route}"

    def list_(who: Who) -> dict[str, Any]:
        with plane.lock:  # a queue deleted meanwhile is not half-seen
            return {"items": [queue_item(kind, n, b) for n, b in plane.queue_objects(kind)]}

    def get(name: str, who: Who) -> dict[str, Any]:
        item: dict[str, Any] = queue_item(kind, name, plane.queue_object(kind, name))
        return item

    async def create(request: Request, who: Admin) -> dict[str, Any]:
        doc = mapping(await read_body(request))
        body = await run_in_threadpool(plane.put_queue_object, kind, doc, create=True)
        return dict(body)

    async def replace(name: str, request: Request,
                      who: Admin) -> dict[str, Any]:
        doc = mapping(await read_body(request))
        _same_name(doc, name)
        body = await run_in_threadpool(plane.put_queue_object, kind, doc, create=False)
        return dict(body)

    def delete(name: str, who: Admin) -> dict[str, Any]:
        plane.delete_queue_object(kind, name)
        return {"deleted": name}

    tag: list[str | Enum] = ["queues"]
    app.add_api_route(base, list_, methods=["GET"], tags=tag, name=f"list_{route}")
    app.add_api_route(f"{base}/{{name}}", get, methods=["GET"], tags=tag, name=f"get_{route}")
    app.add_api_route(base, create, methods=["POST"], tags=tag, status_code=201,
                      name=f"create_{route}", openapi_extra=_body_schema(_OBJECT))
    app.add_api_route(f"{base}/{{name}}", replace, methods=["PUT"], tags=tag,
                      name=f"replace_{route}", openapi_extra=_body_schema(_OBJECT))
    app.add_api_route(f"{base}/{{name}}", delete, methods=["DELETE"], tags=tag,
                      name=f"delete_{route}")
