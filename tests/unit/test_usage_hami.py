"""The virtual cluster's HAMi monitor page (``gpupool.usage.hami``), parsed back with
prometheus_client's parser; the split of a card's use among its holders; what serve names
each pod; the reader's side of bad and missing per-pod series."""

from __future__ import annotations

import random
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.app.exporter import (
    InventoryCard,
    RunningJob,
    card_metrics,
    container_metrics,
    pod_name,
    pod_tasks,
)
from gpupool.core.model import GpuShare, JobId, NodeName, Placement, TaskId
from gpupool.usage.exposition import go_float
from gpupool.usage.feed import MeasuredUse, PodTasks
from gpupool.usage.hami import ContainerMetrics, render
from gpupool.usage.profile import UseProfile, task_samples
from gpupool.usage.prometheus import (
    PodRead,
    PodSample,
    PrometheusReader,
    PrometheusSettings,
    inventory_resolver,
    to_pod_samples,
)

UUID = "GPU-4a5c1d52-7f0e-4bb3-93b8-0c1f3b7e2a61"  # 40 characters, as NVIDIA's are
N1 = NodeName("n1")
MIB = 1048576


def containers() -> list[ContainerMetrics]:
    return [
        ContainerMetrics("team-a", "ft-0", "main", 0, UUID, 91, 10 * 1024 * MIB, 20 * 1024 * MIB),
        ContainerMetrics("team-a", "ft-0", "side", 0, UUID, 0, 512 * MIB, 1024 * MIB),
        ContainerMetrics("team-b", 'nb "x"', "main", 1, UUID + "-extra", 9, 300 * MIB, 8 * MIB),
    ]


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_the_page_has_hamis_names_labels_types_and_units() -> None:
    got = families(render(containers()))
    assert sorted(got) == [
        "hami_container_device_memory_bytes",
        "hami_container_device_utilization_ratio",
        "hami_vgpu_memory_limit_bytes",
        "hami_vgpu_memory_used_bytes",
    ]
    for f in got.values():
        assert f.type == "gauge"
        for s in f.samples:
            assert set(s.labels) == {
                "namespace",
                "pod",
                "container",
                "vdevice_index",
                "device_uuid",
                "zone",
            }
            assert s.labels["zone"] == "vGPU"
            assert len(s.labels["device_uuid"]) <= 40  # the monitor cuts UUIDs at 40
    util = {
        (s.labels["pod"], s.labels["container"]): s.value
        for s in got["hami_container_device_utilization_ratio"].samples
    }
    assert util == {("ft-0", "main"): 91, ("ft-0", "side"): 0, ('nb "x"', "main"): 9}
    used = {s.labels["pod"]: s.value for s in got["hami_vgpu_memory_used_bytes"].samples}
    assert used['nb "x"'] == 300 * MIB  # bytes, the label's quote escaped and read back
    limit = got["hami_vgpu_memory_limit_bytes"].samples
    assert [s.value for s in limit if s.labels["container"] == "side"] == [1024 * MIB]
    nb = [s for s in limit if s.labels["namespace"] == "team-b"]
    assert nb[0].labels["vdevice_index"] == "1" and nb[0].labels["device_uuid"] == UUID


def test_the_text_is_written_as_hamis_go_client_writes_it() -> None:
    """Families by name, labels by name, Go's shortest %g values."""
    lines = render(containers()[:1]).splitlines()
    assert lines[:3] == [
        "# HELP hami_container_device_memory_bytes Container device memory usage in bytes",
        "# TYPE hami_container_device_memory_bytes gauge",
        'hami_container_device_memory_bytes{container="main",device_uuid="' + UUID + '",'
        'namespace="team-a",pod="ft-0",vdevice_index="0",zone="vGPU"} 1.073741824e+10',
    ]
    assert lines[5].endswith("} 91")
    assert render([]) == ""


@pytest.mark.parametrize(
    "value,text",
    [
        (0, "0"),
        (1, "1"),
        (91, "91"),
        (0.5, "0.5"),
        (123456, "123456"),
        (1048576, "1.048576e+06"),
        (10737418240, "1.073741824e+10"),
        (1e6, "1e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (-2.5, "-2.5"),
        (float("inf"), "+Inf"),
        (float("nan"), "NaN"),
    ],
)
def test_values_are_formatted_as_gos_strconv(value: float, text: str) -> None:
    assert go_float(value) == text


def test_legacy_names_come_with_their_own_labels_and_the_reader_takes_the_newer() -> None:
    text = render(containers(), names="both")
    got = families(text)
    old = got["Device_utilization_desc_of_container"]
    assert {"vGPU_device_memory_usage_in_bytes", "vGPU_device_memory_limit_in_bytes"} <= set(got)
    assert set(old.samples[0].labels) == {
        "podnamespace",
        "podname",
        "ctrname",
        "vdeviceid",
        "deviceuuid",
        "zone",
    }
    assert "Device_utilization_desc_of_container" not in render(containers())
    # the reader, on either page as Prometheus would hand it back, gets the same pods
    resolve = inventory_resolver([(N1, 0, UUID)])
    new_only = to_pod_samples(
        as_matrix(render(containers())), PrometheusSettings("http://p"), resolve
    )
    both = to_pod_samples(as_matrix(text), PrometheusSettings("http://p"), resolve)
    assert both == new_only
    assert [(p.pod, p.util_pct) for p in new_only] == [("team-a/ft-0", 91), ('team-b/nb "x"', 9)]
    # HAMi before 2.9: the older names alone, read the same
    legacy = render(containers(), names="legacy")
    assert not any(name.startswith("hami_") for name in families(legacy))
    assert to_pod_samples(as_matrix(legacy), PrometheusSettings("http://p"), resolve) == new_only
    with pytest.raises(ValueError, match="names='old' must be one of current, both, legacy"):
        render(containers(), names="old")


def as_matrix(text: str, t: float = 100.0) -> list[dict[str, Any]]:
    """The page as Prometheus's HTTP API returns it, one sample a series."""
    return [
        {"metric": {"__name__": s.name, **s.labels}, "values": [[t, go_float(s.value)]]}
        for f in text_string_to_metric_families(text)
        for s in f.samples
    ]


def placement(task: str, node: str, shares: tuple[tuple[int, int, int], ...]) -> Placement:
    job = task.rsplit("/", 1)[0]
    return Placement(
        TaskId(task),
        JobId(job),
        NodeName(node),
        1000,
        1024,
        tuple(GpuShare(i, m, mib) for i, m, mib in shares),
    )


def test_the_pods_of_a_card_add_up_to_what_dcgm_reports_of_it() -> None:
    rng = random.Random(5)
    cards = [
        InventoryCard(NodeName(f"n{n}"), g, f"GPU-n{n}-{g}", "A100", 40960)
        for n in range(3)
        for g in range(2)
    ]
    for _ in range(200):
        jobs = []
        for j in range(rng.randint(1, 6)):
            shares = tuple(
                (g, rng.choice([100, 250, 500, 700, 1000]), rng.choice([1024, 10240, 30000]))
                for g in rng.sample(range(2), rng.randint(1, 2))
            )
            p = placement(f"ns/j{j}/main-0", f"n{rng.randrange(3)}", shares)
            prof = UseProfile(rng.uniform(0, 300), rng.uniform(0, 100))
            jobs.append(RunningJob("ns", (p,), prof))
        dcgm = {(n, c.gpu): c for n, cs in card_metrics(cards, jobs).items() for c in cs}
        pods = container_metrics(cards, jobs)
        for (node, gpu), c in dcgm.items():
            mine = [x for x in pods.get(node, []) if x.device_uuid == f"GPU-{node}-{gpu}"]
            assert sum(x.util_pct for x in mine) == round(c.util_pct)
            assert sum(x.memory_used_bytes for x in mine) == c.used_mib * MIB
            assert all(0 <= x.util_pct <= 100 for x in mine)


def test_a_hot_cards_time_is_split_by_demand() -> None:
    cards = [InventoryCard(N1, 0, "GPU-n1-0", "A100", 81920)]
    ft = RunningJob(
        "research",
        (placement("research/ft/main-0", "n1", ((0, 500, 20480),)),),
        UseProfile(190, 50),
    )
    nb = RunningJob(
        "research",
        (placement("research/nb/main-0", "n1", ((0, 300, 20480),)),),
        UseProfile(30, 100),
    )
    [c] = card_metrics(cards, [ft, nb])["n1"]
    assert c.util_pct == 100 and c.used_mib == 30720
    got = {
        (x.pod, x.container): (x.util_pct, x.memory_used_bytes, x.memory_limit_bytes)
        for x in container_metrics(cards, [ft, nb])["n1"]
    }
    assert got == {
        ("ft-main-0", "main"): (91, 10240 * MIB, 20480 * MIB),
        ("nb-main-0", "main"): (9, 20480 * MIB, 20480 * MIB),
    }


def test_sim_s_per_pod_samples_are_serve_s_hami_pages() -> None:
    """``task_samples`` (what ``sim`` and ``bench measured-use`` hand the load model per pod)
    says of each pod what serve's HAMi page says of its container."""
    cards = [
        InventoryCard(N1, 0, "GPU-n1-0", "A100", 81920),
        InventoryCard(N1, 1, "GPU-n1-1", "A100", 81920),
    ]
    ft = placement("research/ft/main-0", "n1", ((0, 500, 20480),))
    nb = placement("research/nb/main-0", "n1", ((0, 300, 20480), (1, 300, 20480)))
    profiles = {"research/ft": UseProfile(190, 50), "research/nb": UseProfile(30, 100)}
    jobs = [RunningJob("research", (p,), profiles[str(p.job)]) for p in (ft, nb)]
    page = {
        (x.pod, x.device_uuid): (x.util_pct, x.memory_used_bytes)
        for x in container_metrics(cards, jobs)["n1"]
    }
    got = task_samples([ft, nb], profiles, {(N1, 0): 81920, (N1, 1): 81920}, 60.0)
    assert {(str(s.task), s.gpu): (s.util_pct, s.used_mib * MIB) for s in got} == {
        (f"research/{pod.split('-')[0]}/main-0", int(uuid[-1])): v
        for (pod, uuid), v in page.items()
    }
    assert {(str(s.task), s.gpu, s.time_s) for s in got} == {
        ("research/ft/main-0", 0, 60.0),
        ("research/nb/main-0", 0, 60.0),
        ("research/nb/main-0", 1, 60.0),
    }


def test_serve_names_each_task_a_pod_and_finds_the_task_again() -> None:
    assert pod_name("research", "research/ft/main-3") == pod_name("research", "research/ft/main-3")
    name = pod_name("research", "research/ft/main-3")
    assert (name.namespace, name.pod, name.container, name.key) == (
        "research",
        "ft-main-3",
        "main",
        "research/ft-main-3",
    )
    whole = placement("research/big/main-0", "n1", ((0, 1000, 81920), (1, 1000, 81920)))
    part = placement("research/ft/main-0", "n1", ((2, 500, 10240),))
    tasks = pod_tasks([RunningJob("research", (whole, part), UseProfile())])
    assert tasks.task_of("research/ft-main-0") == TaskId("research/ft/main-0")
    assert tasks.task_of("research/big-main-0") == TaskId("research/big/main-0")
    assert tasks.task_of("other/ft-main-0") is None
    assert tasks.held == {"research/ft-main-0"}  # slices only


def test_bad_per_pod_values_are_skipped_and_counted() -> None:
    resolve = inventory_resolver([(N1, 0, UUID)])
    hami = "hami_container_device_utilization_ratio"
    series = [
        {
            "metric": {
                "__name__": hami,
                "namespace": "x",
                "pod": "a",
                "container": "c1",
                "device_uuid": UUID,
            },
            "values": [[10, "20"], [11, "NaN"], [12, "-3"], [13, "abc"]],
        },
        {
            "metric": {
                "__name__": hami,
                "namespace": "x",
                "pod": "a",
                "container": "c2",
                "device_uuid": UUID,
            },
            "values": [[10, "5"], [11, "5"]],
        },
        {"metric": {"__name__": hami, "device_uuid": UUID}, "values": [[10, "7"]]},  # no pod
    ]
    skipped: dict[str, int] = {}
    got = to_pod_samples(series, PrometheusSettings("http://p"), resolve, skipped)
    # at t=11 one container's value is bad: the pod's sum there is not taken at all
    assert [(p.pod, p.time_s, p.util_pct) for p in got] == [("x/a", 10.0, 25.0)]
    assert skipped == {"bad-value": 3, "no-pod-label": 1}


def test_the_feed_says_which_pods_learn_from_their_cards_only() -> None:
    feed = MeasuredUse(PrometheusReader(PrometheusSettings("http://p")))
    read = PodRead(
        [PodSample(N1, 0, "x/a", 10.0, 50.0), PodSample(N1, 0, "x/other", 10.0, 5.0)],
        {"bad-value": 2},
    )
    assert (
        feed.take(
            [], 20.0, pods=read, task_of=PodTasks({"x/a": TaskId("x/a/main-0")}.get, {"x/a", "x/b"})
        )
        == 0
    )
    assert feed.pod_series == {"own": 1, "unknown-pod": 1, "card": 1, "bad-value": 2}
    assert feed.pods_reason.startswith("1 of 2 slice pods have no per-pod series")
    assert (
        "(x/b)" in feed.pods_reason and "2 per-pod samples skipped (bad-value)" in feed.pods_reason
    )
    assert feed.reads_ok == 1 and not feed.model.source_down
    feed.take(
        [],
        30.0,
        pods=PodRead([PodSample(N1, 0, "x/a", 25.0, 50.0), PodSample(N1, 0, "x/b", 25.0, 5.0)], {}),
        task_of=PodTasks(
            {"x/a": TaskId("x/a/main-0"), "x/b": TaskId("x/b/main-0")}.get, {"x/a", "x/b"}
        ),
    )
    assert feed.pods_reason == "" and feed.pod_series["card"] == 0


def test_a_uuid_cut_at_40_characters_finds_its_card() -> None:
    long = UUID + "-extra"
    resolve = inventory_resolver([(N1, 3, long)])
    assert resolve("", "", long[:40]) == (N1, 3)
    assert resolve("", "", long) == (N1, 3)
