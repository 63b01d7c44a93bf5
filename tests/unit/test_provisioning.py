"""ProvisioningRequest conditions and limits, and the provisioning admission check."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.config import load_queue_config, read_queue_config
from gpupool.core import (
    ConfigError,
    GpuRequest,
    InvalidJobError,
    Job,
    JobId,
    Node,
    PodSet,
    QueueName,
    Taint,
)
from gpupool.core.placement.framework import Code
from gpupool.core.provisioning import (
    BOOKING_S,
    REQUEST_LABEL,
    AdmissionCheck,
    ConditionType,
    ProvisioningRequest,
    ProvisioningRequestConfig,
    RequestLedger,
    RetryStrategy,
    request_name,
)
from gpupool.core.quota import (
    ClusterQueue,
    FlavorQuotas,
    LocalQueue,
    QueueConfig,
    Quota,
    Resource,
    ResourceFlavor,
)
from gpupool.core.scheduler import Scheduler
from tests.builders import job, node, whole

PS = PodSet("main", 4, 1000, 1024, GpuRequest(count=8))


def req(name: str = "r", ns: str = "team", **kw: object) -> ProvisioningRequest:
    pod_sets = kw.pop("pod_sets", (PS,))
    return ProvisioningRequest(name, pod_sets, namespace=ns, **kw)  # type: ignore[arg-type]


# -- the request -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"pod_sets": tuple(PodSet(f"p{i}", 1) for i in range(33))}, "pod_sets"),
        ({"pod_sets": ()}, "pod_sets"),
        ({"pod_sets": (PodSet("main", 1001, gpu=GpuRequest(count=8)),)}, "pod_sets[0].count"),
        ({"pod_sets": (PS, PodSet("b", 0))}, "pod_sets[1].count"),
        ({"pod_sets": (PodSet("a", 600), PodSet("b", 401))}, "pod_sets[*].count"),
        ({"max_run_duration_s": 7 * 24 * 3600.0 + 1}, "maxRunDurationSeconds"),
        ({"max_run_duration_s": 0.0}, "maxRunDurationSeconds"),
        ({"name": "Bad_Name"}, "name"),
    ],
)
def test_bad_requests_are_rejected_naming_the_field(kw: dict[str, object], field: str) -> None:
    name = str(kw.pop("name", "r"))
    with pytest.raises(InvalidJobError) as info:
        req(name, **kw)
    assert info.value.field == field


def test_a_request_of_1000_nodes_and_7_days_is_fine() -> None:
    r = req(
        pod_sets=(PodSet("main", 1000, gpu=GpuRequest(count=8)),),
        max_run_duration_s=7 * 24 * 3600.0,
    )
    assert r.pod_set.count == 1000


def test_a_request_holds_up_to_32_pod_sets_of_1000_pods_in_all() -> None:
    r = req(pod_sets=tuple(PodSet(f"p{i}", 31 if i else 39) for i in range(32)))
    assert len(r.pod_sets) == 32 and r.pod_count == 1000
    assert [p["count"] for p in r.to_dict()["podSets"]][:2] == [39, 31]


def test_conditions_through_a_booking() -> None:
    book = RequestLedger()
    r = book.create(req(max_run_duration_s=3600.0), 0.0)
    assert r.conditions == () and not r.ended
    r = book.accept(r.key, 5.0)
    assert r.is_true(ConditionType.ACCEPTED)
    r = book.provisioned(r.key, ["n1", "n2"], 100.0)
    assert r.provisioned_s == 100.0 and r.booked and r.nodes == ("n1", "n2")
    assert r.booking_expires_s == 100.0 + BOOKING_S and r.run_ends_s == 3700.0
    assert book.next_deadline() == 100.0 + BOOKING_S
    assert book.expire(100.0 + BOOKING_S - 1) == []
    r = book.consume(r.key, 200.0)
    assert not r.booked and r.booking_expires_s is None
    assert book.expire(10_000.0) == []  # consumed: never expires
    r = book.revoke(r.key, "maxRunDurationSeconds reached", 3700.0)
    assert r.is_true(ConditionType.CAPACITY_REVOKED) and r.ended
    d = r.to_dict()
    assert [c["type"] for c in d["conditions"]] == ["Accepted", "Provisioned", "CapacityRevoked"]
    assert d["parameters"] == {"maxRunDurationSeconds": "3600"}


def test_a_booking_expires_ten_minutes_after_provisioned() -> None:
    book = RequestLedger()
    r = book.create(req(), 0.0)
    book.provisioned(r.key, ["n1"], 50.0)
    (expired,) = book.expire(50.0 + 600.0)
    assert expired.is_true(ConditionType.BOOKING_EXPIRED) and expired.ended
    assert book.next_deadline() is None


def test_deletion_cancels_and_a_project_holds_at_most_100_active() -> None:
    book = RequestLedger()
    for i in range(100):
        assert not book.create(req(f"r{i}"), 0.0).ended
    refused = book.create(req("r100"), 0.0)
    assert refused.is_true(ConditionType.FAILED)
    acc = refused.condition(ConditionType.ACCEPTED)
    assert acc is not None and not acc.status and acc.reason == "TooManyRequests"
    assert "100 active ProvisioningRequests" in acc.message
    assert not book.create(req("other", ns="elsewhere"), 0.0).ended  # per project
    book.delete("team/r0")
    assert "team/r0" not in book
    assert not book.create(req("r101"), 1.0).ended  # room again


def test_retry_strategy_doubles_up_to_the_cap() -> None:
    r = RetryStrategy()
    assert [r.delay_s(k) for k in (1, 2, 3, 4, 10)] == [60.0, 120.0, 240.0, 480.0, 1800.0]
    assert RetryStrategy(5, 10.0, 25.0).delay_s(3) == 25.0
    with pytest.raises(ConfigError):
        RetryStrategy(backoff_max_s=1.0)


def test_config_rules() -> None:
    with pytest.raises(ConfigError, match="maxRunDurationSeconds"):
        ProvisioningRequestConfig(parameters={"maxRunDurationSeconds": "700000"})
    with pytest.raises(ConfigError, match="controllerName"):
        AdmissionCheck("x", controller_name="example.com/other")
    assert request_name("Team-A/LLM 7b", 2) == "team-a-llm-7b-2"


# -- the admission check in the scheduler ------------------------------------------------------


def config(
    retry: RetryStrategy | None = None, max_run: str | None = "7200", quota_gpus: int = 32
) -> QueueConfig:
    params = {"maxRunDurationSeconds": max_run} if max_run else {}
    return QueueConfig(
        flavors=(ResourceFlavor("h100", {"pool": "h100"}), ResourceFlavor("a100")),
        cluster_queues=(
            ClusterQueue(
                "train",
                (FlavorQuotas("h100", {Resource.GPU_MILLI: Quota(quota_gpus * 1000)}),),
                admission_checks=("dws",),
            ),
            ClusterQueue("small", (FlavorQuotas("a100", {Resource.GPU_MILLI: Quota(8000)}),)),
        ),
        local_queues=(LocalQueue("jobs", "train", "ml"), LocalQueue("jobs", "small", "web")),
        admission_checks=(
            AdmissionCheck(
                "dws",
                config=ProvisioningRequestConfig(parameters=params, retry=retry or RetryStrategy()),
            ),
        ),
    ).validate()


def gang(name: str, tasks: int = 2, at: float = 0.0) -> Job:
    return job(
        name,
        tasks=tasks,
        gpu=whole(8, models=["H100"]),
        queue="ml/jobs",
        submit=at,
        duration=3600.0,
    )


def cloud_nodes(s: Scheduler, r: ProvisioningRequest, n: int | None = None) -> list[str]:
    names = []
    for i in range(n if n is not None else r.pod_set.count):
        nd = node(
            f"{r.name}-{i}",
            gpu=8,
            model="H100",
            labels={"pool": "h100", REQUEST_LABEL: r.node_label},
            taints=(Taint(REQUEST_LABEL, r.node_label),),
        )
        s.add_node(nd)
        names.append(nd.name)
    return names


def test_quota_reserved_request_made_then_admitted_pinned_to_its_nodes() -> None:
    s = Scheduler([node("a0", gpu=8)], config())
    s.submit(gang("g"), 0.0)
    out = s.cycle(0.0)
    assert out.binds == []
    (r,) = out.provision
    assert r.job == "g" and r.queue == "train" and r.namespace == "ml"
    assert r.pod_set.count == 2 and r.pod_set.node_selector == {"pool": "h100"}
    assert r.max_run_duration_s == 7200.0
    assert s.usage("train")[("h100", Resource.GPU_MILLI)] == 16_000  # reserved
    (p,) = s.pending()
    assert p.reason is not None and "admission check dws Pending" in p.reason.message
    # a node of the pool that is not the request's takes nothing of the job
    s.add_node(node("stray", gpu=8, model="H100", labels={"pool": "h100"}))
    assert s.cycle(10.0).binds == []
    s.provisioning_accepted(r.key, 20.0)
    names = cloud_nodes(s, r)
    s.provisioning_provisioned(r.key, names, 300.0)
    assert s.estimates(300.0)[JobId("g")] == (0, 300.0)
    (bind,) = s.cycle(300.0).binds
    assert sorted(p.node for p in bind.placements) == sorted(names)
    assert s.run_limit_s(JobId("g")) == pytest.approx(7200.0)
    live = s.provisioning_request(r.key)
    assert live is not None and live.consumed_s == 300.0
    s.finished(JobId("g"), 1000.0)
    assert s.cycle(1010.0).deprovision == [r.key]
    assert s.usage("train").get(("h100", Resource.GPU_MILLI), 0) == 0


def test_the_run_limit_is_cut_to_what_is_left_of_the_booking() -> None:
    s = Scheduler([], config(max_run="3600"))
    s.submit(job("g", tasks=1, gpu=whole(8, models=["H100"]), queue="ml/jobs"), 0.0)
    (r,) = s.cycle(0.0).provision
    s.provisioning_provisioned(r.key, cloud_nodes(s, r), 100.0)
    s.cycle(400.0)  # started 300 s into the booking
    assert s.run_limit_s(JobId("g")) == pytest.approx(3300.0)


def test_failure_releases_quota_backs_off_retries_and_finally_rejects() -> None:
    s = Scheduler([], config(retry=RetryStrategy(2, 60.0, 100.0)))
    s.submit(gang("g"), 0.0)
    t = 0.0
    delays = []
    for attempt in (1, 2, 3):
        out = s.cycle(t)
        (r,) = out.provision
        assert r.name == f"g-{attempt}"
        s.provisioning_failed(r.key, "stock-out in every zone", t + 5)
        out = s.cycle(t + 10)
        assert r.key in out.deprovision
        assert s.usage("train").get(("h100", Resource.GPU_MILLI), 0) == 0
        (park,) = out.parks
        if attempt == 3:
            assert park.status.code is Code.UNRESOLVABLE
            assert "rejected after 3 ProvisioningRequests" in park.status.message
            break
        assert "stock-out in every zone" in park.status.message
        rec = s.checks.record(JobId("g")) if s.checks else None
        assert rec is not None
        delays.append(rec.retry_at_s - (t + 10))
        assert s.cycle(rec.retry_at_s - 1).provision == []  # still backing off
        t = rec.retry_at_s
    assert delays == [60.0, 100.0]
    assert s.cycle(t + 10_000).provision == []  # rejected: no more requests
    (p,) = s.pending()
    assert p.reason is not None and p.reason.code is Code.UNRESOLVABLE


def test_an_expired_booking_is_a_failure_and_the_job_retries() -> None:
    s = Scheduler([], config())
    s.submit(gang("g"), 0.0)
    (r,) = s.cycle(0.0).provision
    s.provisioning_provisioned(r.key, [], 100.0)  # its nodes never joined
    assert s.cycle(100.0 + BOOKING_S - 10).binds == []
    out = s.cycle(100.0 + BOOKING_S)
    assert r.key in out.deprovision
    assert "BookingExpired" in out.parks[0].status.message


def test_a_booking_left_behind_is_taken_by_the_next_job_expiring_first_first() -> None:
    s = Scheduler([], config(quota_gpus=64))
    s.submit(gang("early", tasks=1), 0.0)
    s.submit(gang("late", tasks=1), 0.0)
    reqs = {r.job: r for r in s.cycle(0.0).provision}
    s.provisioning_provisioned(reqs["late"].key, cloud_nodes(s, reqs["late"]), 100.0)
    s.provisioning_provisioned(reqs["early"].key, cloud_nodes(s, reqs["early"]), 50.0)
    s.cancel(JobId("early"), 60.0)  # provisioned already: the booking is kept
    s.cancel(JobId("late"), 60.0)
    assert len(s.provisioning_requests()) == 2
    s.submit(gang("next", tasks=1), 70.0)
    out = s.cycle(70.0)
    assert out.provision == []  # no new request: a booking was free
    (bind,) = out.binds
    assert bind.placements[0].node.startswith(reqs["early"].name)  # it expires first


def test_cancel_before_provisioning_deletes_the_request_and_frees_quota() -> None:
    s = Scheduler([], config())
    s.submit(gang("g"), 0.0)
    (r,) = s.cycle(0.0).provision
    s.cancel(JobId("g"), 5.0)
    assert s.cycle(10.0).deprovision == [r.key]
    assert s.usage("train").get(("h100", Resource.GPU_MILLI), 0) == 0
    assert s.pending() == []


def test_a_project_at_its_limit_waits_with_the_reason() -> None:
    s = Scheduler([], config(quota_gpus=80), max_requests_per_project=2)
    for i in range(3):
        s.submit(gang(f"g{i}", tasks=1), 0.0)
    out = s.cycle(0.0)
    assert len(out.provision) == 2
    (park,) = [p for p in out.parks if p.job == "g2"]
    assert "project ml has 2 active ProvisioningRequests" in park.status.message
    s.provisioning_failed(out.provision[0].key, "no", 1.0)
    assert len(s.cycle(2.0).provision) == 1  # g2 now; g0 backs off


def test_jobs_of_a_provisioned_queue_skip_inventory_checks_but_not_request_rules() -> None:
    s = Scheduler([node("a0", gpu=8)], config())
    s.submit(gang("no-h100-here"), 0.0)  # H100 nodes do not exist yet: accepted
    many = Job(
        JobId("many"),
        tuple(PodSet(f"p{i}", 1, gpu=GpuRequest(count=8)) for i in range(33)),
        queue=QueueName("ml/jobs"),
    )
    with pytest.raises(InvalidJobError) as info:
        s.submit(many, 0.0)
    assert info.value.field == "pod_sets" and "at most 32 pod sets" in info.value.rule
    with pytest.raises(InvalidJobError) as info:
        s.submit(gang("huge", tasks=1001), 0.0)
    assert info.value.field == "pod_sets[0].count"
    split = Job(
        JobId("split"),
        (PodSet("a", 600, gpu=GpuRequest(count=8)), PodSet("b", 401, gpu=GpuRequest(count=8))),
        queue=QueueName("ml/jobs"),
    )
    with pytest.raises(InvalidJobError) as info:
        s.submit(split, 0.0)
    assert info.value.field == "pod_sets[*].count"
    with pytest.raises(InvalidJobError):  # other queues keep the inventory checks
        s.submit(job("x", gpu=whole(8, models=["H100"]), queue="web/jobs"), 0.0)


def test_a_job_of_two_pod_sets_gets_one_request_of_both_and_starts_on_its_nodes() -> None:
    s = Scheduler([], config())
    h100 = frozenset({"H100"})
    two = Job(
        JobId("two"),
        (
            PodSet("a", 1, 1000, 1024, GpuRequest(count=8, models=h100)),
            PodSet("b", 2, 1000, 1024, GpuRequest(count=4, models=h100)),
        ),
        queue=QueueName("ml/jobs"),
        duration_s=60.0,
    )
    s.submit(two, 0.0)
    (r,) = s.cycle(0.0).provision
    assert [(ps.name, ps.count) for ps in r.pod_sets] == [("a", 1), ("b", 2)]
    assert all(ps.node_selector == {"pool": "h100"} for ps in r.pod_sets)
    names = cloud_nodes(s, r, 2)
    s.provisioning_provisioned(r.key, names, 10.0)
    (bind,) = s.cycle(10.0).binds
    assert len(bind.placements) == 3 and {p.node for p in bind.placements} == set(names)


def test_queues_without_checks_are_untouched() -> None:
    s = Scheduler([node("a0", gpu=8)], config())
    s.submit(job("x", gpu=whole(2), queue="web/jobs"), 0.0)
    out = s.cycle(0.0)
    assert len(out.binds) == 1 and out.provision == [] and out.deprovision == []


def test_capacity_revoked_requeues_the_job_whole() -> None:
    s = Scheduler([], config())
    s.submit(gang("g"), 0.0)
    (r,) = s.cycle(0.0).provision
    names = cloud_nodes(s, r)
    s.provisioning_provisioned(r.key, names, 10.0)
    assert s.cycle(10.0).binds
    s.provisioning_revoked(r.key, "taken back", 20.0)
    hit = s.remove_node(names[0], 20.0)
    assert hit == [JobId("g")]
    for n in names[1:]:
        s.remove_node(n, 20.0)
    out = s.cycle(30.0)
    assert [x.job for x in out.provision] == ["g"] and r.key in out.deprovision
    (again,) = out.provision
    assert again.key != r.key


def test_hand_made_requests_expire_and_are_passed_on() -> None:
    s = Scheduler([], config())
    r = s.create_provisioning_request(req("reserve", ns="ops"), 0.0)
    s.provisioning_provisioned(r.key, ["x"], 10.0)
    assert s.cycle(10.0 + BOOKING_S).deprovision == [r.key]
    assert s.provisioning_requests()[0].is_true(ConditionType.BOOKING_EXPIRED)


def test_admission_checks_load_from_kueue_yaml(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(QUEUES)
    cfg = load_queue_config(path)
    (check,) = cfg.admission_checks
    assert check.name == "dws" and check.config.max_run_duration_s == 7200.0
    assert check.config.retry == RetryStrategy(3, 60.0, 1800.0)
    assert cfg.cluster_queues[0].admission_checks == ("dws",)
    path.write_text(QUEUES.replace("admissionChecks: [dws]", "admissionChecks: [dwz]"))
    with pytest.raises(
        ConfigError,
        match=r"spec.admissionChecks\[0\]=\"dwz\" is not an "
        "AdmissionCheck; known: dws",
    ):
        load_queue_config(path)
    path.write_text(
        QUEUES.replace(
            "ProvisioningRequestConfig, name: dws-config}",
            "ProvisioningRequestConfig, name: other}",
        )
    )
    with pytest.raises(ConfigError, match="is not a ProvisioningRequestConfig"):
        load_queue_config(path)
    # a check of another controller is accepted and reported; its queues admit without it
    path.write_text(QUEUES.replace("kueue.x-k8s.io/provisioning-request", "x.io/multikueue"))
    read = read_queue_config(path)
    assert read.config.admission_checks == ()
    assert read.config.cluster_queues[0].admission_checks == ()
    assert {(i.object, i.path) for i in read.ignored} >= {
        ("AdmissionCheck dws", "spec.controllerName"),
        ("ClusterQueue train", "spec.admissionChecks"),
    }


QUEUES = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: h100}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: train}
spec:
  admissionChecks: [dws]
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 64}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {name: dws}
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
  parameters: {apiGroup: kueue.x-k8s.io, kind: ProvisioningRequestConfig, name: dws-config}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ProvisioningRequestConfig
metadata: {name: dws-config}
spec:
  provisioningClassName: queued-provisioning.gke.io
  parameters: {maxRunDurationSeconds: "7200"}
"""


def _rebuilt(
    s: Scheduler, nodes: list[Node], jobs: list[Job], at: float, cfg: QueueConfig
) -> Scheduler:
    """A new Scheduler given what an adapter keeps across a restart: nodes, requests, each
    pending job's check record, each running job's placements and booking."""
    kept = s.provisioning_state()
    records = {rec.job.id: rec for rec in kept.records}
    t = Scheduler(nodes, cfg)
    t.restore_provisioning(kept.requests)
    for r in s.running():
        t.restore(kept.submitted.get(r.job.id, r.job), r.placements, r.start_s, r.flavor)
        if r.job.id in kept.bookings:
            t.restore_booking(r.job.id, kept.bookings[r.job.id])
    for j in jobs:
        if j.id not in {r.job.id for r in s.running()}:
            t.submit(j, at)
            rec = records.get(j.id)
            if rec is not None:
                t.restore_check(
                    j.id,
                    rec.state,
                    request=rec.request,
                    flavor=rec.flavor,
                    attempts=rec.attempts,
                    made=kept.made.get(j.id, 0),
                    retry_at_s=rec.retry_at_s,
                    message=rec.message,
                )
    return t


def test_requests_checks_and_bookings_are_taken_back_after_a_restart() -> None:
    jobs = [gang("a"), gang("b"), gang("c")]
    cfg = config(quota_gpus=48, retry=RetryStrategy(2, 60.0, 100.0))
    s = Scheduler([], cfg)
    for j in jobs:
        s.submit(j, 0.0)
    out = s.cycle(0.0)
    ra, rb, rc = sorted(out.provision, key=lambda r: r.name)
    nodes = [
        node(
            n,
            gpu=8,
            model="H100",
            labels={"pool": "h100", REQUEST_LABEL: ra.node_label},
            taints=(Taint(REQUEST_LABEL, ra.node_label),),
        )
        for n in ("a-0", "a-1")
    ]
    for nd in nodes:
        s.add_node(nd)
    s.provisioning_provisioned(ra.key, [n.name for n in nodes], 100.0)
    s.provisioning_failed(rc.key, "stock-out", 100.0)
    s.cycle(400.0)  # a starts on its booking; c backs off; b waits for its request
    t = _rebuilt(s, nodes, jobs, 400.0, cfg)
    for sched in (s, t):
        assert sched.usage("train")[("h100", Resource.GPU_MILLI)] == 32_000  # a + b
        assert sched.run_limit_s(JobId("a")) == pytest.approx(6900.0)
        assert {p.job.id: p.reason.message if p.reason else "" for p in sched.pending()}.keys() == {
            "b",
            "c",
        }
    # what follows is the same either way: c retries under its next name, a's end frees
    # its request, b starts when its request is provisioned
    for sched in (s, t):
        assert [r.name for r in sched.cycle(500.0).provision] == ["c-2"]
        sched.finished(JobId("a"), 600.0)
        assert sched.cycle(600.0).deprovision == [ra.key]
        sched.provisioning_provisioned(rb.key, cloud_nodes(sched, rb), 700.0)
        (bind,) = sched.cycle(700.0).binds
        assert bind.job == "b"
