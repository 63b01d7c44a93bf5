"""Wait-estimate error of one scenario seed, broken down: by queue, by 30-minute submission
bucket, by queue and bucket, and by queue and stream.

    PYTHONPATH=$PWD/src python scripts/esterr.py examples/scenarios/flood.yaml 1

The error of a job is its first estimated start minus its real start (positive: the estimate
was later than the start), over the jobs the scenario report judges (estimated, started).
A bias of one sign held by one queue or stream is a defect of the forecast; spread of both
signs is what undeclared runtimes leave.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Hashable

from gpupool.sim.scenario import load_scenario, simulate
from gpupool.sim.scenario_results import JobRun


def _table(title: str, judged: list[JobRun], key: Callable[[JobRun], Hashable]) -> None:
    groups: dict[Hashable, list[float]] = {}
    for j in judged:
        groups.setdefault(key(j), []).append(_error(j))
    for k in sorted(groups, key=str):
        e = groups[k]
        print(
            f"{title} {k}: n={len(e)} median |e|={statistics.median(map(abs, e)):.0f} s "
            f"median e={statistics.median(e):+.0f} s"
        )


def _error(j: JobRun) -> float:
    assert j.estimate_s is not None and j.start_s is not None
    return j.estimate_s - j.start_s


def main(path: str, seed: int) -> None:
    run = simulate(load_scenario(path), seed)
    jobs = list(run.jobs.values())
    judged = [j for j in jobs if j.estimated and j.estimate_s is not None and j.start_s is not None]
    if not judged:
        print("no job was judged")
        return
    median = statistics.median(abs(_error(j)) for j in judged)
    print(f"judged {len(judged)}, median |e| {median:.0f} s")
    _table("queue", judged, lambda j: j.queue)
    _table("submitted (min)", judged, lambda j: int(j.submit_s // 1800) * 30)
    _table("queue, submitted (min)", judged, lambda j: (j.queue, int(j.submit_s // 1800) * 30))
    _table("stream", judged, lambda j: f"{j.queue}/{j.stream}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
