"""MIG profiles chosen per card as the pod is placed (HAMi 2.10's ``selectMigCandidate`` on
the node being scored), and a pod whose profiles are read again keeping its queue place.
Without a server: the controller with a fake client (``test_controller_fake.py``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gpupool.k8s.controller import Controller, Options
from gpupool.k8s.hami.mig import MIG_ALLOCATIONS
from tests.k8s.kit import hami_node_object, pod_body
from tests.k8s.test_controller_fake import FakeKube, default_config

A40 = "NVIDIA-A100-SXM4-40GB"
A80 = "NVIDIA-A100-SXM4-80GB"


def profile(name: str, mib: int, core: int, slices: int, spans: list[tuple[int, int]]) -> Any:
    return {
        "name": name,
        "memoryMB": mib,
        "core": core,
        "sliceCount": slices,
        "placements": [{"start": a, "size": b} for a, b in spans],
    }


P40 = [
    profile("1g.5gb", 4864, 14, 1, [(i, 1) for i in range(7)]),
    profile("3g.20gb", 19968, 42, 3, [(0, 4), (4, 4)]),
    profile("7g.40gb", 40192, 100, 7, [(0, 8)]),
]
P80 = [
    profile("1g.10gb", 9856, 14, 1, [(i, 1) for i in range(7)]),
    profile("3g.40gb", 40192, 42, 3, [(0, 4), (4, 4)]),
    profile("7g.80gb", 81920, 100, 7, [(0, 8)]),
]


def mig_node(name: str, model: str, mib: int, profiles: list[Any], **extra: Any) -> dict[str, Any]:
    register = [
        {
            "id": f"GPU-{name}",
            "index": 0,
            "count": 7,
            "devmem": mib,
            "devcore": 100,
            "type": model,
            "mode": "mig",
            "health": True,
            "migProfiles": profiles,
        }
    ]
    return hami_node_object(
        name,
        json.dumps(register),
        7,
        labels=extra.get("labels", {}),
        taints=extra.get("taints", []),
    )


def mig_pod(name: str, mib: int, **extra: Any) -> dict[str, Any]:
    pod = pod_body(name, ns="team-a", limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": mib})
    pod["metadata"]["resourceVersion"] = "1"
    pod["metadata"]["annotations"] = {"nvidia.com/vgpu-mode": "mig", **extra.get("ann", {})}
    pod["spec"].update(extra.get("spec", {}))
    return pod


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def start(nodes: list[dict[str, Any]], clock: Clock) -> Controller:
    ctl = Controller(
        FakeKube(),  # type: ignore[arg-type]
        default_config(),
        Options(leader_elect=False, node_lock=False),
        clock=clock,
    )
    for n in nodes:
        ctl.node_informer.cache[n["metadata"]["name"]] = n
    ctl.rebuild()
    return ctl


def add(ctl: Controller, pod: dict[str, Any], event: str = "ADDED") -> None:
    key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    ctl.pod_informer.cache[key] = pod
    ctl._on_pod(event, pod, None)


async def settle() -> None:
    for _ in range(30):
        await asyncio.sleep(0)


def test_a_card_gives_a_larger_profile_on_the_node_the_pod_can_take() -> None:
    """4000 MiB is a 1g.5gb on the A100-40GB of node a and a 1g.10gb on the A100-80GB of
    node b; the pod may only run in zone b. HAMi scores node b alone and takes its
    1g.10gb. Before, gpupool gave the pod the smallest profile of all cards (1g.5gb, on
    40GB cards only) and it waited for node a, which it may not use."""

    async def body() -> None:
        ctl = start(
            [
                mig_node("a", A40, 40960, P40, labels={"zone": "a"}),
                mig_node("b", A80, 81920, P80, labels={"zone": "b"}),
            ],
            Clock(),
        )
        add(ctl, mig_pod("p", 4000, spec={"nodeSelector": {"zone": "b"}}))
        ctl.cycle()
        await settle()
        got = ctl.allocations()
        assert got["team-a/p"][0] == "b"
        (alloc,) = ctl.mig.of("team-a/p")
        assert (alloc.uuid, alloc.profile) == ("GPU-b", "1g.10gb")

    asyncio.run(body())


def test_a_card_whose_smaller_profiles_are_taken_gives_a_larger_one() -> None:
    """Seven 1g.5gb instances fill a 40GB card's 1g placements, and its 3g and 7g overlap
    them: the eighth pod goes to the 80GB card's 1g.10gb (one pod a cycle: instances of
    one card's profiles are counted apart within a cycle, see docs/kubernetes.md)."""

    async def body() -> None:
        ctl = start([mig_node("a", A40, 40960, P40), mig_node("b", A80, 81920, P80)], Clock())
        for i in range(8):
            add(ctl, mig_pod(f"p{i}", 4000))
            ctl.cycle()
            await settle()
        got = [(a.uuid, a.profile) for i in range(8) for a in ctl.mig.of(f"team-a/p{i}")]
        assert sorted(got) == [("GPU-a", "1g.5gb")] * 7 + [("GPU-b", "1g.10gb")]

    asyncio.run(body())


def test_a_pod_read_again_keeps_its_place_in_the_queue() -> None:
    """Pod A (any card) waits before pod C (40GB cards only) for node a's one 7g instance.
    An 80GB node joins, tainted: A's profiles are read again (a new card model) and it is
    submitted again. When the 7g instance frees, A, the older, takes it. Before, A was
    submitted again as new and C went first."""

    async def body() -> None:
        clock = Clock()
        ctl = start([mig_node("a", A40, 40960, P40)], clock)
        add(ctl, mig_pod("x", 30000))
        ctl.cycle()
        await settle()
        assert "team-a/x" in ctl.allocations()
        clock.now += 1
        add(ctl, mig_pod("a", 30000))
        clock.now += 1
        add(ctl, mig_pod("c", 30000, ann={"nvidia.com/use-gputype": "A100-SXM4-40GB"}))
        ctl.cycle()
        clock.now += 1
        taint = [{"key": "maintenance", "value": "yes", "effect": "NoSchedule"}]
        node_b = mig_node("b", A80, 81920, P80, taints=taint)
        ctl.node_informer.cache["b"] = node_b
        ctl._on_node("ADDED", node_b, None)
        ctl.cycle()
        await settle()
        assert "7g.80gb" in ctl.requests["team-a/a"].gpu.mig_choices  # read again
        clock.now += 1
        done = mig_pod("x", 30000)
        done["spec"]["nodeName"] = "a"
        done["metadata"]["annotations"][MIG_ALLOCATIONS] = json.dumps(
            [a.to_json() for a in ctl.mig.of("team-a/x")]
        )
        done["status"] = {"phase": "Succeeded"}
        add(ctl, done, "MODIFIED")
        ctl.cycle()
        await settle()
        got = ctl.allocations()
        assert "team-a/a" in got and "team-a/c" not in got

    asyncio.run(body())
