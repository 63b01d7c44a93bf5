"""``gpupool k8s bench``: bind many GPU pods through a real API server, print the figures.

The benchmark makes (:mod:`gpupool.k8s.bench_objects`) ``--nodes`` fake nodes with
``--gpus-per-node`` cards each (HAMi's register annotation, 40 GiB A100s, Ready, untainted:
there are no kubelets), starts ``gpupool k8s run`` as a separate process (as it runs in a
cluster), creates ``--pods`` pods asking for half a card each (``nvidia.com/gpucores: 50``,
``nvidia.com/gpumem: 16000``) and watches them. A pod counts as bound when the watch shows its
``spec.nodeName``. Pods are created as fast as the API server takes them (32 requests in
flight), or at ``--rate`` pods per second (open loop: pod i is sent at i / rate seconds, however
slow earlier ones were). ``nodes_used`` and ``most_pods_on_a_node`` say how the measured pods
spread: under HAMi's node lock a node binds one GPU pod at a time, so the most pods on one node
bounds how long the last of a burst waits.

With node agents (``--node-agents``, the default) every node also has an emulated kubelet and
HAMi device plugin (:mod:`gpupool.k8s.nodeagent`, running in this process): bound pods are
admitted as a kubelet admits them, served their cards by HAMi's ``Allocate`` rules and marked
``Running``; ``--other-cpu-pct`` first binds one pod of another scheduler to each node holding
that share of its CPU (and a tenth of its memory), as DaemonSets do. ``--external`` runs the
agents with NVIDIA's stock device plugin, since kube-scheduler writes no HAMi annotations.
``--compare-kube-scheduler BINARY`` (:mod:`gpupool.k8s.bench_compare`) does both in one
invocation: gpupool's run, then the bench starts that kube-scheduler
(:mod:`gpupool.k8s.kubescheduler`, client QPS ``--kube-scheduler-qps``, 50 by default as
kube-scheduler's own) and measures it on the same API server straight after, so the two are
taken in the same minute of the machine's load.

Figures (JSON): ``pods_per_s`` is pods bound over the time from the first create to the last
bind; ``create_to_bound_ms`` is per pod, from just before its create request to the watch event
that shows it bound. With node agents, after the last bind the bench waits for the agents to
admit every bound pod, then reports ``swapped_allocations`` (containers on a card other than
the one in ``gpupool.io/placement``), ``misdirected_allocations`` (containers served another
pod's device annotation), ``kubelet_rejections`` (and ``rejections_by_reason``),
``cards_over_split`` / ``cards_over_memory`` and ``pods_running`` (benchmark pods the API
server shows ``Running``); without agents these are null. The API server, etcd, the
scheduler, the agents and this process share the machine's CPUs; the figures include that.
``cpu_s`` (the scheduler's process and this one's, agents included) and ``requests_per_pod``
(every client's, from the API server's counters) cover the first create to the agents'
last judgement (:mod:`gpupool.k8s.bench_cost`).
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
from collections import Counter
from typing import Any

import numpy as np

from gpupool.core.errors import ConfigError
from gpupool.k8s.bench_cost import Cost
from gpupool.k8s.bench_objects import bench_pod, cleanup, create_node, others_namespace
from gpupool.k8s.kube import Kube, KubeError
from gpupool.k8s.nodeagent import Fleet

__all__ = ["bench_command", "run_bench"]


async def _agents_done(
    fleet: Fleet, kube: Kube, ns: str, judged_all: int, bound: int, timeout_s: float
) -> int:
    """Waits until the agents have admitted or rejected ``judged_all`` pods (every bound one,
    the other schedulers' included) or ``timeout_s`` passed; the number of the ``bound``
    benchmark pods the API server shows Running."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        await fleet.settle(timeout_s=max(0.1, deadline - time.perf_counter()))
        judged = fleet.ledger.admitted + len(fleet.ledger.rejections)
        if judged >= judged_all:
            break
        await asyncio.sleep(0.2)
    running_deadline = time.perf_counter() + timeout_s
    count = 0
    while time.perf_counter() < running_deadline:
        listed = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods")
        count = sum(
            1
            for p in listed.get("items") or ()
            if (p.get("status") or {}).get("phase") == "Running"
            and p["metadata"]["name"] != "warmup"
        )
        if count >= bound - len(fleet.ledger.rejections):
            break
        await asyncio.sleep(0.2)
    return count


async def run_bench(
    kubeconfig: str | None,
    nodes: int,
    gpus: int,
    pods: int,
    ns: str,
    scheduler: str = "gpupool",
    timeout_s: float = 300.0,
    profile: str | None = None,
    rate: float = 0.0,
    external: bool = False,
    node_agents: bool = True,
    other_cpu_pct: float = 0.0,
    bind_queue_weight: float | None = None,
) -> dict[str, Any]:
    """``external``: start no gpupool; another scheduler (kube-scheduler, for a baseline)
    binds pods of ``scheduler``, which then ask for ``nvidia.com/gpu: 1`` alone (the only
    GPU resource the fake nodes advertise, so kube-scheduler can count it).
    ``node_agents``: emulate each node's kubelet and device plugin; ``other_cpu_pct``: the
    share of each node's CPU that another scheduler's pod holds (needs ``node_agents``)."""
    if not 0 <= other_cpu_pct < 100:
        raise ConfigError(f"--other-cpu-pct={other_cpu_pct} must be at least 0 and below 100")
    if other_cpu_pct and not node_agents:
        raise ConfigError(
            f"--other-cpu-pct={other_cpu_pct} needs the node agents (they "
            "admit and run the other pods); drop --no-node-agents"
        )
    kube = await Kube.connect(kubeconfig)
    proc: subprocess.Popen[bytes] | None = None
    fleet: Fleet | None = None
    try:
        for space in (ns, others_namespace(ns)):
            with contextlib.suppress(KubeError):
                await kube.request(
                    "POST",
                    "/api/v1/namespaces",
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": space}},
                )
        await cleanup(kube, ns)
        sem = asyncio.Semaphore(32)

        async def limited(coro: Any) -> None:
            async with sem:
                await coro

        names = [f"bench-{i:04d}" for i in range(nodes)]
        await asyncio.gather(*(limited(create_node(kube, name, gpus)) for name in names))
        if node_agents:
            fleet = Fleet(kube, nodes=names, device_plugin="nvidia" if external else "hami")
            await fleet.start()
            if other_cpu_pct:
                await asyncio.gather(
                    *(
                        limited(
                            fleet.occupy(
                                name, other_cpu_pct, memory_pct=10, namespace=others_namespace(ns)
                            )
                        )
                        for name in names
                    )
                )
                await fleet.settle(timeout_s=60)
        prof = ["-m", "cProfile", "-o", profile] if profile else []
        spawn = not external
        cmd = [
            sys.executable,
            *prof,
            "-m",
            "gpupool.k8s",
            "run",
            "--no-leader-elect",
            "--scheduler-name",
            scheduler,
        ]
        if bind_queue_weight is not None:
            cmd += ["--bind-queue-weight", str(bind_queue_weight)]
        if kubeconfig:
            cmd += ["--kubeconfig", kubeconfig]
        if spawn:
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        created: dict[str, float] = {}
        bound: dict[str, float] = {}
        bound_to: dict[str, str] = {}
        ignored: set[str] = set()
        done = asyncio.Event()
        listed = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods")
        rv = str(listed["metadata"]["resourceVersion"])

        async def watch() -> None:
            nonlocal rv
            while not done.is_set():
                try:
                    async for ev in kube.watch(
                        f"/api/v1/namespaces/{ns}/pods",
                        {
                            "resourceVersion": rv,
                            "allowWatchBookmarks": "true",
                            "timeoutSeconds": "300",
                        },
                    ):
                        obj = ev.get("object") or {}
                        rv = str(obj.get("metadata", {}).get("resourceVersion", rv))
                        name = obj.get("metadata", {}).get("name")
                        if (
                            name
                            and obj.get("spec", {}).get("nodeName")
                            and name not in bound
                            and name not in ignored
                        ):
                            bound[name] = time.perf_counter()
                            bound_to[name] = str(obj["spec"]["nodeName"])
                            if len(bound) >= pods and "warmup" not in bound:
                                done.set()
                                return
                except KubeError:
                    await asyncio.sleep(0.1)

        watcher = asyncio.create_task(watch())
        # one pod first, to know the scheduler is up (imports, list, sync) before the clock
        # starts; it keeps its half card, and is left out of the figures
        await kube.request(
            "POST",
            f"/api/v1/namespaces/{ns}/pods",
            bench_pod("warmup", ns, scheduler, plain=external),
        )
        deadline = time.perf_counter() + 60
        while "warmup" not in bound:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(
                    "gpupool k8s run exited: "
                    + (proc.stderr.read().decode() if proc.stderr else "")
                )
            if time.perf_counter() > deadline:
                raise RuntimeError("the scheduler bound no pod within 60 s")
            await asyncio.sleep(0.05)
        del bound["warmup"]
        ignored.add("warmup")  # later events of it (its status) are not binds

        async def create(i: int) -> None:
            name = f"p{i:05d}"
            if rate > 0:  # an open-loop arrival rate: pod i is due at t0 + i / rate
                await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
            created[name] = time.perf_counter()
            await kube.request(
                "POST",
                f"/api/v1/namespaces/{ns}/pods",
                bench_pod(name, ns, scheduler, plain=external),
            )

        cost = Cost(kube, proc.pid if proc is not None else None)
        await cost.start()
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
        with contextlib.suppress(asyncio.CancelledError, KubeError):
            await watcher
        names = sorted(n for n in bound if n in created)
        lat = np.array([bound[n] - created[n] for n in names]) * 1000.0
        slow = [(names[i], round(float(lat[i]), 1)) for i in np.argsort(-lat)[:5]]
        per_node = Counter(bound_to[n] for n in names)
        last = max(bound.values()) if bound else t0
        wall = last - t0
        node_side: dict[str, Any] = dict.fromkeys(
            (
                "swapped_allocations",
                "misdirected_allocations",
                "kubelet_rejections",
                "rejections_by_reason",
                "cards_over_split",
                "cards_over_memory",
                "pods_admitted",
                "pods_running",
            )
        )
        if fleet is not None:
            others = nodes if other_cpu_pct else 0
            running = await _agents_done(
                fleet, kube, ns, len(bound) + 1 + others, len(bound), 120.0
            )
            summary = fleet.summary()
            node_side.update({k: summary[k] for k in node_side if k in summary})
            node_side["pods_running"] = running
        spent = await cost.stop(len(bound))
        return {
            "scheduler": scheduler if external else "gpupool",
            "nodes": nodes,
            "gpus": nodes * gpus,
            "pods": pods,
            "bound": len(bound),
            "rate": rate or None,
            "wall_s": round(wall, 3),
            "create_s": round(created_s, 3),
            "pods_per_s": round(len(bound) / wall, 1) if wall > 0 else 0.0,
            "create_to_bound_ms": {
                "p50": round(float(np.percentile(lat, 50)), 1) if lat.size else None,
                "p99": round(float(np.percentile(lat, 99)), 1) if lat.size else None,
                "max": round(float(lat.max()), 1) if lat.size else None,
            },
            "slowest": slow,
            "nodes_used": len(per_node),
            "most_pods_on_a_node": max(per_node.values(), default=0),
            "node_agents": node_agents,
            "other_cpu_pct": other_cpu_pct,
            "bind_queue_weight": None if external else bind_queue_weight,
            **node_side,
            **spent,
        }
    finally:
        if fleet is not None:
            await fleet.stop()
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        with contextlib.suppress(KubeError):
            await cleanup(kube, ns)
        await kube.close()


def bench_command(args: argparse.Namespace) -> int:
    if getattr(args, "scale", False):
        from gpupool.k8s.bench_scale import scale_command

        return scale_command(args)
    common: dict[str, Any] = {
        "rate": args.rate,
        "node_agents": args.node_agents,
        "other_cpu_pct": args.other_cpu_pct,
    }
    if args.bind_queue_weight is not None:
        common["bind_queue_weight"] = args.bind_queue_weight
    if args.compare_kube_scheduler:
        from gpupool.k8s.bench_compare import run_with_kube_scheduler

        if args.external:
            raise ConfigError(
                "--compare-kube-scheduler measures gpupool and then kube-scheduler; drop --external"
            )
        result = asyncio.run(
            run_with_kube_scheduler(
                args.compare_kube_scheduler,
                args.kubeconfig,
                args.nodes,
                args.gpus_per_node,
                args.pods,
                args.namespace,
                qps=args.kube_scheduler_qps,
                profile=args.profile,
                **common,
            )
        )
    else:
        result = asyncio.run(
            run_bench(
                args.kubeconfig,
                args.nodes,
                args.gpus_per_node,
                args.pods,
                args.namespace,
                args.scheduler_name,
                profile=args.profile,
                external=args.external,
                **common,
            )
        )
    print(json.dumps(result, indent=None if args.json else 2))
    return 0
