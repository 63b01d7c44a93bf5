"""``gpupool bench ...``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gpupool.core.errors import ConfigError


def _positive_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"{value} must be more than 0")
    return x


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return n


def add_parsers(sub: Any) -> Any:
    """Adds ``bench`` and its commands; returns its subparsers, for benches other groups
    own (``gpupool.cli`` adds ``bench heterogeneous`` from ``gpupool.sim``)."""
    bench = sub.add_parser("bench", help="measure placement and admission speed")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCH_COMMAND")
    p = bench_sub.add_parser(
        "placement",
        help="placement decisions per second on a synthetic cluster",
        description="Offers POD pods one at a time to a cluster of NODES nodes with "
        "GPUS_PER_NODE cards each, with a realistic mix of shapes (slices, 1/2/4/8 "
        "GPUs, CPU-only) that leave again so the cluster runs near 85 % allocated.",
    )
    p.add_argument("--nodes", type=_positive, default=1000)
    p.add_argument("--gpus-per-node", type=_positive, default=8)
    p.add_argument("--pods", type=_positive, default=10_000)
    p.add_argument(
        "--policy", default="binpack", help="score plugin to place with (default: binpack)"
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--measured",
        action="store_true",
        help="place by measured use: the measured profile, a scrape of every card "
        "each 500 pods, and each cycle's view brought up to date (its time counted in the "
        "cycle's first decision)",
    )
    p.add_argument(
        "--cycle-pods",
        type=_positive,
        default=1,
        help="pods offered per scheduling cycle, with one snapshot and one view of measured "
        "use (default 1: a cycle per pod, the most views a stream can cost)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_placement)
    a = bench_sub.add_parser(
        "admission",
        help="admissions per second with many queues and cohorts",
        description="Submits WORKLOADS jobs to QUEUES cluster queues in COHORTS cohorts and runs "
        "admission cycles until none admits more; every admission checks quota and "
        "places the job on a cluster sized to hold them all.",
    )
    a.add_argument("--queues", type=_positive, default=1000)
    a.add_argument("--cohorts", type=_positive, default=10)
    a.add_argument("--workloads", type=_positive, default=50_000)
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("--json", action="store_true", help="print the result as JSON")
    a.set_defaults(func=_admission)
    s = bench_sub.add_parser(
        "serve",
        help="sustained job submissions to a real gpupool serve over loopback",
        description="Starts gpupool serve as a subprocess on a free port (temporary state, a "
        "cluster of NODES 8-GPU nodes in three flavors, four ClusterQueues in a "
        "cohort, eight namespaces), submits jobs open-loop at RATE jobs/s for "
        "DURATION seconds with an async HTTP client, and reports API latency, "
        "errors, the admissible backlog, admissions, cycles and the server's peak "
        "memory. The load generator runs on the same machine as the server. Exits "
        "0 whether or not the targets (>= 200 jobs/s, p99 < 100 ms) are met.",
    )
    s.add_argument("--rate", type=_positive_float, default=200.0, help="jobs/s (default 200)")
    s.add_argument(
        "--duration", type=_positive_float, default=60.0, help="seconds of load (default 60)"
    )
    s.add_argument(
        "--nodes",
        type=_positive,
        default=150,
        help="8-GPU nodes of the bench cluster (default 150)",
    )
    s.add_argument(
        "--speed",
        type=_positive_float,
        default=60.0,
        help="cluster seconds per wall second of the server (default 60)",
    )
    s.add_argument(
        "--interval",
        type=_positive_float,
        default=0.1,
        help="server's scheduling period, wall seconds (default 0.1)",
    )
    s.add_argument(
        "--concurrency",
        type=_positive,
        default=16,
        help="most requests in flight (HTTP connections; default 16)",
    )
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=_serve)
    m = bench_sub.add_parser(
        "measured-use",
        help="placement by requests against placement by measured GPU use",
        description="Places one workload twice on a simulated cluster of NODES 8-GPU nodes "
        "over HOURS hours: by requests alone, then by measured use (the samples "
        "fed straight into the load model). Notebooks and inference replicas use "
        "10-40 %% of the compute they request, fine-tuning slices keep their card "
        "90-100 %% busy, training takes whole cards at 90-100 %%, and a tenth of the "
        "cards hold memory no request accounts for. Prints hot-card time, memory "
        "over-subscriptions, allocation and utilisation of each.",
    )
    m.add_argument("--nodes", type=_positive, default=16)
    m.add_argument("--hours", type=_positive_float, default=4.0)
    m.add_argument("--seed", type=int, default=1)
    m.add_argument(
        "--hot-pct",
        type=_positive_float,
        default=80.0,
        help="a card is kept below this share of its compute (default 80)",
    )
    m.add_argument("--json", action="store_true", help="print the result as JSON")
    m.set_defaults(func=_measured_use)
    return bench_sub


def _placement(args: argparse.Namespace) -> int:
    from gpupool.bench import placement
    from gpupool.core import builtin_registry, default_profile

    registry = builtin_registry()
    if args.policy not in registry.names():
        raise ConfigError(
            f"--policy {args.policy!r}: not a known policy; known: {', '.join(registry.names())}"
        )
    profile = default_profile(registry, scores={args.policy: 1.0})
    if args.measured:
        from gpupool.core.placement.registry import MEASURED_SCORES, measured_profile

        profile = measured_profile(registry, scores={args.policy: 1.0, **MEASURED_SCORES})
    from rich.progress import Progress

    with Progress(transient=True, disable=not sys.stderr.isatty(), console=None) as bar:
        task = bar.add_task("placing", total=args.pods)
        result = placement.run(
            args.nodes,
            args.gpus_per_node,
            args.pods,
            args.policy,
            args.seed,
            profile=profile,
            progress=lambda n: bar.advance(task, n),
            measured=args.measured,
            cycle_pods=args.cycle_pods,
        )
    out = result.as_json()
    out["policy"] = args.policy
    out["measured"] = args.measured
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"{out['placed']}/{args.pods} pods placed on {args.nodes} nodes x "
            f"{args.gpus_per_node} GPUs with {args.policy}: "
            f"{out['placements_per_s']} placements/s, decision p50 "
            f"{result.decision_us_p50:.0f} us, p99 {result.decision_us_p99:.0f} us, "
            f"peak RSS {out['peak_rss_mib']} MiB"
        )
    return 0


def _admission(args: argparse.Namespace) -> int:
    from gpupool.bench import admission

    if args.cohorts > args.queues:
        raise ConfigError(f"--cohorts {args.cohorts}: more cohorts than --queues {args.queues}")
    out = admission.run(args.queues, args.cohorts, args.workloads, args.seed).as_json()
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"{out['admitted']}/{args.workloads} workloads admitted through {args.queues} "
            f"queues in {args.cohorts} cohorts ({out['nodes']} nodes) in {out['wall_s']} s: "
            f"{out['admissions_per_s']} admissions/s over {out['cycles']} cycles, "
            f"peak RSS {out['peak_rss_mib']} MiB"
        )
    return 0


def _serve(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from gpupool.bench import serve
    from gpupool.bench.serve_result import TARGET_P99_MS, TARGET_RATE

    total = max(1, round(args.rate * args.duration))
    err = Console(stderr=True)
    with Progress(transient=True, disable=not sys.stderr.isatty(), console=err) as bar:
        task = bar.add_task(f"submitting at {args.rate:g} jobs/s", total=total)
        result = serve.run(
            args.rate,
            args.duration,
            nodes=args.nodes,
            speed=args.speed,
            interval=args.interval,
            concurrency=args.concurrency,
            seed=args.seed,
            progress=lambda n: bar.advance(task, n),
        )
    out = result.as_json()
    met = out["targets"]
    verdict = (
        f"target >= {TARGET_RATE:g} jobs/s: "
        f"{'met' if met['rate_met'] else 'missed'}; target p99 < "
        f"{TARGET_P99_MS:g} ms: {'met' if met['p99_met'] else 'missed'}"
    )
    if args.json:
        print(json.dumps(out))
        print(verdict, file=sys.stderr)
        return 0
    lat, backlog = out["latency_ms"], out["backlog"]
    print(
        f"{out['accepted']}/{out['submitted']} jobs accepted in {args.duration:g} s at "
        f"{args.rate:g} jobs/s offered: {out['achieved_rate']} jobs/s, {out['errors']} "
        f"errors {out['error_kinds'] or ''}".rstrip()
    )
    print(
        f"  API latency p50 {lat['p50']} ms, p99 {lat['p99']} ms, max {lat['max']} ms "
        f"(server's own measure p99 {out['server_submit_ms']['p99']} ms; waiting to be sent "
        f"p99 {out['client_queue_ms']['p99']} ms)"
    )
    print(
        f"  admissible backlog: {backlog['pending_admissible_start']} at start, "
        f"{backlog['pending_admissible_end']} at end, max {backlog['max']}; drained in "
        f"{out['drain_s']} s"
    )
    print(
        f"  {out['admitted']} admitted over {out['cycles']} cycles, decision p99 "
        f"{out['decision_ms']['p99']} ms; server peak RSS {out['server_peak_rss_mib']} MiB"
    )
    print(f"  {verdict}")
    return 0


def _measured_use(args: argparse.Namespace) -> int:
    from gpupool.usage import study

    if args.hot_pct > 100:
        raise ConfigError(f"--hot-pct {args.hot_pct:g}: must be at most 100")
    out = study.run(nodes=args.nodes, hours=args.hours, seed=args.seed, hot_pct=args.hot_pct)
    if args.json:
        print(json.dumps(out))
        return 0
    sc = out["scenario"]
    print(
        f"{sc['jobs']} jobs over {sc['hours']:g} h on {sc['nodes']} nodes x 8 GPUs "
        f"(seed {sc['seed']}):"
    )
    for name in ("request_only", "measured"):
        r = out[name]
        print(
            f"  {name:13} hot-card time {r['hot_card_gpu_s']:>10.0f} GPU-s, memory "
            f"over-subscriptions {r['memory_oversubscriptions']:>3}, allocation "
            f"{r['allocation']:5.1f} %, utilisation {r['utilisation']:5.1f} %"
        )
    met = out["targets"]
    print(
        "  targets: "
        + ", ".join(f"{k.replace('_', ' ')}: {'met' if v else 'missed'}" for k, v in met.items())
    )
    return 0
