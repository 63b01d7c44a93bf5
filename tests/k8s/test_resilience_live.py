"""Faults of a real API server: a watch broken with a forced 410, an API server restart
mid-run, and gpupool itself restarting; afterwards no pod is lost or held twice."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict

import pytest

from gpupool.k8s.controller import Controller
from gpupool.k8s.kube import Kube
from gpupool.k8s.main import default_config
from tests.k8s.conftest import ControlPlane
from tests.k8s.kit import (
    delete_pod,
    list_pods,
    make_node,
    make_pod,
    running,
    set_phase,
    wait_for,
)
from tests.k8s.test_scheduler_live import NS, live

pytestmark = pytest.mark.k8s

GPU = {"nvidia.com/gpu": 1}


Cards = tuple[tuple[int, int, int], ...]


async def live_bound(kube: Kube, ns: str) -> dict[str, tuple[str, Cards]]:
    """Pod key -> (node, cards) for every live bound pod, from the API server alone."""
    out = {}
    for pod in await list_pods(kube, ns):
        meta, spec = pod["metadata"], pod["spec"]
        if not spec.get("nodeName") or meta.get("deletionTimestamp"):
            continue
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        rec = json.loads(meta["annotations"]["gpupool.io/placement"])
        out[f"{ns}/{meta['name']}"] = (
            spec["nodeName"],
            tuple((c[0], c[1], c[2]) for c in rec["cards"]),
        )
    return out


async def check_consistent(kube: Kube, ctl: Controller, ns: str) -> None:
    """The controller holds exactly the cards of the live bound pods: no ghost (a pod gone
    but its cards held), no lost allocation (a bound pod whose cards look free), no card
    given twice."""
    truth = await live_bound(kube, ns)
    held = ctl.allocations()
    assert held == truth
    use: dict[tuple[str, int], int] = defaultdict(int)
    for node, cards in truth.values():
        for index, milli, _mib in cards:
            use[(node, index)] += milli
    assert all(v <= 1000 for v in use.values()), use


async def all_bound(kube: Kube, ns: str, names: list[str]) -> bool:
    pods = {p["metadata"]["name"]: p for p in await list_pods(kube, ns)}
    return all(pods.get(n, {}).get("spec", {}).get("nodeName") for n in names)


def test_forced_410_relists_and_diffs(control_plane: ControlPlane) -> None:
    # Pod watches served by etcd itself: the watch cache would answer an old version with
    # synthetic events as long as it has not wrapped, so a 410 needs history compacted away.
    control_plane.restart_apiserver("--watch-cache-sizes=pods#0")

    async def body(kube: Kube) -> None:
        await make_node(kube, "gpu-1", gpus=4)
        await make_node(kube, "gpu-2", gpus=4)
        async with running(kube, default_config()) as ctl:
            first = [f"p{i}" for i in range(6)]
            for n in first:
                await make_pod(kube, n, ns=NS, limits=GPU)
            await wait_for(lambda: all_bound(kube, NS, first), what="first pods bound")
            # the watch goes down; meanwhile pods go away, finish, and arrive
            ctl.pod_informer.hold()
            await asyncio.sleep(0.2)
            await delete_pod(kube, NS, "p0")
            await delete_pod(kube, NS, "p1")
            await set_phase(kube, NS, "p2", "Succeeded")
            later = [f"q{i}" for i in range(5)]
            for n in later:
                await make_pod(kube, n, ns=NS, limits=GPU)
            assert not await all_bound(kube, NS, later)
            # it comes back from a version long compacted away: 410, re-list, diff
            relists = ctl.pod_informer.relists
            control_plane.compact_etcd()
            ctl.pod_informer.resume_from("1")
            ctl.pod_informer.release()
            await wait_for(lambda: all_bound(kube, NS, later), what="later pods bound")
            assert ctl.pod_informer.relists > relists
            assert f"{NS}/p0" not in ctl.pod_informer.cache  # no ghost
            await check_consistent(kube, ctl, NS)

    try:
        live(control_plane, body)
    finally:
        control_plane.restart_apiserver()


def test_apiserver_restart_mid_run_then_gpupool_restart(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        await make_node(kube, "gpu-1", gpus=4)
        await make_node(kube, "gpu-2", gpus=4)
        async with running(kube, default_config()) as ctl:
            first = [f"a{i}" for i in range(4)]
            for n in first:
                await make_pod(kube, n, ns=NS, limits=GPU)
            await wait_for(lambda: all_bound(kube, NS, first), what="first pods bound")
            second = [f"b{i}" for i in range(3)]
            for n in second:
                await make_pod(kube, n, ns=NS, limits=GPU)
            # the API server goes away while gpupool works, and comes back
            await asyncio.to_thread(control_plane.restart_apiserver)
            await set_phase(kube, NS, "a0", "Succeeded")
            third = [f"c{i}" for i in range(2)]
            for n in third:
                await make_pod(kube, n, ns=NS, limits=GPU)
            await wait_for(
                lambda: all_bound(kube, NS, second + third), 60, what="pods after the restart bound"
            )
            await asyncio.sleep(0.5)
            await check_consistent(kube, ctl, NS)
            before = ctl.allocations()
        # gpupool restarts: the card view comes back from the API server alone
        async with running(kube, default_config()) as fresh:
            assert fresh.allocations() == before
            assert fresh.stats.restored_jobs == len(before)
            # a pod ends and a new one takes exactly its card: 8 cards, 8 live pods
            await set_phase(kube, NS, "a1", "Succeeded")
            await make_pod(kube, "d0", ns=NS, limits=GPU)
            await wait_for(lambda: all_bound(kube, NS, ["d0"]), what="d0 bound")
            await check_consistent(kube, fresh, NS)

    live(control_plane, body)
