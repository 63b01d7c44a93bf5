"""Where a measured placement decision's time goes, plugin by plugin.

Runs ``gpupool bench placement --measured``'s stream (``gpupool.bench.placement.run``) and,
every ``--every``-th decision of the timed part, places the same pod on the same snapshot
``--reps`` times by the measured profile and by requests alone, alternating, keeping each
plugin's least time (the least is the cost with the machine's other work least in the way;
the per-node answers the measured plugins keep with the view, ``plugins/measured_rows.py``,
are set back before each repetition to where the decision found them, so every one
recomputes the rows the decision recomputes). Prints, per request kind, the median over the sampled
decisions of each plugin's least time and of the whole ``place_task``.

    PYTHONPATH=src python scripts/bench-measured-parts.py --nodes 1000 --pods 3000
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from gpupool.bench import placement as bench
from gpupool.core.placement.framework import Profile
from gpupool.core.placement.plugins.measured_rows import RowAnswers
from gpupool.core.placement.registry import (
    MEASURED_SCORES,
    builtin_registry,
    default_profile,
    measured_profile,
)

Spent = dict[str, int]


def _timed(method: Callable[..., Any], label: str, spent: Spent) -> Callable[..., Any]:
    def call(self: object, *args: Any) -> Any:  # noqa: ANN401
        t0 = time.perf_counter_ns()
        out = method(self, *args)
        spent[label] = spent.get(label, 0) + time.perf_counter_ns() - t0
        return out

    return call


def _instrument(profiles: list[Profile], spent: Spent) -> None:
    done: set[type] = set()
    for p in profiles:
        parts = [(f, "filter") for f in p.filters] + [(s, "score") for s, _ in p.scores]
        parts.append((p.cards, "choose_cards"))
        for plugin, method in parts:
            cls = type(plugin)
            if cls in done:
                continue
            done.add(cls)
            setattr(cls, method, _timed(getattr(cls, method), plugin.name, spent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--pods", type=int, default=3000)
    ap.add_argument("--every", type=int, default=25)
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    registry = builtin_registry()
    measured = measured_profile(registry, scores={"binpack": 1.0, **MEASURED_SCORES})
    requests = default_profile(registry, scores={"binpack": 1.0})
    spent: Spent = {}
    _instrument([measured, requests], spent)
    least: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    place = bench.place_task
    seen = [0]

    def sampled(task: Any, snap: Any, profile: Profile) -> Any:  # noqa: ANN401
        if snap.load is not None:
            seen[0] += 1
            if seen[0] % args.every == 0:
                kind = task.request.kind.value
                best: dict[tuple[str, str], int] = {}
                load = snap.load
                found = {k: m.seen for k, m in load.memos.items() if isinstance(m, RowAnswers)}
                for _ in range(args.reps):
                    for by, prof in (("measured", measured), ("requests", requests)):
                        for k, m in load.memos.items():
                            if isinstance(m, RowAnswers):
                                m.seen = found.get(k, (-1, -1))
                        spent.clear()
                        snap.load = load if by == "measured" else None
                        t0 = time.perf_counter_ns()
                        place(task, snap, prof)
                        spent["place_task"] = time.perf_counter_ns() - t0
                        for label, ns in spent.items():
                            best[(by, label)] = min(best.get((by, label), ns), ns)
                snap.load = load
                for (by, label), ns in best.items():
                    least[(kind, by, label)].append(ns / 1000.0)
        return place(task, snap, profile)

    bench.place_task = sampled
    bench.run(args.nodes, args.gpus_per_node, args.pods, profile=measured, measured=True)
    for kind in ("none", "slice", "whole"):
        labels = sorted({label for k, _, label in least if k == kind})
        n = len(least.get((kind, "measured", "place_task"), []))
        print(f"{kind} ({n} decisions sampled): least us, median over them; requests / measured")
        for label in labels:
            cells = [least.get((kind, by, label)) for by in ("requests", "measured")]
            shown = [f"{statistics.median(c):7.1f}" if c else "      -" for c in cells]
            print(f"  {label:30} {shown[0]} {shown[1]}")


if __name__ == "__main__":
    main()
