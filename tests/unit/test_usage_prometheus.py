"""The Prometheus reader's translation of DCGM and HAMi series, its errors, and the exporter's
format (the real server is exercised in tests/e2e/test_measured_prometheus.py)."""

from __future__ import annotations

import httpx
import pytest

from gpupool.core import AdapterError, ConfigError, NodeName
from gpupool.usage.dcgm import CardMetrics, render
from gpupool.usage.prometheus import (
    PrometheusReader,
    PrometheusSettings,
    inventory_resolver,
    to_pod_samples,
    to_samples,
)

N1 = NodeName("n1")
RESOLVE = inventory_resolver(
    [(N1, 0, "GPU-aaa"), (N1, 1, "GPU-bbb"), (N1, 2, "")], hostnames={"host-1.example": N1}
)
S = PrometheusSettings(url="http://prom:9090")


def series(name: str, value: float, t: float = 100.0, **labels: str) -> dict[str, object]:
    return {"metric": {"__name__": name, **labels}, "values": [[t, str(value)]]}


def test_dcgm_fields_become_one_sample_per_card_and_time() -> None:
    out = to_samples(
        [
            series("DCGM_FI_DEV_GPU_UTIL", 37, UUID="GPU-aaa", gpu="0", Hostname="x"),
            series("DCGM_FI_DEV_FB_USED", 1200, UUID="GPU-aaa", gpu="0", Hostname="x"),
            series("DCGM_FI_DEV_FB_FREE", 39000, UUID="GPU-aaa", gpu="0", Hostname="x"),
            # no UUID known: host name (newer exporters' lower-case label) and index
            series("DCGM_FI_DEV_GPU_UTIL", 80, gpu="2", hostname="host-1.example"),
            series("DCGM_FI_DEV_GPU_UTIL", 99, gpu="0", Hostname="someone-else"),
        ],
        S,
        RESOLVE,
    )
    by = {(s.node, s.gpu): s for s in out}
    assert set(by) == {(N1, 0), (N1, 2)}
    assert (by[(N1, 0)].util_pct, by[(N1, 0)].used_mib, by[(N1, 0)].free_mib) == (37, 1200, 39000)
    assert by[(N1, 2)].util_pct == 80 and by[(N1, 2)].used_mib is None


def test_mig_instances_weigh_by_their_slices_where_gpu_util_reads_zero() -> None:
    out = to_samples(
        [
            series("DCGM_FI_DEV_GPU_UTIL", 0, UUID="GPU-aaa", gpu="0"),
            series(
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                0.9,
                UUID="GPU-aaa",
                gpu="0",
                GPU_I_ID="1",
                GPU_I_PROFILE="3g.40gb",
            ),
            series(
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                0.5,
                UUID="GPU-aaa",
                gpu="0",
                GPU_I_ID="2",
                GPU_I_PROFILE="1g.10gb",
            ),
            series("DCGM_FI_DEV_FB_USED", 30000, UUID="GPU-aaa", gpu="0", GPU_I_ID="1"),
            series("DCGM_FI_DEV_FB_USED", 5000, UUID="GPU-aaa", gpu="0", GPU_I_ID="2"),
        ],
        S,
        RESOLVE,
    )
    [s] = out
    assert s.util_pct == pytest.approx(90 * 3 / 7 + 50 * 1 / 7)
    assert s.used_mib == 35000


def test_hami_container_metrics_stand_in_only_where_dcgm_is_absent() -> None:
    out = to_samples(
        [
            series(
                "hami_container_device_utilization_ratio",
                20,
                device_uuid="GPU-bbb",
                pod="a",
                namespace="x",
                container="c",
                vdevice_index="0",
            ),
            series(
                "hami_container_device_utilization_ratio",
                15,
                device_uuid="GPU-bbb",
                pod="b",
                namespace="x",
                container="c",
                vdevice_index="0",
            ),
            series(
                "hami_vgpu_memory_used_bytes",
                2 * 1048576 * 1024,
                device_uuid="GPU-bbb",
                pod="a",
                namespace="x",
                container="c",
                vdevice_index="0",
            ),
            series("hami_container_device_utilization_ratio", 50, device_uuid="GPU-aaa", pod="c"),
            series("DCGM_FI_DEV_GPU_UTIL", 10, UUID="GPU-aaa", gpu="0", t=99.0),
        ],
        S,
        RESOLVE,
    )
    by = {(s.node, s.gpu): s for s in out}
    assert by[(N1, 1)].util_pct == 35 and by[(N1, 1)].used_mib == 2048
    assert [s.util_pct for s in out if s.gpu == 0] == [10]  # DCGM's card reading wins


def test_hami_monitor_metrics_before_the_hami_prefix_are_read_the_newer_names_win() -> None:
    """HAMi's vGPUmonitor (cmd/vGPUmonitor/metrics.go) served per-container
    ``Device_utilization_desc_of_container`` and ``vGPU_device_memory_usage_in_bytes``,
    labelled podnamespace, podname, ctrname, vdeviceid and deviceuuid, before the ``hami_``
    names; a card served under both generations counts once."""
    old = {"podnamespace": "x", "ctrname": "c", "vdeviceid": "0"}
    out = to_samples(
        [
            series(
                "Device_utilization_desc_of_container", 30, deviceuuid="GPU-bbb", podname="a", **old
            ),
            series(
                "Device_utilization_desc_of_container", 25, deviceuuid="GPU-bbb", podname="b", **old
            ),
            series(
                "vGPU_device_memory_usage_in_bytes",
                3 * 1048576 * 1024,
                deviceuuid="GPU-bbb",
                podname="a",
                **old,
            ),
            # card 0 under both generations (a monitor mid-upgrade): the hami_ reading alone
            series(
                "Device_utilization_desc_of_container", 70, deviceuuid="GPU-aaa", podname="c", **old
            ),
            series("hami_container_device_utilization_ratio", 40, device_uuid="GPU-aaa", pod="c"),
        ],
        S,
        RESOLVE,
    )
    by = {(s.node, s.gpu): s for s in out}
    assert by[(N1, 1)].util_pct == 55 and by[(N1, 1)].used_mib == 3072
    assert [s.util_pct for s in out if s.gpu == 0] == [40]


def reader(handler: object) -> PrometheusReader:
    return PrometheusReader(S, httpx.Client(transport=httpx.MockTransport(handler)))  # type: ignore[arg-type]


def test_one_query_per_read_over_all_metrics_with_a_range() -> None:
    seen: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req.url.params["query"])
        assert req.url.path == "/api/v1/query"
        return httpx.Response(
            200,
            json={
                "status": "success",
                "data": {
                    "resultType": "matrix",
                    "result": [series("DCGM_FI_DEV_GPU_UTIL", 5, UUID="GPU-aaa", gpu="0")],
                },
            },
        )

    r = reader(handler)
    assert len(r.read(RESOLVE)) == 1
    assert seen == [
        '{__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_GR_ENGINE_ACTIVE|'
        "DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE|"
        "hami_container_device_utilization_ratio|hami_vgpu_memory_used_bytes|"
        'Device_utilization_desc_of_container|vGPU_device_memory_usage_in_bytes"'
        "}[60s]"
    ]


@pytest.mark.parametrize(
    "response,message",
    [
        (httpx.Response(400, json={"status": "error", "error": "parse error"}), "HTTP 400: parse"),
        (httpx.Response(200, text="<html>"), "not JSON"),
        (
            httpx.Response(
                200, json={"status": "success", "data": {"resultType": "scalar", "result": []}}
            ),
            "scalar",
        ),
    ],
)
def test_bad_answers_are_adapter_errors_saying_what_came(
    response: httpx.Response, message: str
) -> None:
    with pytest.raises(AdapterError, match=message):
        reader(lambda req: response).read(RESOLVE)


def test_unreachable_is_an_adapter_error_with_the_cause() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    with pytest.raises(AdapterError, match="unreachable: ConnectError") as info:
        reader(handler).read(RESOLVE)
    assert isinstance(info.value.__cause__, httpx.ConnectError)


@pytest.mark.parametrize(
    "field,value", [("url", "prom:9090"), ("lookback_s", 0), ("gpu_label", "bad label")]
)
def test_bad_settings_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        PrometheusSettings(**{"url": "http://p:9090", field: value}).validate()  # type: ignore[arg-type]


def test_exporter_page_has_dcgm_names_labels_and_units() -> None:
    text = render("n1", [CardMetrics(0, "GPU-aaa", "A100", 42.4, 1000, 39960)])
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text
    labels = 'gpu="0",UUID="GPU-aaa",device="nvidia0",modelName="A100",Hostname="n1"'
    assert f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 42\n" in text
    assert f"DCGM_FI_DEV_FB_USED{{{labels}}} 1000\n" in text
    assert f"DCGM_FI_DEV_FB_FREE{{{labels}}} 39960\n" in text
    assert f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} 0.424000\n" in text
    assert 'hostname="n1"' in render("n1", [CardMetrics(0, "u", "m", 0, 0, 0)], "hostname")


def test_hami_series_become_each_pods_own_use_of_its_card() -> None:
    """Per pod and card: its containers summed, the pod named ``namespace/name``; HAMi's older
    names (podnamespace, podname, deviceuuid) where the newer ones do not name the pod."""
    old = {"podnamespace": "x", "ctrname": "c", "vdeviceid": "0"}
    hami = "hami_container_device_utilization_ratio"
    out = to_pod_samples(
        [
            series(hami, 20, device_uuid="GPU-bbb", namespace="x", pod="a", container="c1"),
            series(hami, 15, device_uuid="GPU-bbb", namespace="x", pod="a", container="c2"),
            series(hami, 5, device_uuid="GPU-bbb", namespace="x", pod="b", container="c1"),
            series(hami, 9, device_uuid="GPU-zzz", namespace="x", pod="c"),  # not our card
            series(
                "hami_vgpu_memory_used_bytes",
                3 * 1048576,
                device_uuid="GPU-bbb",
                namespace="x",
                pod="a",
                container="c1",
            ),
            series(
                "hami_vgpu_memory_used_bytes",
                1048576,
                device_uuid="GPU-bbb",
                namespace="x",
                pod="a",
                container="c2",
            ),
            # memory of a pod with no compute series of its own
            series("hami_vgpu_memory_used_bytes", 2 * 1048576, device_uuid="GPU-bbb", pod="e"),
            # pod a again under the older names (a monitor mid-upgrade): the newer names win
            series(
                "Device_utilization_desc_of_container", 70, deviceuuid="GPU-bbb", podname="a", **old
            ),
            series(
                "Device_utilization_desc_of_container", 30, deviceuuid="GPU-aaa", podname="d", **old
            ),
        ],
        S,
        RESOLVE,
    )
    # memory, bytes summed over the pod's containers, in MiB; None where not read
    assert [(p.gpu, p.pod, p.util_pct, p.used_mib) for p in out] == [
        (0, "x/d", 30.0, None),
        (1, "e", None, 2.0),
        (1, "x/a", 35.0, 4.0),
        (1, "x/b", 5.0, None),
    ]


def test_the_feed_teaches_each_pods_workload_from_its_own_series() -> None:
    from gpupool.core.model import GpuShare, JobId, Placement
    from gpupool.core.usage import LoadSettings
    from gpupool.usage.feed import MeasuredUse
    from gpupool.usage.prometheus import PodSample
    from tests.builders import job, share

    feed = MeasuredUse(reader(lambda r: httpx.Response(500)), LoadSettings(settle_s=30.0))
    task = next(job("ft", gpu=share(500, 8192)).tasks())
    feed.model.workloads.expected_of(task)
    feed.model.placed(Placement(task.id, JobId("ft"), N1, 0, 0, (GpuShare(1, 500, 8192),)), 0.0)
    pods = [PodSample(N1, 1, "x/ft-0", 30.0 + 15 * i, 90.0) for i in range(3)]
    pods.append(PodSample(N1, 1, "x/unknown", 30.0, 5.0))  # a pod the adapter does not know
    feed.take([], 80.0, pods=pods, task_of={"x/ft-0": task.id}.get)
    assert feed.model.workloads.expected_of(next(job("ft2", gpu=share(500, 8192)).tasks())) == 900.0
