"""What a real API server holds after gpupool binds onto HAMi nodes: the device annotations
and label exactly in HAMi's format, one card set per container, split counts and cordons kept.

The annotations are decoded here the way HAMi's device plugin decodes them
(``DecodePodDevices``: one ``;``-terminated slot per container, init containers first, each
device ``UUID,type,usedmem,usedcores`` followed by ``:``), strictly: any other shape fails.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gpupool.k8s.kube import MERGE_PATCH, Kube
from gpupool.k8s.main import default_config
from tests.k8s.conftest import ControlPlane
from tests.k8s.kit import (
    clean,
    device_plugins,
    ensure_namespace,
    get_pod,
    pod_body,
    running,
    wait_for,
)

pytestmark = pytest.mark.k8s

NS = "team-a"
ENTRY = re.compile(r"(GPU-[\w-]+),NVIDIA,(\d+),(\d+)")


def live(cp: ControlPlane, body: Callable[[Kube], Awaitable[None]]) -> None:
    async def main() -> None:
        kube = await Kube.connect(cp.kubeconfig)
        try:
            await ensure_namespace(kube, NS)
            await clean(kube, [NS])
            async with device_plugins(kube):  # HAMi's plugin releases each node lock
                await body(kube)
        finally:
            await clean(kube, [NS])
            await kube.close()

    asyncio.run(main())


async def hami_node(
    kube: Kube, name: str, cards: list[tuple[int, int]], annotations: dict[str, str] | None = None
) -> None:
    """A node as HAMi v2.10's device plugin registers it: ``cards`` = (devmem, count)."""
    register = json.dumps(
        [
            {
                "id": f"GPU-{name}-{i}",
                **({"index": i} if i else {}),
                "count": count,
                "devmem": mem,
                "devcore": 100,
                "type": "NVIDIA A100-SXM4-80GB",
                "mode": "hami-core",
                "health": True,
            }
            for i, (mem, count) in enumerate(cards)
        ],
        separators=(",", ":"),
    )
    await kube.request(
        "POST",
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"hami.io/node-nvidia-register": register, **(annotations or {})},
            },
        },
    )
    alloc = {
        "cpu": "64",
        "memory": "512Gi",
        "pods": "220",
        "nvidia.com/gpu": str(sum(c for _, c in cards)),
    }
    await kube.request(
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        {
            "status": {
                "capacity": alloc,
                "allocatable": alloc,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "no kubelet: a test node",
                    }
                ],
            }
        },
        content_type=MERGE_PATCH,
    )
    await kube.request(
        "PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}}, content_type=MERGE_PATCH
    )


async def make(
    kube: Kube,
    name: str,
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
) -> None:
    body = pod_body(name, ns=NS, annotations=annotations)
    main = body["spec"]["containers"][0]
    body["spec"]["containers"] = [
        {**main, "name": f"c{i}", "resources": {**main["resources"], "limits": limits}}
        for i, limits in enumerate(containers)
    ]
    if init:
        body["spec"]["initContainers"] = [
            {"name": f"i{i}", "image": "example.invalid/x", "resources": {"limits": limits}}
            for i, limits in enumerate(init)
        ]
    await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", body)


async def bound(kube: Kube, name: str) -> dict[str, Any] | None:
    pod = await get_pod(kube, NS, name)
    return pod if pod["spec"].get("nodeName") else None


def decode(pod: dict[str, Any]) -> list[list[tuple[str, int, int]]]:
    """HAMi's device annotation, strictly: per container slot, (uuid, usedmem, usedcores)."""
    ann = pod["metadata"]["annotations"]
    text = ann["hami.io/vgpu-devices-to-allocate"]
    assert ann["hami.io/vgpu-devices-allocated"] == text
    slots = text.split(";")
    assert slots[-1] == "", text  # every slot ends with ';'
    n = len(pod["spec"].get("initContainers") or ()) + len(pod["spec"]["containers"])
    assert len(slots) - 1 == n, f"{text!r}: {len(slots) - 1} slots for {n} containers"
    out = []
    for slot in slots[:-1]:
        entries = slot.split(":")
        assert entries[-1] == "", slot  # every device ends with ':'
        devs = []
        for e in entries[:-1]:
            m = ENTRY.fullmatch(e)
            assert m, f"{e!r} is not UUID,NVIDIA,usedmem,usedcores"
            devs.append((m[1], int(m[2]), int(m[3])))
        out.append(devs)
    return out


def check_common(pod: dict[str, Any]) -> None:
    ann = pod["metadata"]["annotations"]
    node = pod["spec"]["nodeName"]
    assert ann["hami.io/vgpu-node"] == node
    assert pod["metadata"]["labels"]["hami.io/vgpu-node"] == node
    assert ann["hami.io/bind-phase"] in ("allocating", "success")  # the plugin ran
    assert ann["hami.io/bind-time"].isdigit() and ann["hami.io/vgpu-time"].isdigit()


def test_bound_pods_carry_hamis_annotations_for_every_request_shape(
    control_plane: ControlPlane,
) -> None:
    async def body(kube: Kube) -> None:
        await hami_node(kube, "h1", [(81920, 10)] * 4)
        async with running(kube, default_config()):
            # two containers with slices, one with a percentage; an init container with a
            # card; n cards with memory; UUID choice
            await make(
                kube,
                "multi",
                [
                    {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000, "nvidia.com/gpucores": 20},
                    {},
                    {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 25},
                ],
            )
            await make(
                kube,
                "init",
                [{"nvidia.com/gpumem": 2000}],
                init=[{"nvidia.com/gpu": 1, "nvidia.com/gpumem": 5000, "nvidia.com/gpucores": 40}],
            )
            await make(
                kube,
                "pair",
                [{"nvidia.com/gpu": 2, "nvidia.com/gpumem": 8000, "nvidia.com/gpucores": 10}],
            )
            await make(
                kube,
                "pinned",
                [{"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}],
                annotations={"nvidia.com/use-gpuuuid": "GPU-h1-3"},
            )
            pods = {
                n: await wait_for(lambda n=n: bound(kube, n), what=f"{n} bound")
                for n in ("multi", "init", "pair", "pinned")
            }
            for p in pods.values():
                check_common(p)
            (a,), (), (b,) = decode(pods["multi"])
            assert a[0] != b[0] and a[1:] == (4000, 20) and b[1:] == (81920 // 4, 0)
            (i,), (m,) = decode(pods["init"])
            assert i[0] == m[0] and i[1:] == (5000, 40) and m[1:] == (2000, 0)
            (pair,) = decode(pods["pair"])
            assert len({d[0] for d in pair}) == 2 and {d[1:] for d in pair} == {(8000, 10)}
            assert decode(pods["pinned"]) == [[("GPU-h1-3", 1000, 0)]]

    live(control_plane, body)


def test_split_count_and_device_cordon_hold_on_the_api_server(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        await hami_node(
            kube, "h2", [(81920, 3), (81920, 3)], annotations={"hami.io/device-cordon": "GPU-h2-1"}
        )
        async with running(kube, default_config()):
            for k in range(4):
                await make(
                    kube,
                    f"s{k}",
                    [{"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 5}],
                )
            placed = [
                await wait_for(lambda k=k: bound(kube, f"s{k}"), what=f"s{k} bound")
                for k in range(3)
            ]
            cards = [decode(p)[0][0][0] for p in placed]
            assert cards == ["GPU-h2-0"] * 3  # the cordoned card took nothing
            await asyncio.sleep(1.0)
            assert await bound(kube, "s3") is None  # split count 3 reached
            cond = next(
                c
                for c in (await get_pod(kube, NS, "s3"))["status"]["conditions"]
                if c["type"] == "PodScheduled"
            )
            assert cond["status"] == "False"

    live(control_plane, body)
