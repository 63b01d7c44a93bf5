"""``gpupool sim openb-mix``: a policy against FGD across a family of derived openb mixes.

Derives one pod list per mix from ``--pods`` (:mod:`gpupool.sim.openb_mix`), runs each policy
on each mix for each seed as ``gpupool sim openb`` runs a trace, and writes ``summary.json``,
``report.md`` and a plot of the unallocated GPU % at 100 % arrived load across the family
(:mod:`gpupool.sim.openb_mix_report`). Every experiment is also appended to
``experiments.jsonl``; ``--resume`` reuses the lines there whose inputs (files, mix, policy,
seed, tune, mix seed) match, so a family can be completed in several runs. It does not know
whether a policy's code changed in between: resume only runs of the same code.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpupool.core.errors import ConfigError
from gpupool.sim.openb_cli import (
    DEFAULT_SEEDS,
    DEFAULT_TUNE,
    _input_file,
    _output_dir,
    parse_policies,
    parse_seeds,
    parse_tune,
    parse_workers,
    trace_name,
)
from gpupool.sim.progress import experiment_bar

if TYPE_CHECKING:
    from gpupool.core.model import Node
    from gpupool.sim.openb_mix import MixSpec
    from gpupool.sim.openb_mix_report import Record
    from gpupool.sim.traces.openb import TracePod

BASELINE = "fgd"
RECORDS_FILE = "experiments.jsonl"
DEFAULT_FAMILY = {"gpushare": "0-100:20", "cpu": "0,50,100,200,250,300"}
"""The family run when no axis flag is given: the issue's two axes, as openb spaces them."""

_EPILOG = """\
examples:
  gpupool sim openb-mix --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv \\
      --seeds 42-44 --out runs/family
  gpupool sim openb-mix ... --gpushare 0-100:25 --cpu 0,250 --policy gpupool,bestfit --json

Axis values: gpushare and multigpu in % of the GPU request, gpuspec in % of GPU pods, cpu in
tenths of a % of pods (cpu250 = 25.0 % of pods without GPUs), as the openb files are named.
A list (0,20,40) or a range with a step (0-100:20). Without axis flags:
--gpushare 0-100:20 --cpu 0,50,100,200,250,300. fgd is always run, as the baseline.
"""


def add_parser(sim_sub: Any) -> None:
    """Register ``openb-mix`` under ``gpupool sim``."""
    p = sim_sub.add_parser(
        "openb-mix",
        help="derive workload mixes from an openb pod list and run policies against FGD",
        description="Derive mixes from --pods by moving one proportion at a time (as the openb\n"
        "traces are derived from default), run each policy and FGD on every mix\n"
        "and seed, and write summary.json, report.md and a plot to --out.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--nodes", required=True, metavar="NODES.csv", help="openb node list")
    p.add_argument(
        "--pods",
        required=True,
        metavar="PODS.csv",
        help="openb pod list the mixes are derived from (usually default)",
    )
    for axis, what in (
        ("gpushare", "%% of the GPU request from sharing pods"),
        ("cpu", "tenths of a %% of pods without GPUs"),
        ("multigpu", "%% of the GPU request from multi-GPU pods"),
        ("gpuspec", "%% of GPU pods pinned to a model"),
    ):
        p.add_argument(
            f"--{axis}",
            default=None,
            metavar="VALUES",
            help=f"{what} (a list 0,20,40 or a range 0-100:20)",
        )
    p.add_argument(
        "--policy",
        default="gpupool",
        metavar="P1,P2,...",
        help="policies to compare with fgd (default gpupool)",
    )
    p.add_argument(
        "--seeds",
        default=DEFAULT_SEEDS,
        metavar="SEEDS",
        help=f"seeds, as for sim openb (default {DEFAULT_SEEDS})",
    )
    p.add_argument(
        "--tune",
        default=str(DEFAULT_TUNE),
        metavar="X",
        help=f"tune each mix to X times GPU capacity (default {DEFAULT_TUNE})",
    )
    p.add_argument(
        "--mix-seed",
        default="0",
        metavar="N",
        help="seed of the resampling that derives the mixes (default 0)",
    )
    p.add_argument("--workers", default="1", metavar="N", help="processes (default 1)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder")
    p.add_argument(
        "--resume", action="store_true", help=f"reuse matching experiments from DIR/{RECORDS_FILE}"
    )
    p.add_argument("--json", action="store_true", help="also print summary.json to stdout")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no closing line")
    p.add_argument("--no-plots", action="store_true", help="skip the plot")
    p.set_defaults(func=run)


def parse_family(args: argparse.Namespace) -> list[MixSpec]:
    from gpupool.sim.openb_mix import AXES, MixSpec, parse_values

    given = {axis: getattr(args, axis) for axis in AXES if getattr(args, axis) is not None}
    family = given or DEFAULT_FAMILY
    return [MixSpec(axis, v) for axis, text in family.items() for v in parse_values(text, axis)]


def parse_mix_seed(text: str) -> int:
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    if seed < 0:
        raise ConfigError(f"--mix-seed {text!r}: expected a non-negative integer")
    return seed


def digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def run(args: argparse.Namespace) -> int:
    """The handler of ``gpupool sim openb-mix``."""
    from gpupool.sim import openb as experiment
    from gpupool.sim import openb_mix, openb_mix_report
    from gpupool.sim.traces import openb as traces

    others = parse_policies(args.policy, experiment.POLICIES)
    policies = [p for p in others if p != BASELINE] + [BASELINE]
    family = parse_family(args)
    seeds = parse_seeds(args.seeds)
    tune = parse_tune(args.tune)
    mix_seed = parse_mix_seed(args.mix_seed)
    workers = parse_workers(args.workers)
    nodes_path = _input_file(args.nodes, "--nodes")
    pods_path = _input_file(args.pods, "--pods")
    nodes = traces.load_nodes(nodes_path)
    pods = traces.load_pods(pods_path)
    if not nodes or not pods:
        raise ConfigError(f"--{'nodes' if not nodes else 'pods'}: the file lists nothing")
    mixes = {spec.name: openb_mix.derive(pods, spec, nodes, mix_seed) for spec in family}
    out = _output_dir(args.out)
    inputs = digest(nodes_path, pods_path)

    records_path = out / RECORDS_FILE
    known = load_records(records_path) if args.resume else {}
    if not args.resume:
        records_path.write_text("", encoding="utf-8")
    jobs = [(spec, p, s) for spec in family for p in policies for s in seeds]
    todo = [
        j for j in jobs if record_key(j[0].name, j[1], j[2], tune, mix_seed, inputs) not in known
    ]
    show = not args.quiet and sys.stderr.isatty()
    with (
        records_path.open("a", encoding="utf-8") as sink,
        experiment_bar(show, len(todo), "openb mixes", _label) as tick,
    ):

        def keep(rec: Record) -> None:
            known[record_key(rec.mix, rec.policy, rec.seed, rec.tune, rec.mix_seed, rec.inputs)] = (
                rec
            )
            sink.write(json.dumps(rec.as_dict()) + "\n")
            sink.flush()
            tick(rec)

        run_family(
            todo,
            nodes,
            mixes,
            tune=tune,
            mix_seed=mix_seed,
            inputs=inputs,
            workers=workers,
            on_record=keep,
        )

    records = [known[record_key(s.name, p, seed, tune, mix_seed, inputs)] for s, p, seed in jobs]
    mix_info = [
        {
            "name": s.name,
            "axis": s.axis,
            "value": s.value,
            "unit": openb_mix.AXIS_UNIT[s.axis],
            "composition": openb_mix.composition(mixes[s.name]).as_dict(),
        }
        for s in family
    ]
    summary = openb_mix_report.summarize_family(
        records,
        mix_info,
        policies=policies,
        baseline=BASELINE,
        seeds=seeds,
        extra={
            "base": trace_name(pods_path),
            "base_composition": openb_mix.composition(pods).as_dict(),
            "nodes": len(nodes),
            "gpus": sum(n.gpu_count for n in nodes),
            "tune": tune,
            "mix_seed": mix_seed,
        },
    )
    openb_mix_report.write_family_outputs(summary, out, plots=not args.no_plots)
    if args.json:
        from gpupool.sim.report import dumps_summary

        sys.stdout.write(dumps_summary(summary))
        sys.stdout.flush()
    if not args.quiet:
        print(
            f"gpupool: {len(todo)} experiments run, {len(jobs) - len(todo)} reused; wrote "
            f"{out / openb_mix_report.SUMMARY_FILE} and {out / openb_mix_report.REPORT_FILE}",
            file=sys.stderr,
        )
    return 0


def record_key(
    mix: str, policy: str, seed: int, tune: float, mix_seed: int, inputs: str
) -> tuple[Any, ...]:
    return (mix, policy, seed, tune, mix_seed, inputs)


def load_records(path: Path) -> dict[tuple[Any, ...], Record]:
    from gpupool.sim.openb_mix_report import Record

    out: dict[tuple[Any, ...], Record] = {}
    if not path.exists():
        return out
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = Record(**json.loads(line))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"--resume: {path}:{i}: not an experiment record ({exc})") from None
        out[record_key(rec.mix, rec.policy, rec.seed, rec.tune, rec.mix_seed, rec.inputs)] = rec
    return out


def one(
    nodes: Sequence[Node],
    pods: Sequence[TracePod],
    spec: MixSpec,
    policy: str,
    seed: int,
    tune: float,
    mix_seed: int,
    inputs: str,
) -> Record:
    """One experiment of the family, as a record."""
    from gpupool.sim.openb import run_experiment
    from gpupool.sim.openb_mix_report import Record

    r = run_experiment(nodes, pods, policy, seed, tune=tune, trace=spec.name)

    def at(i: int) -> float | None:
        v = float(r.unallocated_pct[i])
        return None if v != v else round(v, 4)

    return Record(
        mix=spec.name,
        axis=spec.axis,
        value=spec.value,
        policy=policy,
        seed=seed,
        tune=tune,
        mix_seed=mix_seed,
        inputs=inputs,
        unallocated_100=at(100),
        unallocated_130=at(130),
        wall_s=round(r.wall_s, 3),
        decisions=r.decisions,
        placed=r.placed,
        failed=r.failed,
    )


def run_family(
    jobs: Sequence[tuple[MixSpec, str, int]],
    nodes: list[Node],
    mixes: dict[str, list[TracePod]],
    *,
    tune: float,
    mix_seed: int,
    inputs: str,
    workers: int = 1,
    on_record: Callable[[Record], None],
) -> None:
    """Run every (mix, policy, seed) job, in this process or in ``workers`` spawned ones;
    ``on_record`` is called here as each finishes."""
    workers = min(workers, len(jobs))
    if workers <= 1:
        for spec, policy, seed in jobs:
            on_record(one(nodes, mixes[spec.name], spec, policy, seed, tune, mix_seed, inputs))
        return
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_init_worker,
        initargs=(nodes, mixes, tune, mix_seed, inputs),
    )
    try:
        futures: list[Future[Record]] = [
            pool.submit(_run_in_worker, spec, policy, seed) for spec, policy, seed in jobs
        ]
        for future in as_completed(futures):
            on_record(future.result())
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


_worker: tuple[list[Node], dict[str, list[TracePod]], float, int, str] | None = None


def _init_worker(
    nodes: list[Node], mixes: dict[str, list[TracePod]], tune: float, mix_seed: int, inputs: str
) -> None:
    global _worker
    _worker = (nodes, mixes, tune, mix_seed, inputs)


def _run_in_worker(spec: MixSpec, policy: str, seed: int) -> Record:
    assert _worker is not None, "worker started without its inputs"
    nodes, mixes, tune, mix_seed, inputs = _worker
    return one(nodes, mixes[spec.name], spec, policy, seed, tune, mix_seed, inputs)


def _label(rec: Record) -> str:
    return f"{rec.mix} {rec.policy} seed {rec.seed}"
