"""``gpupool serve``, the command: its flags, the checks made before anything is written (the
files named, the port, the state file's lock), and the run: the service built, its threads
started, the API served until stopped.
"""

from __future__ import annotations

import argparse
import logging
import math
import socket
from pathlib import Path
from typing import Any

from gpupool.api.auth import ENV
from gpupool.app.endpoint import listen, load_tokens
from gpupool.app.service import Service
from gpupool.control.statelock import StateLock
from gpupool.control.views import cluster_view
from gpupool.core.errors import ConfigError
from gpupool.core.usage import LoadSettings
from gpupool.usage.hami import NAMES
from gpupool.usage.prometheus import PrometheusSettings

DATA = Path(__file__).resolve().parent.with_name("data")  # installed with the package
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
        "/nodes/<node>/metrics, and each node's pods as HAMi's monitor reports them at "
        "/nodes/<node>/hami/metrics, on this port (0: any free port, printed), "
        "each running job using what its gpupool.io/actual-use annotation "
        "declares (default: what it requests), for a Prometheus to scrape",
    )
    p.add_argument(
        "--hami-metric-names",
        choices=NAMES,
        default="current",
        help="the names of HAMi's monitor pages: current (hami_*, HAMi 2.9 on), both "
        "(2.9 on with --legacy-metrics), legacy (before 2.9) (default: current)",
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
    tokens, admin = load_tokens(args, state, namespaces)
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
            exporter = service.start_exporter(
                args.host, args.dcgm_exporter_port, args.hami_metric_names
            )
        except OSError as exc:
            raise ConfigError(
                f"--dcgm-exporter-port {args.dcgm_exporter_port}: cannot be bound: {exc.strerror}"
            ) from None
        print(
            f"  GPU exporter: http://{exporter.address}/nodes/<node>/metrics "
            "(DCGM exporter's format)",
            flush=True,
        )
        print(
            f"  HAMi monitor: http://{exporter.address}/nodes/<node>/hami/metrics "
            "(HAMi's vGPU monitor's format)",
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
