"""``gpupool sim scenario``: replay a multi-tenant scenario file, one run per seed.

The file is read and checked before anything runs or ``--out`` is created; a problem is a
ConfigError (exit 2, one line naming the file, the document and the field).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpupool.config.fields import fmt_s, parse_duration_s
from gpupool.core.errors import ConfigError
from gpupool.sim.openb_cli import parse_seeds
from gpupool.sim.report import dumps_summary
from gpupool.sim.scenario import RunResult, load_scenario, simulate
from gpupool.sim.scenario_report import (
    REPORT_FILE,
    SHARES_PLOT,
    SUMMARY_FILE,
    USERS_PLOT,
    WAITS_PLOT,
    summarise,
    write_outputs,
)

DEFAULT_SEEDS = "1"

_EPILOG = f"""\
examples:
  gpupool sim scenario examples/scenarios/flood.yaml --seeds 1-3 --out runs/flood
  gpupool sim scenario examples/scenarios/gang-vs-stream.yaml --duration 2h --json --quiet \\
      --out runs/gang

--seeds takes a range (1-3), a list (1,2,5) or one seed (1). --duration runs the scenario
for less (or more) simulated time than its spec.duration; the saturated window is cut to fit.
Writes {SUMMARY_FILE}, {REPORT_FILE}, {SHARES_PLOT}, {USERS_PLOT} and {WAITS_PLOT} to --out.
The format of the scenario file is in docs/scenarios.md.
"""


def add_parser(sim_sub: Any) -> None:
    """Register ``scenario`` under ``gpupool sim``."""
    p = sim_sub.add_parser(
        "scenario",
        help="replay a multi-tenant scenario (queues, quotas, tenants' job streams)",
        description="Replay a scenario file (cluster, queues and each tenant's submissions)\n"
        "through the queue-aware scheduler, once per seed, and report fairness,\n"
        "utilization, waits, preemptions and quota checks.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE.yaml", help="the scenario file")
    p.add_argument(
        "--seeds",
        default=DEFAULT_SEEDS,
        metavar="SEEDS",
        help=f"seeds: 1-3, 1,2,5 or 1 (default {DEFAULT_SEEDS})",
    )
    p.add_argument(
        "--duration",
        default=None,
        metavar="D",
        help="simulate D (e.g. 2h, 90m) instead of the scenario's spec.duration",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="output folder, created if missing; files in it are replaced",
    )
    p.add_argument("--json", action="store_true", help="also print summary.json to stdout")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no closing table")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(func=run)


def parse_duration_flag(text: str) -> float:
    try:
        seconds = parse_duration_s(text)
    except ValueError as exc:
        raise ConfigError(f"--duration {text!r}: {exc}") from None
    if not seconds > 0:
        raise ConfigError(f"--duration {text!r}: must be positive")
    return seconds


def run(args: argparse.Namespace) -> int:
    seeds = parse_seeds(args.seeds)
    duration = parse_duration_flag(args.duration) if args.duration is not None else None
    scenario = load_scenario(args.file)
    if duration is not None:
        scenario = scenario.shortened(duration)
    started = time.perf_counter()
    runs: list[RunResult] = []
    show = not args.quiet and sys.stderr.isatty()
    with _progress_bar(show, len(seeds), scenario.duration_s) as progress:
        for i, seed in enumerate(seeds):
            tick = None if progress is None else functools.partial(progress, i, seed)
            runs.append(simulate(scenario, seed, progress=tick, clock=time.perf_counter))
    summary = summarise(
        scenario, runs, wall_s=time.perf_counter() - started, duration_override=duration is not None
    )
    paths = write_outputs(Path(args.out), summary, runs, plots=not args.no_plots)
    if args.json:
        sys.stdout.write(dumps_summary(summary))
    elif not args.quiet:
        _print_summary(summary, paths)
    return 0


@contextmanager
def _progress_bar(
    enabled: bool, seeds: int, duration_s: float
) -> Iterator[Callable[[int, int, float], None] | None]:
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("scenario"),
        BarColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("", total=float(seeds))

        def update(index: int, seed: int, now_s: float) -> None:
            done = index + (min(1.0, now_s / duration_s) if duration_s > 0 else 1.0)
            bar.update(
                task,
                completed=done,
                description=f"seed {seed} ({index + 1}/{seeds}) at {fmt_s(now_s)}",
            )

        yield update


def _print_summary(s: dict[str, Any], paths: list[Path]) -> None:
    from rich.console import Console
    from rich.table import Table

    a = s["aggregate"]
    console = Console()
    table = Table(
        title=f"scenario {s['scenario']} · seeds {', '.join(map(str, s['seeds']))}"
        f" · {fmt_s(s['duration_s'])} simulated",
        title_justify="left",
    )
    for col in ("queue", "entitled", "share", "gap (pts)", "wait p50", "wait p99", "preempted"):
        table.add_column(col, justify="left" if col == "queue" else "right")
    for q, row in a["queues"].items():
        table.add_row(
            q,
            f"{100 * row['entitled_share']:.1f} %",
            f"{100 * (row['share']['mean'] or 0):.1f} %",
            f"{row['share_error_pts']['mean'] or 0:+.2f}",
            f"{(row['wait_p50_s']['mean'] or 0) / 60:.1f} min",
            f"{(row['wait_p99_s']['mean'] or 0) / 60:.1f} min",
            str(row["preempted"]),
        )
    console.print(table)
    jain = a["jain_index"]["mean"]
    util = a["utilization"]["mean"]
    console.print(
        f"jain_index {jain if jain is None else f'{jain:.4f}'} · utilization "
        f"{'n/a' if util is None else f'{100 * util:.1f} %'} · partial gangs "
        f"{a['partial_gang_placements']} · most "
        f"preemptions of one job {a['max_preemptions_per_job']}/"
        f"{a['max_preemptions_allowed']} · {s['wall_s']:.1f} s"
    )
    err = a["wait_estimate_median_abs_error_s"]["mean"]
    rel = a["wait_estimate_median_rel_error"]["mean"]
    console.print(
        "wait estimate: median absolute error "
        f"{'n/a' if err is None else f'{err / 60:.1f} min'}"
        f"{'' if rel is None else f' ({100 * rel:.1f} % of the wait)'}"
    )
    for seed, run in s["runs"].items():
        missed = [t for t in run.get("targets", ()) if not t["met"]]
        for t in missed:
            console.print(
                f"seed {seed}: target missed: {t['target']} {t['goal']}, measured {t['measured']}"
            )
    if any(run.get("targets") for run in s["runs"].values()):
        console.print(f"targets met on every seed: {'yes' if s['targets_met'] else 'no'}")
    prov = a.get("provisioning")
    if prov is not None:
        p50 = prov["submit_to_start_p50_s"]["mean"]
        top = prov["submit_to_start_max_s"]["mean"]
        idle = prov["idle_booking_gpu_hours"]["mean"]
        console.print(
            f"provisioned jobs: submission to start p50 "
            f"{'n/a' if p50 is None else f'{p50 / 60:.1f} min'}, max "
            f"{'n/a' if top is None else f'{top / 60:.1f} min'} · GPU-hours idle in bookings "
            f"{'n/a' if idle is None else f'{idle:.2f}'} · requests "
            + ", ".join(f"{k} {v}" for k, v in prov["by_outcome"].items())
            + f" · partial provisions {prov['partial_provisions']}"
        )
    console.print("wrote " + ", ".join(str(p) for p in paths))
