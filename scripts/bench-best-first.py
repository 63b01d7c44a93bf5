"""Best-first evaluation against every plugin on every row, on the same snapshots.

Runs ``gpupool bench placement --measured``'s stream (``gpupool.bench.placement.run``, one pod
per cycle) and, every ``--every``-th decision of the timed part, chooses the node for the same
pod on the same snapshot ``--reps`` times each way (``place._best_row``: filters and scores
on every row; ``best_first.choose``), keeping each way's least time, and counts the rows
best-first evaluation ran the lazy plugins on and in how many rounds. Prints, per request
kind, the medians over the sampled decisions. The card choice, the same both ways, is left
out.

    PYTHONPATH=src python scripts/bench-best-first.py --nodes 1000 --pods 3000
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from dataclasses import replace
from typing import Any

from gpupool.bench import placement as bench
from gpupool.core.placement import best_first, place
from gpupool.core.placement.registry import MEASURED_SCORES, builtin_registry, measured_profile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=3000)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    profile = measured_profile(builtin_registry(), scores={"binpack": 1.0, **MEASURED_SCORES})
    lazy, full = replace(profile, best_first=True), replace(profile, best_first=False)
    least: dict[str, list[tuple[float, float]]] = defaultdict(list)
    rounds: dict[str, list[tuple[int, int]]] = defaultdict(list)
    evaluated = [0, 0]
    evaluate = best_first._Search._evaluate

    def counted(self: Any, at: Any) -> Any:  # noqa: ANN401
        evaluated[0] += 1
        evaluated[1] += int(at.size)
        return evaluate(self, at)

    seen = [0]
    real = bench.place_task
    perf = time.perf_counter_ns

    def sampled(task: Any, snap: Any, prof: Any) -> Any:  # noqa: ANN401
        if snap.load is not None:
            seen[0] += 1
            if seen[0] % args.every == 0:
                kind = bench._kind(task.request)
                best = [float("inf"), float("inf")]
                for _ in range(args.reps):
                    t0 = perf()
                    place._best_row(task, snap, full)
                    t1 = perf()
                    best_first.choose(task, snap, lazy)
                    t2 = perf()
                    best = [min(best[0], t1 - t0), min(best[1], t2 - t1)]
                least[kind].append((best[0] / 1000.0, best[1] / 1000.0))
                evaluated[:] = [0, 0]
                best_first._Search._evaluate = counted  # type: ignore[method-assign]
                best_first.choose(task, snap, lazy)
                best_first._Search._evaluate = evaluate  # type: ignore[method-assign]
                rows, _ = place.feasible(task, snap, full)
                rounds[kind].append((evaluated[0], evaluated[1]))
                least[kind + " candidates"].append((float(rows.size), 0.0))
        return real(task, snap, prof)

    bench.place_task = sampled  # type: ignore[assignment]
    bench.run(args.nodes, 8, args.pods, profile=full, measured=True)
    for kind in ("none", "slice", "whole"):
        if kind not in least:
            continue
        every = statistics.median(a for a, _ in least[kind])
        lazily = statistics.median(b for _, b in least[kind])
        one = sum(1 for r, _ in rounds[kind] if r <= 1)
        print(
            f"{kind}: {len(least[kind])} decisions; least time, every row {every:.1f} us, "
            f"best-first {lazily:.1f} us; candidates after every filter "
            f"{statistics.median(a for a, _ in least[kind + ' candidates']):.0f} (median), "
            f"lazy plugins run on {statistics.median(n for _, n in rounds[kind]):.0f} rows "
            f"(median), in one round in {one} of {len(rounds[kind])}"
        )


if __name__ == "__main__":
    main()
