"""``gpupool sim replay``: replay an openb pod list on its own clock (see :mod:`.replay`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpupool.sim.replay import DEFAULT_POLICY, policy_names, run_replay
from gpupool.sim.replay_report import (
    PLOT_FILE,
    REPORT_FILE,
    SUMMARY_FILE,
    fmt_duration,
    write_outputs,
)

_EPILOG = f"""\
examples:
  gpupool sim replay --nodes openb_node_list_gpu_node.csv \\
      --pods openb_pod_list_default.csv --out runs/replay
  gpupool sim replay ... --policy fgd --time-scale 0.001 --limit 4000 --out runs/dense --json

Each pod arrives at its creation_time and, once placed, runs for deletion_time -
creation_time seconds. --time-scale X multiplies the arrival offsets and keeps durations, so
X < 1 packs the same pods closer together (more load). Writes {SUMMARY_FILE}, {REPORT_FILE}
and {PLOT_FILE} to --out. The 5-column multigpu pod lists carry no times and are refused.
"""


def add_parser(sim_sub: Any) -> None:
    """Register ``replay`` under ``gpupool sim``."""
    p = sim_sub.add_parser(
        "replay",
        help="replay an openb pod list in time: pods arrive, run, leave; jobs wait when full",
        description="Replay an openb trace on its own clock through the scheduling core and\n"
        "report waits, GPU allocation over time and GPU-hours.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--nodes",
        required=True,
        metavar="NODES.csv",
        help="openb node list (sn,cpu_milli,memory_mib,gpu,model)",
    )
    p.add_argument(
        "--pods",
        required=True,
        metavar="PODS.csv",
        help="openb pod list with times (the 11-column layout)",
    )
    p.add_argument(
        "--policy",
        default=DEFAULT_POLICY,
        metavar="NAME",
        help=f"placement score policy (default {DEFAULT_POLICY}); one of "
        f"{', '.join(policy_names())}",
    )
    p.add_argument(
        "--limit", type=int, default=None, metavar="N", help="replay only the N earliest arrivals"
    )
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="multiply arrival offsets by X, durations unchanged (default 1)",
    )
    p.add_argument(
        "--seed", type=int, default=0, metavar="N", help="seed of the random policy (default 0)"
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="output folder, created if missing; files in it are replaced",
    )
    p.add_argument("--json", action="store_true", help="print summary.json to stdout")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--no-plot", action="store_true", help=f"skip {PLOT_FILE}")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    show_progress = not args.quiet and sys.stderr.isatty()
    with _progress_bar(show_progress) as progress:
        outcome = run_replay(
            args.nodes,
            args.pods,
            policy=args.policy,
            limit=args.limit,
            time_scale=args.time_scale,
            seed=args.seed,
            progress=progress,
            clock=time.perf_counter,
        )
    paths = write_outputs(Path(args.out), outcome.summary, outcome.result, plot=not args.no_plot)
    if args.json:
        print(json.dumps(outcome.summary, indent=2))
    else:
        _print_summary(outcome.summary, paths)
    return 0


@contextmanager
def _progress_bar(enabled: bool) -> Iterator[Callable[[float, float], None] | None]:
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("replay"),
        BarColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("", total=1.0)

        def update(now_s: float, end_s: float) -> None:
            done = min(1.0, now_s / end_s) if end_s > 0 else 1.0
            bar.update(task, completed=done, description=f"simulated {fmt_duration(now_s)}")

        yield update


def _print_summary(s: dict[str, Any], paths: list[Path]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(
        title=f"replay of {s['trace']} · policy {s['policy']} · time scale {s['time_scale']:g}",
        show_header=False,
        box=None,
        title_justify="left",
        padding=(0, 2),
    )
    table.add_column(style="bold")
    table.add_column()
    w, u = s["wait_s"], s["utilisation_pct"]
    table.add_row("cluster", f"{s['nodes']:,} nodes, {s['gpus']:,} GPUs")
    table.add_row(
        "jobs",
        f"{s['jobs']:,} submitted, {s['completed']:,} completed, "
        f"{s['rejected']:,} rejected, {s['waited']:,} waited",
    )
    table.add_row(
        "wait",
        f"p50 {fmt_duration(w['p50'])}, p90 {fmt_duration(w['p90'])}, "
        f"p99 {fmt_duration(w['p99'])}, max {fmt_duration(w['max'])}",
    )
    table.add_row("GPU allocated", f"mean {u['mean']:.2f} %, peak {u['peak']:.2f} %")
    table.add_row("GPU-hours", f"{s['gpu_hours']:,.1f}")
    table.add_row(
        "simulated", f"{fmt_duration(s['span_s'])} in {s['wall_s']:.2f} s ({s['cycles']:,} cycles)"
    )
    console.print(table)
    console.print("wrote " + ", ".join(str(p) for p in paths))
