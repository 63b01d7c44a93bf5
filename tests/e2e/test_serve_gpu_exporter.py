"""``gpupool serve --dcgm-exporter-port``: the virtual cluster's cards in DCGM exporter's
format, each running job using what its ``gpupool.io/actual-use`` annotation declares, read
back through a real Prometheus."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from gpupool.app import Service
from gpupool.client.render import describe_node
from gpupool.control.views import node_view
from gpupool.core import ConfigError, NodeName
from gpupool.core.usage import LoadSettings
from gpupool.usage.profile import parse_annotation
from gpupool.usage.prometheus import PrometheusReader, PrometheusSettings, inventory_resolver
from tests.e2e.serve_kit import ADMIN, CLUSTER, QUEUES, Wall, auth, client, job_doc, make_plane
from tests.e2e.test_measured_prometheus import free_port, start_prometheus, stop


def service(tmp: Path, **kw: object) -> Service:
    return Service(state=tmp / "state.db", cluster=CLUSTER, queues=QUEUES, speed=1.0, **kw)  # type: ignore[arg-type]


def running_job(svc: Service, name: str, annotation: str | None, **kw: object) -> tuple[str, int]:
    doc = job_doc(name, duration="1h", **kw)  # type: ignore[arg-type]
    if annotation is not None:
        doc["metadata"]["annotations"] = {"gpupool.io/actual-use": annotation}
    svc.plane.submit(doc)
    svc.plane.tick()
    rec = svc.plane.job(f"research/{name}")
    assert rec.phase == "Running", rec.message
    [p] = rec.placements
    return p.node, p.shares[0].index


@pytest.mark.real_component("prometheus")
def test_the_exporter_serves_actual_use_not_requests(tmp_path: Path) -> None:
    svc = service(tmp_path)
    try:
        node, gpu = running_job(
            svc, "ft", "compute=190%,memory=50%", milli=500, gpu_memory="20Gi", models=["A100-80GB"]
        )
        exporter = svc.start_exporter("127.0.0.1", free_port())
        page = httpx.get(f"http://{exporter.address}/nodes/{node}/metrics").text
        line = next(
            x
            for x in page.splitlines()
            if x.startswith("DCGM_FI_DEV_GPU_UTIL{") and f'gpu="{gpu}"' in x
        )
        assert line.endswith(" 95")  # 500 milli asked, 190 % of it used: 95 % of the card
        used = next(
            x
            for x in page.splitlines()
            if x.startswith("DCGM_FI_DEV_FB_USED{") and f'gpu="{gpu}"' in x
        )
        assert used.endswith(" 10240")
        assert f'Hostname="{node}"' in line
        assert httpx.get(f"http://{exporter.address}/nodes/nope/metrics").status_code == 404

        proc, url = start_prometheus(tmp_path, exporter, [node])
        try:
            reader = PrometheusReader(PrometheusSettings(url=url, lookback_s=30))
            nodes = svc.plane.scheduler.node_list()
            resolve = inventory_resolver(
                (n.name, g.index, g.uuid or f"GPU-{n.name}-{g.index}")
                for n in nodes
                for g in n.gpus
            )
            deadline = time.monotonic() + 60
            got = []
            while time.monotonic() < deadline and not got:
                got = [s for s in reader.read(resolve) if (s.node, s.gpu) == (NodeName(node), gpu)]
                time.sleep(0.5)
            assert got and got[-1].util_pct == 95 and got[-1].used_mib == 10240
        finally:
            stop(proc)
    finally:
        svc.stop()


@pytest.mark.parametrize(
    "text,rule",
    [
        ("compute:30%", "is not field=percentage"),
        ("compute=abc", "is not a percentage"),
        ("compute=40%-10%", "low above high"),
        ("power=3", "unknown field(s) power"),
        ("memory=150%", "from 0 to 100"),
    ],
)
def test_a_bad_annotation_names_the_annotation_and_the_rule(text: str, rule: str) -> None:
    with pytest.raises(ConfigError, match=r"research/j: metadata\.annotations") as info:
        parse_annotation(text, "research/j")
    assert rule in str(info.value)


def test_a_range_is_drawn_once_per_job_from_its_key() -> None:
    a = parse_annotation("compute=10%-40%", "research/a")
    assert 10 <= a.compute_pct <= 40 and a.memory_pct == 100
    assert parse_annotation("compute=10%-40%", "research/a") == a


@pytest.mark.real_component("prometheus")
def test_serve_places_by_what_prometheus_reads_back_and_degrades_when_it_stops(
    tmp_path: Path,
) -> None:
    port = free_port()
    svc = service(
        tmp_path,
        prometheus=PrometheusSettings(url=f"http://127.0.0.1:{port}", lookback_s=30, timeout_s=2),
        measured=LoadSettings(stale_after_s=60, settle_s=1),
    )
    try:
        node, gpu = running_job(
            svc, "ft", "compute=190%,memory=50%", milli=500, gpu_memory="20Gi", models=["A100-80GB"]
        )
        exporter = svc.start_exporter("127.0.0.1", free_port())
        nodes = [n.name for n in svc.plane.scheduler.node_list()]
        proc, _ = start_prometheus(tmp_path, exporter, nodes, port)
        try:
            deadline = time.monotonic() + 60
            readings = []
            while time.monotonic() < deadline:
                svc.poll_measured()
                with svc.plane.lock:
                    readings = svc.measured.model.readings(  # type: ignore[union-attr]
                        svc.plane.scheduler.node_table(), NodeName(node), svc.plane.clock.now()
                    )
                if readings[gpu].measured:
                    break
                time.sleep(0.5)
            assert readings[gpu].measured and readings[gpu].load_milli >= 900
            # describe node: measured beside requested
            view = node_view(svc.plane, node)
            card = view["gpus"][gpu]
            assert card["usedMilli"] == 500 and card["measured"]["fresh"]
            assert card["measured"]["utilPct"] >= 90 and card["measured"]["usedMib"] == 10240
            text = describe_node(view)
            assert "Measured:" in text and "UTIL-P90" in text
            # by requests the notebook would share ft's card (best fit on the fullest node)
            svc.plane.submit(
                job_doc("nb", duration="1h", milli=300, gpu_memory="8Gi", models=["A100-80GB"])
            )
            svc.plane.tick()
            [p] = svc.plane.job("research/nb").placements
            assert (p.node, p.shares[0].index) != (node, gpu)
        finally:
            stop(proc)
        assert svc.poll_measured() == -1
        view = node_view(svc.plane, node)
        assert "unreachable" in view["measuredReason"]
        assert "by requests" in describe_node(view)
        text = svc.metrics.render().decode()
        assert "gpupool_measured_source_up 0.0" in text
        svc.plane.submit(
            job_doc("nb2", duration="1h", milli=300, gpu_memory="8Gi", models=["A100-80GB"])
        )
        svc.plane.tick()  # by requests now, never an error
        assert svc.plane.job("research/nb2").phase == "Running"
    finally:
        svc.stop()


@pytest.mark.parametrize(
    "text,rule",
    [
        ("compute:30%", "is not field=percentage"),
        ("compute=abc", "compute: 'abc' is not a percentage"),
        ("power=3", "unknown field(s) power"),
        ("memory=150%", "memory: '150%' must be a percentage from 0 to 100"),
    ],
)
def test_serve_refuses_a_job_whose_actual_use_does_not_parse(
    tmp_path: Path, text: str, rule: str
) -> None:
    wall = Wall()
    plane = make_plane(tmp_path / "state.db", wall)
    http = client(plane)
    doc = job_doc("bad")
    doc["metadata"]["annotations"] = {"gpupool.io/actual-use": text}
    r = http.post("/api/v1/jobs", json=doc, headers=auth(ADMIN))
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "InvalidJobError"
    assert body["details"]["field"] == "metadata.annotations[gpupool.io/actual-use]"
    assert body["details"]["value"] == text
    assert rule in body["details"]["rule"]
    assert http.get("/api/v1/jobs/research/bad", headers=auth(ADMIN)).status_code == 404
    doc["metadata"]["annotations"] = {"gpupool.io/actual-use": "compute=30%,memory=10%-60%"}
    assert http.post("/api/v1/jobs", json=doc, headers=auth(ADMIN)).status_code == 201
