"""The REST API of ``gpupool serve`` (FastAPI; the spec is at ``/openapi.json``).

Resources, JSON in and out (YAML accepted in, with ``Content-Type: application/yaml``), one
router each under ``api/routers/``, their answers' shapes in ``api/models/``::

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
    ...  /api/v1/elasticgpu{classes,claims,s}, /api/v1/provisioningrequests, /api/v1/cloud

Handlers that touch the control plane are plain functions (run on the worker threads), so a
scheduling cycle holding the plane's lock never stalls the event loop; bodies are read on the
loop first, with the size limit applied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from gpupool.api.auth import Tokens
from gpupool.api.body import MAX_BODY_BYTES
from gpupool.api.errors import RESPONSES, install
from gpupool.api.headers import SecurityHeaders
from gpupool.api.models.base import name_schemas
from gpupool.api.observe import Observe
from gpupool.api.routers import (
    cluster,
    elastic,
    events,
    jobs,
    nodes,
    provisioning,
    queues,
    service,
)
from gpupool.control.elastic import ElasticService
from gpupool.control.plane import ControlPlane

STATIC = Path(__file__).parent / "static"
ROUTERS = (service, cluster, nodes, queues, jobs, events, elastic, provisioning)

__all__ = ["MAX_BODY_BYTES", "create_app"]


def create_app(
    plane: ControlPlane, tokens: Tokens, *, max_body_bytes: int = MAX_BODY_BYTES
) -> FastAPI:
    app = FastAPI(
        title="gpupool",
        version="v1",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        responses=RESPONSES,
        description="GPU scheduler control plane: queues, jobs, nodes and cards.",
    )
    app.state.plane = plane
    app.state.tokens = tokens
    app.state.max_body_bytes = max_body_bytes
    app.state.elastic = ElasticService.of(plane)  # restored from the state file now
    install(app)
    for module in ROUTERS:
        app.include_router(module.router)
    _declare_request_models(app)
    app.add_middleware(Observe, metrics=plane.metrics, max_body_bytes=max_body_bytes)
    app.add_middleware(SecurityHeaders)
    if STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC), name="static")

        @app.get("/", include_in_schema=False)
        def dashboard() -> FileResponse:
            return FileResponse(STATIC / "index.html")

    return app


def _declare_request_models(app: FastAPI) -> None:
    """The models request bodies refer to go into the document's ``components.schemas``."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = build()
            name_schemas(spec)  # the document keeps its names (``Wire.schema_name``)
            spec.setdefault("components", {}).setdefault("schemas", {}).update(jobs.COMPONENTS)
        return app.openapi_schema or build()

    app.openapi = openapi  # type: ignore[method-assign]
