"""The controller's bookkeeping against a fake client that records what it is asked to do."""

from __future__ import annotations

import asyncio
from typing import Any

from gpupool.k8s.controller import Controller, Options
from gpupool.k8s.main import default_config
from tests.k8s.kit import pod_body, register_json


class FakeKube:
    """Answers every request with ``{}`` and remembers (method, path, body)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    async def request(
        self, method: str, path: str, body: object = None, **_: Any
    ) -> dict[str, Any]:
        self.calls.append((method, path, body))
        return {}

    def posts(self, suffix: str) -> list[str]:
        return [p for m, p, _ in self.calls if m == "POST" and p.endswith(suffix)]


def node_obj(name: str, gpus: int) -> dict[str, Any]:
    alloc = {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": str(gpus * 10)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "annotations": {
                "hami.io/node-nvidia-register": register_json(name, gpus, "A100", 40960)
            },
        },
        "spec": {},
        "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod_obj(name: str, node: str | None = None) -> dict[str, Any]:
    pod = pod_body(name, ns="team-a", limits={"nvidia.com/gpu": 1})
    pod["metadata"]["resourceVersion"] = "1"
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def controller(kube: FakeKube) -> Controller:
    ctl = Controller(kube, default_config(), Options(leader_elect=False))  # type: ignore[arg-type]
    ctl.node_informer.cache["n1"] = node_obj("n1", 1)
    ctl.rebuild()
    return ctl


def test_bind_waits_for_an_evicted_pod_on_its_node() -> None:
    async def body() -> None:
        kube = FakeKube()
        ctl = controller(kube)
        ctl.evicting["team-a/victim"] = "n1"  # evicted, still terminating on n1
        pod = pod_obj("p")
        ctl.pod_informer.cache["team-a/p"] = pod
        ctl._on_pod("ADDED", pod, None)
        ctl.cycle()
        await asyncio.sleep(0)
        assert kube.posts("/binding") == []
        assert "team-a/p" in ctl.allocations()  # held in the core meanwhile
        ctl._on_pod("DELETED", pod_obj("victim", "n1"), None)
        for _ in range(5):
            await asyncio.sleep(0)
        assert kube.posts("/binding") == ["/api/v1/namespaces/team-a/pods/p/binding"]

    asyncio.run(body())


def test_pod_deleted_while_pending_is_withdrawn_and_frees_nothing() -> None:
    async def body() -> None:
        kube = FakeKube()
        ctl = controller(kube)
        for name in ("a", "b"):
            pod = pod_obj(name)
            ctl.pod_informer.cache[f"team-a/{name}"] = pod
            ctl._on_pod("ADDED", pod, None)
        ctl.cycle()  # one card: a is bound, b waits
        await asyncio.sleep(0)
        assert list(ctl.allocations()) == ["team-a/a"]
        assert ctl.sched is not None and len(ctl.sched.pending()) == 1
        ctl._on_pod("DELETED", pod_obj("b"), None)
        assert ctl.sched.pending() == [] and "team-a/b" not in ctl.pod_job
        # a finishes: its card is free again
        done = pod_obj("a", "n1")
        done["status"] = {"phase": "Succeeded"}
        ctl._on_pod("MODIFIED", done, None)
        assert ctl.allocations() == {} and ctl.sched.running() == []

    asyncio.run(body())


def test_bound_pod_with_a_placement_it_did_not_make_is_taken_back() -> None:
    async def body() -> None:
        kube = FakeKube()
        ctl = controller(kube)
        pod = pod_obj("elsewhere", "n1")
        pod["metadata"]["annotations"]["gpupool.io/placement"] = (
            '{"job":"team-a/elsewhere","task":"team-a/elsewhere/ps0-0","queue":"default",'
            '"flavor":"","node":"n1","cpu":1000,"mem":1024,"start":1.0,"gang":1,'
            '"cards":[[0,1000,40960,null]]}'
        )
        ctl.pod_informer.cache["team-a/elsewhere"] = pod
        ctl._on_pod("ADDED", pod, None)
        assert ctl.allocations() == {"team-a/elsewhere": ("n1", ((0, 1000, 40960),))}
        # so a new pod finds no card
        new = pod_obj("new")
        ctl.pod_informer.cache["team-a/new"] = new
        ctl._on_pod("ADDED", new, None)
        ctl.cycle()
        await asyncio.sleep(0)
        assert kube.posts("/binding") == []

    asyncio.run(body())


def test_pod_bound_by_hami_alone_is_taken_back() -> None:
    async def body() -> None:
        kube = FakeKube()
        ctl = controller(kube)
        pod = pod_obj("hami", "n1")
        pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = (
            "GPU-n1-0,NVIDIA,40960,0:;"
        )
        ctl.pod_informer.cache["team-a/hami"] = pod
        ctl.rebuild()
        assert ctl.allocations() == {"team-a/hami": ("n1", ((0, 1000, 40960),))}

    asyncio.run(body())
