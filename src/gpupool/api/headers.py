"""Security headers on every response of ``gpupool serve``.

The dashboard is one page that loads its own script and stylesheet and talks to its own
origin: its Content-Security-Policy allows nothing else (no inline script, no other origin,
no framing). Inline ``style`` attributes are allowed (``style-src-attr``): the page draws its
bars with them. ``frame-ancestors 'none'`` and ``X-Frame-Options: DENY`` (for browsers without
CSP level 2) keep the page out of other sites' frames (clickjacking); ``nosniff`` keeps a JSON
answer from being read as a script; no referrer leaves the page (its link may carry a token
in the fragment, which browsers do not send, but the path is nobody else's business).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; "
    "style-src-attr 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
)


class SecurityHeaders:
    """Plain ASGI: adds ``HEADERS`` to each HTTP response's start."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", ())}
                message["headers"] = [
                    *message.get("headers", ()),
                    *((k, v) for k, v in HEADERS if k not in names),
                ]
            await send(message)

        await self.app(scope, receive, with_headers)
