"""What a call to ``gpupool serve`` can fail with, as errors of gpupool's own tree.

Every refusal the server answers carries one JSON shape, ``{"error", "message", "details"}``;
the client turns it into a :class:`ResponseError` once, at the boundary, choosing the class by
the status code and the server's error name::

    ResponseError (GpupoolError)             status, error, message, details
     +-- RequestError                        4xx: the request must change (exit code 2)
     |    +-- BadRequest                     400 (also 413 PayloadTooLarge, 415 ...)
     |    +-- Unauthorized / Forbidden       401 no or unknown token / 403 not allowed
     |    +-- NotFoundError                  404, also a core.errors.NotFoundError
     |    +-- ConflictError                  409, also a core.errors.ConflictError
     |    +-- InvalidJobError / ConfigError  422, also the core class of the same name
     |    +-- InvalidRequest                 422 for a malformed parameter or body
     +-- ServerError                         5xx, also a core.errors.AdapterError (exit 1)
    Unreachable (core.errors.AdapterError)   no answer: refused, timed out, broken off

The classes that share a name with a core error subclass it, so ``except NotFoundError``
written against the core catches the server's refusal too, and the one-line message that
``gpupool`` prints reads as the server wrote it:
``InvalidJobError: spec.podSets[0].gpu.milli=1500: should be less than or equal to 999``.

``ApiError``, the root's earlier name, still imports (with a ``DeprecationWarning``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from gpupool.core import errors as core


class ResponseError(core.GpupoolError):
    """An error response from the server (a refusal, or its failure): its status code, error
    name, message and details."""

    def __init__(
        self, status: int, error: str, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        Exception.__init__(self, message)
        self.status = status
        self.error = error
        self.message = message
        self.details: dict[str, Any] = dict(details or {})


class RequestError(ResponseError):
    """4xx: the request is wrong and sending it again will not help."""


class BadRequest(RequestError):
    """400 (unreadable body), 413 (too large), 415 (wrong content type), other 4xx."""


class Unauthorized(RequestError):
    """401: no token, or a token the server does not know."""


class Forbidden(RequestError):
    """403: the token is known but may not do this (a tenant on an admin route)."""


class InvalidRequest(RequestError):
    """422: a malformed parameter or body that is not a job or configuration document."""


class NotFoundError(RequestError, core.NotFoundError):
    """404: no such job, node or queue object (or one the token may not see)."""


class ConflictError(RequestError, core.ConflictError):
    """409: the object exists already, or the change contradicts the state."""


class ConfigError(RequestError, core.ConfigError):
    """422: a queue object or node pool the server cannot accept; ``field``, ``value`` and
    ``rule`` name the problem where the server said them."""

    def __init__(
        self, status: int, error: str, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(status, error, message, details)
        field = self.details.get("field")
        rule = self.details.get("rule")
        self.field = None if field is None else str(field)
        self.value = self.details.get("value")
        self.rule = None if rule is None else str(rule)
        self.where = None
        self.document = None


class InvalidJobError(RequestError, core.InvalidJobError):
    """422: a job that can never run as written; ``field``, ``value`` and ``rule`` name it."""

    def __init__(
        self, status: int, error: str, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(status, error, message, details)
        self.field = str(self.details.get("field", ""))
        self.value = self.details.get("value")
        self.rule = str(self.details.get("rule", ""))
        self.job = None


class ServerError(ResponseError, core.AdapterError):
    """5xx: the server failed (a bug, or its disk); the request may succeed later."""


class Unreachable(core.AdapterError):
    """No answer from the server: connection refused, timed out or broken off."""


_BY_NAME: dict[str, type[RequestError]] = {
    "InvalidJobError": InvalidJobError,
    "ConfigError": ConfigError,
    "InvalidRequest": InvalidRequest,
    "NotFoundError": NotFoundError,
    "ConflictError": ConflictError,
    "Unauthorized": Unauthorized,
    "Forbidden": Forbidden,
}
_BY_STATUS: dict[int, type[RequestError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFoundError,
    409: ConflictError,
    422: InvalidRequest,
}


def from_response(status: int, body: object, where: str) -> ResponseError:
    """The error for a response with a status of 400 or more.

    ``body`` is the decoded JSON (or the text when it was not JSON); ``where`` names the
    call (``POST http://host/api/v1/jobs``) for answers that are not the server's own shape.
    """
    if isinstance(body, Mapping) and isinstance(body.get("error"), str):
        error = str(body["error"])
        message = str(body.get("message") or error)
        details = body.get("details")
        details = details if isinstance(details, Mapping) else {}
    else:
        error = f"HTTP {status}"
        text = str(body or "").strip().replace("\n", " ")
        message = f"{where}: HTTP {status}" + (f": {text[:200]}" if text else "")
        details = {}
    if status >= 500:
        shown = message if error in ("ServerError", "") else f"{error}: {message}"
        return ServerError(status, error, shown, details)
    cls = _BY_NAME.get(error) or _BY_STATUS.get(status, BadRequest)
    if cls is NotFoundError and error != "NotFoundError":
        message = f"{message} ({where})"  # a route the server does not have
    if cls is BadRequest and error not in ("BadRequest", f"HTTP {status}"):
        message = f"{error}: {message}"
    return cls(status, error, message, details)


def __getattr__(name: str) -> type[ResponseError]:
    """``ApiError``: the earlier name of :class:`ResponseError`, deprecated."""
    if name == "ApiError":
        warnings.warn(
            "gpupool.client.errors.ApiError is now ResponseError", DeprecationWarning, stacklevel=2
        )
        return ResponseError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
