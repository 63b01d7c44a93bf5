"""``gpupool bench heterogeneous`` (the simulator runs it; the ``bench`` group lists it)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_bench_parser(bench_sub: Any) -> None:
    h = bench_sub.add_parser(
        "heterogeneous",
        help="a mixed NVIDIA/Ascend/DCU cluster, jobs pinned vs with fallback",
        description="Runs a scenario of a mixed cluster twice with one seed: with every job's "
        "alternatives removed (pinned) and as written (fallback), and reports "
        "utilisation, median wait, Jain's index over the queues' normalised "
        "shares and placements a card's division rule forbids, for each.",
    )
    h.add_argument(
        "--scenario",
        default=None,
        metavar="FILE.yaml",
        help="scenario file (default: the packaged copy of examples/scenarios/heterogeneous.yaml)",
    )
    h.add_argument("--seed", type=int, default=1)
    h.add_argument(
        "--duration",
        default=None,
        metavar="D",
        help="simulate D (e.g. 4h) instead of the scenario's spec.duration",
    )
    h.add_argument("--json", action="store_true", help="print the result as JSON")
    h.set_defaults(func=_heterogeneous)


def _heterogeneous(args: argparse.Namespace) -> int:
    from gpupool.config.quantity import duration_s
    from gpupool.sim import heterogeneous

    duration = None if args.duration is None else duration_s(args.duration, "--duration")
    modes = heterogeneous.run(args.scenario, args.seed, duration)
    out = {name: m.as_json() for name, m in modes.items()}
    if args.json:
        print(json.dumps(out))
    else:
        for name, m in out.items():
            print(
                f"{name:>8}: utilisation {m['utilisation']:.1%}, wait p50 "
                f"{m['wait_p50_s']:.0f} s, Jain {m['jain']:.4f} (normalised shares), "
                f"{m['forbidden_placements']} forbidden placements, "
                f"{m['started']}/{m['jobs']} jobs started"
            )
    return 0
