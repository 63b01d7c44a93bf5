"""The outermost middleware: refuses a body declared over the size limit (413) and times every
request into the metrics."""

from __future__ import annotations

import time

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpupool.metrics import Metrics


class Observe:
    """Plain ASGI: no task group or streams per request, which Starlette's
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
            response = JSONResponse(
                {
                    "error": "PayloadTooLarge",
                    "message": f"body of {int(size)} bytes is over the limit of "
                    f"{self.max_body_bytes} bytes",
                    "details": {},
                },
                413,
            )
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
