"""Pod affinity, anti-affinity and topology spread on a real API server: the pods of other
schedulers counted by their labels, and pods decided in one cycle counting each other."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from gpupool.k8s.kube import Kube
from gpupool.k8s.main import default_config
from tests.k8s.conftest import ControlPlane
from tests.k8s.kit import DevicePluginLocks, make_node, pod_body, running, wait_for
from tests.k8s.test_binding_live import live
from tests.k8s.test_scheduler_live import NS, bound, condition

pytestmark = pytest.mark.k8s

HOST = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def term(key: str, **labels: str) -> dict[str, Any]:
    return {"topologyKey": key, "labelSelector": {"matchLabels": labels}}


async def post(kube: Kube, pod: dict[str, Any]) -> None:
    await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", pod)


def test_anti_affinity_spreads_a_two_pod_deployment_over_two_nodes(
    control_plane: ControlPlane,
) -> None:
    async def body(kube: Kube, plugin: DevicePluginLocks) -> None:
        for n in ("n1", "n2"):
            await make_node(kube, n, gpus=4, labels={HOST: n})
        # the replicas a ReplicaSet makes: same labels, each keeping away from the others;
        # made before gpupool starts, so both are decided in one cycle
        for i in range(3):
            pod = pod_body(f"web-{i}", ns=NS, labels={"app": "web"}, limits={"nvidia.com/gpu": 1})
            pod["spec"]["affinity"] = {"podAntiAffinity": {REQUIRED: [term(HOST, app="web")]}}
            await post(kube, pod)
        async with running(kube, default_config()):
            nodes = []
            for i in range(2):
                pod = await wait_for(lambda i=i: bound(kube, NS, f"web-{i}"), 20, f"web-{i}")
                nodes.append(pod["spec"]["nodeName"])
            assert sorted(nodes) == ["n1", "n2"]
            cond = await wait_for(lambda: condition(kube, NS, "web-2"), 20, "a reason")
            assert "pod anti-affinity" in cond["message"]
            assert (await bound(kube, NS, "web-2")) is None

    live(control_plane, body)


def test_affinity_colocates_with_a_pod_another_scheduler_placed(
    control_plane: ControlPlane,
) -> None:
    async def body(kube: Kube, plugin: DevicePluginLocks) -> None:
        for n in ("n1", "n2", "n3"):
            await make_node(kube, n, gpus=4, labels={HOST: n})
        cache = pod_body("cache", ns=NS, labels={"app": "cache"}, scheduler="default-scheduler")
        cache["spec"]["nodeName"] = "n2"
        await post(kube, cache)
        async with running(kube, default_config()):
            for i in range(3):
                pod = pod_body(f"user-{i}", ns=NS, limits={"nvidia.com/gpu": 1})
                pod["spec"]["affinity"] = {"podAffinity": {REQUIRED: [term(HOST, app="cache")]}}
                await post(kube, pod)
            lonely = pod_body("lonely", ns=NS, limits={"nvidia.com/gpu": 1})
            lonely["spec"]["affinity"] = {"podAffinity": {REQUIRED: [term(HOST, app="none")]}}
            await post(kube, lonely)
            for i in range(3):
                pod = await wait_for(lambda i=i: bound(kube, NS, f"user-{i}"), 20, f"user-{i}")
                assert pod["spec"]["nodeName"] == "n2"
            cond = await wait_for(lambda: condition(kube, NS, "lonely"), 20, "a reason")
            assert "pod affinity" in cond["message"]

    live(control_plane, body)


def test_topology_spread_with_max_skew_one_over_zones(control_plane: ControlPlane) -> None:
    zones = {"a1": "a", "a2": "a", "b1": "b"}

    async def body(kube: Kube, plugin: DevicePluginLocks) -> None:
        for n, z in zones.items():
            await make_node(kube, n, gpus=8, labels={HOST: n, "topology.kubernetes.io/zone": z})
        # one replica another scheduler already placed in zone a
        first = pod_body("spread-x", ns=NS, labels={"app": "s"}, scheduler="default-scheduler")
        first["spec"]["nodeName"] = "a1"
        await post(kube, first)
        async with running(kube, default_config()):
            for i in range(5):
                pod = pod_body(
                    f"spread-{i}", ns=NS, labels={"app": "s"}, limits={"nvidia.com/gpu": 1}
                )
                pod["spec"]["topologySpreadConstraints"] = [
                    {
                        "maxSkew": 1,
                        "topologyKey": "topology.kubernetes.io/zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": "s"}},
                    }
                ]
                await post(kube, pod)
            count = Counter({"a": 1})
            for i in range(5):
                pod = await wait_for(lambda i=i: bound(kube, NS, f"spread-{i}"), 20, f"spread-{i}")
                count[zones[pod["spec"]["nodeName"]]] += 1
            assert count == {"a": 3, "b": 3}

    live(control_plane, body)
