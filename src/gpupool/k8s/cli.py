"""``gpupool k8s ...``: the scheduler against a real cluster, and its benchmark.

``gpupool k8s run`` schedules pods whose ``schedulerName`` is gpupool's (leader-elected, so
several replicas may run); ``gpupool k8s bench`` binds many GPU pods through an API server
and prints the figures as JSON. The heavy modules load only when a command runs.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parsers(sub: Any) -> None:
    k8s = sub.add_parser("k8s", help="schedule a Kubernetes cluster's GPU pods")
    k8s_sub = k8s.add_subparsers(dest="k8s_command", required=True, metavar="K8S_COMMAND")

    run = k8s_sub.add_parser("run", help="the scheduler: watch nodes and pods, bind pods")
    _common(run)
    run.add_argument(
        "--queues",
        metavar="FILE",
        help="queue objects (Kueue YAML); default: gpupool.io CRDs in the cluster",
    )
    run.add_argument(
        "--identity",
        default="",
        help="leader-election identity (default: host name and process id)",
    )
    run.add_argument("--lease-namespace", default="gpupool-system")
    run.add_argument("--lease-name", default="gpupool-scheduler")
    run.add_argument(
        "--no-leader-elect", action="store_true", help="bind without a lease (one replica only)"
    )
    run.add_argument(
        "--lease-duration",
        type=float,
        default=15.0,
        metavar="S",
        help="seconds a lease holds without renewal (default 15)",
    )
    run.add_argument(
        "--renew-interval",
        type=float,
        default=2.0,
        metavar="S",
        help="seconds between renewals (default 2)",
    )
    run.add_argument(
        "--annotate-first",
        action="store_true",
        help="patch HAMi's annotations in a write of their own before binding",
    )
    run.add_argument(
        "--bind-queue-weight",
        type=float,
        default=1.0,
        metavar="W",
        help="weight of the bind-queue score against binpack's 1: GPU pods "
        "prefer nodes with fewer binds waiting for HAMi's node lock "
        "(default 1; 0 turns it off)",
    )
    run.add_argument(
        "--extender-for",
        action="append",
        default=[],
        metavar="SCHEDULER",
        help="track cards of pods this scheduler binds through gpupool's "
        "extender (e.g. default-scheduler); repeatable",
    )
    run.add_argument(
        "--extender-port",
        type=int,
        default=0,
        help="serve the scheduler extender (and webhook with --tls-dir) here",
    )
    run.add_argument(
        "--tls-dir",
        default="",
        help="serve HTTPS with tls.crt/tls.key from here (the webhook needs it)",
    )
    run.add_argument("--metrics-port", type=int, default=0, help="Prometheus metrics port")
    add_measured_arguments(run)
    run.set_defaults(func=_run)

    certs = k8s_sub.add_parser(
        "certs",
        help="make the webhook's CA and serving certificate; with --secret, keep "
        "them in the cluster and set the webhook's caBundle (the init container)",
    )
    certs.add_argument("--out", default="", help="directory for ca.crt, tls.crt, tls.key")
    certs.add_argument("--service", default="gpupool")
    certs.add_argument("--namespace", default="gpupool-system")
    certs.add_argument("--ip", action="append", default=[], help="also valid for this IP")
    certs.add_argument(
        "--secret",
        default="",
        help="the kubernetes.io/tls Secret to read, or write when missing, "
        "wrong or about to expire (e.g. gpupool-webhook-tls)",
    )
    certs.add_argument(
        "--webhook",
        default="gpupool",
        help="MutatingWebhookConfiguration whose caBundle is set (with --secret)",
    )
    certs.add_argument(
        "--renew-days",
        type=int,
        default=30,
        help="with --secret: replace a certificate expiring within this many days (default 30)",
    )
    certs.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)",
    )
    certs.set_defaults(func=_certs)

    bench = k8s_sub.add_parser("bench", help="bind GPU pods through an API server, print JSON")
    _common(bench)
    bench.add_argument("--nodes", type=int, default=100)
    bench.add_argument("--gpus-per-node", type=int, default=8)
    bench.add_argument("--pods", type=int, default=1000)
    bench.add_argument("--namespace", default="gpupool-bench")
    bench.add_argument("--json", action="store_true", help="print only the JSON figures")
    bench.add_argument(
        "--rate",
        type=float,
        default=0.0,
        metavar="PODS_PER_S",
        help="create pods at this rate (default: as fast as the API server "
        "takes them, 32 requests in flight)",
    )
    bench.add_argument(
        "--external",
        action="store_true",
        help="start no gpupool: measure the scheduler named by "
        "--scheduler-name (e.g. kube-scheduler as default-scheduler)",
    )
    bench.add_argument(
        "--node-agents",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="emulate each node's kubelet and HAMi device plugin, and report "
        "swapped allocations, kubelet rejections and running pods "
        "(default: on)",
    )
    bench.add_argument(
        "--other-cpu-pct",
        type=float,
        default=0.0,
        metavar="PCT",
        help="bind one pod of another scheduler to each node first, holding "
        "this percentage of its CPU (default 0; needs the node agents)",
    )
    bench.add_argument(
        "--bind-queue-weight",
        type=float,
        default=None,
        metavar="W",
        help="passed to gpupool k8s run (default: its own)",
    )
    bench.add_argument(
        "--compare-kube-scheduler",
        metavar="BINARY",
        default="",
        help="after gpupool's run, start this kube-scheduler binary and "
        "measure it on the same pods (as --external does) in the same "
        'invocation; its figures go under "kube_scheduler"',
    )
    bench.add_argument(
        "--kube-scheduler-qps",
        type=int,
        default=50,
        metavar="QPS",
        help="kube-scheduler's client QPS for --compare-kube-scheduler "
        "(default 50, its own default; burst twice that)",
    )
    bench.add_argument(
        "--profile", metavar="FILE", help="run the scheduler process under cProfile, writing FILE"
    )
    bench.add_argument(
        "--scale",
        action="store_true",
        help="the scheduler at --nodes/--pods of realistic objects, on a "
        "replayed list/watch stream; prints peak_rss_mib, "
        "initial_sync_s, lease_lost, pods_per_s (k8s/bench_scale.py)",
    )
    bench.add_argument(
        "--pending",
        type=int,
        default=None,
        metavar="N",
        help="with --scale: how many of the pods wait to be bound (default: a tenth)",
    )
    bench.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="with --scale: give up binding after this long (default 600)",
    )
    bench.set_defaults(func=_bench)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)",
    )
    p.add_argument("--scheduler-name", default="gpupool")
    p.add_argument("--default-queue", default="default", help="queue of pods that name none")
    p.add_argument("--gpu-resource", default="nvidia.com/gpu")
    p.add_argument("--gpumem-resource", default="nvidia.com/gpumem")
    p.add_argument("--gpumem-percentage-resource", default="nvidia.com/gpumem-percentage")
    p.add_argument("--gpucores-resource", default="nvidia.com/gpucores")


def _run(args: argparse.Namespace) -> int:
    from gpupool.k8s.main import run_command

    code: int = run_command(args)
    return code


def _certs(args: argparse.Namespace) -> int:
    import base64

    from gpupool.k8s.certs import service_names
    from gpupool.k8s.tls import make_certificates

    svc, ns = args.service, args.namespace
    if args.secret:
        return _certs_in_cluster(args, service_names(svc, ns))
    if not args.out:
        print("gpupool k8s certs: --out is required without --secret")
        return 2
    certs = make_certificates(service_names(svc, ns), args.ip)
    out = certs.write(args.out)
    print(f"wrote {out}/ca.crt, tls.crt, tls.key")
    print(
        f"kubectl -n {ns} create secret tls gpupool-webhook-tls "
        f"--cert={out}/tls.crt --key={out}/tls.key"
    )
    print("caBundle for deploy/webhook.yaml: " + base64.b64encode(certs.ca_pem).decode())
    return 0


def _certs_in_cluster(args: argparse.Namespace, names: list[str]) -> int:
    import asyncio
    import logging

    from gpupool.k8s.certs import bootstrap
    from gpupool.k8s.kube import Kube

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    async def run() -> None:
        kube = await Kube.connect(args.kubeconfig)
        try:
            await bootstrap(
                kube,
                namespace=args.namespace,
                secret=args.secret,
                webhook=args.webhook,
                names=names,
                ips=args.ip,
                out=args.out,
                renew_days=args.renew_days,
            )
        finally:
            await kube.close()

    asyncio.run(run())
    return 0


def _bench(args: argparse.Namespace) -> int:
    from gpupool.k8s.bench import bench_command

    code: int = bench_command(args)
    return code


def add_measured_arguments(p: argparse.ArgumentParser) -> None:
    """Placement by measured GPU use (docs/policies.md, "Measured use")."""
    g = p.add_argument_group("measured GPU use")
    g.add_argument(
        "--prometheus",
        default="",
        metavar="URL",
        help="read DCGM exporter (and HAMi monitor) metrics from this Prometheus "
        "and place by measured use; unset: by requests",
    )
    g.add_argument(
        "--prometheus-query",
        default="",
        metavar="PROMQL",
        help="the whole range query (default: the DCGM and HAMi metrics over "
        "--measured-interval x 4)",
    )
    g.add_argument(
        "--prometheus-hostname-label",
        action="append",
        default=[],
        metavar="LABEL",
        help="label naming a series' node (default: Hostname, then hostname)",
    )
    g.add_argument(
        "--measured-interval",
        type=float,
        default=15.0,
        metavar="S",
        help="seconds between reads (default 15)",
    )
    g.add_argument(
        "--measured-window",
        type=float,
        default=300.0,
        metavar="S",
        help="window of the p90 aggregate (default 300)",
    )
    g.add_argument(
        "--measured-stale-after",
        type=float,
        default=120.0,
        metavar="S",
        help="a card whose newest sample is older places by requests (default 120)",
    )
    g.add_argument(
        "--measured-hot-pct",
        type=float,
        default=80.0,
        metavar="PCT",
        help="slices keep cards at or below this share of compute (default 80)",
    )
