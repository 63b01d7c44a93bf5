"""A small client of the ``gpupool serve`` REST API: one method per call.

::

    with Client("http://127.0.0.1:8080", token) as c:
        job = c.submit({"apiVersion": "gpupool.io/v1alpha1", "kind": "Job", ...})
        for j in c.jobs(namespace="research", phases=["Pending"]):
            print(j["metadata"]["name"], j["status"]["pendingReason"])

Methods return the API's JSON as it is (dicts and lists). Failures are translated here, once:
a refusal becomes the :mod:`gpupool.client.errors` class for its status and error name, and a
server that does not answer becomes :class:`~gpupool.client.errors.Unreachable`.

It speaks HTTP/1.1 itself, on one kept-alive socket (``ssl`` only for ``https``): what a
call needs of HTTP is small, and the CLI starts in a few tens of milliseconds, where
``http.client`` (with the e-mail parser it reads headers with) or an HTTP library costs more
to import than the call takes.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable, Mapping
from typing import Any, BinaryIO
from urllib.parse import quote, urlencode, urlsplit

from gpupool.client.errors import Unreachable, from_response

MAX_HEADER_LINE = 65_536


class _Closed(Exception):
    """The server closed a kept-alive connection before answering."""


DEFAULT_SERVER = "http://127.0.0.1:8080"
PAGE = 500
QUEUE_KINDS = ("flavors", "clusterqueues", "cohorts", "localqueues")


def _seg(name: str) -> str:
    return quote(name, safe="")


class Client:
    def __init__(
        self, server: str = DEFAULT_SERVER, token: str | None = None, *, timeout_s: float = 30.0
    ) -> None:
        self.server = server.rstrip("/") or DEFAULT_SERVER
        if "://" not in self.server:
            self.server = f"http://{self.server}"
        url = urlsplit(self.server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise Unreachable(f"server {server!r}: expected http://HOST[:PORT] or https://...")
        self._scheme, self._host, self._prefix = url.scheme, url.hostname, url.path
        try:
            self._port = url.port
        except ValueError:
            raise Unreachable(f"server {server!r}: the port is not a number") from None
        self._timeout = timeout_s
        self._headers = {"Accept": "application/json", "User-Agent": "gpupool-client"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._sock: socket.socket | None = None
        self._file: BinaryIO | None = None
        self.time_s: float | None = None  # the cluster time of the last job list

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the one place requests are made -----------------------------------------------------

    def _connect(self) -> tuple[socket.socket, BinaryIO]:
        if self._sock is None or self._file is None:
            port = self._port or (443 if self._scheme == "https" else 80)
            sock = socket.create_connection((self._host, port), timeout=self._timeout)
            if self._scheme == "https":
                import ssl  # only here: it costs more to import than a call takes

                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self._host)
            self._sock, self._file = sock, sock.makefile("rb")
        return self._sock, self._file

    def _exchange(
        self, method: str, target: str, content: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        sock, f = self._connect()
        host = self._host if self._port is None else f"{self._host}:{self._port}"
        lines = [
            f"{method} {target} HTTP/1.1",
            f"Host: {host}",
            *(f"{k}: {v}" for k, v in headers.items()),
            f"Content-Length: {len(content or b'')}",
            "",
            "",
        ]
        sock.sendall("\r\n".join(lines).encode("latin-1") + (content or b""))
        status_line = f.readline(MAX_HEADER_LINE)
        if not status_line:
            raise _Closed
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            raise OSError(f"not an HTTP answer: {status_line[:60]!r}")
        status = int(parts[1])
        answer: dict[str, str] = {}
        while True:
            line = f.readline(MAX_HEADER_LINE)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            answer[name.strip().lower()] = value.strip()
        if answer.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(f.readline(MAX_HEADER_LINE).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while f.readline(MAX_HEADER_LINE) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                chunks.append(f.read(size))
                f.readline(MAX_HEADER_LINE)
            body = b"".join(chunks)
        elif "content-length" in answer:
            body = f.read(int(answer["content-length"]))
        else:
            body = f.read()
            answer["connection"] = "close"
        if answer.get("connection", "").lower() == "close":
            self.close()
        return status, body

    def _send(
        self, method: str, target: str, content: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """One exchange; a kept-alive connection the server has closed is opened again once
        for a GET (nothing was done with it)."""
        for attempt in (0, 1):
            try:
                return self._exchange(method, target, content, headers)
            except (_Closed, BrokenPipeError, ConnectionResetError) as exc:
                self.close()
                if attempt or method not in ("GET", "HEAD"):
                    raise Unreachable(
                        f"cannot reach the server at {self.server}: the "
                        f"connection was broken off ({type(exc).__name__})"
                    ) from exc
            except TimeoutError as exc:
                self.close()
                raise Unreachable(
                    f"no answer from the server at {self.server} in time ({self._timeout:g} s)"
                ) from exc
            except (OSError, ValueError) as exc:
                self.close()
                reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
                raise Unreachable(f"cannot reach the server at {self.server}: {reason}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: object = None,
    ) -> Any:
        """One call; the decoded JSON answer, or the error for the refusal."""
        where = f"{method} {self.server}{path}"
        content = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if content is not None:
            headers["Content-Type"] = "application/json"
        query = {k: v for k, v in (params or {}).items() if v is not None}
        target = self._prefix.rstrip("/") + path + (f"?{urlencode(query)}" if query else "")
        status, raw = self._send(method, target, content, headers)
        text = raw.decode("utf-8", errors="replace")
        try:
            data: Any = json.loads(text)
        except ValueError:
            data = text
        if status >= 400:
            raise from_response(status, data, where)
        if isinstance(data, str):
            raise from_response(502, f"expected JSON, got {data[:100]!r}", where)
        return data

    def _items(self, path: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.request("GET", path, params=params)["items"]
        return items

    # -- service and cluster -----------------------------------------------------------------

    def healthz(self) -> dict[str, Any]:
        out: dict[str, Any] = self.request("GET", "/healthz")
        return out

    def whoami(self) -> dict[str, Any]:
        """``{"name", "role", "namespaces"}`` (namespaces is null for an admin)."""
        out: dict[str, Any] = self.request("GET", "/api/v1/whoami")
        return out

    def cluster(self) -> dict[str, Any]:
        out: dict[str, Any] = self.request("GET", "/api/v1/cluster")
        return out

    def nodes(self) -> list[dict[str, Any]]:
        return self._items("/api/v1/nodes")

    def node(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.request("GET", f"/api/v1/nodes/{_seg(name)}")
        return out

    def patch_node(self, name: str, **fields: bool) -> dict[str, Any]:
        """Set ``unschedulable`` (cordon) or ``failed`` on a node (admin)."""
        out: dict[str, Any] = self.request("PATCH", f"/api/v1/nodes/{_seg(name)}", body=fields)
        return out

    def drain_node(self, name: str) -> dict[str, Any]:
        """Cordon a node and send its jobs back to their queues (admin); the node, with
        ``requeued``: the jobs sent back."""
        out: dict[str, Any] = self.request("POST", f"/api/v1/nodes/{_seg(name)}/drain")
        return out

    # -- queue objects -----------------------------------------------------------------------

    def apply_queue_object(self, kind: str, document: Mapping[str, Any]) -> tuple[str, Any]:
        """Create or replace a queue object (admin): ``("created" | "configured", object)``.
        ``kind`` is the endpoint (flavors, clusterqueues, cohorts, localqueues)."""
        kind = _queue_kind(kind)
        meta = document.get("metadata")
        name = str(meta.get("name")) if isinstance(meta, Mapping) else ""
        if kind == "localqueues":
            ns = meta.get("namespace") if isinstance(meta, Mapping) else None
            path = f"/api/v1/{kind}/{_seg(str(ns or 'default'))}/{_seg(name)}"
        else:
            path = f"/api/v1/{kind}/{_seg(name)}"
        from gpupool.client.errors import NotFoundError

        try:
            return "configured", self.request("PUT", path, body=dict(document))
        except NotFoundError:
            return "created", self.request("POST", f"/api/v1/{kind}", body=dict(document))

    def queue_objects(self, kind: str) -> list[dict[str, Any]]:
        """Every object of ``kind`` (flavors, clusterqueues, cohorts, localqueues)."""
        return self._items(f"/api/v1/{_queue_kind(kind)}")

    def queue_object(self, kind: str, name: str) -> dict[str, Any]:
        """One object; a LocalQueue is named ``namespace/name``."""
        kind = _queue_kind(kind)
        path = (
            "/".join(_seg(p) for p in name.split("/", 1)) if kind == "localqueues" else _seg(name)
        )
        out: dict[str, Any] = self.request("GET", f"/api/v1/{kind}/{path}")
        return out

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """Submit one Job document; the job as the server took it (201)."""
        out: dict[str, Any] = self.request("POST", "/api/v1/jobs", body=dict(document))
        return out

    def jobs(
        self,
        *,
        namespace: str | None = None,
        queue: str | None = None,
        phases: Iterable[str] | None = None,
        page: int = PAGE,
    ) -> list[dict[str, Any]]:
        """Every job the token may see that matches, following the pages to the end."""
        phase = ",".join(phases) if phases else None
        out: list[dict[str, Any]] = []
        after = 0
        while True:
            data = self.request(
                "GET",
                "/api/v1/jobs",
                params={
                    "namespace": namespace,
                    "queue": queue,
                    "phase": phase,
                    "limit": page,
                    "after": after or None,
                },
            )
            out.extend(data["items"])
            if isinstance(data.get("timeSeconds"), (int, float)):
                self.time_s = float(data["timeSeconds"])  # the cluster's clock as it answered
            after = data.get("continue") or 0
            if not after:
                return out

    def job(self, namespace: str, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.request("GET", f"/api/v1/jobs/{_seg(namespace)}/{_seg(name)}")
        return out

    def cancel(self, namespace: str, name: str) -> dict[str, Any]:
        """Cancel a pending or running job; a job that has ended is answered as it is."""
        out: dict[str, Any] = self.request(
            "POST", f"/api/v1/jobs/{_seg(namespace)}/{_seg(name)}/cancel"
        )
        return out

    def delete(self, namespace: str, name: str) -> dict[str, Any]:
        """Delete a job (cancelled first if it has not ended); the job as it was last."""
        out: dict[str, Any] = self.request("DELETE", f"/api/v1/jobs/{_seg(namespace)}/{_seg(name)}")
        return out

    # -- events ------------------------------------------------------------------------------

    def events(
        self, *, namespace: str | None = None, since: int = 0, limit: int = 200
    ) -> list[dict[str, Any]]:
        """The last ``limit`` events (or those after sequence number ``since``), oldest
        first."""
        return self._items(
            "/api/v1/events", {"namespace": namespace, "since": since or None, "limit": limit}
        )


def _queue_kind(kind: str) -> str:
    if kind not in QUEUE_KINDS:
        raise ValueError(f"kind {kind!r}: one of {', '.join(QUEUE_KINDS)}")
    return kind
