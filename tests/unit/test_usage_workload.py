"""core/usage_workload: a new slice is counted at what its workload's slices were measured to
use (learned on cards one slice holds alone), not at a request that is only its floor."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.core import ClusterState, NodeName, place_task
from gpupool.core.affinity import PodMeta
from gpupool.core.model import GpuShare, Placement, Task
from gpupool.core.placement.registry import measured_profile
from gpupool.core.usage import CardSample, LoadModel, LoadSettings, TaskSample
from gpupool.core.usage_workload import MIN_READINGS, WorkloadUse, workload_of
from tests.builders import job, node, share

N1 = NodeName("n1")


def task_of(name: str, milli: int = 500, mib: int = 20_000) -> Task:
    return next(job(name, gpu=share(milli, mib)).tasks())


def on(task: Task, gpu: int, node_name: NodeName = N1) -> Placement:
    req = task.request
    return Placement(
        task.id, task.job, node_name, 1000, 1024, (GpuShare(gpu, req.gpu_milli, req.memory_mib),)
    )


def learned(ratio_pct: float, readings: int = MIN_READINGS) -> WorkloadUse:
    """A workload of 500-milli slices measured at ``ratio_pct`` of a card, alone on card 0."""
    w = WorkloadUse(quantile=0.9, settle_s=30.0)
    first = task_of("ft-1")
    w.expected_of(first)
    w.placed(on(first, 0), 0.0)
    for i in range(readings):
        w.read(N1, 0, 30.0 + 15 * i, ratio_pct)
    return w


def test_a_slice_measured_using_more_than_it_asks_teaches_its_workload() -> None:
    w = learned(95.0)  # 950 milli of a card for a 500-milli request
    assert w.expected_of(task_of("ft-2")) == pytest.approx(950.0)
    # another workload (another request) is still counted at its request
    assert w.expected_of(task_of("nb-1", 300, 8192)) == 300.0


@pytest.mark.parametrize("pct,want", [(20.0, 500.0), (100.0, 1000.0)])
def test_the_estimate_is_never_below_the_request_nor_above_a_card(pct: float, want: float) -> None:
    w = learned(pct)  # a core limit keeps use at or below the request: the request stands
    assert w.expected_of(task_of("ft-2")) == pytest.approx(want)


def test_the_kept_estimate_follows_each_new_reading() -> None:
    # a decision asks twice per slice, so the quantile is kept between readings: a reading
    # must replace it, and a reading of another card must not
    w = learned(60.0)
    assert w.expected_of(task_of("ft-2")) == pytest.approx(600.0)
    assert w.expected_of(task_of("ft-3")) == pytest.approx(600.0)
    for i in range(8):
        w.read(N1, 0, 200.0 + 15 * i, 90.0)
    assert w.expected_of(task_of("ft-4")) == pytest.approx(900.0)
    w.read(N1, 1, 400.0, 10.0)  # nobody alone on card 1: teaches nothing
    assert w.expected_of(task_of("ft-5")) == pytest.approx(900.0)


def test_readings_need_the_slice_alone_settled_and_enough_of_them() -> None:
    assert learned(95.0, readings=MIN_READINGS - 1).expected_of(task_of("ft-2")) == 500.0
    w = WorkloadUse(quantile=0.9, settle_s=30.0)
    a, b = task_of("ft-1"), task_of("nb-1", 300, 8192)
    for t in (a, b):
        w.expected_of(t)
        w.placed(on(t, 0), 0.0)
    for i in range(10):
        w.read(N1, 0, 30.0 + 15 * i, 95.0)  # two holders: nobody's reading
    assert w.expected_of(task_of("ft-2")) == 500.0
    w.released(on(b, 0))
    w.read(N1, 0, 10.0, 95.0)  # alone now, but a sample before it settled does not count
    assert w.expected_of(task_of("ft-2")) == 500.0


def test_a_slice_no_decision_asked_about_holds_its_card_and_teaches_nothing() -> None:
    w = WorkloadUse(quantile=0.9, settle_s=30.0)
    unknown = task_of("ft-1")
    w.placed(on(unknown, 0), 0.0)  # placed while the cycle read no measured load
    for i in range(10):
        w.read(N1, 0, 30.0 + 15 * i, 95.0)
    assert w.expected_of(task_of("ft-2")) == 500.0
    known = task_of("ft-3")
    w.expected_of(known)
    w.placed(on(known, 0), 0.0)
    for i in range(10):
        w.read(N1, 0, 30.0 + 15 * i, 95.0)  # two holders: still nobody's reading
    assert w.expected_of(task_of("ft-2")) == 500.0


def test_a_workload_is_its_app_label_else_its_shape() -> None:
    base = task_of("a")
    labelled = replace(
        base,
        pod_set=replace(
            base.pod_set,
            pod=PodMeta(namespace="lab", labels={"app.kubernetes.io/name": "finetune", "app": "x"}),
        ),
    )
    assert workload_of(labelled) == "lab/finetune"
    app = replace(base, pod_set=replace(base.pod_set, pod=PodMeta(labels={"app": "x"})))
    assert workload_of(app) == "/x"
    assert workload_of(base) == workload_of(task_of("b")) != workload_of(task_of("c", 300))


def samples(gpu: int, pct: float, start: float, n: int = 4) -> list[CardSample]:
    return [CardSample(N1, gpu, start + 15 * i, pct, 20_000, 60_000) for i in range(n)]


def test_the_load_model_counts_a_new_slice_at_its_workloads_use_until_it_shows() -> None:
    s = ClusterState([node("n1", gpu=4)])
    m = LoadModel(LoadSettings(settle_s=15.0, stale_after_s=600))
    first = task_of("ft-1")
    m.workloads.expected_of(first)
    p1 = on(first, 0)
    s.assume(p1)
    m.placed(p1, 0.0)
    m.add(samples(0, 95.0, 15.0) + samples(1, 0.0, 15.0), now_s=60.0)
    second = task_of("ft-2")
    m.workloads.expected_of(second)
    p2 = on(second, 1)
    s.assume(p2)
    m.placed(p2, 61.0)
    view = m.view(s.table, 62.0)
    assert view.milli[s.table.row(N1), 1] == pytest.approx(950.0)  # not its 500 request
    s.forget(p2.task)
    m.released(p2, 70.0)  # what was counted comes off, not the request
    assert m.view(s.table, 71.0).milli[s.table.row(N1), 1] == pytest.approx(0.0)


def test_a_fine_tune_is_kept_off_a_card_its_request_would_call_cool() -> None:
    """Card 0: a fine-tune measured 95 % busy (its workload learned); card 1: a notebook at
    40 %. By its 500-milli request a second fine-tune on card 1 reaches 90 %, hot; by what its
    workload uses it cannot stay cool anywhere shared, so it takes the idle card 2."""
    s = ClusterState([node("n1", gpu=3)])
    m = LoadModel(LoadSettings(settle_s=15.0, stale_after_s=600))
    ft, nb = task_of("ft-1"), task_of("nb-1", 300, 8192)
    for t, g in ((ft, 0), (nb, 1)):
        m.workloads.expected_of(t)
        p = on(t, g)
        s.assume(p)
        m.placed(p, 0.0)
    m.add(samples(0, 95.0, 15.0) + samples(1, 40.0, 15.0) + samples(2, 0.0, 15.0, n=4), now_s=60.0)
    snap = s.snapshot()
    snap.load = m.view(snap.table, 61.0)
    p, _ = place_task(task_of("ft-2"), snap, measured_profile(hot_pct=95))
    assert p is not None and p.shares[0].index == 2
    plain = LoadModel(LoadSettings(settle_s=15.0, stale_after_s=600))  # nothing learned
    for t, g in ((ft, 0), (nb, 1)):
        plain.placed(on(t, g), 0.0)
    plain.add(
        samples(0, 95.0, 15.0) + samples(1, 40.0, 15.0) + samples(2, 0.0, 15.0, n=4), now_s=60.0
    )
    snap2 = s.snapshot()
    snap2.load = plain.view(snap2.table, 61.0)
    p2, _ = place_task(task_of("ft-2"), snap2, measured_profile(hot_pct=95))
    assert p2 is not None and p2.shares[0].index == 1  # by its request: "cool" beside 40 %


def test_a_pods_own_series_teaches_its_workload_on_a_shared_card() -> None:
    """A fine-tune and a notebook share card 0, so no card reading is anyone's alone; HAMi's
    per-pod series (``hami_container_device_utilization_ratio`` by pod and device) say what
    each uses, and each workload learns from its own series."""
    w = WorkloadUse(quantile=0.9, settle_s=30.0)
    ft, nb = task_of("ft-1"), task_of("nb-1", 300, 8192)
    for t in (ft, nb):
        w.expected_of(t)
        w.placed(on(t, 0), 0.0)
    for i in range(MIN_READINGS):
        time = 30.0 + 15 * i
        w.read(N1, 0, time, 100.0)  # the card: both together, nobody's reading
        w.read_task(TaskSample(N1, 0, ft.id, time, 90.0))
        w.read_task(TaskSample(N1, 0, nb.id, time, 6.0))
    assert w.expected_of(task_of("ft-2")) == pytest.approx(900.0)  # 90 % of a card
    assert w.expected_of(task_of("nb-2", 300, 8192)) == 300.0  # 60 of 300: the request floor
    # a pod of another card, or a sample before the pod settled, teaches nothing
    w.read_task(TaskSample(N1, 1, ft.id, 200.0, 10.0))
    w.read_task(TaskSample(N1, 0, task_of("x-1").id, 200.0, 10.0))
    assert w.expected_of(task_of("ft-3")) == pytest.approx(900.0)


def test_a_pod_with_its_own_series_is_not_read_twice_when_it_holds_the_card_alone() -> None:
    w = WorkloadUse(quantile=0.5, settle_s=30.0)
    ft = task_of("ft-1")
    w.expected_of(ft)
    w.placed(on(ft, 0), 0.0)
    for i in range(MIN_READINGS):
        time = 30.0 + 15 * i
        w.read_task(TaskSample(N1, 0, ft.id, time, 60.0))
        # the card shows the pod and work no request accounts for: not the pod's reading
        w.read(N1, 0, time, 100.0)
    assert w.expected_of(task_of("ft-2")) == pytest.approx(600.0)
    # once it left, another pod alone on the card is read from the card again
    w.released(on(ft, 0))
    other = task_of("ft-9")
    w.expected_of(other)
    w.placed(on(other, 0), 100.0)
    for i in range(8):
        w.read(N1, 0, 130.0 + 15 * i, 100.0)
    assert w.expected_of(task_of("ft-3")) == pytest.approx(1000.0)


def test_the_load_model_takes_task_samples_for_its_workloads() -> None:
    m = LoadModel(LoadSettings(settle_s=30.0))
    ft, nb = task_of("ft-1"), task_of("nb-1", 300, 8192)
    for t in (ft, nb):
        m.workloads.expected_of(t)
        m.placed(on(t, 0), 0.0)
    m.add_tasks(
        [TaskSample(N1, 0, ft.id, 30.0 + 15 * i, 95.0) for i in range(MIN_READINGS)]
        + [TaskSample(N1, 0, nb.id, 30.0 + 15 * i, 5.0) for i in range(MIN_READINGS)]
    )
    assert m.workloads.expected_of(task_of("ft-2")) == pytest.approx(950.0)


def test_a_pod_sample_read_again_is_not_a_new_reading() -> None:
    """Each read reaches back over several intervals, so a pod's sample comes again in the
    next reads: one sample seen three times is one reading, not the three a workload needs."""
    w = WorkloadUse(quantile=0.9, settle_s=30.0)
    ft = task_of("ft-1")
    w.expected_of(ft)
    w.placed(on(ft, 0), 0.0)
    for _ in range(MIN_READINGS):
        w.read_task(TaskSample(N1, 0, ft.id, 45.0, 95.0))
    assert w.expected_of(task_of("ft-2")) == 500.0
    for i in range(1, MIN_READINGS):
        w.read_task(TaskSample(N1, 0, ft.id, 45.0 + 15 * i, 95.0))
    assert w.expected_of(task_of("ft-3")) == pytest.approx(950.0)


def test_a_pod_naming_no_namespace_takes_its_jobs() -> None:
    """``gpupool serve``'s pods carry no namespace of their own: their workloads are scoped
    by the job's (its id's ``namespace/``), so two tenants asking alike do not pool."""
    a, b = task_of("team-a/nb-1"), task_of("team-b/nb-1")
    assert workload_of(a) == "team-a/main:500m:20000Mi:1"
    assert workload_of(b) == "team-b/main:500m:20000Mi:1"
    assert workload_of(task_of("nb-1")) == "/main:500m:20000Mi:1"  # an id naming none
    # a pod's own namespace wins over its job's
    own = replace(a, pod_set=replace(a.pod_set, pod=PodMeta(namespace="lab")))
    assert workload_of(own) == "lab/main:500m:20000Mi:1"
    # team-a's fine-tunes measured at 95 % of a card teach team-a, not team-b
    w = WorkloadUse(quantile=0.9, settle_s=30.0)
    w.expected_of(a)
    w.placed(on(a, 0), 0.0)
    for i in range(MIN_READINGS):
        w.read(N1, 0, 30.0 + 15 * i, 95.0)
    assert w.expected_of(task_of("team-a/nb-2")) == pytest.approx(950.0)
    assert w.expected_of(task_of("team-b/nb-2")) == 500.0


def test_serve_jobs_of_two_namespaces_asking_alike_are_two_workloads() -> None:
    """What ``gpupool serve`` submits: a Job document, parsed into tasks whose pods name no
    namespace; each tenant's notebooks are a workload of their own."""
    from gpupool.config.jobs import parse_job
    from gpupool.core.quota import ClusterQueue, LocalQueue, QueueConfig

    config = QueueConfig(
        cluster_queues=(ClusterQueue("q", ()),),
        local_queues=(LocalQueue("nb", "q", "team-a"), LocalQueue("nb", "q", "team-b")),
    )

    def submitted(ns: str) -> Task:
        body = {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "nb-1", "namespace": ns},
            "spec": {
                "queue": "nb",
                "duration": "10m",
                "podSets": [{"name": "main", "count": 1, "gpu": {"milli": 300, "memory": "8Gi"}}],
            },
        }
        return next(parse_job(body, config).job.tasks())

    a, b = submitted("team-a"), submitted("team-b")
    assert a.pod_set.pod.namespace == ""  # nothing on the pod: the job's namespace scopes it
    assert workload_of(a) == "team-a/main:300m:8192Mi:1"
    assert workload_of(b) == "team-b/main:300m:8192Mi:1"
