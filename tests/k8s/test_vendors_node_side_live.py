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
from tests.k8s.kit import list_pods, make_pod, running
from tests.k8s.test_node_side_live import NS, all_running, clean_run, fleet, live
from tests.k8s.test_vendors_live import node

pytestmark = pytest.mark.k8s


def test_nvidia_hygon_and_ascend_nodes_run_their_own_pods(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        nvidia = json.dumps(
            [
                {
                    "id": f"GPU-e-{i}",
                    "index": i,
                    "count": 4,
                    "devmem": 81920,
                    "devcore": 100,
                    "type": "NVIDIA H100",
                    "health": True,
                }
                for i in range(2)
            ]
        )
        dcu = "".join(f"DCU-e-{i},4,65536,100,DCU-K100,0,true,{i},hami-core:" for i in range(2))
        npu = json.dumps(
            [
                {
                    "id": f"NPU-e-{i}",
                    "index": i,
                    "count": 4,
                    "devmem": 65536,
                    "devcore": 20,
                    "type": "Ascend910B3",
                    "health": True,
                }
                for i in range(2)
            ]
        )
        await node(kube, "e-nv", {"hami.io/node-nvidia-register": nvidia}, {"nvidia.com/gpu": "8"})
        await node(kube, "e-dcu", {"hami.io/node-dcu-register": dcu}, {"hygon.com/dcunum": "8"})
        await node(
            kube,
            "e-npu",
            {"hami.io/node-register-Ascend910B3": npu},
            {"huawei.com/Ascend910B3": "8"},
        )
        async with fleet(kube) as f, running(kube, default_config()):
            assert devices_of(f.nodes["e-dcu"]).to_allocate == "hami.io/dcu-devices-to-allocate"
            shapes = {
                "nv": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000},
                "dcu": {"hygon.com/dcunum": 1, "hygon.com/dcumem": 16000, "hygon.com/dcucores": 25},
                "npu": {"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 12000},
            }
            await asyncio.gather(
                *(
                    make_pod(kube, f"{kind}-{i}", ns=NS, limits=limits, cpu="100m", memory="128Mi")
                    for kind, limits in shapes.items()
                    for i in range(4)
                )
            )
            await all_running(kube, f, 12)
            await f.settle()
            clean_run(f)
            nodes = {
                a.pod.split("/")[1].split("-")[0]: a.devices[0].type
                for p in f.ledger.pods.values()
                for a in p.allocations
            }
            assert nodes == {"nv": "NVIDIA", "dcu": "DCU", "npu": "Ascend910B3"}
            assert f.ledger.summary()["pods_admitted"] == 12

    live(control_plane, body)


def test_capacity_counted_vendors_run_their_own_pods(control_plane: ControlPlane) -> None:
    """Cambricon, Moore Threads and Enflame nodes register no annotation: HAMi counts their
    cards from node capacity, and so do their emulated device plugins."""

    async def body(kube: Kube) -> None:
        await node(
            kube,
            "c-mlu",
            {},
            {
                "cambricon.com/vmlu": "8",
                "cambricon.com/mlu.smlu.vcore": "200",
                "cambricon.com/mlu.smlu.vmemory": "256",
            },
        )
        await node(
            kube,
            "c-mt",
            {},
            {
                "mthreads.com/vgpu": "8",
                "mthreads.com/sgpu-core": "32",
                "mthreads.com/sgpu-memory": "128",
            },
        )
        await node(kube, "c-gcu", {}, {"enflame.com/gcu": "2"})
        async with fleet(kube) as f, running(kube, default_config()):
            for name, (resource, kind) in {
                "c-mlu": ("cambricon.com/vmlu", "MLU"),
                "c-mt": ("mthreads.com/vgpu", "Mthreads"),
                "c-gcu": ("enflame.com/gcu", "GCU"),
            }.items():
                d = devices_of(f.nodes[name])
                assert (d.resource, d.device_type, d.register) == (resource, kind, "")
            # the cards as HAMi's GetNodeDevices makes them of the capacity
            assert {c.uuid: (c.split, c.memory_mib) for c in f.ledger.cards["c-mlu"].values()} == {
                "c-mlu-cambricon-mlu-0": (100, 32768),
                "c-mlu-cambricon-mlu-1": (100, 32768),
            }
            assert set(f.ledger.cards["c-gcu"]) == {"c-gcu-GCU-0", "c-gcu-GCU-1"}
            shapes = {
                "mlu": (
                    {
                        "cambricon.com/vmlu": 1,
                        "cambricon.com/mlu.smlu.vmemory": 16,
                        "cambricon.com/mlu.smlu.vcore": 25,
                    },
                    4,
                ),
                "mt": (
                    {
                        "mthreads.com/vgpu": 1,
                        "mthreads.com/sgpu-memory": 8,
                        "mthreads.com/sgpu-core": 4,
                    },
                    4,
                ),
                "gcu": ({"enflame.com/gcu": 1}, 2),
            }
            await asyncio.gather(
                *(
                    make_pod(kube, f"{kind}-{i}", ns=NS, limits=limits, cpu="100m", memory="128Mi")
                    for kind, (limits, n) in shapes.items()
                    for i in range(n)
                )
            )
            await all_running(kube, f, 10)
            await f.settle()
            clean_run(f)
            kinds = {
                a.pod.split("/")[1].split("-")[0]: a.devices[0].type
                for p in f.ledger.pods.values()
                for a in p.allocations
            }
            assert kinds == {"mlu": "MLU", "mt": "Mthreads", "gcu": "GCU"}
            gcu = {
                a.devices[0].uuid
                for p in f.ledger.pods.values()
                for a in p.allocations
                if a.devices[0].type == "GCU"
            }
            assert gcu == {"c-gcu-GCU-0", "c-gcu-GCU-1"}  # whole cards: one pod each
            assert f.ledger.summary()["pods_admitted"] == 10

    live(control_plane, body)


# An Enflame S60 node in DRS mode as recorded on real hardware (its enflame.com/gcu-drs-capacity
# and allocatable enflame.com/drs-gcu; the record HAMi's pkg/device/enflame was written
# against): one card of 6 slices, profiles 1g.6gb, 3g.20gb and 6g.40gb.
S60_DRS = (
    '{"devices":[{"index":"0","minor":"0","capacity":6}],'
    '"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}'
)


def test_enflame_drs_nodes_create_an_instance_per_container(control_plane: ControlPlane) -> None:
    """Enflame's device plugin finds each container by ``assigned-containers`` (no lock, no
    ``-to-allocate``), creates its profile's instance on the card HAMi's annotations name,
    and marks the record allocated; no card gives more slices than it has."""

    async def body(kube: Kube) -> None:
        two = json.dumps(
            {
                "devices": [
                    {"index": "0", "minor": "2", "capacity": 6},
                    {"index": "1", "minor": "3", "capacity": 6},
                ],
                "profiles": json.loads(S60_DRS)["profiles"],
            }
        )
        await node(
            kube, "d-one", {"enflame.com/gcu-drs-capacity": S60_DRS}, {"enflame.com/drs-gcu": "6"}
        )
        await node(
            kube, "d-two", {"enflame.com/gcu-drs-capacity": two}, {"enflame.com/drs-gcu": "12"}
        )
        async with fleet(kube) as f, running(kube, default_config()):
            d = devices_of(f.nodes["d-one"])
            assert (d.resource, d.device_type, d.to_allocate) == (
                "enflame.com/drs-gcu",
                "Enflame",
                "",
            )
            assert {c.uuid: (c.split, c.memory_mib) for c in f.ledger.cards["d-two"].values()} == {
                "d-two-enflame-drs-0": (6, 40960),
                "d-two-enflame-drs-1": (6, 40960),
            }
            # HAMi's examples/enflame/vgcu_use.yaml: vgcu-pod-1 (1 slice), vgcu-pod-2 (3)
            shapes = {
                "three": ({"enflame.com/drs-gcu": 3}, 4),
                "one": ({"enflame.com/drs-gcu": 1}, 3),
            }
            await asyncio.gather(
                *(
                    make_pod(kube, f"{kind}-{i}", ns=NS, limits=limits, cpu="100m", memory="128Mi")
                    for kind, (limits, n) in shapes.items()
                    for i in range(n)
                )
            )
            await all_running(kube, f, 7)
            await f.settle()
            clean_run(f)
            assert {a.devices[0].type for p in f.ledger.pods.values() for a in p.allocations} == {
                "Enflame"
            }
            held: dict[str, int] = {}
            for pod in await list_pods(kube, NS):
                ann = pod["metadata"]["annotations"]
                (record,) = json.loads(ann["assigned-containers"]).values()
                assert record["allocated"] is True and record["instanceUUID"]
                assert ann["enflame.com/gcu-assigned"] == "true"
                card = f"{pod['spec']['nodeName']}/{ann['enflame.com/gcu-assigned-index']}"
                held[card] = held.get(card, 0) + record["request"]
                minor = {"d-one/0": "0", "d-two/0": "2", "d-two/1": "3"}[card]
                assert ann["enflame.com/gcu-assigned-minor"] == minor
            assert sum(held.values()) == 15 and max(held.values()) <= 6, held

    live(control_plane, body)
