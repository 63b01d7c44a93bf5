"""gpupool against a real API server *and* emulated nodes (kubelet admission, HAMi's device
plugin): every container must run on the card gpupool recorded, the kubelet must admit
every pod gpupool binds, and no card may hold more slices or memory than it has.

Each test ends with :func:`clean_run`: 0 swapped or misdirected allocations, 0 kubelet
rejections, no card over its split count or memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from gpupool.k8s.kube import MERGE_PATCH, Kube
from gpupool.k8s.main import default_config
from gpupool.k8s.nodeagent import Fleet, hami
from tests.k8s.conftest import ControlPlane
from tests.k8s.kit import (
    clean,
    delete_pod,
    ensure_namespace,
    list_pods,
    make_node,
    make_pod,
    running,
    wait_for,
)
from tests.k8s.test_scheduler_live import condition

pytestmark = pytest.mark.k8s

WHOLE = {"nvidia.com/gpu": 1}
NS = "team-a"


def live(cp: ControlPlane, body: Callable[[Kube], Awaitable[None]]) -> None:
    """Runs ``body`` against the API server with a clean namespace and no nodes. Nothing
    else plays the node side here: the tests' own :class:`Fleet` is the only kubelet and
    device plugin (so, for instance, only it releases HAMi's node locks)."""

    async def main() -> None:
        kube = await Kube.connect(cp.kubeconfig)
        try:
            await ensure_namespace(kube, NS)
            await clean(kube, [NS])
            await body(kube)
        finally:
            await clean(kube, [NS])
            await kube.close()

    asyncio.run(main())


@contextlib.asynccontextmanager
async def fleet(kube: Kube, **kwargs: Any) -> AsyncIterator[Fleet]:
    f = Fleet(
        kube,
        start_delay_s=kwargs.pop("start_delay_s", 0.05),
        register_interval_s=kwargs.pop("register_interval_s", 0),
        **kwargs,
    )
    async with f:
        yield f


def clean_run(f: Fleet) -> None:
    s = f.summary()
    faults = {
        k: s[k]
        for k in (
            "swapped_allocations",
            "misdirected_allocations",
            "kubelet_rejections",
            "cards_over_split",
            "cards_over_memory",
        )
    }
    assert faults == dict.fromkeys(faults, 0), f.ledger.describe()


async def phases(kube: Kube, prefix: str = "") -> dict[str, str]:
    return {
        p["metadata"]["name"]: p.get("status", {}).get("phase", "")
        for p in await list_pods(kube, NS)
        if p["metadata"]["name"].startswith(prefix)
    }


async def all_running(
    kube: Kube, f: Fleet, n: int, prefix: str = "", timeout_s: float = 60
) -> None:
    """Waits for ``n`` pods named ``prefix*`` to run; fails at once, with what the nodes
    saw, when one of them failed."""

    async def check() -> bool:
        got = await phases(kube, prefix)
        failed = sorted(k for k, v in got.items() if v == "Failed")
        assert not failed, (
            f"pods failed: {failed[:5]}: {f.ledger.describe()}\n"
            + "\n".join(f.trace[-60:])
            + "\n"
            + "\n".join(e for a in f.agents.values() for e in a.plugin.errors)
        )
        return len(got) == n and all(v == "Running" for v in got.values())

    await wait_for(check, timeout_s, f"{n} pods {prefix}* Running")


def gang_pod(kube: Kube, name: str, gang: str, size: int, **kw: Any) -> Any:
    return make_pod(
        kube,
        name,
        ns=NS,
        limits=kw.pop("limits", WHOLE),
        cpu="100m",
        memory="128Mi",
        annotations={"gpupool.io/gang": gang, "gpupool.io/gang-size": str(size)},
        **kw,
    )


def test_gangs_of_eight_run_on_their_recorded_cards(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        for i in range(4):
            await make_node(kube, f"gpu-{i}", gpus=8)
        async with fleet(kube) as f, running(kube, default_config()):
            await asyncio.gather(
                *(gang_pod(kube, f"g{g}-{i}", f"g{g}", 8) for g in range(4) for i in range(8))
            )
            await all_running(kube, f, 32)
            await f.settle()
            clean_run(f)
            # every card of every node holds exactly one pod
            assert f.ledger.summary()["pods_admitted"] == 32
            cards = [c for uid in f.ledger.pods for _, cs in f.ledger.real_cards(uid) for c in cs]
            assert len(cards) == len(set(cards)) == 32

    live(control_plane, body)


def test_a_thousand_pods_in_gangs_of_eight(control_plane: ControlPlane) -> None:
    """125 gangs of eight 1-GPU pods onto 125 nodes of 8 cards: the full cluster, at once."""
    nodes, gangs = 125, 125

    async def body(kube: Kube) -> None:
        sem = asyncio.Semaphore(32)

        async def limited(coro: Any) -> None:
            async with sem:
                await coro

        await asyncio.gather(*(limited(make_node(kube, f"n{i:03d}", gpus=8)) for i in range(nodes)))
        async with fleet(kube, start_delay_s=0.2) as f, running(kube, default_config()):
            await asyncio.gather(
                *(
                    limited(gang_pod(kube, f"g{g:03d}-{i}", f"g{g:03d}", 8))
                    for g in range(gangs)
                    for i in range(8)
                )
            )
            await all_running(kube, f, gangs * 8, timeout_s=240)
            await f.settle()
            clean_run(f)
            assert f.ledger.summary()["pods_admitted"] == gangs * 8

    live(control_plane, body)


@pytest.mark.parametrize("weight", [1.0, 0.0])
def test_a_burst_spreads_over_nodes_whose_lock_queue_is_short(
    control_plane: ControlPlane, weight: float
) -> None:
    """Eight half-card pods at once onto two empty 8-card nodes: packing alone stacks all
    eight behind one node's lock (weight 0); the bind-queue score puts the burst on both."""
    half = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 50, "nvidia.com/gpumem": 16000}

    async def body(kube: Kube) -> None:
        for i in range(2):
            await make_node(kube, f"gpu-{i}", gpus=8)
        async with fleet(kube) as f, running(kube, default_config(), bind_queue_weight=weight):
            await asyncio.gather(
                *(
                    make_pod(kube, f"b{i}", ns=NS, limits=half, cpu="100m", memory="128Mi")
                    for i in range(8)
                )
            )
            await all_running(kube, f, 8, prefix="b")
            await f.settle()
            clean_run(f)
            nodes = [p["spec"]["nodeName"] for p in await list_pods(kube, NS)]
            assert len(nodes) == 8
            if weight:
                assert set(nodes) == {"gpu-0", "gpu-1"}, nodes
            else:
                assert len(set(nodes)) == 1, nodes

    live(control_plane, body)


def test_slices_from_several_containers_and_init_containers(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        await make_node(kube, "gpu-0", gpus=2, memory_mib=40960)
        async with fleet(kube) as f, running(kube, default_config()):
            for i in range(4):
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"multi-{i}", "namespace": NS},
                    "spec": {
                        "schedulerName": "gpupool",
                        "terminationGracePeriodSeconds": 0,
                        "initContainers": [
                            {
                                "name": "warm",
                                "image": "example.invalid/x",
                                "resources": {
                                    "limits": {
                                        "nvidia.com/gpu": 1,
                                        "nvidia.com/gpumem": 8000,
                                        "nvidia.com/gpucores": 20,
                                    }
                                },
                            }
                        ],
                        "containers": [
                            {
                                "name": f"c{j}",
                                "image": "example.invalid/x",
                                "resources": {
                                    "limits": {
                                        "nvidia.com/gpu": 1,
                                        "nvidia.com/gpumem": 4000,
                                        "nvidia.com/gpucores": 10,
                                    }
                                },
                            }
                            for j in range(2)
                        ],
                    },
                }
                await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", pod)
            await all_running(kube, f, 4, "multi-")
            await f.settle()
            clean_run(f)
            # three Allocate calls per pod (init, c0, c1), each from the pod's own annotation
            assert sum(len(p.allocations) for p in f.ledger.pods.values()) == 12

    live(control_plane, body)


def test_mig_mode_nodes_are_used_in_hamis_format_or_refused(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        reg = [
            {
                "id": f"GPU-mig-{i}",
                "index": i,
                "count": 7,
                "devmem": 81920,
                "devcore": 100,
                "type": "NVIDIA-A100-SXM4-80GB",
                "mode": "mig",
                "health": True,
                "migProfiles": [
                    {"name": "1g.10gb", "memory": 9856, "count": 7},
                    {"name": "3g.40gb", "memory": 40192, "count": 2},
                ],
            }
            for i in range(2)
        ]
        await make_node(kube, "mig-0", gpus=2, form="none")
        await kube.request(
            "PATCH",
            "/api/v1/nodes/mig-0",
            {"metadata": {"annotations": {"hami.io/node-nvidia-register": json.dumps(reg)}}},
            content_type=MERGE_PATCH,
        )
        async with fleet(kube) as f, running(kube, default_config()):
            for i in range(3):
                await make_pod(
                    kube,
                    f"mig-{i}",
                    ns=NS,
                    cpu="100m",
                    memory="128Mi",
                    limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 9000},
                )

            async def decided() -> bool:
                for p in await list_pods(kube, NS):
                    bound = p["spec"].get("nodeName")
                    said = any(
                        c.get("type") == "PodScheduled" and c.get("status") == "False"
                        for c in p.get("status", {}).get("conditions") or ()
                    )
                    if not ((bound and p.get("status", {}).get("phase") == "Running") or said):
                        return False
                return True

            await wait_for(decided, 30, "each MIG pod running or told why not")
            await f.settle()
            clean_run(f)

    live(control_plane, body)


# One A100-40GB in MIG mode as HAMi 2.10 registers it: 8 memory slices, 1g at 0..6,
# 2g at 0, 2, 4, 3g at 0 and 4 (the placements overlap).
MIG_CARD = {
    "id": "GPU-dyn-0",
    "index": 0,
    "count": 7,
    "devmem": 40960,
    "devcore": 100,
    "type": "NVIDIA-A100-SXM4-40GB",
    "mode": "mig",
    "health": True,
    "migProfiles": [
        {
            "name": "1g.5gb",
            "memoryMB": 4864,
            "core": 15,
            "sliceCount": 1,
            "placements": [{"start": i, "size": 1} for i in range(7)],
        },
        {
            "name": "2g.10gb",
            "memoryMB": 9856,
            "core": 29,
            "sliceCount": 2,
            "placements": [{"start": i, "size": 2} for i in (0, 2, 4)],
        },
        {
            "name": "3g.20gb",
            "memoryMB": 19968,
            "core": 43,
            "sliceCount": 3,
            "placements": [{"start": 0, "size": 4}, {"start": 4, "size": 4}],
        },
    ],
}
MIG_MODE = {"nvidia.com/vgpu-mode": "mig"}


def test_mig_pods_get_non_overlapping_placements_in_hamis_format(
    control_plane: ControlPlane,
) -> None:
    """Two 3g pods and a 1g pod decided in one cycle on a card where a 1g instance blocks
    one of the two 3g placements: two run, on placements that do not overlap, each instance
    made by the device plugin exactly where gpupool recorded it; the third waits with the
    reason, and runs once one of the others ends."""

    async def body(kube: Kube) -> None:
        await make_node(kube, "dyn-0", gpus=1, form="none")
        await kube.request(
            "PATCH",
            "/api/v1/nodes/dyn-0",
            {"metadata": {"annotations": {"hami.io/node-nvidia-register": json.dumps([MIG_CARD])}}},
            content_type=MERGE_PATCH,
        )
        for name, mib in (("big-0", 15000), ("big-1", 15000), ("small-0", 4000)):
            await make_pod(
                kube,
                name,
                ns=NS,
                cpu="100m",
                memory="128Mi",
                annotations=MIG_MODE,
                limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": mib},
            )
        async with fleet(kube) as f, running(kube, default_config()):

            async def two_running() -> bool:
                got = await phases(kube)
                return sum(v == "Running" for v in got.values()) == 2

            await wait_for(two_running, 30, "two MIG pods running")
            await asyncio.sleep(2.0)  # time for a wrong bind to reach a kubelet
            await f.settle()
            pods = {p["metadata"]["name"]: p for p in await list_pods(kube, NS)}
            run = [n for n, p in pods.items() if p["status"].get("phase") == "Running"]
            (waiting,) = [n for n in pods if n not in run]
            made = [
                a
                for n in run
                for a in json.loads(
                    pods[n]["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"]
                )
            ]
            assert all(a["migUUID"] and a["gpuUUID"] == "GPU-dyn-0" for a in made), made
            spans = sorted((a["placement"]["start"], a["placement"]["size"]) for a in made)
            assert spans[0][0] + spans[0][1] <= spans[1][0], spans  # no overlap
            profile = {"big": "3g.20gb", "sma": "1g.5gb"}
            assert all(
                a["profile"] == profile[n[:3]]
                for n in run
                for a in json.loads(
                    pods[n]["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"]
                )
            )
            cond = await wait_for(lambda: condition(kube, NS, waiting), 20, "a reason")
            assert "MIG" in cond["message"], cond
            clean_run(f)
            await delete_pod(kube, NS, run[0])

            async def runs() -> bool:
                return (await phases(kube)).get(waiting) == "Running"

            await wait_for(runs, 30, f"{waiting} running once {run[0]} ended")
            await f.settle()
            clean_run(f)
            assert sum(a.plugin.mig_created for a in f.agents.values()) == 3

    live(control_plane, body)


# An A100-80GB in MIG mode beside the 40GB card: its own profiles, the smallest a 1g.10gb.
MIG_CARD_80 = {
    "id": "GPU-dyn-80",
    "index": 1,
    "count": 7,
    "devmem": 81920,
    "devcore": 100,
    "type": "NVIDIA-A100-SXM4-80GB",
    "mode": "mig",
    "health": True,
    "migProfiles": [
        {
            "name": "1g.10gb",
            "memoryMB": 9856,
            "core": 15,
            "sliceCount": 1,
            "placements": [{"start": i, "size": 1} for i in range(7)],
        },
        {
            "name": "2g.20gb",
            "memoryMB": 19968,
            "core": 29,
            "sliceCount": 2,
            "placements": [{"start": i, "size": 2} for i in (0, 2, 4)],
        },
        {
            "name": "3g.40gb",
            "memoryMB": 40192,
            "core": 43,
            "sliceCount": 3,
            "placements": [{"start": 0, "size": 4}, {"start": 4, "size": 4}],
        },
    ],
}


def test_mig_profiles_per_card_model_with_hamis_fallback_for_pods_without_vgpu_mode(
    control_plane: ControlPlane,
) -> None:
    """No card outside MIG mode: pods without ``nvidia.com/vgpu-mode`` take MIG-mode cards
    (HAMi lets them take any card). Eight pods asking 4000 MiB: a 1g.5gb on the A100-40GB
    while a 1g placement is free there (seven), then the eighth the A100-80GB's own
    smallest profile, a 1g.10gb, instead of waiting for a 1g.5gb."""

    async def body(kube: Kube) -> None:
        await make_node(kube, "dyn-1", gpus=2, form="none")
        await kube.request(
            "PATCH",
            "/api/v1/nodes/dyn-1",
            {
                "metadata": {
                    "annotations": {
                        "hami.io/node-nvidia-register": json.dumps([MIG_CARD, MIG_CARD_80])
                    }
                }
            },
            content_type=MERGE_PATCH,
        )
        for i in range(8):
            await make_pod(
                kube,
                f"small-{i}",
                ns=NS,
                cpu="100m",
                memory="128Mi",
                limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000},
            )
        async with fleet(kube) as f, running(kube, default_config()):
            await all_running(kube, f, 8)
            await f.settle()
            made = [
                a
                for p in await list_pods(kube, NS)
                for a in json.loads(p["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"])
            ]
            assert all(a["migUUID"] for a in made), made
            got = sorted((a["gpuUUID"], a["profile"]) for a in made)
            assert got == [("GPU-dyn-0", "1g.5gb")] * 7 + [("GPU-dyn-80", "1g.10gb")], got
            clean_run(f)
            assert sum(a.plugin.mig_created for a in f.agents.values()) == 8

    live(control_plane, body)


def test_a_container_asking_two_gpus_gets_two_mig_instances(control_plane: ControlPlane) -> None:
    """HAMi gives a container ``nvidia.com/gpu: 2`` two MIG devices: both 3g.20gb of the
    A100-40GB, made by the device plugin at the two placements gpupool recorded; a second
    such pod waits with the reason."""

    async def body(kube: Kube) -> None:
        await make_node(kube, "dyn-2", gpus=1, form="none")
        await kube.request(
            "PATCH",
            "/api/v1/nodes/dyn-2",
            {"metadata": {"annotations": {"hami.io/node-nvidia-register": json.dumps([MIG_CARD])}}},
            content_type=MERGE_PATCH,
        )
        for name in ("pair-0", "pair-1"):
            await make_pod(
                kube,
                name,
                ns=NS,
                cpu="100m",
                memory="128Mi",
                annotations=MIG_MODE,
                limits={"nvidia.com/gpu": 2, "nvidia.com/gpumem": 15000},
            )
        async with fleet(kube) as f, running(kube, default_config()):

            async def one_running() -> bool:
                return sum(v == "Running" for v in (await phases(kube)).values()) == 1

            await wait_for(one_running, 30, "one pod of two MIG instances running")
            await f.settle()
            pods = {p["metadata"]["name"]: p for p in await list_pods(kube, NS)}
            (run,) = [n for n, p in pods.items() if p["status"].get("phase") == "Running"]
            made = json.loads(pods[run]["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"])
            assert sorted(
                (a["deviceIndex"], a["profile"], a["placement"]["start"]) for a in made
            ) == [(0, "3g.20gb", 4), (1, "3g.20gb", 0)], made
            assert all(a["migUUID"] for a in made), made
            (waiting,) = [n for n in pods if n != run]
            cond = await wait_for(lambda: condition(kube, NS, waiting), 20, "a reason")
            assert "MIG" in cond["message"], cond
            clean_run(f)
            assert sum(a.plugin.mig_created for a in f.agents.values()) == 2

    live(control_plane, body)


def test_nodes_at_ninety_percent_cpu_from_other_pods(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        for i in range(2):
            await make_node(kube, f"busy-{i}", gpus=8, cpu="10", memory="64Gi")
        async with fleet(kube) as f:
            for i in range(2):
                await f.occupy(f"busy-{i}", cpu_pct=90, memory_pct=10, namespace=NS)
            await all_running(kube, f, 2, "other-")
            async with running(kube, default_config()):
                for i in range(6):  # 1 CPU each: one fits per node
                    await make_pod(kube, f"cpu-{i}", ns=NS, limits=WHOLE, cpu="1", memory="1Gi")

                async def two_running() -> bool:
                    got = await phases(kube, "cpu-")
                    return sum(v == "Running" for v in got.values()) == 2

                await wait_for(two_running, 30, "two pods running, one per node")
                await asyncio.sleep(2.0)  # time for a wrong bind to reach a kubelet
                await f.settle()
                got = await phases(kube, "cpu-")
                assert sorted(got.values()).count("Pending") == 4, got
                clean_run(f)

    live(control_plane, body)


async def offer(kube: Kube, node: str, **extended: str) -> None:
    """The node advertises extended resources (as a device plugin makes the kubelet do)."""
    obj = await kube.request("GET", f"/api/v1/nodes/{node}")
    alloc = {**obj["status"]["allocatable"], **extended}
    await kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        {"status": {"capacity": alloc, "allocatable": alloc}},
        content_type=MERGE_PATCH,
    )


def test_extended_resources_counted_against_every_pod_on_the_node(
    control_plane: ControlPlane,
) -> None:
    """rdma/hca: r1 has 1, r2 has 2 of which another scheduler's pod holds 1. Of three pods
    asking one each, decided in one cycle, two run (one per node) and the kubelet refuses
    none; the third waits until the other pod ends. A pod asking a resource no node has
    waits with the reason."""

    async def body(kube: Kube) -> None:
        for name, hcas in (("r1", "1"), ("r2", "2")):
            await make_node(kube, name, gpus=8)
            await offer(kube, name, **{"rdma/hca": hcas})
        async with fleet(kube) as f:
            other = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "other-r2", "namespace": NS},
                "spec": {
                    "nodeName": "r2",
                    "schedulerName": "default-scheduler",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "net",
                            "image": "example.invalid/net:1",
                            "resources": {"limits": {"rdma/hca": "1"}},
                        }
                    ],
                },
            }
            await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", other)
            await all_running(kube, f, 1, "other-")
            for i in range(3):
                await make_pod(
                    kube,
                    f"rd-{i}",
                    ns=NS,
                    limits={**WHOLE, "rdma/hca": 1},
                    cpu="100m",
                    memory="128Mi",
                )
            await make_pod(
                kube,
                "foo",
                ns=NS,
                limits={**WHOLE, "example.com/foo": 1},
                cpu="100m",
                memory="128Mi",
            )
            async with running(kube, default_config()):

                async def two_running() -> bool:
                    got = await phases(kube, "rd-")
                    return sum(v == "Running" for v in got.values()) == 2

                await wait_for(two_running, 30, "two rd- pods running")
                await asyncio.sleep(2.0)  # time for a wrong bind to reach a kubelet
                await f.settle()
                got = await phases(kube, "rd-")
                (waiting,) = [k for k, v in got.items() if v == "Pending"]
                nodes = sorted(
                    p["spec"]["nodeName"]
                    for p in await list_pods(kube, NS)
                    if p["metadata"]["name"].startswith("rd-") and p["spec"].get("nodeName")
                )
                assert nodes == ["r1", "r2"]
                cond = await wait_for(lambda: condition(kube, NS, waiting), 20, "a reason")
                assert "rdma/hca" in cond["message"], cond
                cond = await wait_for(lambda: condition(kube, NS, "foo"), 20, "a reason")
                assert "example.com/foo" in cond["message"], cond
                clean_run(f)
                await delete_pod(kube, NS, "other-r2")
                await all_running(kube, f, 3, "rd-", timeout_s=30)
                clean_run(f)

    live(control_plane, body)


def test_required_node_affinity_and_node_selector(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        await make_node(kube, "zone-a", gpus=8, labels={"zone": "a", "pool": "train"})
        await make_node(kube, "zone-b", gpus=8, labels={"zone": "b", "pool": "train"})
        affinity = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
                    ]
                }
            }
        }
        async with fleet(kube) as f, running(kube, default_config()):
            for i in range(6):
                body = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"aff-{i}", "namespace": NS},
                    "spec": {
                        "schedulerName": "gpupool",
                        "terminationGracePeriodSeconds": 0,
                        "nodeSelector": {"pool": "train"},
                        "affinity": affinity,
                        "containers": [
                            {
                                "name": "main",
                                "image": "example.invalid/x",
                                "resources": {"limits": WHOLE},
                            }
                        ],
                    },
                }
                await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", body)
            await all_running(kube, f, 6, "aff-")
            await f.settle()
            clean_run(f)
            nodes = {p["spec"]["nodeName"] for p in await list_pods(kube, NS)}
            assert nodes == {"zone-b"}

    live(control_plane, body)


def test_a_node_whose_device_plugin_died_gets_no_gpu_pods(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        await make_node(kube, "dead", gpus=8)
        await make_node(kube, "alive", gpus=8)
        async with fleet(kube) as f:
            await f.agent("dead").kill_device_plugin()
            async with running(kube, default_config()):
                for i in range(6):
                    await make_pod(kube, f"h-{i}", ns=NS, limits=WHOLE, cpu="100m", memory="128Mi")
                await all_running(kube, f, 6, "h-")
                await f.settle()
                clean_run(f)
                nodes = {p["spec"]["nodeName"] for p in await list_pods(kube, NS)}
                assert nodes == {"alive"}

    live(control_plane, body)


def test_a_replacement_pod_of_the_same_name(control_plane: ControlPlane) -> None:
    """A pod replaced by a same-name pod asking for more, while gpupool's bind of the first
    waits for the node's lock: the replacement must get a decision of its own (binds fenced
    by the pod's UID). A stale one-card decision on the two-card pod would fail the
    kubelet's ``Allocate`` (``device number not matched``)."""

    async def body(kube: Kube) -> None:
        await make_node(kube, "gpu-0", gpus=2)
        # another scheduler's pod is being allocated on the node: it holds HAMi's lock
        await make_pod(kube, "holder", ns=NS, scheduler="elsewhere", cpu="100m", memory="128Mi")
        lock = hami.format_lock(datetime.now(UTC), NS, "holder")
        await kube.request(
            "PATCH",
            "/api/v1/nodes/gpu-0",
            {"metadata": {"annotations": {hami.NODE_LOCK: lock}}},
            content_type=MERGE_PATCH,
        )
        async with fleet(kube) as f, running(kube, default_config()):
            await make_pod(kube, "same", ns=NS, limits=WHOLE, cpu="100m", memory="128Mi")
            await asyncio.sleep(1.5)  # decided; its bind waits for the lock
            await delete_pod(kube, NS, "same")
            await make_pod(
                kube, "same", ns=NS, limits={"nvidia.com/gpu": 2}, cpu="100m", memory="128Mi"
            )
            await asyncio.sleep(0.5)
            await kube.request(
                "PATCH",
                "/api/v1/nodes/gpu-0",
                {"metadata": {"annotations": {hami.NODE_LOCK: None}}},
                content_type=MERGE_PATCH,
            )
            await all_running(kube, f, 1, "same")
            await f.settle()
            clean_run(f)
            pod = await kube.request("GET", f"/api/v1/namespaces/{NS}/pods/same")
            record = json.loads(pod["metadata"]["annotations"]["gpupool.io/placement"])
            assert len(record["cards"]) == 2

    live(control_plane, body)


def test_bench_reports_the_node_side(control_plane: ControlPlane) -> None:
    """``gpupool k8s bench`` with node agents and other pods: every bound pod is judged by
    a kubelet, and the figures say how."""
    from gpupool.k8s.bench import run_bench

    result = asyncio.run(
        run_bench(
            control_plane.kubeconfig,
            nodes=3,
            gpus=4,
            pods=12,
            ns="gpupool-bench-node",
            other_cpu_pct=50,
        )
    )
    assert result["bound"] == 12 and result["node_agents"] is True
    # 12 measured pods, the warm-up pod and 3 other pods, each admitted or rejected
    assert result["pods_admitted"] + result["kubelet_rejections"] == 16
    faults = {
        k: result[k]
        for k in (
            "swapped_allocations",
            "misdirected_allocations",
            "kubelet_rejections",
            "cards_over_split",
            "cards_over_memory",
        )
    }
    assert faults == dict.fromkeys(faults, 0)
    assert result["pods_running"] == 12
