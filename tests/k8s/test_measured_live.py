"""``gpupool k8s`` with ``--prometheus``: a real kube-apiserver, a real Prometheus scraping a
DCGM-format exporter of the node's cards, and the controller placing a slice by what it read;
then Prometheus stops and placement goes on by requests."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gpupool.core.usage import LoadSettings
from gpupool.k8s.extender import metrics_text
from gpupool.k8s.kube import Kube
from gpupool.k8s.main import default_config
from gpupool.usage.dcgm import CardMetrics, ExporterServer
from gpupool.usage.prometheus import PrometheusSettings
from tests.e2e.test_measured_prometheus import free_port, start_prometheus, stop
from tests.k8s.conftest import ControlPlane
from tests.k8s.kit import make_node, make_pod, running, wait_for
from tests.k8s.test_scheduler_live import NS, bound, live

pytestmark = [pytest.mark.k8s, pytest.mark.real_component("prometheus")]

NODE = "gpu-measured"


def cards() -> dict[str, list[CardMetrics]]:
    # card 0 kept 97 % busy by work the requests do not show; card 1 nearly idle
    return {
        NODE: [
            CardMetrics(0, f"GPU-{NODE}-0", "NVIDIA", 97.0, 12000, 28960),
            CardMetrics(1, f"GPU-{NODE}-1", "NVIDIA", 3.0, 300, 40660),
        ]
    }


def test_a_slice_goes_to_the_card_prometheus_shows_cool(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    server = ExporterServer(cards, port=free_port()).start()
    proc, url = start_prometheus(tmp_path, server, [NODE])

    async def body(kube: Kube) -> None:
        await make_node(kube, NODE, gpus=2, memory_mib=40960)
        settings = PrometheusSettings(url=url, lookback_s=30, timeout_s=2)
        async with running(
            kube,
            default_config(),
            prometheus=settings,
            measured=LoadSettings(stale_after_s=30, settle_s=2),
            measured_interval_s=0.5,
        ) as ctl:
            assert ctl.measured is not None

            async def both_cards_measured() -> bool:
                assert ctl.sched is not None
                view = ctl.measured.model.view(ctl.sched.node_table(), ctl.clock())  # type: ignore[union-attr]
                return view.measured_cards == 2

            await wait_for(both_cards_measured, 60, "samples of both cards read back")
            await make_pod(
                kube,
                "nb",
                ns=NS,
                limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000, "nvidia.com/gpucores": 30},
            )
            pod = await wait_for(lambda: bound(kube, NS, "nb"), what="nb bound")
            ann = pod["metadata"]["annotations"]
            assert json.loads(ann["gpupool.io/placement"])["cards"][0][0] == 1
            assert ann["hami.io/vgpu-devices-allocated"] == f"GPU-{NODE}-1,NVIDIA,8000,30:;"
            text = metrics_text(ctl)
            assert "gpupool_measured_source_up 1.0" in text
            assert f'gpupool_gpu_measured_load_ratio{{gpu="0",node="{NODE}"}}' in text

            stop(proc)  # Prometheus goes away: by requests, with a reason, no error

            async def degraded() -> bool:
                return ctl.measured is not None and ctl.measured.reads_failed > 0

            await wait_for(degraded, 30, "a failed read")
            await make_pod(
                kube,
                "nb2",
                ns=NS,
                limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000, "nvidia.com/gpucores": 30},
            )
            await wait_for(lambda: bound(kube, NS, "nb2"), what="nb2 bound")
            assert ctl.sched is not None
            view = ctl.measured.model.view(ctl.sched.node_table(), ctl.clock())
            assert "unreachable" in view.reasons[NODE]  # type: ignore[index]
            assert "gpupool_measured_source_up 0.0" in metrics_text(ctl)
            await asyncio.sleep(0)

    try:
        live(control_plane, body)
    finally:
        if proc.poll() is None:
            stop(proc)
        server.stop()
