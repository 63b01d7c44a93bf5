"""``gpupool sim openb``: the ATC'23 openb benchmark for several policies and seeds.

Runs one experiment per (policy, seed) on one node list and one pod list, in this process or
in ``--workers`` spawned processes, and writes ``summary.json``, ``report.md``,
``curves.csv`` and the plots (see :mod:`gpupool.sim.report`). Every flag is checked before any
experiment starts; a bad one is a :class:`ConfigError` (exit 2, one line). Results are put in
(policy as given, seed ascending) order whatever order the workers finish in, so the outputs
depend only on the inputs, apart from the timing fields.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pickle
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpupool.core.errors import ConfigError, GpupoolError
from gpupool.sim.progress import experiment_bar

if TYPE_CHECKING:
    from gpupool.core.model import Node
    from gpupool.sim.openb import ExperimentResult
    from gpupool.sim.traces.openb import TracePod

TRACE_PREFIX = "openb_pod_list_"
DEFAULT_SEEDS = "42-51"
DEFAULT_TUNE = 1.3

_EPILOG = """\
examples:
  gpupool sim openb --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv \\
      --policy fgd,bestfit,gpupool --seeds 42-51 --workers 2 --out runs/default
  gpupool sim openb ... --policy all --seeds 42,43,50 --json --quiet --out runs/quick

--seeds takes a range (42-51), a list (42,43,50), one seed (42) or a mix (42-45,50).
--policy takes a comma list of policy names, or "all"; an unknown name is refused with the
list of known ones.
"""


def add_parser(sim_sub: Any) -> None:
    """Register ``openb`` under ``gpupool sim``."""
    p = sim_sub.add_parser(
        "openb",
        help="replay an openb trace (ATC'23 FGD benchmark) for policies x seeds",
        description="Place every pod of an openb trace, shuffled and tuned to --tune times\n"
        "the cluster's GPU capacity, once per policy and seed; write summary.json,\n"
        "report.md, curves.csv and PNG plots to --out.",
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
        "--pods", required=True, metavar="PODS.csv", help="openb pod list (11- or 5-column layout)"
    )
    p.add_argument(
        "--policy", required=True, metavar="P1,P2,...", help='comma-separated policies, or "all"'
    )
    p.add_argument(
        "--seeds",
        default=DEFAULT_SEEDS,
        metavar="SEEDS",
        help=f"seeds: 42-51, 42,43,50 or 42 (default {DEFAULT_SEEDS})",
    )
    p.add_argument(
        "--tune",
        default=str(DEFAULT_TUNE),
        metavar="X",
        help=f"tune the pod list to X times the cluster's GPU capacity (default {DEFAULT_TUNE})",
    )
    p.add_argument(
        "--workers",
        default="1",
        metavar="N",
        help="run experiments in N processes (default 1: in this process)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="output folder, created if missing; files in it are replaced",
    )
    p.add_argument(
        "--trace",
        default=None,
        metavar="NAME",
        help="trace name in the outputs (default: from the pods file name, "
        f"{TRACE_PREFIX}NAME.csv); published figures are shown for 'default'",
    )
    p.add_argument("--json", action="store_true", help="also print summary.json to stdout")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no closing line")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(func=run)


# ---------------------------------------------------------------------------------------------
# Flags


def parse_seeds(text: str) -> list[int]:
    """``42-51``, ``42,43,50``, ``42`` or a mix, as a sorted list of distinct seeds."""
    seeds: list[int] = []
    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not part for part in parts):
        raise ConfigError(
            f"--seeds {text!r}: expected a range (42-51), a list (42,43,50) or one seed (42)"
        )
    for part in parts:
        lo_text, dash, hi_text = part.partition("-")
        try:
            lo = int(lo_text)
            hi = int(hi_text) if dash else lo
        except ValueError:
            raise ConfigError(
                f"--seeds {text!r}: {part!r} is not a seed or a range of seeds "
                "(non-negative integers, as 42 or 42-51)"
            ) from None
        if hi < lo:
            raise ConfigError(f"--seeds {text!r}: range {part!r} runs backwards")
        seeds.extend(range(lo, hi + 1))
    dupes = sorted({s for s in seeds if seeds.count(s) > 1})
    if dupes:
        raise ConfigError(f"--seeds {text!r}: seed {dupes[0]} is given twice")
    return sorted(seeds)


def parse_policies(text: str, known: Sequence[str]) -> list[str]:
    """A comma list of policy names (or ``all``), in the order given, each known and once."""
    names = [part.strip() for part in text.split(",")]
    if names == ["all"]:
        return list(known)
    if any(not n for n in names):
        raise ConfigError(
            f"--policy {text!r}: expected comma-separated policy names; known: {', '.join(known)}"
        )
    for name in names:
        if name not in known:
            raise ConfigError(
                f"--policy: unknown policy {name!r}; known: {', '.join(known)} (or all)"
            )
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"--policy {text!r}: {name!r} is given twice")
    return names


def parse_workers(text: str) -> int:
    try:
        workers = int(text)
    except ValueError:
        workers = 0
    if workers < 1:
        raise ConfigError(f"--workers {text!r}: expected a whole number of processes, 1 or more")
    return workers


def parse_tune(text: str) -> float:
    try:
        tune = float(text)
    except ValueError:
        tune = float("nan")
    if not tune > 0 or tune == float("inf"):
        raise ConfigError(f"--tune {text!r}: expected a positive number (the paper uses 1.3)")
    return tune


def trace_name(pods_path: str | Path) -> str:
    """``openb_pod_list_default.csv`` -> ``default``; other names lose only the suffix."""
    stem = Path(pods_path).stem
    return stem.removeprefix(TRACE_PREFIX) or stem


def _input_file(text: str, flag: str) -> Path:
    path = Path(text)
    if not path.exists():
        raise ConfigError(f"{flag} {text}: no such file")
    if not path.is_file():
        raise ConfigError(f"{flag} {text}: not a file")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{flag} {text}: not readable (permission denied)")
    return path


def _output_dir(text: str) -> Path:
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--out {text}: exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {text}: cannot create the folder: {exc.strerror}") from exc
    if not os.access(path, os.W_OK):
        raise ConfigError(f"--out {text}: not writable (permission denied)")
    return path


# ---------------------------------------------------------------------------------------------
# Running


def run(args: argparse.Namespace) -> int:
    """The handler of ``gpupool sim openb``."""
    from gpupool.sim import openb as experiment
    from gpupool.sim import report
    from gpupool.sim.traces import openb as traces

    policies = parse_policies(args.policy, experiment.POLICIES)
    seeds = parse_seeds(args.seeds)
    tune = parse_tune(args.tune)
    workers = parse_workers(args.workers)
    nodes_path = _input_file(args.nodes, "--nodes")
    pods_path = _input_file(args.pods, "--pods")
    trace = args.trace if args.trace else trace_name(pods_path)

    nodes = traces.load_nodes(nodes_path)
    pods = traces.load_pods(pods_path)
    if not nodes:
        raise ConfigError(f"--nodes {args.nodes}: the file lists no nodes")
    if not pods:
        raise ConfigError(f"--pods {args.pods}: the file lists no pods")
    out = _output_dir(args.out)

    jobs = [(policy, seed) for policy in policies for seed in seeds]
    show = not args.quiet and sys.stderr.isatty()
    with experiment_bar(show, len(jobs), "openb experiments", _label) as tick:
        results = run_experiments(
            jobs, nodes, pods, tune=tune, trace=trace, workers=workers, on_result=tick
        )

    published = experiment.PUBLISHED_DEFAULT if trace == "default" else None
    summary = report.write_outputs(
        results,
        out,
        trace=trace,
        seeds=seeds,
        policies=policies,
        published=published,
        extra={"tune": tune, "pods": len(pods)},
        plots=not args.no_plots,
    )
    if args.json:
        sys.stdout.write(report.dumps_summary(summary))
        sys.stdout.flush()
    if not args.quiet:
        print(
            f"gpupool: {len(results)} experiments; wrote {out / report.SUMMARY_FILE} and "
            f"{out / report.REPORT_FILE}",
            file=sys.stderr,
        )
    return 0


def run_experiments(
    jobs: Sequence[tuple[str, int]],
    nodes: list[Node],
    pods: list[TracePod],
    *,
    tune: float,
    trace: str,
    workers: int = 1,
    on_result: Callable[[ExperimentResult], None] | None = None,
) -> list[ExperimentResult]:
    """Run every (policy, seed) job; results come back in ``jobs`` order.

    With ``workers`` > 1 the jobs run in a pool of spawned processes (safe on every platform;
    no state is inherited by forking), each given the nodes and pods once at start-up.
    ``on_result`` is called in this process as each experiment finishes.
    """
    from gpupool.sim import openb as experiment

    done: dict[tuple[str, int], ExperimentResult] = {}

    def finished(key: tuple[str, int], result: ExperimentResult) -> None:
        done[key] = result
        if on_result is not None:
            on_result(result)

    workers = min(workers, len(jobs))
    if workers <= 1:
        for policy, seed in jobs:
            finished(
                (policy, seed),
                experiment.run_experiment(nodes, pods, policy, seed, tune=tune, trace=trace),
            )
        return [done[key] for key in jobs]

    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_init_worker,
        initargs=(nodes, pods, tune, trace),
    )
    try:
        futures: dict[Future[ExperimentResult], tuple[str, int]] = {
            pool.submit(_run_in_worker, policy, seed): (policy, seed) for policy, seed in jobs
        }
        for future in as_completed(futures):
            finished(futures[future], future.result())
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return [done[key] for key in jobs]


_worker_inputs: tuple[list[Node], list[TracePod], float, str] | None = None
"""The trace of a worker process, set once by :func:`_init_worker` (worker processes only)."""


def _init_worker(nodes: list[Node], pods: list[TracePod], tune: float, trace: str) -> None:
    global _worker_inputs
    _worker_inputs = (nodes, pods, tune, trace)


def _run_in_worker(policy: str, seed: int) -> ExperimentResult:
    from gpupool.sim import openb as experiment

    assert _worker_inputs is not None, "worker started without its trace"
    nodes, pods, tune, trace = _worker_inputs
    try:
        return experiment.run_experiment(nodes, pods, policy, seed, tune=tune, trace=trace)
    except GpupoolError as exc:
        raise _portable(exc) from None


def _portable(exc: GpupoolError) -> GpupoolError:
    """The error itself if it survives the trip back to the parent process, else its text.

    Errors whose constructor takes more than the message (``InvalidJobError``) cannot be
    rebuilt from their pickled form; they travel as a plain :class:`GpupoolError` naming the
    original class, so the parent still reports one line and exits 2.
    """
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return GpupoolError(f"{type(exc).__name__}: {exc}")
    return exc


def _label(result: ExperimentResult) -> str:
    return f"{result.policy} seed {result.seed}"
