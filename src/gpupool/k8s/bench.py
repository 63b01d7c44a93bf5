"""``gpupool k8s bench``: bind many GPU pods through a real API server, print the figures.

The benchmark makes ``--nodes`` fake nodes with ``--gpus-per-node`` cards each (HAMi's
register annotation, 40 GiB A100s, Ready, untainted: there are no kubelets), starts
``gpupool k8s run`` as a separate process (as it runs in a cluster), creates ``--pods`` pods
asking for half a card each (``nvidia.com/gpucores: 50``, ``nvidia.com/gpumem: 16000``) and
watches them. A pod counts as bound when the watch shows its ``spec.nodeName``. Pods are
created as fast as the API server takes them (32 requests in flight), or at ``--rate`` pods
per second (open loop: pod i is sent at i / rate seconds, however slow earlier ones were).

Figures (JSON): ``pods_per_s`` is pods bound over the time from the first create to the last
bind; ``create_to_bound_ms`` is per pod, from just before its create request to the watch event
that shows it bound. The API server, etcd, the scheduler and this process share the
machine's CPUs; the figures include that.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import numpy as np

from gpupool.k8s.kube import MERGE_PATCH, ApiError, Kube

__all__ = ["bench_command", "run_bench"]

MODEL = "NVIDIA-A100-SXM4-40GB"
CARD_MIB = 40960


async def _node(kube: Kube, name: str, gpus: int) -> None:
    reg = json.dumps([{"id": f"GPU-{name}-{i}", "index": i, "count": 10, "devmem": CARD_MIB,
                       "devcore": 100, "type": MODEL, "mode": "hami-core", "health": True}
                      for i in range(gpus)])
    await kube.request("POST", "/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"gpupool.io/bench": "true"},
                     "annotations": {"hami.io/node-nvidia-register": reg}}})
    alloc = {"cpu": "128", "memory": "1Ti", "pods": "250", "nvidia.com/gpu": str(gpus * 10)}
    await kube.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": {
        "capacity": alloc, "allocatable": alloc,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}},
        content_type=MERGE_PATCH)
    await kube.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}},
                       content_type=MERGE_PATCH)


def _pod(name: str, ns: str, scheduler: str, plain: bool = False) -> dict[str, Any]:
    gpu: dict[str, Any] = {"nvidia.com/gpu": 1}
    if not plain:
        gpu.update({"nvidia.com/gpucores": 50, "nvidia.com/gpumem": 16000})
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "main", "image": "example.invalid/cuda:12",
                                 "resources": {
                                     "requests": {"cpu": "100m", "memory": "256Mi"},
                                     "limits": gpu}}]},
    }


async def _cleanup(kube: Kube, ns: str) -> None:
    with contextlib.suppress(ApiError):
        await kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods",
                           {"apiVersion": "v1", "kind": "DeleteOptions",
                            "gracePeriodSeconds": 0})
    with contextlib.suppress(ApiError):
        await kube.request("DELETE", "/api/v1/nodes",
                           params={"labelSelector": "gpupool.io/bench=true"})
    for _ in range(200):
        left = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods",
                                  params={"limit": "1"})
        if not left.get("items"):
            return
        await asyncio.sleep(0.1)


async def run_bench(kubeconfig: str | None, nodes: int, gpus: int, pods: int, ns: str,
                    scheduler: str = "gpupool", timeout_s: float = 300.0,
                    profile: str | None = None, rate: float = 0.0,
                    external: bool = False) -> dict[str, Any]:
    """``external``: start no gpupool; another scheduler (kube-scheduler, for a baseline)
    binds pods of ``scheduler``, which then ask for ``nvidia.com/gpu: 1`` alone (the only
    GPU resource the fake nodes advertise, so kube-scheduler can count it)."""
    kube = await Kube.connect(kubeconfig)
    proc: subprocess.Popen[bytes] | None = None
    try:
        with contextlib.suppress(ApiError):
            await kube.request("POST", "/api/v1/namespaces", {
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        await _cleanup(kube, ns)
        sem = asyncio.Semaphore(32)

        async def limited(coro: Any) -> None:
            async with sem:
                await coro

        await asyncio.gather(*(limited(_node(kube, f"bench-{i:04d}", gpus))
                               for i in range(nodes)))
        prof = ["-m", "cProfile", "-o", profile] if profile else []
        spawn = not external
        cmd = [sys.executable, *prof, "-m", "gpupool.k8s", "run", "--no-leader-elect",
               "--scheduler-name", scheduler]
        if kubeconfig:
            cmd += ["--kubeconfig", kubeconfig]
        if spawn:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
        created: dict[str, float] = {}
        bound: dict[str, float] = {}
        warmed = False
        done = asyncio.Event()
        listed = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods")
        rv = str(listed["metadata"]["resourceVersion"])

        async def watch() -> None:
            nonlocal rv
            while not done.is_set():
                try:
                    async for ev in kube.watch(f"/api/v1/namespaces/{ns}/pods",
                                               {"resourceVersion": rv,
                                                "allowWatchBookmarks": "true",
                                                "timeoutSeconds": "300"}):
                        obj = ev.get("object") or {}
                        rv = str(obj.get("metadata", {}).get("resourceVersion", rv))
                        name = obj.get("metadata", {}).get("name")
                        if name == "warmup" and warmed:
                            continue  # changed after its bind (the device plugin ran)
                        if name and obj.get("spec", {}).get("nodeName") and name not in bound:
                            bound[name] = time.perf_counter()
                            if len(bound) >= pods and "warmup" not in bound:
                                done.set()
                                return
                except ApiError:
                    await asyncio.sleep(0.1)

        watcher = asyncio.create_task(watch())
        # one pod first, to know the scheduler is up (imports, list, sync) before the clock
        # starts; it keeps its half card, and is left out of the figures
        await kube.request("POST", f"/api/v1/namespaces/{ns}/pods",
                           _pod("warmup", ns, scheduler, plain=external))
        deadline = time.perf_counter() + 60
        while "warmup" not in bound:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError("gpupool k8s run exited: "
                                   + (proc.stderr.read().decode() if proc.stderr else ""))
            if time.perf_counter() > deadline:
                raise RuntimeError("the scheduler bound no pod within 60 s")
            await asyncio.sleep(0.05)
        del bound["warmup"]
        warmed = True

        async def create(i: int) -> None:
            name = f"p{i:05d}"
            if rate > 0:  # an open-loop arrival rate: pod i is due at t0 + i / rate
                await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
            created[name] = time.perf_counter()
            await kube.request("POST", f"/api/v1/namespaces/{ns}/pods",
                               _pod(name, ns, scheduler, plain=external))

        t0 = time.perf_counter()
        if rate > 0:
            await asyncio.gather(*(create(i) for i in range(pods)))
        else:
            await asyncio.gather(*(limited(create(i)) for i in range(pods)))
        created_s = time.perf_counter() - t0
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout_s)
        done.set()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, ApiError):
            await watcher
        names = sorted(n for n in bound if n in created)
        lat = np.array([bound[n] - created[n] for n in names]) * 1000.0
        slow = [(names[i], round(float(lat[i]), 1)) for i in np.argsort(-lat)[:5]]
        last = max(bound.values()) if bound else t0
        wall = last - t0
        return {
            "scheduler": scheduler if external else "gpupool",
            "nodes": nodes, "gpus": nodes * gpus, "pods": pods, "bound": len(bound),
            "rate": rate or None, "wall_s": round(wall, 3), "create_s": round(created_s, 3),
            "pods_per_s": round(len(bound) / wall, 1) if wall > 0 else 0.0,
            "create_to_bound_ms": {
                "p50": round(float(np.percentile(lat, 50)), 1) if lat.size else None,
                "p99": round(float(np.percentile(lat, 99)), 1) if lat.size else None,
                "max": round(float(lat.max()), 1) if lat.size else None},
            "slowest": slow,
        }
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        with contextlib.suppress(ApiError):
            await _cleanup(kube, ns)
        await kube.close()


def bench_command(args: argparse.Namespace) -> int:
    result = asyncio.run(run_bench(args.kubeconfig, args.nodes, args.gpus_per_node, args.pods,
                                   args.namespace, args.scheduler_name,
                                   profile=args.profile, rate=args.rate,
                                   external=args.external))
    print(json.dumps(result, indent=None if args.json else 2))
    return 0
