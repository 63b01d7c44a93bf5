"""Bind rate through a real API server with and without HAMi's node lock, in one run.

Runs gpupool's controller in this process against the API server of ``--kubeconfig``, with
the tests' stand-in for HAMi's device plugins releasing the locks (``tests/k8s/kit.py``),
makes ``--nodes`` fake nodes of ``--gpus`` cards, then for each mode creates ``--pods``
half-card pods (32 creates in flight) and times create -> bound from the pods' watch.
Prints one JSON object per mode (``--modes lock,open``); with the lock, ``chain_ms`` gives the
mean of each link of a node's chain (see ``chain``). Run from the repository root:

    PYTHONPATH=src:. python scripts/bench-node-lock.py --kubeconfig K --nodes 100 --pods 1000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from typing import Any

import numpy as np

from gpupool.k8s.controller import Controller, Options
from gpupool.k8s.kube import Kube, KubeError
from gpupool.k8s.main import default_config
from tests.k8s.kit import DevicePluginLocks, clean, ensure_namespace, make_node, pod_body

NS = "bench-lock"


def trace(ctl: Controller, plugin: DevicePluginLocks) -> dict[str, list[tuple[str, float]]]:
    """Wraps the steps of each node's chain to time them: submit (the core's decision reached
    the binder), locked (lock written), bound (label patch and Binding done), seen (the
    plugin saw the bound, locked pod), released (the plugin's writes done), woken (gpupool
    saw the node change). Returns node -> [(step, time)]."""
    steps: dict[str, list[tuple[str, float]]] = {}

    def mark(node: str, step: str) -> None:
        steps.setdefault(node, []).append((step, time.perf_counter()))

    binder, locks = ctl.binder, ctl.locks
    submit, acquire, write = binder.submit, locks.acquire, binder._write
    changed, release = binder.node_changed, plugin._release

    def t_submit(item: Any) -> None:
        mark(item.node, "submit")
        submit(item)

    async def t_acquire(node: str, ns: str, name: str) -> None:
        await acquire(node, ns, name)
        mark(node, "locked")

    async def t_write(item: Any, *a: Any) -> Any:
        out = await write(item, *a)
        mark(item.node, "bound")
        return out

    def t_changed(node: str) -> None:
        mark(node, "woken")
        changed(node)

    async def t_release(name: str, *a: Any) -> None:
        mark(name, "seen")
        await release(name, *a)
        mark(name, "released")

    binder.submit, locks.acquire, binder._write = t_submit, t_acquire, t_write  # type: ignore
    binder.node_changed, plugin._release = t_changed, t_release  # type: ignore
    return steps


def chain(steps: dict[str, list[tuple[str, float]]]) -> dict[str, float]:
    """Mean milliseconds of each link of the per-node chain: locked -> bound (gpupool's
    writes), bound -> seen (the plugin learns of the bind), seen -> released (the plugin's
    writes), released -> woken (gpupool's node watch), woken -> locked (the next lock)."""
    gaps: dict[str, list[float]] = {}
    for marks in steps.values():
        last: dict[str, float] = {}
        for step, t in marks:
            prev = {
                "bound": "locked",
                "seen": "bound",
                "released": "seen",
                "woken": "released",
                "locked": "woken",
            }.get(step)
            if prev in last and (step != "woken" or "released" in last):
                gaps.setdefault(f"{prev}->{step}", []).append((t - last[prev]) * 1000)
                if step == "woken":
                    last.pop("released")
            last[step] = t
    return {k: round(float(np.mean(v)), 1) for k, v in gaps.items()}


async def one(kube: Kube, nodes: int, gpus: int, pods: int, lock: bool) -> dict[str, Any]:
    await clean(kube, [NS])
    for i in range(nodes):
        await make_node(kube, f"n{i:04d}", gpus=gpus, cpu="128", memory="1Ti")
    plugin = DevicePluginLocks(kube)
    ctl = Controller(kube, default_config(), Options(leader_elect=False, node_lock=lock))
    steps = trace(ctl, plugin) if lock else {}
    tasks = [asyncio.create_task(plugin.run()), asyncio.create_task(ctl.run())]
    while ctl.sched is None:
        await asyncio.sleep(0.05)
    listed = await kube.request("GET", f"/api/v1/namespaces/{NS}/pods")
    rv = str(listed["metadata"]["resourceVersion"])
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    done = asyncio.Event()

    async def watch() -> None:
        async for ev in kube.watch(
            f"/api/v1/namespaces/{NS}/pods", {"resourceVersion": rv, "timeoutSeconds": "600"}
        ):
            obj = ev.get("object") or {}
            name = obj.get("metadata", {}).get("name")
            if name and obj.get("spec", {}).get("nodeName") and name not in bound:
                bound[name] = time.perf_counter()
                if len(bound) >= pods:
                    done.set()
                    return

    watcher = asyncio.create_task(watch())
    sem = asyncio.Semaphore(32)

    async def create(i: int) -> None:
        async with sem:
            name = f"p{i:05d}"
            body = pod_body(
                name,
                ns=NS,
                cpu="100m",
                memory="128Mi",
                limits={"nvidia.com/gpu": 1, "nvidia.com/gpucores": 50, "nvidia.com/gpumem": 16000},
            )
            created[name] = time.perf_counter()
            await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", body)

    t0 = time.perf_counter()
    await asyncio.gather(*(create(i) for i in range(pods)))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), 300)
    wall = max(bound.values(), default=t0) - t0
    lat = np.array([bound[n] - created[n] for n in bound if n in created]) * 1000
    for t in (watcher, *tasks):
        t.cancel()
    await asyncio.gather(watcher, *tasks, return_exceptions=True)
    return {
        "node_lock": lock,
        "nodes": nodes,
        "pods": pods,
        "bound": len(bound),
        "pods_per_s": round(len(bound) / wall, 1) if wall > 0 else 0.0,
        "create_to_bound_ms": {
            "p50": round(float(np.percentile(lat, 50)), 1),
            "p99": round(float(np.percentile(lat, 99)), 1),
        },
        "lock_allocations": len(plugin.released),
        "allocating_overlaps": len(plugin.allocating_overlaps()),
        "max_locked_binds_per_node": max(ctl.binder.max_in_flight.values(), default=0),
        **({"chain_ms": chain(steps)} if steps else {}),
    }


async def main(args: argparse.Namespace) -> None:
    kube = await Kube.connect(args.kubeconfig)
    try:
        await ensure_namespace(kube, NS)
        for lock in [m == "lock" for m in args.modes.split(",")]:
            print(json.dumps(await one(kube, args.nodes, args.gpus, args.pods, lock)), flush=True)
    finally:
        with contextlib.suppress(KubeError):
            await clean(kube, [NS])
        await kube.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument(
        "--modes",
        default="lock,open",
        help="comma-separated: lock (HAMi's node lock), open (no lock)",
    )
    asyncio.run(main(parser.parse_args()))
