"""Emulated Hygon and Ascend nodes beside NVIDIA ones (kubelet admission and each vendor's
HAMi device plugin, ``k8s/nodeagent``) on a real API server: every pod gpupool binds is
admitted by its node's kubelet, each container's ``Allocate`` reads the vendor's own
allocation annotation, and no card holds more than its split count or memory."""

from __future__ import annotations

import asyncio
import json

import pytest

from gpupool.k8s.kube import Kube
from gpupool.k8s.main import default_config
from gpupool.k8s.nodeagent.devices import devices_of
from tests.k8s.conftest import ControlPlane
from tests.k8s.kit import make_pod, running
from tests.k8s.test_node_side_live import NS, all_running, clean_run, fleet, live
from tests.k8s.test_vendors_live import node

pytestmark = pytest.mark.k8s


def test_nvidia_hygon_and_ascend_nodes_run_their_own_pods(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        nvidia = json.dumps([{"id": f"GPU-e-{i}", "index": i, "count": 4, "devmem": 81920,
                              "devcore": 100, "type": "NVIDIA H100", "health": True}
                             for i in range(2)])
        dcu = "".join(f"DCU-e-{i},4,65536,100,DCU-K100,0,true,{i},hami-core:" for i in range(2))
        npu = json.dumps([{"id": f"NPU-e-{i}", "index": i, "count": 4, "devmem": 65536,
                           "devcore": 20, "type": "Ascend910B3", "health": True}
                          for i in range(2)])
        await node(kube, "e-nv", {"hami.io/node-nvidia-register": nvidia},
                   {"nvidia.com/gpu": "8"})
        await node(kube, "e-dcu", {"hami.io/node-dcu-register": dcu}, {"hygon.com/dcunum": "8"})
        await node(kube, "e-npu", {"hami.io/node-register-Ascend910B3": npu},
                   {"huawei.com/Ascend910B3": "8"})
        async with fleet(kube) as f, running(kube, default_config()):
            assert devices_of(f.nodes["e-dcu"]).to_allocate == "hami.io/dcu-devices-to-allocate"
            shapes = {
                "nv": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000},
                "dcu": {"hygon.com/dcunum": 1, "hygon.com/dcumem": 16000,
                        "hygon.com/dcucores": 25},
                "npu": {"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 12000},
            }
            await asyncio.gather(*(make_pod(kube, f"{kind}-{i}", ns=NS, limits=limits,
                                            cpu="100m", memory="128Mi")
                                   for kind, limits in shapes.items() for i in range(4)))
            await all_running(kube, f, 12)
            await f.settle()
            clean_run(f)
            nodes = {a.pod.split("/")[1].split("-")[0]: a.devices[0].type
                     for p in f.ledger.pods.values() for a in p.allocations}
            assert nodes == {"nv": "NVIDIA", "dcu": "DCU", "npu": "Ascend910B3"}
            assert f.ledger.summary()["pods_admitted"] == 12

    live(control_plane, body)
