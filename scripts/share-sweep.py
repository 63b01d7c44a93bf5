"""Share gaps of one scenario over many seeds, scheduling only (wait estimates off: scheduling
is the same with them on, and the forecast is most of a scenario's time).

    PYTHONPATH=$PWD/src nice -n 5 python scripts/share-sweep.py \\
        examples/scenarios/gang-priority.yaml 1-30 --queue team-d --jobs 2

Prints each seed's gap to the entitled share per queue (points) and utilisation, then for
``--queue`` the mean gap and mean |gap|, and the seeds where any queue is more than
``--pts`` points off.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import statistics

from gpupool.sim.scenario import Scenario, load_scenario, simulate
from gpupool.sim.scenario_summary import summarise_run


def _seed(args: tuple[Scenario, int]) -> tuple[int, dict[str, float], float]:
    scenario, seed = args
    s = summarise_run(simulate(scenario, seed))
    gaps = {q: float(v["share_error_pts"]) for q, v in s["queues"].items()}
    return seed, gaps, float(s["utilization"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("seeds", help="a-b")
    ap.add_argument("--queue", required=True, help="the queue whose mean gap is reported")
    ap.add_argument("--jobs", type=int, default=2, help="processes")
    ap.add_argument("--pts", type=float, default=2.0, help="the share target, in points")
    a = ap.parse_args()
    lo, _, hi = a.seeds.partition("-")
    scenario = dataclasses.replace(load_scenario(a.scenario), estimate_every_s=1e12)
    seeds = range(int(lo), int(hi or lo) + 1)
    with multiprocessing.Pool(a.jobs) as pool:
        rows = sorted(pool.map(_seed, [(scenario, s) for s in seeds]))
    for seed, gaps, util in rows:
        cols = " ".join(f"{q} {g:+.2f}" for q, g in gaps.items())
        print(f"seed {seed}: {cols} | utilisation {100 * util:.1f} %")
    mine = [gaps[a.queue] for _, gaps, _ in rows]
    off = [
        f"{seed} ({q} {g:+.2f})"
        for seed, gaps, _ in rows
        for q, g in [max(gaps.items(), key=lambda kv: abs(kv[1]))]
        if abs(g) > a.pts
    ]
    utils = [u for *_, u in rows]
    print(
        f"{a.queue}: mean gap {statistics.mean(mine):+.2f}, mean |gap| "
        f"{statistics.mean(map(abs, mine)):.2f}; seeds with a queue over {a.pts:g} points "
        f"off: {len(off)} of {len(rows)}: {', '.join(off) or 'none'}; utilisation mean "
        f"{100 * statistics.mean(utils):.1f} % (min {100 * min(utils):.1f} %)"
    )


if __name__ == "__main__":
    main()
