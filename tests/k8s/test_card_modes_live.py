"""HAMi's ``mps`` card mode against a real API server and emulated nodes: a node whose
device plugin registers two cards in ``mps`` mode beside two in ``hami-core`` mode; pods
naming ``nvidia.com/vgpu-mode`` run only on cards of that mode (HAMi's ``checkType``), each
on the card gpupool recorded, with no kubelet rejection."""

from __future__ import annotations

import json

import pytest

from gpupool.k8s.kube import MERGE_PATCH, Kube
from gpupool.k8s.main import default_config
from tests.k8s.conftest import ControlPlane
from tests.k8s.kit import list_pods, make_node, make_pod, register_json, running, wait_for
from tests.k8s.test_node_side_live import NS, clean_run, fleet, live

pytestmark = pytest.mark.k8s

MODES = ["hami-core", "mps", "hami-core", "mps"]


def test_pods_run_only_on_cards_of_the_mode_they_name(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        await make_node(kube, "modes-0", gpus=4)
        reg = json.loads(register_json("modes-0", 4, "NVIDIA-A100", 40960))
        for d, m in zip(reg, MODES, strict=True):
            d["mode"] = m
        await kube.request(
            "PATCH",
            "/api/v1/nodes/modes-0",
            {"metadata": {"annotations": {"hami.io/node-nvidia-register": json.dumps(reg)}}},
            content_type=MERGE_PATCH,
        )
        async with fleet(kube) as f, running(kube, default_config()):
            for i, mode in enumerate(["mps", "hami-core", "mps", "hami-core", "hami-core"]):
                await make_pod(
                    kube,
                    f"m{i}",
                    ns=NS,
                    cpu="100m",
                    memory="128Mi",
                    limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000},
                    annotations={"nvidia.com/vgpu-mode": mode},
                )

            async def four_running() -> bool:
                pods = await list_pods(kube, NS)
                return sum(p.get("status", {}).get("phase") == "Running" for p in pods) == 4

            await wait_for(four_running, timeout_s=60)
            card: dict[str, str] = {}
            waiting = ""
            for p in await list_pods(kube, NS):
                ann = p["metadata"].get("annotations") or {}
                if p.get("status", {}).get("phase") == "Running":
                    uuid = ann["hami.io/vgpu-devices-allocated"].split(",")[0]
                    card[p["metadata"]["name"]] = MODES[int(uuid.rsplit("-", 1)[1])]
                else:
                    waiting = p["metadata"]["name"]
            assert waiting in {"m1", "m3", "m4"}  # two hami-core cards for three such pods
            for name, mode in card.items():
                assert mode == ann_mode(name), (name, mode)
            clean_run(f)

    live(control_plane, body)


def ann_mode(name: str) -> str:
    return ["mps", "hami-core", "mps", "hami-core", "hami-core"][int(name[1:])]
