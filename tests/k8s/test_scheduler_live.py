"""gpupool scheduling pods on a real kube-apiserver: binding, HAMi annotations, pending
reasons, rejections, quotas."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import yaml

from gpupool.config import load_queue_config
from gpupool.k8s.extender import metrics_text
from gpupool.k8s.kube import Kube, KubeError
from gpupool.k8s.main import default_config
from tests.k8s.conftest import ControlPlane
from tests.k8s.kit import (
    clean,
    device_plugins,
    ensure_namespace,
    events_for,
    get_pod,
    make_node,
    make_pod,
    pod_body,
    running,
    set_phase,
    wait_for,
)

pytestmark = pytest.mark.k8s

NS = "team-a"


def live(
    cp: ControlPlane, body: Callable[[Kube], Awaitable[None]], namespaces: tuple[str, ...] = (NS,)
) -> None:
    async def main() -> None:
        kube = await Kube.connect(cp.kubeconfig)
        try:
            for ns in namespaces:
                await ensure_namespace(kube, ns)
            await clean(kube, list(namespaces))
            async with device_plugins(kube):  # they release HAMi's node locks
                await body(kube)
        finally:
            await clean(kube, list(namespaces))
            await kube.close()

    asyncio.run(main())


async def bound(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    pod = await get_pod(kube, ns, name)
    return pod if pod["spec"].get("nodeName") else None


async def condition(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    pod = await get_pod(kube, ns, name)
    for c in pod.get("status", {}).get("conditions") or ():
        if c["type"] == "PodScheduled" and c["status"] == "False":
            return c  # type: ignore[no-any-return]
    return None


def test_pods_bound_with_hami_annotations(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        await make_node(kube, "gpu-json", gpus=2, memory_mib=40960, form="json")
        await make_node(kube, "gpu-colon", gpus=2, memory_mib=40960, form="colon")
        async with running(kube, default_config()) as ctl:
            await make_pod(kube, "whole", ns=NS, limits={"nvidia.com/gpu": 1})
            await make_pod(
                kube,
                "slice",
                ns=NS,
                init=True,
                limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 10000, "nvidia.com/gpucores": 30},
            )
            whole = await wait_for(lambda: bound(kube, NS, "whole"), what="whole bound")
            sliced = await wait_for(lambda: bound(kube, NS, "slice"), what="slice bound")
            for pod in (whole, sliced):
                ann = pod["metadata"]["annotations"]
                node = pod["spec"]["nodeName"]
                assert ann["hami.io/vgpu-node"] == node
                assert pod["metadata"]["labels"]["hami.io/vgpu-node"] == node
                assert ann["hami.io/bind-phase"] in ("allocating", "success")  # the plugin ran
                assert ann["hami.io/vgpu-time"].isdigit() and ann["hami.io/bind-time"].isdigit()
                assert (
                    ann["hami.io/vgpu-devices-to-allocate"] == ann["hami.io/vgpu-devices-allocated"]
                )
                record = json.loads(ann["gpupool.io/placement"])
                assert record["node"] == node
            card = json.loads(whole["metadata"]["annotations"]["gpupool.io/placement"])
            idx = card["cards"][0][0]
            node = whole["spec"]["nodeName"]
            assert (
                whole["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
                == f"GPU-{node}-{idx},NVIDIA,40960,100:;"
            )
            s_ann = sliced["metadata"]["annotations"]
            s_node = sliced["spec"]["nodeName"]
            s_idx = json.loads(s_ann["gpupool.io/placement"])["cards"][0][0]
            # init container first: its empty slot, then the main container's card
            assert (
                s_ann["hami.io/vgpu-devices-allocated"]
                == f";GPU-{s_node}-{s_idx},NVIDIA,10000,30:;"
            )
            assert ctl.stats.binds == 2

    live(control_plane, body)


def test_annotations_patched_first_mode(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        await make_node(kube, "gpu-1", gpus=1)
        async with running(kube, default_config(), annotate_first=True):
            await make_pod(kube, "p", ns=NS, limits={"nvidia.com/gpu": 1})
            pod = await wait_for(lambda: bound(kube, NS, "p"), what="bound")
            assert (
                pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
                == "GPU-gpu-1-0,NVIDIA,40960,100:;"
            )

    live(control_plane, body)


def test_pending_pod_gets_condition_and_event_with_numbers(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        await make_node(kube, "gpu-1", gpus=2)
        async with running(kube, default_config()) as ctl:
            await make_pod(kube, "big", ns=NS, limits={"nvidia.com/gpu": 2})
            await wait_for(lambda: bound(kube, NS, "big"), what="big bound")
            await make_pod(kube, "waits", ns=NS, limits={"nvidia.com/gpu": 1})
            cond = await wait_for(lambda: condition(kube, NS, "waits"), what="condition")
            assert cond["reason"] == "Unschedulable"
            assert any(ch.isdigit() for ch in cond["message"]), cond["message"]
            # counted by the plugin that holds it back: no card free on the one node
            assert 'gpupool_pending_reasons{plugin="gpu-fit"} 1\n' in metrics_text(ctl)
            events = await wait_for(lambda: events_for(kube, NS, "waits"), what="event")
            assert events[0]["reason"] == "FailedScheduling"
            assert events[0]["message"] == cond["message"]
            # the big pod finishes: the waiting one binds
            await set_phase(kube, NS, "big", "Succeeded")
            await wait_for(lambda: bound(kube, NS, "waits"), what="waits bound")

    live(control_plane, body)


@pytest.mark.parametrize(
    ("limits", "labels", "reason"),
    [
        ({"nvidia.com/gpu": 4}, {}, "gpu"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 99999}, {}, "memory"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 150}, {}, "0..100"),
        ({"nvidia.com/gpu": 1}, {"gpupool.io/queue": "nope"}, "does not exist"),
    ],
)
def test_bad_pods_are_rejected_with_reasons(
    control_plane: ControlPlane, limits: dict[str, Any], labels: dict[str, str], reason: str
) -> None:
    async def body(kube: Kube) -> None:
        await make_node(kube, "gpu-1", gpus=2)
        async with running(kube, default_config()) as ctl:
            await make_pod(kube, "bad", ns=NS, limits=limits, labels=labels)
            events = await wait_for(lambda: events_for(kube, NS, "bad"), what="event")
            assert events[0]["reason"] == "Rejected"
            assert reason in events[0]["message"], events[0]["message"]
            cond = await wait_for(lambda: condition(kube, NS, "bad"), what="condition")
            assert cond["message"].startswith("rejected: ")
            assert f"{NS}/bad" in ctl.rejected
            assert (await get_pod(kube, NS, "bad"))["spec"].get("nodeName") is None

    live(control_plane, body)


def test_bad_node_is_reported_and_ignored(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        await make_node(kube, "gpu-ok", gpus=1)
        await make_node(kube, "gpu-bad", gpus=1, form="none")
        await kube.request(
            "PATCH",
            "/api/v1/nodes/gpu-bad",
            {"metadata": {"annotations": {"hami.io/node-nvidia-register": "garbage"}}},
            content_type="application/merge-patch+json",
        )
        async with running(kube, default_config()) as ctl:
            assert "gpu-bad" in ctl.bad_nodes and "gpu-ok" in ctl.nodes_by_name
            events = await wait_for(
                lambda: events_for(kube, "default", "gpu-bad"), what="node event"
            )
            assert events[0]["reason"] == "InvalidNode"
            assert "hami.io/node-nvidia-register" in events[0]["message"]

    live(control_plane, body, namespaces=(NS, "default"))


QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-b}
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: 6}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: a, namespace: team-a}
spec: {clusterQueue: team-a}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: b, namespace: team-b}
spec: {clusterQueue: team-b}
"""


def test_queue_quota_end_to_end(control_plane: ControlPlane) -> None:
    config = load_queue_config(list(yaml.safe_load_all(QUEUES)))

    async def body(kube: Kube) -> None:
        await make_node(kube, "gpu-1", gpus=4)
        await make_node(kube, "gpu-2", gpus=4)
        async with running(kube, config) as ctl:
            for i in range(3):
                await make_pod(
                    kube,
                    f"a{i}",
                    ns="team-a",
                    limits={"nvidia.com/gpu": 1},
                    labels={"kueue.x-k8s.io/queue-name": "a"},
                )
            for i in range(3):
                await make_pod(
                    kube,
                    f"b{i}",
                    ns="team-b",
                    limits={"nvidia.com/gpu": 2},
                    labels={"gpupool.io/queue": "b"},
                )
            for i in range(3):
                await wait_for(lambda i=i: bound(kube, "team-b", f"b{i}"), what=f"b{i}")

            async def a_bound() -> int:
                return sum([bool(await bound(kube, "team-a", f"a{i}")) for i in range(3)])

            assert await wait_for(a_bound, what="two of team-a") == 2
            await asyncio.sleep(0.5)
            assert await a_bound() == 2  # the third is held by team-a's quota of 2 GPUs
            unbound = [f"a{i}" for i in range(3) if not await bound(kube, "team-a", f"a{i}")]
            waiting = unbound.pop()
            cond = await wait_for(lambda: condition(kube, "team-a", waiting), what="reason")
            assert "2" in cond["message"], cond["message"]
            # one of team-a's pods finishes: the third starts
            done = next(f"a{i}" for i in range(3) if f"a{i}" != waiting)
            await set_phase(kube, "team-a", done, "Succeeded")
            await wait_for(lambda: bound(kube, "team-a", waiting), what="third bound")
            usage = ctl.sched.usage("team-a") if ctl.sched else {}
            assert sum(v for (_, r), v in usage.items() if str(r) == "gpu_milli") == 2000

    live(control_plane, body, namespaces=("team-a", "team-b"))


PREEMPTION = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: shared}
spec:
  preemption: {withinClusterQueue: LowerPriority}  # Kueue's default is Never
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: shared, namespace: team-a}
spec: {clusterQueue: shared}
---
apiVersion: gpupool.io/v1alpha1
kind: QueueSettings
spec: {minRuntime: 0}
"""


def test_priority_preempts_and_waits_for_the_victim(control_plane: ControlPlane) -> None:
    """A pod of a higher PriorityClass (the API server fills spec.priority) takes the card of
    a lower one: the victim is evicted through the Eviction API and the card goes to the
    preemptor. (Binds onto a node wait while a victim there is still terminating; here the
    victim has no grace period and goes at once.)"""
    config = load_queue_config(list(yaml.safe_load_all(PREEMPTION)))
    classes = "/apis/scheduling.k8s.io/v1/priorityclasses"

    async def body(kube: Kube) -> None:
        for name, value in (("gpupool-low", 10), ("gpupool-high", 1000)):
            with contextlib.suppress(KubeError):
                await kube.request(
                    "POST",
                    classes,
                    {
                        "apiVersion": "scheduling.k8s.io/v1",
                        "kind": "PriorityClass",
                        "metadata": {"name": name},
                        "value": value,
                    },
                )
        await make_node(kube, "gpu-1", gpus=1)
        async with running(kube, config) as ctl:
            low = pod_body(
                "low", ns=NS, limits={"nvidia.com/gpu": 1}, labels={"gpupool.io/queue": "shared"}
            )
            low["spec"]["priorityClassName"] = "gpupool-low"
            await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", low)
            await wait_for(lambda: bound(kube, NS, "low"), what="low bound")
            high = pod_body(
                "high", ns=NS, limits={"nvidia.com/gpu": 1}, labels={"gpupool.io/queue": "shared"}
            )
            high["spec"]["priorityClassName"] = "gpupool-high"
            await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", high)
            pod = await wait_for(lambda: bound(kube, NS, "high"), what="high bound")
            assert pod["spec"]["priority"] == 1000
            assert ctl.stats.evictions == 1

            async def low_gone() -> bool:
                try:
                    await get_pod(kube, NS, "low")
                except KubeError as exc:
                    return exc.status == 404
                return False

            assert await wait_for(low_gone, what="the victim gone")
            assert list(ctl.allocations()) == [f"{NS}/high"]

    try:
        live(control_plane, body)
    finally:

        async def drop() -> None:
            kube = await Kube.connect(control_plane.kubeconfig)
            for name in ("gpupool-low", "gpupool-high"):
                with contextlib.suppress(KubeError):
                    await kube.request("DELETE", f"{classes}/{name}")
            await kube.close()

        asyncio.run(drop())
