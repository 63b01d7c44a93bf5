"""The composition root of ``gpupool serve``: state file, virtual cluster, control plane, API,
the scheduling loop and (with ``--demo``) a stream of example jobs, wired and run.

Three threads: uvicorn's event loop (plus its worker threads for handlers), the scheduling
loop (``tick`` every ``--interval`` seconds) and, with ``--demo``, the job stream. They meet
only in ``ControlPlane``, behind its lock.
"""

from __future__ import annotations

import argparse
import errno
import logging
import math
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from gpupool.api.app import create_app
from gpupool.api.auth import ENV, Tokens, generate
from gpupool.cloud.spec import load_cloud
from gpupool.config import load_cluster, load_documents
from gpupool.control import Clock, ControlPlane
from gpupool.control.elastic import ElasticService, parse_classes
from gpupool.control.records import JobPhase
from gpupool.control.statelock import StateLock
from gpupool.control.views import cluster_view
from gpupool.core.errors import AdapterError, ConfigError, GpupoolError
from gpupool.core.placement.registry import measured_profile
from gpupool.core.quota import Resource
from gpupool.core.usage import LoadModel, LoadSettings
from gpupool.metrics import Gauges, Metrics
from gpupool.store import Store
from gpupool.usage.dcgm import CardMetrics, ExporterServer
from gpupool.usage.feed import MeasuredUse
from gpupool.usage.profile import ANNOTATION, FULL, UseProfile, card_use, parse_annotation
from gpupool.usage.prometheus import PrometheusReader, PrometheusSettings, inventory_resolver
from gpupool.virtual import VirtualCluster
from gpupool.virtual.demo import DemoStream, demo_count

log = logging.getLogger("gpupool.serve")

DATA = Path(__file__).resolve().with_name("data")  # installed with the package
DEFAULT_CLUSTER = DATA / "cluster.yaml"  # copies of examples/cluster.yaml and queues.yaml
DEFAULT_QUEUES = DATA / "queues.yaml"
DEFAULT_STATE = ".gpupool/state.db"
DEMO_SPEED = 60.0


def _number(low: float, high: float, *, low_open: bool = True) -> Any:
    """An argparse type: a finite number in (low, high] (or [low, high]), else a message
    naming the value and the rule (argparse puts the flag in front)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        above = value > low if low_open else value >= low
        if not (math.isfinite(value) and above and value <= high):
            raise argparse.ArgumentTypeError(
                f"{text!r} must be {'>' if low_open else '>='} {low:g} and <= {high:g}"
            )
        return value

    return parse


def _integer(low: int, high: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} must be between {low} and {high}")
        return value

    return parse


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run the control plane on an embedded virtual cluster",
        description="Run gpupool's control plane: REST API, dashboard and metrics, scheduling "
        "jobs onto a virtual cluster of nodes read from a YAML spec. State is kept "
        "in a SQLite file; restarting with the same --state carries on where it "
        "stopped.",
    )
    p.add_argument(
        "--cluster",
        metavar="FILE",
        help="nodes of the virtual cluster (default: the example cluster installed "
        "with gpupool, a copy of examples/cluster.yaml); read only when the "
        "state file is new",
    )
    p.add_argument(
        "--queues",
        metavar="FILE",
        help="flavors, cohorts, queues (Kueue YAML; default: the example queues "
        "installed with gpupool, a copy of examples/queues.yaml); read only "
        "when the state file is new",
    )
    p.add_argument(
        "--elastic",
        metavar="FILE",
        help="ElasticGPUClass documents (e.g. examples/elastic.yaml); read only "
        "when the state file is new",
    )
    p.add_argument(
        "--cloud",
        metavar="FILE",
        help="a simulated cloud (one kind: Cloud document, e.g. examples/cloud.yaml) "
        "that provisions nodes for the ProvisioningRequests of queues with a "
        "provisioning admission check; give the same file on every start",
    )
    p.add_argument(
        "--state",
        default=DEFAULT_STATE,
        metavar="PATH",
        help=f"SQLite state file (default {DEFAULT_STATE})",
    )
    p.add_argument(
        "--tokens",
        metavar="FILE",
        help=f"bearer tokens (YAML); else ${ENV}; else tokens are generated "
        "into tokens.yaml beside the state file",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--port",
        type=_integer(0, 65_535),
        default=8080,
        help="TCP port (default 8080; 0: any free port, printed at start)",
    )
    p.add_argument(
        "--speed",
        type=_number(0, 1e6),
        default=None,
        help="cluster seconds per wall second, > 0 (default 1; --demo uses "
        f"{DEMO_SPEED:g} unless given)",
    )
    p.add_argument(
        "--interval",
        type=_number(0.01, 86_400, low_open=False),
        default=0.1,
        help="wall seconds between scheduling cycles, 0.01 to 86400 (default 0.1)",
    )
    p.add_argument("--demo", action="store_true", help="also submit a stream of example jobs")
    p.add_argument(
        "--demo-rate",
        type=_number(0, 1000),
        default=0.8,
        metavar="JOBS_PER_S",
        help="arrival rate of the example jobs, per wall second, > 0 (default 0.8)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=7,
        help="seed of the example job stream and of the cloud's delays",
    )
    p.add_argument(
        "--max-body-bytes",
        type=_integer(1024, 1 << 30),
        default=1 << 20,
        help="largest request body accepted (default 1 MiB)",
    )
    p.add_argument(
        "--dcgm-exporter-port",
        type=_integer(0, 65_535),
        default=None,
        metavar="PORT",
        help="also serve each virtual node's cards in DCGM exporter's format at "
        "/nodes/<node>/metrics on this port (0: any free port, printed), "
        "each running job using what its gpupool.io/actual-use annotation "
        "declares (default: what it requests), for a Prometheus to scrape",
    )
    p.add_argument(
        "--prometheus",
        default="",
        metavar="URL",
        help="place by measured GPU use read from this Prometheus (e.g. one "
        "scraping --dcgm-exporter-port); unset: by requests",
    )
    p.add_argument(
        "--measured-interval",
        type=_number(0, 86_400),
        default=15.0,
        metavar="S",
        help="wall seconds between reads of --prometheus (default 15)",
    )
    p.add_argument(
        "--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug")
    )
    p.set_defaults(func=serve)


class Service:
    """Everything ``serve`` runs, built but not started."""

    def __init__(
        self,
        *,
        state: str | Path,
        cluster: str | Path | None,
        queues: str | Path | None,
        speed: float,
        elastic: str | Path | None = None,
        cloud: str | Path | None = None,
        seed: int = 7,
        prometheus: PrometheusSettings | None = None,
        measured: LoadSettings | None = None,
    ) -> None:
        """``prometheus``: place by measured GPU use read from it (``measured``: the load
        model's settings); None: by requests."""
        store = Store(state)
        new = store.meta("created") is None
        nodes = load_cluster(cluster) if new and cluster else []
        queue_docs = load_documents(queues) if new and queues else []
        classes = parse_classes(load_documents(elastic)) if new and elastic else []
        self.metrics = Metrics()
        self.backend = VirtualCluster()
        self.measured = (
            None if prometheus is None else MeasuredUse(PrometheusReader(prometheus), measured)
        )
        self.plane = ControlPlane(
            store,
            self.backend,
            Clock(speed),
            nodes=nodes,
            queue_docs=queue_docs,
            metrics=self.metrics,
            profile=None if prometheus is None else measured_profile(),
            cloud=load_cloud(str(cloud)) if cloud else None,
            cloud_seed=seed,
        )
        if self.measured is not None:
            model = self.measured.model
            self.plane.scheduler.use_measurements(model)
            self.plane.watchers.append(_Measured(model))  # and every scheduler built later
            self.measured.register(self.metrics.registry, self._measured_view)
        self.elastic = ElasticService.of(self.plane)
        self.elastic.seed(classes)
        self.metrics.watch(self._gauges)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.exporter: ExporterServer | None = None
        self._profiles: dict[str, UseProfile] = {}

    def api(self, tokens: Tokens, max_body_bytes: int = 1 << 20) -> Any:
        """The ASGI app serving this service to holders of ``tokens``."""
        return create_app(self.plane, tokens, max_body_bytes=max_body_bytes)

    def _gauges(self) -> Gauges:
        plane = self.plane
        with plane.lock:
            queues = [q.name for q in plane.config.cluster_queues]
            pending: dict[str, int] = dict.fromkeys(queues, 0)  # every queue, 0 included
            running: dict[str, int] = dict.fromkeys(queues, 0)
            alloc: dict[tuple[str, str], int] = {}
            for rec in plane.jobs.values():
                if rec.phase == JobPhase.PENDING:
                    pending[rec.cluster_queue] = pending.get(rec.cluster_queue, 0) + 1
                elif rec.phase == JobPhase.RUNNING:
                    running[rec.cluster_queue] = running.get(rec.cluster_queue, 0) + 1
                    k = (rec.flavor, rec.cluster_queue)
                    alloc[k] = alloc.get(k, 0) + sum(p.gpu_milli for p in rec.placements)
            view = cluster_view(plane)
            sched = plane.scheduler
            return Gauges(
                pending=pending,
                running=running,
                gpus_allocated={k: v / 1000 for k, v in alloc.items()},
                gpu_milli_allocated=alloc,
                gpus_total={f["name"]: f["gpus"] for f in view["flavors"]},
                gpu_milli_total={f["name"]: f["gpus"] * 1000 for f in view["flavors"]},
                gpu_milli_nominal={
                    (flavor, q.name): amount
                    for q in plane.config.cluster_queues
                    for (flavor, res), amount in sched.nominal(q.name).items()
                    if res == Resource.GPU_MILLI
                },
                fragmentation_ratio=view["fragmentation"]["ratio"],
                nodes={s: view["nodes"][s] for s in ("ready", "cordoned", "failed")},
                queue_share={q.name: sched.share(q.name) for q in plane.config.cluster_queues},
                pending_reasons=sched.pending_reasons(),
            )

    # -- threads -----------------------------------------------------------------------------

    def start_loop(self, interval: float) -> None:
        def loop() -> None:
            last_trim = time.monotonic()
            while not self._stop.wait(interval):
                try:
                    self.plane.tick()
                    if time.monotonic() - last_trim > 60:
                        self.plane.trim_events()
                        last_trim = time.monotonic()
                except Exception:  # a failed cycle is logged; the next one tries again
                    log.exception("scheduling cycle failed")

        self._spawn(loop, "gpupool-loop")

    def _measured_view(self) -> tuple[Any, float]:
        with self.plane.lock:
            return self.plane.scheduler.node_table(), self.plane.clock.now()

    def poll_measured(self) -> int:
        """One read of Prometheus (outside the plane's lock), its samples handed to the model
        under it, their times moved onto the cluster clock; -1 when the read failed."""
        feed = self.measured
        assert feed is not None
        plane = self.plane
        with plane.lock:
            nodes = plane.scheduler.node_list()
        resolve = inventory_resolver(
            (n.name, g.index, g.uuid or f"GPU-{n.name}-{g.index}") for n in nodes for g in n.gpus
        )
        try:
            samples = feed.reader.read(resolve)
        except AdapterError as exc:
            with plane.lock:
                feed.failed(exc)
            return -1
        clock = plane.clock
        with plane.lock:
            now, wall = clock.now(), clock.wall()
            return feed.take(samples, now, lambda t: now - (wall - t) * clock.speed)

    def start_measured(self, interval: float) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.poll_measured()
                except Exception:  # logged; the next read tries again
                    log.exception("reading measured use failed")
                self._stop.wait(interval)

        self._spawn(loop, "gpupool-measured")

    def demo_stream(self, rate: float, seed: int) -> DemoStream:
        """The example stream, carrying on after the demo jobs the state file holds (a
        restart neither repeats their names nor waits for them)."""
        plane = self.plane
        with plane.lock:
            return DemoStream(
                plane.config,
                plane.scheduler.node_list(),
                seed,
                rate,
                burst=plane.cloud is not None,
                start=demo_count([r.request.name for r in plane.jobs.values()]),
            )

    def start_demo(self, rate: float, seed: int) -> None:
        plane = self.plane
        stream = self.demo_stream(rate, seed)

        def demo() -> None:
            while not self._stop.wait(stream.gap_s()):
                try:
                    plane.submit(stream.next_job())
                except GpupoolError as exc:
                    log.warning("demo job refused: %s", exc)

        self._spawn(demo, "gpupool-demo")

    def _spawn(self, fn: Any, name: str) -> None:
        t = threading.Thread(target=fn, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        if self.exporter is not None:
            self.exporter.stop()

    # -- the virtual cluster's GPU exporter ----------------------------------------------------

    def start_exporter(self, host: str, port: int) -> ExporterServer:
        self.exporter = ExporterServer(self.exporter_cards, host, port).start()
        return self.exporter

    def exporter_cards(self) -> dict[str, list[CardMetrics]]:
        """What every card of the virtual cluster does now: its running jobs' actual use
        (``gpupool.io/actual-use``), as dcgm-exporter on the node would report it."""
        plane = self.plane
        with plane.lock:
            nodes = plane.scheduler.node_list()
            running = [r for r in plane.jobs.values() if r.phase == JobPhase.RUNNING]
            profiles = {str(r.job.id): self._profile(r.key, r.request.document) for r in running}
            use = card_use([p for r in running for p in r.placements], profiles)
        out: dict[str, list[CardMetrics]] = {}
        for node in nodes:
            cards = []
            for g in node.gpus:
                u = use.get((node.name, g.index))
                used = min(g.memory_mib, round(u.memory_mib)) if u else 0
                cards.append(
                    CardMetrics(
                        g.index,
                        g.uuid or f"GPU-{node.name}-{g.index}",
                        g.model,
                        u.util_pct if u else 0.0,
                        used,
                        g.memory_mib - used,
                    )
                )
            out[node.name] = cards
        return out

    def _profile(self, key: str, document: Any) -> UseProfile:
        if key not in self._profiles:
            meta = document.get("metadata") if isinstance(document, dict) else None
            text = ((meta or {}).get("annotations") or {}).get(ANNOTATION)
            try:
                self._profiles[key] = FULL if text is None else parse_annotation(str(text), key)
            except ConfigError as exc:
                log.warning("%s; the job uses what it requests", exc)
                self._profiles[key] = FULL
        return self._profiles[key]


class _Measured:
    """Hands the load model to every scheduler the plane builds (a restart of the state, a
    node change), as the plane's watchers are told."""

    def __init__(self, model: LoadModel) -> None:
        self.model = model

    def scheduler_built(self, scheduler: Any) -> None:
        scheduler.use_measurements(self.model)

    def node_failed(self, name: str) -> None:
        return

    def ticked(self, result: Any) -> None:
        return


def _tokens(args: argparse.Namespace, state: Path, namespaces: list[str]) -> tuple[Tokens, str]:
    """The tokens to use, and the admin token to print when they were generated here."""
    if args.tokens or os.environ.get(ENV):
        return Tokens.load(args.tokens), ""
    path = state.parent / "tokens.yaml"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(generate(namespaces), f, sort_keys=False)
    data = yaml.safe_load(path.read_text())
    admin = next((t["token"] for t in data["tokens"] if t.get("role") == "admin"), "")
    return Tokens.from_file(path), admin


def listen(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound before anything is written, so that a port in use
    stops ``serve`` with the state file and tokens untouched."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound: {exc.strerror}"
        raise ConfigError(f"--port {port}: {host}:{port} {why}; give another --port") from None
    sock.set_inheritable(True)
    return sock


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    speed = args.speed if args.speed is not None else DEMO_SPEED if args.demo else 1.0
    state = Path(args.state)
    cluster, queues = Path(args.cluster or DEFAULT_CLUSTER), Path(args.queues or DEFAULT_QUEUES)
    for flag, path in (
        ("--cluster", cluster),
        ("--queues", queues),
        ("--elastic", args.elastic),
        ("--cloud", args.cloud),
        ("--tokens", args.tokens),
    ):
        if (
            path
            and not Path(path).is_file()
            and (flag in ("--cloud", "--tokens") or not state.exists())
        ):
            raise ConfigError(f"{flag} {path}: no such file (give the path of a YAML spec)")
    # Checked in this order, before anything is written: the port, then the state file's lock.
    sock = listen(args.host, args.port)
    lock = StateLock(state)
    try:
        lock.acquire()
    except BaseException:
        sock.close()
        raise
    try:
        return _serve(args, uvicorn, sock, state, cluster, queues, speed)
    finally:
        sock.close()
        lock.release()


def _serve(
    args: argparse.Namespace,
    uvicorn: Any,
    sock: socket.socket,
    state: Path,
    cluster: Path,
    queues: Path,
    speed: float,
) -> int:
    prometheus = None
    if args.prometheus:
        prometheus = PrometheusSettings(
            url=args.prometheus, lookback_s=4 * args.measured_interval
        ).validate()
    service = Service(
        state=state,
        cluster=cluster,
        queues=queues,
        speed=speed,
        elastic=args.elastic,
        cloud=args.cloud,
        seed=args.seed,
        prometheus=prometheus,
        measured=LoadSettings(
            stale_after_s=max(120.0, 4 * args.measured_interval * speed),
            window_s=max(300.0, 20 * args.measured_interval * speed),
        ),
    )
    namespaces = [lq.namespace for lq in service.plane.config.local_queues]
    tokens, admin = _tokens(args, state, namespaces)
    if not len(tokens):
        raise ConfigError("no tokens: give --tokens FILE or set " + ENV)
    app = service.api(tokens, args.max_body_bytes)
    service.start_loop(args.interval)
    if service.measured is not None:
        service.start_measured(args.measured_interval)
    if args.demo:
        service.start_demo(args.demo_rate, args.seed)
    port = sock.getsockname()[1]
    url = f"http://{args.host}:{port}/"
    if args.dcgm_exporter_port is not None:
        try:
            exporter = service.start_exporter(args.host, args.dcgm_exporter_port)
        except OSError as exc:
            raise ConfigError(
                f"--dcgm-exporter-port {args.dcgm_exporter_port}: cannot be bound: {exc.strerror}"
            ) from None
        print(
            f"  GPU exporter: http://{exporter.address}/nodes/<node>/metrics "
            "(DCGM exporter's format)",
            flush=True,
        )
    view = cluster_view(service.plane)
    print(
        f"gpupool serve: {view['nodes']['total']} nodes, {view['gpus']['total']} GPUs, "
        f"{len(service.plane.config.cluster_queues)} cluster queues; state {state}; "
        f"speed x{speed:g}" + ("; example jobs flowing" if args.demo else ""),
        flush=True,
    )
    if admin:
        print(f"  dashboard: {url}#token={admin}", flush=True)
        print(
            f"  tokens:    {state.parent / 'tokens.yaml'} (admin and one per namespace)", flush=True
        )
        print(f"  CLI:       export GPUPOOL_SERVER={url} GPUPOOL_TOKEN={admin}", flush=True)
    else:
        print(f"  dashboard: {url} (paste a token from your tokens file)", flush=True)
    config = uvicorn.Config(
        app, host=args.host, port=port, log_level=args.log_level, access_log=False
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        service.stop()
    return 0
