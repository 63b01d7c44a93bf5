"""Bind rate through a real API server with and without HAMi's node lock, in one run.

Runs gpupool's controller in this process against the API server of ``--kubeconfig``, with
the tests' stand-in for HAMi's device plugins releasing the locks (``tests/k8s/kit.py``),
makes ``--nodes`` fake nodes of ``--gpus`` cards, then for each mode creates ``--pods``
half-card pods (32 creates in flight) and times create -> bound from the pods' watch.
Prints one JSON object per mode. Run from the repository root:

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
from gpupool.k8s.kube import ApiError, Kube
from gpupool.k8s.main import default_config
from tests.k8s.kit import DevicePluginLocks, clean, ensure_namespace, make_node, pod_body

NS = "bench-lock"


async def one(kube: Kube, nodes: int, gpus: int, pods: int, lock: bool) -> dict[str, Any]:
    await clean(kube, [NS])
    for i in range(nodes):
        await make_node(kube, f"n{i:04d}", gpus=gpus, cpu="128", memory="1Ti")
    plugin = DevicePluginLocks(kube)
    ctl = Controller(kube, default_config(), Options(leader_elect=False, node_lock=lock))
    tasks = [asyncio.create_task(plugin.run()), asyncio.create_task(ctl.run())]
    while ctl.sched is None:
        await asyncio.sleep(0.05)
    listed = await kube.request("GET", f"/api/v1/namespaces/{NS}/pods")
    rv = str(listed["metadata"]["resourceVersion"])
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    done = asyncio.Event()

    async def watch() -> None:
        async for ev in kube.watch(f"/api/v1/namespaces/{NS}/pods",
                                   {"resourceVersion": rv, "timeoutSeconds": "600"}):
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
            body = pod_body(name, ns=NS, cpu="100m", memory="128Mi", limits={
                "nvidia.com/gpu": 1, "nvidia.com/gpucores": 50, "nvidia.com/gpumem": 16000})
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
        "node_lock": lock, "nodes": nodes, "pods": pods, "bound": len(bound),
        "pods_per_s": round(len(bound) / wall, 1) if wall > 0 else 0.0,
        "create_to_bound_ms": {"p50": round(float(np.percentile(lat, 50)), 1),
                               "p99": round(float(np.percentile(lat, 99)), 1)},
        "lock_allocations": len(plugin.released),
        "allocating_overlaps": len(plugin.allocating_overlaps()),
        "max_locked_binds_per_node": max(ctl.binder.max_in_flight.values(), default=0),
    }


async def main(args: argparse.Namespace) -> None:
    kube = await Kube.connect(args.kubeconfig)
    try:
        await ensure_namespace(kube, NS)
        for lock in (True, False):
            print(json.dumps(await one(kube, args.nodes, args.gpus, args.pods, lock)),
                  flush=True)
    finally:
        with contextlib.suppress(ApiError):
            await clean(kube, [NS])
        await kube.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=1000)
    asyncio.run(main(parser.parse_args()))
