"""The virtual cluster's GPU exporter: what each card does, in DCGM exporter's format.

On a real node NVIDIA's dcgm-exporter serves ``/metrics`` (port 9400) with one series per card
and field, labelled ``gpu`` (index), ``UUID``, ``device`` (``nvidia0``), ``modelName``,
``Hostname`` (``hostname`` in newer releases) and, on MIG, ``GPU_I_ID``/``GPU_I_PROFILE``.
This module writes the fields gpupool reads, with those names and units, so that Prometheus
scrapes the virtual cluster exactly as it would scrape dcgm-exporter:

* ``DCGM_FI_DEV_GPU_UTIL``: percent of time the card was busy (0..100);
* ``DCGM_FI_DEV_FB_USED`` / ``DCGM_FI_DEV_FB_FREE``: framebuffer used / free, MiB;
* ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``: ratio of time the graphics engine was active (0..1).

:class:`ExporterServer` serves one page per node at ``/nodes/<node>/metrics`` (one target
per node, as the exporter's DaemonSet gives) on a small HTTP server of the standard library;
given a source of containers, also each node's HAMi monitor at ``/nodes/<node>/hami/metrics``
(``gpupool.usage.hami``: what each pod does with its share of each card).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

from gpupool.usage.exposition import escape_label
from gpupool.usage.hami import ContainerMetrics
from gpupool.usage.hami import render as render_hami

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

FIELDS: tuple[tuple[str, str], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active."),
)


@dataclass(frozen=True, slots=True)
class CardMetrics:
    """One card's readings on one node."""

    gpu: int
    uuid: str
    model: str
    util_pct: float
    used_mib: int
    free_mib: int


def render(hostname: str, cards: Iterable[CardMetrics], hostname_label: str = "Hostname") -> str:
    """The exposition text of one node's exporter."""
    cards = list(cards)
    lines: list[str] = []
    for name, help_text in FIELDS:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        for c in cards:
            labels = (
                f'gpu="{c.gpu}",UUID="{escape_label(c.uuid)}",device="nvidia{c.gpu}",'
                f'modelName="{escape_label(c.model)}",{hostname_label}="{escape_label(hostname)}"'
            )
            if name == "DCGM_FI_DEV_GPU_UTIL":
                value = f"{round(c.util_pct)}"
            elif name == "DCGM_FI_DEV_FB_FREE":
                value = f"{c.free_mib}"
            elif name == "DCGM_FI_DEV_FB_USED":
                value = f"{c.used_mib}"
            else:
                value = f"{c.util_pct / 100.0:.6f}"
            lines.append(f"{name}{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


Source = Callable[[], dict[str, list[CardMetrics]]]
"""Every node's cards now, by node name."""
PodSource = Callable[[], dict[str, list[ContainerMetrics]]]
"""Every node's containers on HAMi-shared cards now, by node name (a node without any may be
absent)."""


@dataclass(frozen=True, slots=True)
class HamiMonitor:
    """The HAMi monitor pages a server also serves: ``pods`` says what each node's containers
    do; ``names`` which of HAMi's metric names the pages carry (``gpupool.usage.hami.NAMES``:
    ``current``, ``both``, ``legacy``)."""

    pods: PodSource
    names: str = "current"


class ExporterServer:
    """Serves ``/nodes/<node>/metrics`` for every node ``source`` knows, on ``host:port``
    (port 0: a free one), and ``/nodes/<node>/hami/metrics`` where ``hami`` is given.
    Start with :meth:`start`, stop with :meth:`stop`."""

    def __init__(
        self,
        source: Source,
        host: str = "127.0.0.1",
        port: int = 0,
        hostname_label: str = "Hostname",
        hami: HamiMonitor | None = None,
    ) -> None:
        self.source = source
        self.hostname_label = hostname_label
        self.hami = hami
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = [unquote(p) for p in self.path.split("?")[0].strip("/").split("/")]
                nodes = outer.source()
                if (
                    len(parts) == 3
                    and parts[0] == "nodes"
                    and parts[2] == "metrics"
                    and parts[1] in nodes
                ):
                    body = render(parts[1], nodes[parts[1]], outer.hostname_label).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", CONTENT_TYPE)
                elif (
                    outer.hami is not None
                    and len(parts) == 4
                    and parts[0] == "nodes"
                    and parts[2:] == ["hami", "metrics"]
                    and parts[1] in nodes
                ):
                    containers = outer.hami.pods().get(parts[1], [])
                    body = render_hami(containers, outer.hami.names).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", CONTENT_TYPE)
                elif parts == ["nodes"]:
                    body = ("\n".join(sorted(nodes)) + "\n").encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                else:
                    body = b"not found: GET /nodes/<node>/metrics or /nodes/<node>/hami/metrics\n"
                    self.send_response(404)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}" if isinstance(host, str) else f"{host.decode()}:{port}"

    def path(self, node: str) -> str:
        return f"/nodes/{node}/metrics"

    def hami_path(self, node: str) -> str:
        return f"/nodes/{node}/hami/metrics"

    def start(self) -> ExporterServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="gpupool-dcgm-exporter", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
