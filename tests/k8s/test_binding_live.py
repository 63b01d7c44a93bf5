"""The node side of binding, on a real API server: HAMi's node lock (one allocating pod per
node, pipelined across nodes), every pod counted against its node, required node affinity,
UID-fenced binds, eviction, and readiness on the leader alone. The device plugins' part in
the lock is played by :class:`~tests.k8s.kit.DevicePluginLocks`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpupool.k8s.binding import PodBinder
from gpupool.k8s.kube import Kube, KubeError
from gpupool.k8s.main import default_config
from gpupool.k8s.nodelock import LOCK_ANNOTATION, NodeLocks
from tests.k8s.conftest import ControlPlane
from tests.k8s.kit import (
    DevicePluginLocks,
    RecordingHost,
    clean,
    ensure_namespace,
    get_pod,
    list_pods,
    make_node,
    make_pod,
    pod_body,
    running,
    set_phase,
    wait_for,
)
from tests.k8s.test_leader_live import LEASE, LEASE_NS, QUEUES, holder
from tests.k8s.test_scheduler_live import NS, bound, condition

pytestmark = pytest.mark.k8s


def live(cp: ControlPlane, body: Callable[[Kube, DevicePluginLocks], Awaitable[None]]) -> None:
    async def main() -> None:
        kube = await Kube.connect(cp.kubeconfig)
        plugin = DevicePluginLocks(kube)
        task = asyncio.create_task(plugin.run())
        try:
            await ensure_namespace(kube, NS)
            await clean(kube, [NS])
            await body(kube, plugin)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await clean(kube, [NS])
            await kube.close()

    asyncio.run(main())


async def bound_pods(kube: Kube) -> list[dict[str, Any]]:
    return [p for p in await list_pods(kube, NS) if p["spec"].get("nodeName")]


def test_gang_of_eight_binds_one_pod_at_a_time_under_the_lock(control_plane: ControlPlane) -> None:
    async def body(kube: Kube, plugin: DevicePluginLocks) -> None:
        await make_node(kube, "gpu-8", gpus=8)
        async with running(kube, default_config()) as ctl:
            for i in range(8):
                await make_pod(
                    kube,
                    f"g{i}",
                    ns=NS,
                    limits={"nvidia.com/gpu": 1},
                    annotations={"gpupool.io/gang": "eight", "gpupool.io/gang-size": "8"},
                )

            async def all_released() -> bool:
                return len([r for r in plugin.released if r[0] == "gpu-8"]) == 8

            await wait_for(all_released, 60, "8 allocations on gpu-8")
            pods = await bound_pods(kube)
            assert len(pods) == 8
            # at every Allocate the locked pod was the only one allocating on the node
            assert plugin.allocating_overlaps() == []
            assert {r[1] for r in plugin.released} == {f"{NS}/g{i}" for i in range(8)}
            assert ctl.binder.max_in_flight["gpu-8"] == 1 and ctl.locks.taken == 8
            uuids = [
                p["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"].split(",")[0]
                for p in pods
            ]
            assert len(set(uuids)) == 8  # eight different cards
            node = await kube.request("GET", "/api/v1/nodes/gpu-8")
            assert LOCK_ANNOTATION not in node["metadata"].get("annotations", {})

    live(control_plane, body)


def test_locks_are_held_on_many_nodes_at_once_and_one_pod_per_node(
    control_plane: ControlPlane,
) -> None:
    """With the device plugins silent, each node gets exactly one pod (the one its lock
    names) and every node is locked at once; when they answer, the rest follow."""

    async def body(kube: Kube, plugin: DevicePluginLocks) -> None:
        nodes = [f"gpu-{i}" for i in range(4)]
        plugin.paused.update(nodes)
        for n in nodes:
            await make_node(kube, n, gpus=2)
        async with running(kube, default_config()) as ctl:
            for i in range(8):
                await make_pod(kube, f"p{i}", ns=NS, limits={"nvidia.com/gpu": 1})

            async def four_bound() -> list[dict[str, Any]] | None:
                pods = await bound_pods(kube)
                return pods if len(pods) >= 4 else None

            await wait_for(four_bound, 30, "one pod bound per node")
            await asyncio.sleep(1.5)  # nothing more may be bound while the locks are held
            pods = await bound_pods(kube)
            assert sorted(p["spec"]["nodeName"] for p in pods) == nodes
            for p in pods:
                node = await kube.request("GET", f"/api/v1/nodes/{p['spec']['nodeName']}")
                lock = node["metadata"]["annotations"][LOCK_ANNOTATION]
                assert lock.endswith(f",{NS},{p['metadata']['name']}")
            plugin.paused.clear()

            async def all_bound() -> bool:
                return len(await bound_pods(kube)) == 8

            await wait_for(all_bound, 30, "all 8 bound")
            await wait_for(lambda: _released(plugin, 8), 30, "8 allocations")
            assert plugin.allocating_overlaps() == []
            assert max(ctl.binder.max_in_flight.values()) == 1

    live(control_plane, body)


async def _released(plugin: DevicePluginLocks, n: int) -> bool:
    return len(plugin.released) >= n


def test_dangling_lock_of_a_pod_that_is_gone_is_taken_over(control_plane: ControlPlane) -> None:
    async def body(kube: Kube, plugin: DevicePluginLocks) -> None:
        await make_node(kube, "gpu-1", gpus=1)
        await kube.request(
            "PATCH",
            "/api/v1/nodes/gpu-1",
            {
                "metadata": {
                    "annotations": {LOCK_ANNOTATION: "2030-01-01T00:00:00Z,team-a,long-gone"}
                }
            },
            content_type="application/merge-patch+json",
        )
        async with running(kube, default_config()) as ctl:
            await make_pod(kube, "p", ns=NS, limits={"nvidia.com/gpu": 1})
            await wait_for(lambda: bound(kube, NS, "p"), 20, "p bound")
            assert ctl.locks.stale_released == 1

    live(control_plane, body)


def test_node_full_of_other_pods_is_not_chosen_until_they_end(control_plane: ControlPlane) -> None:
    async def body(kube: Kube, plugin: DevicePluginLocks) -> None:
        await make_node(kube, "busy", gpus=2, cpu="10", memory="64Gi")
        # a DaemonSet-like pod another scheduler placed: 9 of the node's 10 CPUs
        other = pod_body("agent", ns=NS, scheduler="default-scheduler", cpu="8", memory="1Gi")
        other["spec"]["nodeName"] = "busy"
        other["spec"]["initContainers"] = [
            {  # an init container counts if it is larger
                "name": "setup",
                "image": "example.invalid/x",
                "resources": {"requests": {"cpu": "9", "memory": "1Gi"}},
            }
        ]
        await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", other)
        async with running(kube, default_config()) as ctl:
            await make_pod(kube, "train", ns=NS, cpu="2", limits={"nvidia.com/gpu": 1})
            cond = await wait_for(lambda: condition(kube, NS, "train"), 20, "a reason")
            assert "CPU" in cond["message"] or "cpu" in cond["message"]
            assert ctl.usage.of("busy")["cpu"] == 9000
            assert (await get_pod(kube, NS, "train"))["spec"].get("nodeName") is None
            await set_phase(kube, NS, "agent", "Succeeded")  # it ended: its CPUs are free
            pod = await wait_for(lambda: bound(kube, NS, "train"), 20, "train bound")
            assert pod["spec"]["nodeName"] == "busy"
            assert ctl.usage.of("busy") == {}

    live(control_plane, body)


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def test_required_node_affinity_is_honoured(control_plane: ControlPlane) -> None:
    cases = {
        "in-b": (
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
            "zone-b",
        ),
        "notin-b": (
            {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]},
            "zone-a",
        ),
        "gen-gt-4": (
            {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]},
            "zone-b",
        ),
        "by-name": (
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["zone-a"]}]},
            "zone-a",
        ),
        "nowhere": (
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["c"]}]},
            None,
        ),
    }

    async def body(kube: Kube, plugin: DevicePluginLocks) -> None:
        await make_node(kube, "zone-a", gpus=4, labels={"zone": "a", "gen": "3"})
        await make_node(kube, "zone-b", gpus=4, labels={"zone": "b", "gen": "5"})
        async with running(kube, default_config()):
            for name, (term, _) in cases.items():
                pod = pod_body(name, ns=NS, limits={"nvidia.com/gpu": 1})
                pod["spec"]["affinity"] = affinity(term)
                await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", pod)
            for name, (_, where) in cases.items():
                if where is None:
                    cond = await wait_for(lambda: condition(kube, NS, "nowhere"), 20, "a reason")
                    assert "node affinity does not match (zone In c)" in cond["message"]
                    continue
                pod = await wait_for(lambda n=name: bound(kube, NS, n), 20, f"{name} bound")
                assert pod["spec"]["nodeName"] == where, name

    live(control_plane, body)


async def _binder(kube: Kube) -> PodBinder:
    async def exists(ns: str, name: str) -> bool:
        return True

    locks = NodeLocks(kube, lambda n: None, exists, clock=time.time)
    return PodBinder(kube, locks, RecordingHost())


def test_same_name_replacement_pod_is_never_bound_with_a_stale_decision(
    control_plane: ControlPlane,
) -> None:
    """Pod r's bind waits behind gpu-1's lock; r is deleted and made again (a new UID,
    asking for 2 CPUs). The waiting bind, made for the old r, must not bind the new one:
    the new r is bound with its own decision."""

    async def body(kube: Kube, plugin: DevicePluginLocks) -> None:
        await make_node(kube, "gpu-1", gpus=2)
        plugin.paused.add("gpu-1")
        async with running(kube, default_config()) as ctl:
            await make_pod(kube, "first", ns=NS, limits={"nvidia.com/gpu": 1})
            await wait_for(lambda: bound(kube, NS, "first"), 20, "first bound")
            old = await make_pod(kube, "r", ns=NS, cpu="1", limits={"nvidia.com/gpu": 1})

            async def waiting() -> bool:
                return ctl.binder.lock_waits >= 1

            await wait_for(waiting, 20, "r's bind waiting for the lock")
            await kube.request(
                "DELETE",
                f"/api/v1/namespaces/{NS}/pods/r",
                {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
            )
            new = await make_pod(kube, "r", ns=NS, cpu="2", limits={"nvidia.com/gpu": 1})
            assert new["metadata"]["uid"] != old["metadata"]["uid"]
            await asyncio.sleep(1.5)  # the old decision's bind looks again meanwhile
            plugin.paused.clear()
            pod = await wait_for(lambda: bound(kube, NS, "r"), 20, "the new r bound")
            record = json.loads(pod["metadata"]["annotations"]["gpupool.io/placement"])
            assert pod["metadata"]["uid"] == new["metadata"]["uid"]
            assert record["cpu"] == 2000  # the new pod's own decision
            assert ctl.stats.binds == 2 and ctl.stats.bind_failures == 0
            cards = ctl.allocations()
            assert set(cards) == {f"{NS}/first", f"{NS}/r"}
            assert cards[f"{NS}/r"][1][0][0] == record["cards"][0][0]
            await wait_for(lambda: _released(plugin, 2), 20, "both allocated")
            assert plugin.allocating_overlaps() == []

    live(control_plane, body)


def test_eviction_falls_back_to_v1beta1_where_the_server_lacks_v1(
    control_plane: ControlPlane,
) -> None:
    async def body(kube: Kube, plugin: DevicePluginLocks) -> None:
        await make_node(kube, "gpu-1", gpus=1)
        pod = pod_body("victim", ns=NS, scheduler="nobody")
        pod["spec"]["nodeName"] = "gpu-1"
        await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", pod)
        binder = await _binder(kube)
        assert await binder.eviction_version() == "v1beta1"  # Kubernetes 1.20
        gone: list[str] = []
        assert await binder.evict(f"{NS}/victim", "test", gone.append)

        async def deleted() -> bool:
            try:
                p = await get_pod(kube, NS, "victim")
            except KubeError as exc:
                return exc.status == 404
            return bool(p["metadata"].get("deletionTimestamp"))

        await wait_for(deleted, 20, "victim evicted")
        assert not await binder.evict(f"{NS}/never-was", "test", gone.append)
        assert gone == [f"{NS}/never-was"]

    live(control_plane, body)


def test_only_the_leader_is_ready(control_plane: ControlPlane, tmp_path: Path) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(QUEUES)
    base = control_plane.port + 15
    ports = {"r1": base, "r2": base + 1}
    procs: dict[str, subprocess.Popen[bytes]] = {}

    async def ready(session: aiohttp.ClientSession, name: str) -> int:
        try:
            async with session.get(f"http://127.0.0.1:{ports[name]}/readyz") as resp:
                return resp.status
        except aiohttp.ClientError:
            return 0

    async def body(kube: Kube, plugin: DevicePluginLocks) -> None:
        await ensure_namespace(kube, LEASE_NS)
        with contextlib.suppress(KubeError):
            await kube.request("DELETE", LEASE)
        for name in ports:
            procs[name] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gpupool.k8s",
                    "run",
                    "--kubeconfig",
                    control_plane.kubeconfig,
                    "--identity",
                    name,
                    "--queues",
                    str(queues),
                    "--lease-duration",
                    "4",
                    "--renew-interval",
                    "0.5",
                    "--lease-namespace",
                    LEASE_NS,
                    "--extender-port",
                    str(ports[name]),
                ],
                stdout=(tmp_path / f"{name}.log").open("wb"),
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        async with aiohttp.ClientSession() as session:
            leader = await wait_for(lambda: holder(kube), 30, "a leader")
            other = "r2" if leader == "r1" else "r1"

            async def answers() -> dict[str, int] | None:
                got = {n: await ready(session, n) for n in ports}
                return got if got[leader] == 200 and got[other] == 503 else None

            await wait_for(answers, 30, "the leader ready, the other not")
            procs[leader].send_signal(signal.SIGKILL)
            procs[leader].wait(10)

            async def taken_over() -> bool:
                return await ready(session, other) == 200

            await wait_for(taken_over, 30, "the other ready once it leads")
            assert await holder(kube) == other

    try:
        live(control_plane, body)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
