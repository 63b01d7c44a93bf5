"""The provisioning scenario: all-or-nothing starts, booking expiry, run-limit reclaim."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.core import ConfigError
from gpupool.sim.scenario import RunResult, load_scenario, simulate
from gpupool.sim.scenario_report import render_report, summarise, summarise_run
from tests.property.quota_oracle import QuotaOracle

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "provisioning.yaml"


@pytest.fixture(scope="module")
def run() -> RunResult:
    scenario = load_scenario(EXAMPLE)
    oracle = QuotaOracle(scenario.config)
    result = simulate(scenario, 1, observe=oracle)
    assert oracle.checks == result.cycles and not oracle.violations, oracle.violations[:10]
    return result


def test_gangs_start_all_or_nothing_on_their_own_nodes(run: RunResult) -> None:
    assert run.cloud is not None
    gangs = [j for j in run.jobs.values() if j.queue == "train"]
    assert len(gangs) == 8 and all(j.start_s is not None and j.provisioned for j in gangs)
    assert run.partial_gang_placements == 0  # quota: checked by the oracle in the fixture
    for rec in run.cloud.requests.values():
        if rec.provisioned_s is None:
            continue
        assert len(rec.node_names) == rec.nodes  # every node, at one instant, in one zone
        assert set(rec.nodes_added_s) == {rec.provisioned_s}
        assert all(f"-{rec.zone}-" in n for n in rec.node_names)
    for j in gangs:  # each gang started when its booking came, not before
        mine = [
            r for r in run.cloud.requests.values() if r.job == j.job.id and r.consumed_s is not None
        ]
        assert len(mine) == 1 and mine[0].consumed_s == j.start_s
        assert mine[0].provisioned_s is not None and j.start_s is not None
        assert 0 <= j.start_s - mine[0].provisioned_s <= run.scenario.interval_s


def test_a_booking_nobody_consumes_expires_after_ten_minutes(run: RunResult) -> None:
    assert run.cloud is not None
    rec = run.cloud.requests["reservations/l4-reserve"]
    assert rec.outcome == "expired" and rec.consumed_s is None
    assert rec.provisioned_s is not None and rec.ended_s is not None
    assert 600 <= rec.ended_s - rec.provisioned_s <= 600 + run.scenario.interval_s
    assert rec.idle_booking_gpu_s == pytest.approx(32 * (rec.ended_s - rec.provisioned_s))


def test_capacity_is_reclaimed_at_the_run_limit(run: RunResult) -> None:
    assert run.cloud is not None
    long = [j for j in run.jobs.values() if j.job.id in ("train-pretrain-b", "train-pretrain-e")]
    for j in long:
        assert j.stopped_at_limit and j.revoked == 0
        (rec,) = [r for r in run.cloud.requests.values() if r.job == j.job.id and r.consumed_s]
        assert rec.outcome == "revoked" and rec.provisioned_s is not None
        assert j.end_s == pytest.approx(rec.provisioned_s + 3 * 3600)  # maxRunDurationSeconds
    short = run.jobs["train-pretrain-a"]  # type: ignore[index]
    assert not short.stopped_at_limit and short.end_s is not None and short.start_s is not None
    assert short.end_s - short.start_s == pytest.approx(90 * 60)


def test_the_report_prints_waits_and_idle_booking_hours(run: RunResult) -> None:
    p = summarise_run(run)["provisioning"]
    assert p["partial_provisions"] == 0 and p["expired_bookings"] == 1
    assert p["revoked_at_run_limit"] == 2 and p["never_started"] == 0
    assert p["submit_to_start_s"]["n"] == 8 and p["submit_to_start_s"]["p50"] > 0
    assert p["idle_booking_gpu_hours"] >= p["idle_booking_gpu_hours_unconsumed"] > 5.0
    text = render_report(summarise(run.scenario, [run]))
    assert "time from submission to start, provisioned jobs, p50" in text
    assert "GPU-hours idle in bookings" in text


def test_one_seed_one_result() -> None:
    scenario = load_scenario(EXAMPLE).shortened(4 * 3600)
    a, b = summarise_run(simulate(scenario, 7)), summarise_run(simulate(scenario, 7))
    a.pop("wall_s")
    b.pop("wall_s")
    assert a == b


TINY = """\
apiVersion: gpupool.io/v1alpha1
kind: Cluster
nodePools:
- {name: cpu, count: 1, cpu: 8, memory: 32Gi, gpus: {model: T4, count: 1, memory: 16Gi}}
---
apiVersion: gpupool.io/v1alpha1
kind: Cloud
metadata: {name: tiny}
spec:
  gpuQuota: 64
  provisioningDelay: 5m
  nodePools:
  - {name: h100, zones: [a, b], maxNodesPerZone: 2, cpu: 64, memory: 512Gi,
     labels: {pool: h100}, gpus: {model: H100, count: 8, memory: 80Gi}}
---
{kind: ResourceFlavor, metadata: {name: h100}, spec: {nodeLabels: {pool: h100}}}
---
kind: ProvisioningRequestConfig
metadata: {name: cfg}
spec:
  provisioningClassName: queued-provisioning.gke.io
  retryStrategy: {backoffLimitCount: 2, backoffBaseSeconds: 60}
---
kind: AdmissionCheck
metadata: {name: dws}
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
  parameters: {kind: ProvisioningRequestConfig, name: cfg}
---
kind: ClusterQueue
metadata: {name: train}
spec:
  admissionChecks: [dws]
  resourceGroups:
  - flavors: [{name: h100, resources: [{name: nvidia.com/gpu, nominalQuota: 64}]}]
---
{kind: LocalQueue, metadata: {name: jobs, namespace: ml}, spec: {clusterQueue: train}}
---
kind: Scenario
metadata: {name: tiny}
spec:
  duration: 2h
  tenants:
  - name: ml
    queue: ml/jobs
    streams:
    - name: g
      tasks: TASKS
      gpus: 8
      cpu: 8
      memory: 64Gi
      duration: 30m
      jobs: [{at: 1m, name: gang}]
"""


def test_a_request_no_zone_can_hold_never_makes_a_node(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY.replace("TASKS", "3"))  # 3 nodes; a zone holds 2
    r = simulate(load_scenario(path), 1)
    assert r.cloud is not None and r.cloud.nodes_made == 0
    gang = r.jobs["ml-gang"]  # type: ignore[index]
    assert gang.start_s is None
    outcomes = [q.outcome for q in r.cloud.requests.values()]
    assert outcomes == ["failed", "failed", "failed"]  # the first try and 2 retries
    assert all("TooLarge" in q.reason for q in r.cloud.requests.values())
    path.write_text(TINY.replace("TASKS", "2"))
    r = simulate(load_scenario(path), 1)
    assert r.jobs["ml-gang"].wait_s == pytest.approx(5 * 60, abs=20)  # type: ignore[index]


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("gpuQuota: 64", "gpuQuota: 64\n  colour: red", "spec.colour: unknown field"),
        ("memory: 80Gi}}", "memory: lots}}", "spec.nodePools[0].gpus.memory"),
        ("maxNodesPerZone: 2, ", "", "spec.nodePools[0].maxNodesPerZone: missing"),
        ("kind: Cloud", "kind: Clouds", "is not a known kind"),
    ],
)
def test_cloud_documents_are_checked(tmp_path: Path, old: str, new: str, words: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(TINY.replace("TASKS", "2").replace(old, new, 1))
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert words in str(info.value)


def test_admission_checks_need_a_cloud(tmp_path: Path) -> None:
    path = tmp_path / "nocloud.yaml"
    text = TINY.replace("TASKS", "2")
    start = text.index("apiVersion: gpupool.io/v1alpha1\nkind: Cloud")
    end = text.index("---", start)
    path.write_text(text[:start] + text[end + 4 :])
    with pytest.raises(ConfigError, match="no kind: Cloud document"):
        load_scenario(path)


def test_gangs_waiting_on_the_cloud_get_an_estimate_once_a_request_was_provisioned(
    run: RunResult,
) -> None:
    assert run.cloud is not None
    first = min(
        r.provisioned_s
        for r in run.cloud.requests.values()
        if r.job and r.provisioned_s is not None
    )
    gangs = [j for j in run.jobs.values() if j.queue == "train" and j.estimate_at_s is not None]
    assert len(gangs) == 8
    for j in gangs:
        assert j.estimate_at_s is not None
        if j.estimate_at_s < first:  # nothing learned yet: no start foreseen
            assert j.estimate_s is None, j.job.id
        elif j.estimated:  # learned: not before it was asked
            assert j.estimate_s is not None and j.estimate_s >= j.estimate_at_s, j.job.id
    assert sum(j.estimated for j in gangs) >= 4


def test_a_gang_whose_request_waits_for_room_in_the_cloud_is_not_estimated_at_the_making_time(
    run: RunResult,
) -> None:
    """Once a request of the class failed at the cloud's queue timeout (the class's capacity
    showed), a gang asked while the class's nodes fill the cloud is expected when earlier
    bookings leave room, not its creation plus the time making capacity takes."""
    assert run.cloud is not None
    reqs = [r for r in run.cloud.requests.values() if r.job]
    timed_out = min(r.ended_s or 0.0 for r in reqs if r.outcome == "failed")
    checked = 0
    for j in run.jobs.values():
        if j.queue != "train" or j.estimate_s is None or j.estimate_at_s is None:
            continue
        mine = [r for r in reqs if r.job == str(j.job.id) and r.created_s <= j.estimate_at_s]
        if j.estimate_at_s < timed_out or not mine:
            continue
        r = mine[-1]
        assert r.committed_s is not None
        if r.committed_s - r.created_s < 60.0:
            continue  # the cloud had room for it at once
        making = max(
            p.provisioned_s - (p.committed_s or p.created_s)
            for p in reqs
            if p.provisioned_s is not None and p.provisioned_s <= j.estimate_at_s
        )
        assert j.estimate_s > r.created_s + making, j.job.id
        checked += 1
    assert checked >= 1


def test_a_gang_behind_a_run_past_every_end_is_not_expected_before_that_runs_end(
    run: RunResult,
) -> None:
    """Gang f is asked at 3 h, while the region holds 3 gangs: b (4 h, stopped at its 3 h run
    end) has outlived every trainer run that ended (90 min), so room for f comes at b's run
    end at the earliest, not minutes after the mean runtime."""
    assert run.cloud is not None
    (b,) = [r for r in run.cloud.requests.values() if r.job == "train-pretrain-b"]
    f = run.jobs["train-pretrain-f"]  # type: ignore[index]
    assert b.provisioned_s is not None and f.estimate_s is not None
    assert f.estimate_s >= b.provisioned_s + 3 * 3600


def test_a_gang_waiting_for_its_queues_quota_gets_a_start_once_a_request_was_provisioned(
    run: RunResult,
) -> None:
    """Gangs asked while their queue's quota is taken (no request made yet) are given the
    time the quota frees plus their wait in the cloud, not no start."""
    assert run.cloud is not None
    reqs = [r for r in run.cloud.requests.values() if r.job]
    first = min(r.provisioned_s for r in reqs if r.provisioned_s is not None)
    quota_waits = [
        j
        for j in run.jobs.values()
        if j.queue == "train"
        and j.estimate_at_s is not None
        and j.estimate_at_s >= first
        and not any(r.job == str(j.job.id) and r.created_s <= j.estimate_at_s for r in reqs)
    ]
    assert quota_waits  # seed 1: gang e, asked at 2 h while a, b, c, d hold the quota
    for j in quota_waits:
        assert j.estimate_s is not None and j.estimate_at_s is not None
        assert j.estimate_s > j.estimate_at_s, j.job.id
