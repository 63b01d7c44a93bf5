"""One error shape for every failure, and the status code each error class means.

``{"error": "InvalidJobError", "message": "...", "details": {"field": ..., "value": ...,
"rule": ...}}``: the class of the error, one sentence, and where known the field, the value
and the rule it broke.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpupool.core.errors import (
    AdapterError,
    ConfigError,
    ConflictError,
    GpupoolError,
    InvalidJobError,
    NotFoundError,
)

STATUS = {
    InvalidJobError: 422,
    ConfigError: 422,
    NotFoundError: 404,
    ConflictError: 409,
    AdapterError: 503,
}


class ErrorBody(BaseModel):
    """The shape of every error response (declared in the OpenAPI spec)."""

    error: str
    message: str
    details: dict[str, Any]


RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (400, "Malformed body"),
        (401, "No token, or an unknown one"),
        (403, "The token's role or namespaces do not allow this"),
        (404, "Not found"),
        (405, "Method not allowed"),
        (409, "Conflicts with the state"),
        (413, "Body too large"),
        (415, "Unsupported content type"),
        (422, "Invalid request: the field, the value and the rule"),
        (503, "The state file could not be written"),
    )
}


class HttpProblem(Exception):
    """A problem the API answers at the HTTP level (no token, wrong role, a body too large or
    unreadable): its status code and the error shape's ``error``, ``message`` and ``details``.
    Domain errors (``GpupoolError``) are answered by their own handler, not raised as this."""

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message
        self.details = details or {}
        self.headers = headers


def body(error: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": error, "message": message, "details": details or {}}


def _jsonable(value: object) -> object:
    try:
        json.dumps(value, allow_nan=False)  # as the response is written: no Infinity, NaN
        return value
    except (TypeError, ValueError):
        return repr(value)


def status_of(exc: GpupoolError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 400


def install(app: FastAPI) -> None:
    @app.exception_handler(HttpProblem)
    async def _api(_: Request, exc: HttpProblem) -> JSONResponse:
        return JSONResponse(
            body(exc.error, exc.message, exc.details), exc.status, headers=exc.headers
        )

    @app.exception_handler(GpupoolError)
    async def _domain(_: Request, exc: GpupoolError) -> JSONResponse:
        details: dict[str, Any] = {}
        if isinstance(exc, InvalidJobError) or (isinstance(exc, ConfigError) and exc.structured):
            details = {"field": exc.field, "value": _jsonable(exc.value), "rule": exc.rule}
        return JSONResponse(body(type(exc).__name__, str(exc), details), status_of(exc))

    @app.exception_handler(RequestValidationError)
    async def _params(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        msg = f"{where}: {first.get('msg', 'invalid')}"
        return JSONResponse(
            body(
                "InvalidRequest",
                msg,
                {
                    "field": where,
                    "value": _jsonable(first.get("input")),
                    "rule": first.get("msg", ""),
                },
            ),
            422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        name = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HTTPError")
        return JSONResponse(
            body(name, str(exc.detail)), exc.status_code, headers=getattr(exc, "headers", None)
        )

    @app.exception_handler(Exception)
    async def _bug(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(body("InternalError", f"{type(exc).__name__}: {exc}"), 500)
