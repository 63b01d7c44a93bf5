"""A small JSON client for the API server: requests, watch streams and errors.

Credentials come from ``kubernetes_asyncio``'s loaders (kubeconfig, or the in-cluster service
account); requests go out over one ``aiohttp`` session and answers are read as plain JSON
dicts. Generated client models are not used: they cost time per object at the rates the
scheduler needs, and they fail to parse some answers (the Binding subresource's reply is a
``Status``, which the generated ``create_namespaced_binding`` tries to read as a Binding).

Every failure becomes :class:`KubeError` (an ``AdapterError``) with the HTTP status, the
API server's reason and message, and the request it answered.

A watch is a stream of JSON lines, one event each. aiohttp's line reader refuses a line
longer than its buffer limit (128 KiB by default), and one Node with a large annotation, or a
ConfigMap near its 1 MiB limit, is longer; :meth:`Kube.watch` splits the stream itself, so a
line may be as long as ``max_line_bytes`` (256 MiB by default).
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client import Configuration

from gpupool.core.errors import AdapterError

__all__ = ["Kube", "KubeError", "load_configuration"]

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


class KubeError(AdapterError):
    """The Kubernetes client's error: the API server answered with an error status (its
    ``status``, ``reason`` and ``message``), or could not be reached (``status`` 0)."""

    def __init__(self, status: int, reason: str, message: str, request: str) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.request = request
        super().__init__(f"{request}: {status} {reason}: {message}")


async def load_configuration(kubeconfig: str | None = None) -> Configuration:
    """Kubeconfig (the file given, else $KUBECONFIG or ~/.kube/config), else in-cluster."""
    cfg = Configuration()
    try:
        await k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    except (k8s_config.ConfigException, FileNotFoundError, OSError) as exc:
        if kubeconfig:
            raise AdapterError(f"kubeconfig {kubeconfig} cannot be loaded: {exc}") from exc
        try:
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=cfg
            )
        except k8s_config.ConfigException as exc2:
            raise AdapterError(
                f"no kubeconfig and not running in a cluster: {exc}; {exc2}"
            ) from exc2
    return cfg


class Kube:
    """One API server connection. ``await Kube.connect(path)``; ``await kube.close()``."""

    def __init__(
        self, cfg: Configuration, *, connections: int = 128, max_line_bytes: int = 256 << 20
    ) -> None:
        self.cfg = cfg
        self.max_line_bytes = max_line_bytes
        self.host = str(cfg.host or "").rstrip("/")
        ctx: ssl.SSLContext | bool
        if self.host.startswith("https"):
            ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.verify_ssl else False
            if isinstance(ctx, ssl.SSLContext) and cfg.cert_file:
                ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
        else:
            ctx = False
        self._connector = aiohttp.TCPConnector(ssl=ctx, limit=connections)
        self._session = aiohttp.ClientSession(connector=self._connector)
        self._auth: dict[str, str] = {}
        self._auth_at = -1e9

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, **kwargs: Any) -> Kube:
        kube = cls(await load_configuration(kubeconfig), **kwargs)
        await kube._headers()
        return kube

    async def close(self) -> None:
        await self._session.close()

    async def _headers(self) -> dict[str, str]:
        now = time.monotonic()
        if now - self._auth_at > 60:
            auth = await self.cfg.auth_settings()
            token = auth.get("BearerToken", {}).get("value")
            self._auth = {"Authorization": token} if token else {}
            self._auth_at = now
        return self._auth

    async def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = JSON,
        timeout_s: float = 30.0,
        raw_filter: Callable[[bytes], bytes] | None = None,
    ) -> dict[str, Any]:
        """One request; the answer as a dict (``{}`` when empty). KubeError on failure.
        ``raw_filter`` maps the answer's bytes before they are parsed."""
        raw = await self.request_raw(
            method, path, body, params=params, content_type=content_type, timeout_s=timeout_s
        )
        if raw_filter is not None:
            raw = raw_filter(raw)
        return json.loads(raw) if raw else {}

    async def request_raw(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = JSON,
        timeout_s: float = 30.0,
    ) -> bytes:
        """One request; the answer's bytes, unparsed. KubeError on failure."""
        headers = {**await self._headers(), "Accept": JSON}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        what = f"{method} {path}"
        try:
            async with self._session.request(
                method,
                self.host + path,
                data=data,
                params=params,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as resp:
                raw = await resp.read()
                if resp.status >= 400:
                    raise _error(resp.status, raw.decode("utf-8", "replace"), what)
                return raw
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise KubeError(0, type(exc).__name__, str(exc) or "no answer", what) from exc

    async def watch(
        self,
        path: str,
        params: Mapping[str, str],
        raw_filter: Callable[[bytes], bytes] | None = None,
        parse: Callable[[bytes], dict[str, Any]] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch (``{"type", "object"}``) until the server ends it;
        ``raw_filter`` maps each event's bytes before they are parsed, ``parse`` parses them
        (``json.loads`` by default)."""
        headers = {**await self._headers(), "Accept": JSON}
        what = f"WATCH {path}"
        query = {**params, "watch": "true"}
        try:
            async with self._session.get(
                self.host + path,
                params=query,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None),
            ) as resp:
                if resp.status >= 400:
                    raise _error(resp.status, await resp.text(), what)
                async for line in _lines(resp.content, self.max_line_bytes, what):
                    if raw_filter is not None:
                        line = raw_filter(line)
                    yield json.loads(line) if parse is None else parse(line)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise KubeError(0, type(exc).__name__, str(exc) or "stream broken", what) from exc


async def _lines(stream: aiohttp.StreamReader, max_bytes: int, what: str) -> AsyncIterator[bytes]:
    """The non-empty lines of a stream, however long (up to ``max_bytes``)."""
    buf = bytearray()
    async for chunk in stream.iter_any():
        scan = len(buf)
        buf += chunk
        start = 0
        while (end := buf.find(b"\n", scan)) >= 0:
            line = bytes(buf[start:end])
            if line.strip():
                yield line
            start = scan = end + 1
        if start:
            del buf[:start]
        if len(buf) > max_bytes:
            raise KubeError(0, "LineTooLong", f"a watch event longer than {max_bytes} bytes", what)
    if buf.strip():
        yield bytes(buf)


def _error(status: int, text: str, what: str) -> KubeError:
    try:
        body = json.loads(text)
        return KubeError(status, str(body.get("reason", "")), str(body.get("message", text)), what)
    except (json.JSONDecodeError, AttributeError):
        return KubeError(status, "", text[:500], what)
