"""Scenario files: reading and checking them, the jobs they generate, and the run loop on
tiny clusters written per test."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from gpupool.config.fields import parse_duration_s
from gpupool.core import ConfigError, JobId
from gpupool.sim.scenario import (
    Scenario,
    generate_jobs,
    load_scenario,
    simulate,
)
from gpupool.sim.scenario_report import jain, step_mean, summarise, summarise_run
from tests.property.quota_oracle import QuotaOracle

# Two nodes of 4 GPUs; queues a and b of 4 GPUs each in one cohort; priority classes.
HEADER = """\
apiVersion: gpupool.io/v1alpha1
kind: Cluster
metadata: {name: tiny}
nodePools:
- name: n
  count: 2
  cpu: 64
  memory: 512Gi
  labels: {gpupool.io/flavor: a100}
  gpus: {model: A100-80GB, count: 4, memory: 80Gi}
---
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {gpupool.io/flavor: a100}}
---
kind: ClusterQueue
metadata: {name: a}
spec:
  cohort: all
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: 4}]}]
---
kind: ClusterQueue
metadata: {name: b}
spec:
  cohort: all
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: 4}]}]
---
kind: LocalQueue
metadata: {name: jobs, namespace: team-a}
spec: {clusterQueue: a}
---
kind: LocalQueue
metadata: {name: jobs, namespace: team-b}
spec: {clusterQueue: b}
---
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
---
kind: QueueSettings
spec: {minRuntime: 0s, maxPreemptionsPerJob: 2}
---
"""

SCENARIO = """\
kind: Scenario
metadata: {name: tiny}
spec:
  duration: 1h
  schedulingInterval: 10s
  gracePeriod: 20s
  saturatedWindow: {start: 10m, end: 50m}
  tenants:
"""


def write(tmp_path: Path, tenants: str, spec_extra: str = "", header: str = HEADER) -> Path:
    path = tmp_path / "scenario.yaml"
    body = SCENARIO.replace("  tenants:\n", spec_extra + "  tenants:\n")
    path.write_text(header + body + tenants)
    return path


A_STREAM = """\
  - name: team-a
    queue: team-a/jobs
    users: [ann, al]
    streams:
    - name: train
      poisson: {ratePerHour: 30}
      gpus: 1
      cpu: 4
      memory: 16Gi
      duration: {uniform: {min: 5m, max: 15m}}
"""


def load(tmp_path: Path, tenants: str, spec_extra: str = "") -> Scenario:
    return load_scenario(write(tmp_path, tenants, spec_extra))


# --- the format -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("30m", 1800.0),
        ("8h", 28800.0),
        ("1d", 86400.0),
        ("1h30m", 5400.0),
        (45, 45.0),
        ("2.5", 2.5),
    ],
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["10x", "", "h", True, "-5m", -3])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration_s(text)


def test_reads_cluster_queues_and_tenants(tmp_path: Path) -> None:
    s = load(
        tmp_path,
        A_STREAM
        + """\
  - name: team-b
    queue: team-b/jobs
    streams:
    - name: slices
      every: 2m
      start: 5m
      stop: 40m
      gpuMilli: 250
      gpuMemory: 10Gi
      duration: {exponential: {mean: 10m, max: 30m}}
      priority: high
    - name: gang
      jobs:
      - {at: 20m, name: big}
      - {at: 30m, tasks: 3}
      tasks: 2
      minMember: 2
      gpus: 4
      duration: 10m
      runLimit: 20m
""",
    )
    assert (s.name, s.duration_s, s.interval_s, s.grace_s) == ("tiny", 3600.0, 10.0, 20.0)
    assert s.window == (600.0, 3000.0) and s.gpus == 8 and len(s.nodes) == 2
    a, b = s.tenants
    assert (a.queue, a.cluster_queue, a.users) == ("team-a/jobs", "a", ("ann", "al"))
    assert b.users == ("team-b",)  # default: the tenant's name
    train = a.streams[0]
    assert (train.kind, train.rate_per_h, train.shape.gpus) == ("poisson", 30.0, 1)
    assert (train.shape.cpu_milli, train.shape.memory_mib) == (4000, 16384)
    assert train.shape.duration.kind == "uniform"
    slices, gang = b.streams
    assert (slices.kind, slices.every_s, slices.start_s, slices.stop_s) == (
        "every",
        120.0,
        300.0,
        2400.0,
    )
    assert (slices.shape.gpu_milli, slices.shape.gpu_memory_mib) == (250, 10240)
    assert slices.shape.priority == 1000 and slices.shape.duration.b == 1800.0
    assert [j.at_s for j in gang.jobs] == [1200.0, 1800.0]
    assert gang.jobs[0].name == "big" and gang.jobs[1].shape.tasks == 3
    assert gang.jobs[1].shape.min_member == 2 and gang.jobs[1].shape.run_limit_s == 1200.0


ERRORS = [
    ("    bogus: 1\n", "spec.tenants[0].streams[0].bogus: unknown field", "bogus"),
    (
        "    runLimit: 10x\n",
        'spec.tenants[0].streams[0].runLimit="10x" is not a duration',
        "runLimit",
    ),
    ("    gpuMilli: 1500\n", "gpuMilli=1500 is not a slice: a slice is 1..999 milli", "gpuMilli"),
    ("    gpuMilli: 500\n", "give either gpus", "gpus"),
    (
        "    priority: urgent\n",
        "priority=\"urgent\" is not a priority class of this file (unknown priority class 'urgent'",
        "priority",
    ),
    ("    tasks: 2\n    minMember: 3\n", "minMember=3 is more than tasks (2)", "minMember"),
    ("    every: 1m\n", "exactly one arrival process", "streams[0]"),
    ("    user: zed\n", 'user="zed" is not one of the tenant\'s users', "user"),
    ("    runLimit: 0s\n", 'runLimit="0s" must be positive', "runLimit"),
    ('    tasks: "2"\n', 'tasks="2" should be a valid integer', "tasks"),
    (
        "    duration: {uniform: {min: 5m, mx: 6m}}\n",
        "duration.uniform.mx: unknown field; known fields here: min, max",
        "duration.uniform.mx",
    ),
    (
        "    duration: {uniform: {min: 5m, max: 1m}}\n",
        'duration.uniform.max="1m" is below min (5m)',
        "duration.uniform.max",
    ),
]


@pytest.mark.parametrize(("extra", "needle", "field"), ERRORS)
def test_errors_name_file_document_and_field(
    tmp_path: Path, extra: str, needle: str, field: str
) -> None:
    """Each problem is one line naming the file, the document, the field path, the value
    and the rule, and the error carries the field path for callers."""
    stream = A_STREAM.replace(
        "      duration: {uniform: {min: 5m, max: 15m}}\n",
        "      duration: {uniform: {min: 5m, max: 15m}}\n"
        + extra.replace("    ", "      ", 1).replace("\n    ", "\n      "),
    )
    if "duration:" in extra:  # the stream's own duration is replaced, not repeated
        stream = stream.replace("      duration: {uniform: {min: 5m, max: 15m}}\n", "", 1)
    with pytest.raises(ConfigError) as err:
        load(tmp_path, stream)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'scenario.yaml'}: document 9 (Scenario tiny, line ")
    assert needle in message, message
    assert err.value.field is not None and err.value.field.startswith("spec.tenants[0].streams[0]")
    assert err.value.field.endswith(field), err.value.field
    assert err.value.rule is not None and err.value.rule in message


def test_unknown_queue_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"spec.tenants\[0\].queue=\"team-z/jobs\" is not a "
        r"LocalQueue of this file; known: .*team-a/jobs",
    ):
        load(tmp_path, A_STREAM.replace("team-a/jobs", "team-z/jobs"))


def test_window_must_fit_the_run(tmp_path: Path) -> None:
    path = write(tmp_path, A_STREAM)
    path.write_text(path.read_text().replace("end: 50m", "end: 2h"))
    with pytest.raises(ConfigError, match=r"spec\.saturatedWindow\.end=\"2h\" is after the end"):
        load_scenario(path)


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such scenario file"):
        load_scenario(tmp_path / "missing.yaml")
    only_queues = tmp_path / "q.yaml"
    only_queues.write_text(HEADER)
    with pytest.raises(ConfigError, match="no kind: Scenario document"):
        load_scenario(only_queues)
    twice = write(tmp_path, A_STREAM)
    text = twice.read_text()
    twice.write_text(text + "---\n" + text.split("---\n")[-1])
    with pytest.raises(ConfigError, match="documents 9 and 10 are both kind: Scenario"):
        load_scenario(twice)
    odd = tmp_path / "odd.yaml"
    odd.write_text(HEADER + "kind: Gadget\nmetadata: {name: x}\n---\n" + SCENARIO + A_STREAM)
    with pytest.raises(
        ConfigError,
        match=r"document 9 \(Gadget x.*kind=\"Gadget\" is not a "
        r"known kind; known: .*Scenario",
    ):
        load_scenario(odd)


def test_shortened_cuts_the_window(tmp_path: Path) -> None:
    s = load(tmp_path, A_STREAM)
    short = s.shortened(1800.0)
    assert short.duration_s == 1800.0 and short.window == (600.0, 1800.0)
    with pytest.raises(ConfigError, match="ends before the saturated window"):
        s.shortened(300.0)


# --- jobs -----------------------------------------------------------------------------------


def test_jobs_are_seeded_and_streams_independent(tmp_path: Path) -> None:
    s = load(tmp_path, A_STREAM)
    jobs1, src = generate_jobs(s, 1)
    again, _ = generate_jobs(s, 1)
    other, _ = generate_jobs(s, 2)
    assert jobs1 == again and jobs1 != other
    assert all(src[j.id].tenant == "team-a" for j in jobs1)
    assert {j.user for j in jobs1} == {"ann", "al"}
    assert all(300 <= src[j.id].duration_s <= 900 for j in jobs1)
    assert all(j.duration_s is None for j in jobs1)  # nothing declared to the scheduler
    assert [j.submit_time_s for j in jobs1] == sorted(j.submit_time_s for j in jobs1)
    # a second tenant does not change the first one's jobs
    s2 = load(tmp_path, A_STREAM + A_STREAM.replace("team-a", "team-b").replace("ann, al", "bo"))
    jobs2, _ = generate_jobs(s2, 1)
    assert [j for j in jobs2 if j.id.startswith("team-a")] == jobs1


def test_poisson_rate_is_about_right(tmp_path: Path) -> None:
    s = load(tmp_path, A_STREAM.replace("ratePerHour: 30", "ratePerHour: 600"))
    counts = [len(generate_jobs(s, seed)[0]) for seed in range(5)]
    assert 500 < float(np.mean(counts)) < 700


def test_every_burst_and_explicit_jobs(tmp_path: Path) -> None:
    s = load(
        tmp_path,
        """\
  - name: team-a
    queue: team-a/jobs
    streams:
    - name: tick
      every: 10m
      start: 5m
      stop: 40m
      maxJobs: 3
      gpus: 1
      duration: 1m
    - name: wave
      burst: {at: 30m, count: 4}
      gpus: 2
      duration: {fixed: 2m}
      priority: 7
    - name: one
      jobs: [{at: 50m, name: special, gpus: 4}, {at: 2h}]
      gpus: 1
      duration: 3m
""",
    )
    jobs, src = generate_jobs(s, 3)
    tick = [j for j in jobs if src[j.id].stream == "tick"]
    assert [j.submit_time_s for j in tick] == [300.0, 900.0, 1500.0]  # maxJobs: 3
    wave = [j for j in jobs if src[j.id].stream == "wave"]
    assert [j.submit_time_s for j in wave] == [1800.0] * 4
    assert all(j.priority == 7 and src[j.id].duration_s == 120.0 for j in wave)
    one = [j for j in jobs if src[j.id].stream == "one"]
    assert [j.id for j in one] == [JobId("team-a-special")]  # 2h is after the end
    assert one[0].pod_sets[0].gpu.count == 4


# --- the run loop --------------------------------------------------------------------------


def explicit(tmp_path: Path, tenants: str, spec_extra: str = "") -> Scenario:
    return load(tmp_path, tenants, spec_extra)


def test_cycles_run_on_the_grid_and_jobs_run_their_duration(tmp_path: Path) -> None:
    s = explicit(
        tmp_path,
        """\
  - name: team-a
    queue: team-a/jobs
    streams:
    - name: x
      jobs: [{at: 3s}, {at: 10m, runLimit: 1m}]
      gpus: 2
      duration: 5m
""",
    )
    oracle = QuotaOracle(s.config)
    r = simulate(s, 1, observe=oracle)
    first, second = r.jobs[JobId("team-a-x-00000")], r.jobs[JobId("team-a-x-00001")]
    assert (first.start_s, first.end_s, first.wait_s) == (10.0, 310.0, 7.0)
    assert first.gpu_s == pytest.approx(600.0)  # 2 GPUs x 300 s
    assert second.start_s == 600.0 and second.end_s == 660.0 and second.stopped_at_limit
    assert second.window_gpu_s == pytest.approx(120.0)
    assert r.partial_gang_placements == 0
    assert oracle.checks == r.cycles and not oracle.violations, oracle.violations
    t, used = r.series.arrays()
    assert used[t == 10.0, 0].tolist() == [2000.0]


def test_reclaim_waits_the_grace_period(tmp_path: Path) -> None:
    # b borrows all of a's quota (8 one-GPU jobs); at 20m a asks for its 4 GPUs back.
    s = explicit(
        tmp_path,
        """\
  - name: team-b
    queue: team-b/jobs
    streams:
    - name: fill
      burst: {at: 0s, count: 8}
      gpus: 1
      duration: 50m
  - name: team-a
    queue: team-a/jobs
    streams:
    - name: back
      burst: {at: 20m, count: 2}
      gpus: 2
      duration: 10m
""",
    )
    r = simulate(s, 1)
    evictions = r.evictions
    assert len(evictions) == 4 and {e.reason for e in evictions} == {"reclaim"}
    assert all(e.time_s == 1200.0 and e.queue == "b" for e in evictions)
    assert r.time_to_nominal_s["a"] == 20.0  # evicted at 20m, bound after the 20 s grace
    starts = sorted(j.start_s or -1.0 for j in r.jobs.values() if j.queue == "a")
    assert starts == [1220.0, 1220.0]
    victims = [r.jobs[JobId(e.job)] for e in evictions]
    assert all(v.evictions == 1 and v.runs == 2 for v in victims)  # restarted once a ended
    assert all(v.end_s is None for v in victims)  # from scratch: 50 more minutes
    run = summarise_run(r)
    assert run["preemptions"]["guaranteed_preempted"] == 0
    assert run["max_preemptions_per_job"] == 1


def test_same_seed_same_summary(tmp_path: Path) -> None:
    s = load(
        tmp_path,
        A_STREAM
        + A_STREAM.replace("team-a", "team-b")
        .replace("ann, al", "bo")
        .replace("ratePerHour: 30", "ratePerHour: 90"),
    )
    oracle = QuotaOracle(s.config)
    a = summarise(s, [simulate(s, 4, observe=oracle), simulate(s, 5, observe=oracle)])
    b = summarise(s, [simulate(s, 4), simulate(s, 5)])
    for x in (a, b):
        x.pop("wall_s")
        for run in x["runs"].values():
            run.pop("wall_s")
    assert a == b
    assert a["seeds"] == [4, 5] and set(a["runs"]) == {"4", "5"}
    agg = a["aggregate"]
    assert agg["partial_gang_placements"] == 0 and not oracle.violations
    shares = [agg["queues"][q]["share"]["mean"] for q in ("a", "b")]
    assert sum(shares) == pytest.approx(1.0, abs=1e-3)


# --- report arithmetic ---------------------------------------------------------------------


def test_jain() -> None:
    assert jain([1.0, 1.0, 1.0]) == 1.0
    assert jain([1.0, 0.0]) == pytest.approx(0.5)
    assert jain([]) is None and jain([0.0, 0.0]) == 1.0


def test_step_mean() -> None:
    t = np.array([0.0, 10.0, 20.0])
    y = np.array([1.0, 3.0, 0.0])
    assert step_mean(t, y, 0, 20) == pytest.approx(2.0)
    assert step_mean(t, y, 5, 15) == pytest.approx(2.0)
    assert step_mean(t, y, 20, 40) == 0.0
    assert math.isclose(step_mean(t, y, 0, 40), 1.0)


TARGET_ERRORS = [
    ("  targets: {bogus: 1}\n", "spec.targets.bogus: unknown field"),
    ("  targets: {jain: 1.5}\n", "spec.targets.jain: 1.5 must be between 0 and 1"),
    (
        "  targets: {noGainPts: {queues: [zz], pts: 2}}\n",
        "spec.targets.noGainPts.queues: 'zz' is not a ClusterQueue of this file; known: a, b",
    ),
    (
        "  targets: {guaranteedPreempted: -1}\n",
        "spec.targets.guaranteedPreempted: -1 must be a count",
    ),
    ("  targets: {waitEstimate: {}}\n", "spec.targets.waitEstimate: give relativeError"),
]


@pytest.mark.parametrize(("extra", "needle"), TARGET_ERRORS)
def test_target_errors_name_the_field_value_and_rule(
    tmp_path: Path, extra: str, needle: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load(tmp_path, A_STREAM, spec_extra=extra)
    assert needle in str(err.value), str(err.value)


def test_targets_are_read_and_checked_per_seed(tmp_path: Path) -> None:
    from gpupool.sim.scenario_report import summarise

    s = load(
        tmp_path,
        A_STREAM,
        spec_extra=(
            "  targets:\n    utilization: 0.99\n    guaranteedPreempted: 0\n"
            "    waitEstimate: {relativeError: 0.1, absoluteError: 5m}\n"
        ),
    )
    assert s.targets.utilization == 0.99 and s.targets.wait_absolute_error_s == 300.0
    summary = summarise(s, [simulate(s, 1)])
    rows = {t["target"]: t for t in summary["runs"]["1"]["targets"]}
    assert set(rows) == {"utilization", "evictions of guaranteed quota", "wait estimate"}
    assert rows["evictions of guaranteed quota"]["met"]
    util = summary["runs"]["1"]["utilization"]
    assert rows["utilization"]["met"] == (util >= 0.99)
    assert summary["targets_met"] == all(t["met"] for t in rows.values())


def test_a_declared_duration_reaches_the_scheduler(tmp_path: Path) -> None:
    s = load(
        tmp_path,
        A_STREAM.replace(
            "      duration: {uniform: {min: 5m, max: 15m}}\n",
            "      duration: {uniform: {min: 5m, max: 15m}}\n      declareDuration: true\n",
        ),
    )
    jobs, src = generate_jobs(s, 1)
    assert jobs and all(j.duration_s == src[j.id].duration_s for j in jobs)
    with pytest.raises(ConfigError, match='declareDuration="yes" should be a valid boolean'):
        load(
            tmp_path,
            A_STREAM.replace("      cpu: 4\n", "      cpu: 4\n      declareDuration: 'yes'\n"),
        )
