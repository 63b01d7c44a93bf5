"""What a scenario run measured: ``summary.json``, ``report.md`` and the plots.

The figures of one seed are in ``scenario_summary.py``, over seeds in ``scenario_aggregate.py``,
the tables of ``report.md`` in ``scenario_tables.py`` and the plots in ``scenario_plots.py``;
this module writes them out and re-exports their names.

Definitions (``docs/scenarios.md`` repeats them for users):

- **GPU-seconds**: a job holding g GPUs (a slice counts its fraction, 250 milli = 0.25) for
  t seconds uses g x t; counted per ClusterQueue and per user, over the whole run and inside
  the saturated window.
- **share** of a queue: its GPU-seconds in the window over all queues' GPU-seconds in the
  window (a share of what was allocated, not of capacity).
- **entitled share**: the queue's weighted fair share of GPUs, ``tree.entitled(cq)`` summed
  over flavors, over the sum for all queues: what weighted dominant-resource fairness
  promises a queue when every queue wants more than it gets. ``nominal_share`` (nominal
  quota over the sum of nominal quotas) is reported beside it; with equal weights and
  equal quotas the two agree.
- **jain_index**: Jain's fairness index of x_q = share / entitled share over the queues that
  submitted anything before the window ended: (sum x)^2 / (n sum x^2), 1 when every queue
  got exactly its entitlement.
- **utilization**: GPU-seconds allocated in the window over GPUs x window length.
- **partial_gang_placements**: binds with fewer placements than the job's gang minimum.
- **preemptions**: evictions by reason; ``guaranteed_preempted`` counts evictions (reclaim
  and fair-share) that took a queue below its nominal GPU quota, i.e. took more than it had
  borrowed; ``mutual`` counts pairs of jobs that preempted each other.
- **provisioning** (scenarios with a ``kind: Cloud``): per ProvisioningRequest, when it was
  made, provisioned, consumed and how it ended; ``submit_to_start_s``: from submission to the
  first start of the jobs of queues with a provisioning admission check (those that started);
  ``idle_booking_gpu_hours``: GPUs of a request's nodes x the time from Provisioned to the
  first pod on them (or to the end of the booking when none came); ``partial_provisions``:
  requests whose nodes did not all join at one instant in one zone (0: all or nothing). The
  cloud's GPUs count in the capacity that utilization is measured against.
- **wait_estimate**: jobs are asked about at the first estimate after they arrive (after
  every cycle, or every ``estimateEvery``); for those still pending then and given a start
  time, the absolute error between that estimate and the actual start. Jobs that never
  started are left out (``started`` counts the rest); ``asked`` counts the jobs asked about,
  ``estimated_jobs`` those given a time (the estimator gives times to the first jobs of the
  global order only), ``median_estimate_delay_s`` how long after arrival they were asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpupool.sim.report import dumps_summary
from gpupool.sim.scenario_aggregate import ENTITLED_BASIS, aggregate, summarise
from gpupool.sim.scenario_plots import (
    SHARES_PLOT,
    USERS_PLOT,
    WAITS_PLOT,
    plot_shares,
    plot_waits,
    resample,
)
from gpupool.sim.scenario_results import RunResult
from gpupool.sim.scenario_summary import (
    capacity_gpu_s,
    gangs,
    jain,
    provisioned_queues,
    provisioning_summary,
    step_mean,
    summarise_run,
)
from gpupool.sim.scenario_tables import render_provisioning, render_report, render_targets

__all__ = [
    "ENTITLED_BASIS",
    "REPORT_FILE",
    "SHARES_PLOT",
    "SUMMARY_FILE",
    "USERS_PLOT",
    "WAITS_PLOT",
    "aggregate",
    "capacity_gpu_s",
    "gangs",
    "jain",
    "plot_shares",
    "plot_waits",
    "provisioned_queues",
    "provisioning_summary",
    "render_provisioning",
    "render_report",
    "render_targets",
    "resample",
    "step_mean",
    "summarise",
    "summarise_run",
    "write_outputs",
]

SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.md"


def write_outputs(
    out: Path, summary: Mapping[str, Any], runs: Sequence[RunResult], plots: bool = True
) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    if plots and runs:
        plot_shares(out / SHARES_PLOT, runs[0])
        plot_shares(out / USERS_PLOT, runs[0], by="user")
        plot_waits(out / WAITS_PLOT, runs)
        names = [SHARES_PLOT, USERS_PLOT, WAITS_PLOT]
    (out / SUMMARY_FILE).write_text(dumps_summary(summary))
    (out / REPORT_FILE).write_text(render_report(summary, names))
    return [out / SUMMARY_FILE, out / REPORT_FILE, *(out / n for n in names)]
