"""The cluster ``gpupool k8s bench`` makes and takes down: its fake GPU nodes and its pods.

Each node is what a kubelet and HAMi's device plugin would have registered: ``--gpus-per-node``
40 GiB A100s in HAMi's register annotation (``hami.io/node-nvidia-register``), Ready and
untainted, labelled ``gpupool.io/bench=true`` so the cleanup finds them. Each pod asks for half
a card (``nvidia.com/gpucores: 50``, ``nvidia.com/gpumem: 16000``), or for ``nvidia.com/gpu:
1`` alone when another scheduler binds it. Other schedulers' pods live in a namespace of their
own (:func:`others_namespace`), apart from the measured ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from gpupool.k8s.kube import MERGE_PATCH, Kube, KubeError

__all__ = ["CARD_MIB", "MODEL", "bench_pod", "cleanup", "create_node", "others_namespace"]

MODEL = "NVIDIA-A100-SXM4-40GB"
CARD_MIB = 40960


async def create_node(kube: Kube, name: str, gpus: int) -> None:
    reg = json.dumps(
        [
            {
                "id": f"GPU-{name}-{i}",
                "index": i,
                "count": 10,
                "devmem": CARD_MIB,
                "devcore": 100,
                "type": MODEL,
                "mode": "hami-core",
                "health": True,
            }
            for i in range(gpus)
        ]
    )
    await kube.request(
        "POST",
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"gpupool.io/bench": "true"},
                "annotations": {"hami.io/node-nvidia-register": reg},
            },
        },
    )
    alloc = {"cpu": "128", "memory": "1Ti", "pods": "250", "nvidia.com/gpu": str(gpus * 10)}
    await kube.request(
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        {
            "status": {
                "capacity": alloc,
                "allocatable": alloc,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            }
        },
        content_type=MERGE_PATCH,
    )
    await kube.request(
        "PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}}, content_type=MERGE_PATCH
    )


def bench_pod(name: str, ns: str, scheduler: str, plain: bool = False) -> dict[str, Any]:
    gpu: dict[str, Any] = {"nvidia.com/gpu": 1}
    if not plain:
        gpu.update({"nvidia.com/gpucores": 50, "nvidia.com/gpumem": 16000})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "example.invalid/cuda:12",
                    "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": gpu},
                }
            ],
        },
    }


async def cleanup(kube: Kube, ns: str) -> None:
    for space in (ns, others_namespace(ns)):
        with contextlib.suppress(KubeError):
            await kube.request(
                "DELETE",
                f"/api/v1/namespaces/{space}/pods",
                {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
            )
    with contextlib.suppress(KubeError):
        await kube.request(
            "DELETE", "/api/v1/nodes", params={"labelSelector": "gpupool.io/bench=true"}
        )
    for _ in range(200):
        left = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods", params={"limit": "1"})
        if not left.get("items"):
            return
        await asyncio.sleep(0.1)


def others_namespace(ns: str) -> str:
    """The namespace of the other schedulers' pods (kept apart from the measured ones)."""
    return f"{ns}-others"
