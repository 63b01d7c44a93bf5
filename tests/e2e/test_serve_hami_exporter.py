"""``gpupool serve``'s virtual cluster as HAMi's monitor: each running pod's use of its card,
scraped by a real Prometheus (Debian's ``prometheus``) and read back through the same
``read_with_pods`` path as ``gpupool k8s``, so each workload learns what its own pods use
however many share a card."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.app import Service
from gpupool.core import NodeName
from gpupool.core.model import JobId, Task
from gpupool.core.usage import LoadSettings
from gpupool.usage.prometheus import PrometheusSettings
from tests.e2e.serve_kit import QUEUES, job_doc, serving
from tests.e2e.test_measured_prometheus import free_port, start_prometheus, stop

pytestmark = pytest.mark.real_component("prometheus")

ONE_CARD = """apiVersion: gpupool.io/v1alpha1
kind: Cluster
metadata: {name: one-card}
nodePools:
- name: a100
  count: 1
  cpu: 128
  memory: 1Ti
  labels: {gpupool.io/flavor: a100}
  taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
  gpus: {model: A100-80GB, count: 1, memory: 80Gi}
"""
NODE = "a100-0"


def shared_card(tmp: Path, port: int) -> Service:
    """One node of one card, shared by a fine-tune asking 500 milli and keeping the card busy
    (190 % of its request) and a notebook asking 300 milli using 30 % of it: the card is hot
    (950 + 90 milli wanted), so the monitor splits its 100 % as 91 and 9."""
    (tmp / "cluster.yaml").write_text(ONE_CARD)
    svc = Service(
        state=tmp / "state.db",
        cluster=tmp / "cluster.yaml",
        queues=QUEUES,
        speed=1.0,
        prometheus=PrometheusSettings(url=f"http://127.0.0.1:{port}", lookback_s=30, timeout_s=2),
        measured=LoadSettings(stale_after_s=60, settle_s=1),
    )
    for name, use, milli in (("ft", "compute=190%", 500), ("nb", "compute=30%", 300)):
        doc = job_doc(name, duration="1h", milli=milli, gpu_memory="20Gi", models=["A100-80GB"])
        doc["metadata"]["annotations"] = {"gpupool.io/actual-use": use}
        svc.plane.submit(doc)
    svc.plane.tick()
    for name in ("ft", "nb"):
        [p] = svc.plane.job(f"research/{name}").placements
        assert (p.node, p.shares[0].index) == (NODE, 0)
    return svc


def task(svc: Service, name: str) -> Task:
    [t] = svc.plane.job(f"research/{name}").request.job.tasks()
    assert t.job == JobId(f"research/{name}")
    return t


def expected(svc: Service, name: str) -> float:
    """What the load model expects a new slice of ``name``'s workload to use, milli."""
    assert svc.measured is not None
    with svc.plane.lock:
        return svc.measured.model.workloads.expected_of(task(svc, name))


def test_each_pods_own_series_teaches_its_workload_on_a_shared_card(tmp_path: Path) -> None:
    port = free_port()
    svc = shared_card(tmp_path, port)
    try:
        exporter = svc.start_exporter("127.0.0.1", free_port())
        page = httpx.get(f"http://{exporter.address}{exporter.hami_path(NODE)}").text
        assert (
            'hami_container_device_utilization_ratio{container="main",'
            'device_uuid="GPU-a100-0-0",namespace="research",pod="ft-main-0",'
            'vdevice_index="0",zone="vGPU"} 91'
        ) in page.splitlines()
        proc, url = start_prometheus(tmp_path, exporter, [NODE], port, jobs=("dcgm", "hami"))
        try:
            assert expected(svc, "ft") == 500  # two pods on the card: it alone teaches nothing
            feed = svc.measured
            assert feed is not None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and expected(svc, "ft") == 500:
                assert svc.poll_measured() >= 0
                time.sleep(0.5)
            # each pod's own share of the card, read back through Prometheus, reached the
            # workload model: 91 % of a card over 500 milli asked
            assert expected(svc, "ft") == pytest.approx(910)
            assert expected(svc, "nb") == 300  # 9 % of a card: never below its request
            assert feed.pod_series["own"] == 2 and feed.pod_series["card"] == 0
            assert feed.pods_reason == ""
            # the card's own reading is DCGM's, the pods' sum: 100 %
            with svc.plane.lock:
                [card] = svc.measured.model.readings(  # type: ignore[union-attr]
                    svc.plane.scheduler.node_table(), NodeName(NODE), svc.plane.clock.now()
                )
            assert card.measured and card.util_pct == 100
            # Prometheus holds HAMi's series as the monitor labels them
            got = httpx.get(
                f"{url}/api/v1/query",
                params={"query": 'hami_vgpu_memory_used_bytes{pod="nb-main-0"}'},
            ).json()["data"]["result"]
            [series] = got
            assert series["metric"]["zone"] == "vGPU"
            assert series["metric"]["container"] == "main"
            assert float(series["value"][1]) == 20 * 1024**3  # 100 % of 20 GiB asked
        finally:
            stop(proc)
    finally:
        svc.stop()


def test_without_per_pod_series_serve_reads_cards_and_says_why(tmp_path: Path) -> None:
    """Prometheus scrapes the DCGM pages only: the read succeeds, the card is measured, and
    the pods are counted as learning from their card, with the reason; never an error."""
    port = free_port()
    svc = shared_card(tmp_path, port)
    try:
        exporter = svc.start_exporter("127.0.0.1", free_port())
        proc, _ = start_prometheus(tmp_path, exporter, [NODE], port, jobs=("dcgm",))
        try:
            feed = svc.measured
            assert feed is not None
            deadline = time.monotonic() + 60
            measured = False
            while time.monotonic() < deadline and not measured:
                assert svc.poll_measured() >= 0
                with svc.plane.lock:
                    [card] = feed.model.readings(
                        svc.plane.scheduler.node_table(), NodeName(NODE), svc.plane.clock.now()
                    )
                measured = card.measured
                time.sleep(0.5)
            assert measured and card.util_pct == 100
            assert feed.pod_series == {"own": 0, "unknown-pod": 0, "card": 2}
            assert "2 of 2 slice pods have no per-pod series" in feed.pods_reason
            assert "research/ft-main-0" in feed.pods_reason
            assert expected(svc, "ft") == 500  # nothing learned: two pods share the card
            text = svc.metrics.render().decode()
            assert 'gpupool_measured_pod_series{outcome="card"} 2.0' in text
        finally:
            stop(proc)
    finally:
        svc.stop()


def test_gpupool_serve_serves_hamis_monitor_with_the_names_asked(tmp_path: Path) -> None:
    """The command line: ``--dcgm-exporter-port`` serves both pages of each node,
    ``--hami-metric-names legacy`` the names of HAMi before 2.9."""
    port = free_port()
    extra = ("--dcgm-exporter-port", str(port), "--hami-metric-names", "legacy")
    with serving(tmp_path / "state.db", extra=extra) as server:
        doc = job_doc("nb", duration="1h", milli=250, gpu_memory="10Gi", models=["A100-80GB"])
        doc["metadata"]["annotations"] = {"gpupool.io/actual-use": "compute=40%,memory=50%"}
        with server.client() as http:
            assert http.post("/api/v1/jobs", json=doc).status_code == 201
            deadline = time.monotonic() + 30
            status: dict[str, Any] = {}
            while time.monotonic() < deadline and status.get("phase") != "Running":
                status = http.get("/api/v1/jobs/research/nb").json()["status"]
                time.sleep(0.1)
        [p] = status["placements"]
        page = httpx.get(f"http://127.0.0.1:{port}/nodes/{p['node']}/hami/metrics").text
        got = {f.name: f for f in text_string_to_metric_families(page)}
        assert sorted(got) == [
            "Device_utilization_desc_of_container",
            "vGPU_device_memory_limit_in_bytes",
            "vGPU_device_memory_usage_in_bytes",
        ]
        [util] = got["Device_utilization_desc_of_container"].samples
        assert util.labels["podname"] == "nb-main-0" and util.labels["podnamespace"] == "research"
        assert util.value == 10  # 40 % of 250 milli: 10 % of the card
        [used] = got["vGPU_device_memory_usage_in_bytes"].samples
        assert used.value == 5 * 1024**3
        assert "/nodes/<node>/hami/metrics" in server.log.read_text()
