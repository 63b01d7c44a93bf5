"""``gpupool k8s --prometheus``: the controller places by measured use, and an unreachable
Prometheus degrades to requests with a reason and a metric (fake API client)."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from gpupool.core import ConfigError, NodeName
from gpupool.core.usage import CardSample
from gpupool.k8s.cli import add_measured_arguments
from gpupool.k8s.controller import Controller, Options
from gpupool.k8s.extender import metrics_text
from gpupool.k8s.main import default_config, measured_options
from gpupool.k8s.measured import measured_loop, pod_tasks, resolver
from gpupool.usage.prometheus import PodSample, PrometheusSettings
from tests.k8s.kit import pod_body
from tests.k8s.test_controller_fake import FakeKube, node_obj


def controller(url: str = "http://127.0.0.1:9") -> Controller:
    opt = Options(
        leader_elect=False,
        prometheus=PrometheusSettings(url=url, timeout_s=0.5),
        measured_interval_s=0.05,
    )
    ctl = Controller(FakeKube(), default_config(), opt)  # type: ignore[arg-type]
    ctl.node_informer.cache["n1"] = node_obj("n1", 2)
    ctl.rebuild()
    return ctl


def test_the_scheduler_uses_the_measured_profile_and_the_feed_s_model() -> None:
    ctl = controller()
    assert ctl.sched is not None and ctl.measured is not None
    assert ctl.sched.profile.name == "measured"
    assert ctl.sched.measured_use is ctl.measured.model
    ctl.rebuild()  # a new leader term: a new scheduler, the same model
    assert ctl.sched.measured_use is ctl.measured.model
    # HAMi's register annotation gives the UUIDs the DCGM series are matched by
    assert resolver(ctl)("", "", "GPU-n1-1") == (NodeName("n1"), 1)
    assert resolver(ctl)("n1", "0", "") == (NodeName("n1"), 0)


def test_a_slice_pod_goes_to_the_cool_card() -> None:
    ctl = controller()
    assert ctl.measured is not None
    now = ctl.clock()
    ctl.measured.take(
        [
            CardSample(NodeName("n1"), 0, now - 1, 97.0, 20000, 20960),
            CardSample(NodeName("n1"), 1, now - 1, 5.0, 30000, 10960),
        ],
        now,
    )

    async def body() -> None:
        pod = pod_body(
            "nb",
            ns="team-a",
            limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000, "nvidia.com/gpucores": 30},
        )
        pod["metadata"]["resourceVersion"] = "1"
        ctl.pod_informer.cache["team-a/nb"] = pod
        ctl._on_pod("ADDED", pod, None)
        ctl.cycle()
        await asyncio.sleep(0)

    asyncio.run(body())
    assert ctl.sched is not None
    [held] = ctl.sched.placements_on(NodeName("n1"))
    assert held.shares[0].index == 1  # card 0 is 97 % busy; card 1 has 10960 MiB free


def test_hami_per_pod_series_teach_the_bound_pods_workload() -> None:
    """A pod placed by the controller is known by its ``namespace/name`` to HAMi's per-pod
    series; its own readings teach its workload (``app`` label), though its card is shared."""
    ctl = controller()
    assert ctl.measured is not None
    now = ctl.clock()
    ctl.measured.take([CardSample(NodeName("n1"), g, now - 1, 5.0, 0, 40960) for g in (0, 1)], now)

    async def body() -> None:
        for name in ("ft-a", "nb-a"):
            pod = pod_body(
                name,
                ns="team-a",
                limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000, "nvidia.com/gpucores": 50},
            )
            pod["metadata"]["labels"] = {"app": name.split("-")[0]}
            pod["metadata"]["resourceVersion"] = "1"
            ctl.pod_informer.cache[f"team-a/{name}"] = pod
            ctl._on_pod("ADDED", pod, None)
        ctl.cycle()
        await asyncio.sleep(0)

    asyncio.run(body())
    assert ctl.sched is not None
    held = {p.task: p for p in ctl.sched.placements_on(NodeName("n1"))}
    assert len(held) == 2
    ft = pod_tasks(ctl).task_of("team-a/ft-a")
    assert ft in held and pod_tasks(ctl).task_of("team-a/gone") is None
    card = held[ft].shares[0].index
    later = ctl.clock() + 60.0
    pods = [PodSample(NodeName("n1"), card, "team-a/ft-a", later + 15 * i, 95.0) for i in range(3)]
    ctl.measured.take([], later + 45, pods=pods, task_of=pod_tasks(ctl))
    learned = ctl.measured.model.workloads
    assert learned.expected("team-a/ft", 500) == 950.0  # 95 % of a card for 500 asked
    assert learned.expected("team-a/nb", 500) == 500.0  # no series of its own: the request
    # both pods hold a slice: the one without a series of its own is counted and named
    assert pod_tasks(ctl).held == {"team-a/ft-a", "team-a/nb-a"}
    assert ctl.measured.pod_series == {"own": 1, "unknown-pod": 0, "card": 1}
    assert "1 of 2 slice pods have no per-pod series" in ctl.measured.pods_reason
    assert "(team-a/nb-a)" in ctl.measured.pods_reason
    text = metrics_text(ctl)
    assert 'gpupool_measured_pod_series{outcome="card"} 1.0' in text
    assert 'gpupool_measured_pod_series{outcome="own"} 1.0' in text


def test_whole_gpu_pods_are_not_counted_among_the_slice_pods_without_a_series() -> None:
    """A pod holding whole cards has its cards alone: its workload learns from them, so a
    read without a per-pod series of it names no missing pod."""
    ctl = controller()
    assert ctl.measured is not None

    async def body() -> None:
        pod = pod_body("train", ns="team-a", limits={"nvidia.com/gpu": 1})
        pod["metadata"]["resourceVersion"] = "1"
        ctl.pod_informer.cache["team-a/train"] = pod
        ctl._on_pod("ADDED", pod, None)
        ctl.cycle()
        await asyncio.sleep(0)

    asyncio.run(body())
    tasks = pod_tasks(ctl)
    assert tasks.task_of("team-a/train") is not None and tasks.held == set()
    ctl.measured.take([], ctl.clock(), pods=[], task_of=tasks)
    assert ctl.measured.pod_series["card"] == 0 and ctl.measured.pods_reason == ""


def test_unreachable_prometheus_places_by_requests_with_a_reason_and_a_metric() -> None:
    ctl = controller("http://127.0.0.1:9")  # the discard port: nothing listens

    async def body() -> None:
        assert ctl.measured is not None
        task = asyncio.create_task(measured_loop(ctl, ctl.measured))
        for _ in range(100):
            await asyncio.sleep(0.05)
            if ctl.measured.reads_failed:
                break
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(body())
    assert ctl.measured is not None and ctl.measured.reads_failed >= 1
    assert ctl.sched is not None
    view = ctl.measured.model.view(ctl.sched.node_table(), ctl.clock())
    assert "unreachable" in view.reasons[NodeName("n1")]
    text = metrics_text(ctl)
    assert "gpupool_measured_source_up 0.0" in text
    assert 'gpupool_measured_reads_total{outcome="error"}' in text
    assert 'gpupool_measured_cards{source="requests"} 2.0' in text
    ctl.cycle()  # and scheduling goes on


def args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_measured_arguments(p)
    return p.parse_args(list(argv))


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--prometheus", "prom:9090"], "url='prom:9090' must be an http"),
        (["--prometheus", "http://p:9090", "--measured-interval", "0"], "--measured-interval 0"),
        (["--prometheus", "http://p:9090", "--measured-hot-pct", "150"], "--measured-hot-pct 150"),
        (["--prometheus", "http://p:9090", "--measured-stale-after", "-1"], "stale_after_s=-1"),
    ],
)
def test_bad_measured_flags_name_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        measured_options(args(*argv))


def test_measured_flags_become_options() -> None:
    got = measured_options(
        args(
            "--prometheus",
            "http://p:9090",
            "--measured-interval",
            "10",
            "--prometheus-hostname-label",
            "node",
        )
    )
    assert got["prometheus"].lookback_s == 40 and got["prometheus"].hostname_labels == ("node",)
    assert got["measured_interval_s"] == 10
