"""``/healthz`` (no token), ``/metrics``, ``/openapi.json`` and ``/api/v1/whoami``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse

from gpupool.api.deps import Plane, Who
from gpupool.api.models.base import Health, Identity
from gpupool.metrics import CONTENT_TYPE

router = APIRouter(tags=["service"])


@router.get("/healthz", response_model=Health)
def healthz(plane: Plane) -> dict[str, Any]:
    return {"status": "ok", "cycles": plane.cycles}


@router.get("/metrics", response_class=PlainTextResponse)
def prometheus(who: Who, plane: Plane) -> Response:
    return Response(plane.metrics.render(), media_type=CONTENT_TYPE)


@router.get("/openapi.json", include_in_schema=False)
def spec(who: Who, request: Request) -> dict[str, Any]:
    document: dict[str, Any] = request.app.openapi()
    return document


@router.get("/api/v1/whoami", response_model=Identity)
async def whoami(who: Who) -> dict[str, Any]:
    return who.to_json()
