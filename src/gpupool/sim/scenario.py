"""Multi-tenant scenarios: a cluster, its queues and each tenant's submissions, replayed.

A scenario file is one multi-document YAML file. The cluster (``kind: Cluster``) and the queue
objects (``ResourceFlavor``, ``ClusterQueue``, ``Cohort``, ``LocalQueue``,
``WorkloadPriorityClass``, ``QueueSettings``) are read by :mod:`gpupool.config`, as for every
other command; one ``kind: Scenario`` document says how long to run, which window to measure
fairness over, and what each tenant submits (``docs/scenarios.md`` has the full format).

This module is the public entry; each concept has its own module:

==========================  =====================================================================
``scenario_model.py``       the scenario as values: ``Scenario``, ``Tenant``, ``Stream``, ``Shape``
``scenario_schema.py``      the document's shape (pydantic models)
``scenario_read.py``        its values read with errors naming field, value and rule
``scenario_streams.py``     tenants and their streams of jobs, checked against the file's queues
``scenario_alternatives.py`` the other accelerators a job may run on
``scenario_load.py``        the file: :func:`load_scenario`, :func:`parse_scenario`
``scenario_jobs.py``        :func:`generate_jobs`: the jobs of one seed, in submission order
``scenario_run.py``         :func:`simulate`: the run loop on the simulation kernel
``scenario_results.py``     what a run produced: ``RunResult``, ``JobRun``, ``Eviction``,
                            ``QueueSeries``
``scenario_targets.py``     what a scenario promises (``spec.targets``)
``scenario_report.py``      the report: summary, tables, plots
==========================  =====================================================================

Nothing here reads the wall clock; one file and one seed give one result.
"""

from __future__ import annotations

from gpupool.sim.scenario_jobs import JobSource, generate_jobs
from gpupool.sim.scenario_load import load_scenario, parse_scenario
from gpupool.sim.scenario_model import (
    DEFAULT_ESTIMATE_EVERY_S,
    DEFAULT_GRACE_S,
    DEFAULT_INTERVAL_S,
    SCENARIO_KIND,
    ExplicitJob,
    Scenario,
    Shape,
    Stream,
    Tenant,
)
from gpupool.sim.scenario_results import Eviction, JobRun, QueueSeries, RunResult, gpu_entitlement
from gpupool.sim.scenario_run import CycleObserver, ProgressFn, ScenarioRun, simulate

__all__ = [
    "DEFAULT_ESTIMATE_EVERY_S",
    "DEFAULT_GRACE_S",
    "DEFAULT_INTERVAL_S",
    "SCENARIO_KIND",
    "CycleObserver",
    "Eviction",
    "ExplicitJob",
    "JobRun",
    "JobSource",
    "ProgressFn",
    "QueueSeries",
    "RunResult",
    "Scenario",
    "ScenarioRun",
    "Shape",
    "Stream",
    "Tenant",
    "generate_jobs",
    "gpu_entitlement",
    "load_scenario",
    "parse_scenario",
    "simulate",
]
