"""``gpupool k8s --prometheus URL``: placement by measured GPU use in a real cluster.

The reader runs in a worker thread every ``interval_s`` while this replica leads, so a slow
Prometheus never holds up the event loop; the samples are handed to the load model on the
loop, between cycles. The cards are matched by the UUIDs in HAMi's register annotation, else
by node name (DCGM's ``Hostname``/``hostname``: dcgm-exporter writes the node's name there
when its DaemonSet sets ``NODE_NAME``) and index.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest

from gpupool.core.errors import AdapterError
from gpupool.core.model import WHOLE_GPU_MILLI, NodeName
from gpupool.usage.feed import MeasuredUse, PodTasks
from gpupool.usage.prometheus import Resolve, inventory_resolver

if TYPE_CHECKING:
    from gpupool.k8s.controller import Controller

log = logging.getLogger("gpupool.k8s.measured")


def resolver(c: Controller) -> Resolve:
    return inventory_resolver(
        (NodeName(n.name), g.index, g.uuid) for n in c.nodes_by_name.values() for g in n.gpus
    )


def pod_tasks(c: Controller) -> PodTasks:
    """The task of each pod the controller holds (``namespace/name``): HAMi's per-pod series
    teach each pod's workload what it uses where its card holds several pods; and the pods
    of those running now that hold a slice of a card (not a whole card, not a MIG instance),
    so those without a series of their own are counted and named
    (``gpupool_measured_pod_series{outcome="card"}``, ``MeasuredUse.pods_reason``)."""
    by_pod = {pod: task for info in c.jobs.values() for task, pod in info.task_pod.items()}
    held: set[str] = set()
    for r in c.sched.running() if c.sched is not None else ():
        info = c.jobs.get(r.job.id)
        if info is None:
            continue
        for p in r.placements:
            key = info.task_pod.get(p.task)
            if key is None or key in info.ended:
                continue
            if any(0 < s.gpu_milli < WHOLE_GPU_MILLI and s.mig_profile is None for s in p.shares):
                held.add(key)
    return PodTasks(by_pod.get, held)


async def measured_loop(c: Controller, feed: MeasuredUse) -> None:
    """Reads measured use every ``feed.interval_s`` while this replica leads."""
    while True:
        if c.sched is not None and c.is_leader():
            try:
                samples, pods = await asyncio.to_thread(feed.reader.read_with_pods, resolver(c))
            except AdapterError as exc:
                feed.failed(exc)
            else:
                feed.take(samples, c.clock(), pods=pods, task_of=pod_tasks(c))
        await asyncio.sleep(feed.interval_s)


def metrics_text(c: Controller, feed: MeasuredUse) -> str:
    """The feed's ``gpupool_measured_*`` families, in the exposition format."""
    registry = CollectorRegistry()

    def view() -> tuple[object, float] | None:
        return None if c.sched is None else (c.sched.node_table(), c.clock())

    feed.register(registry, view)  # type: ignore[arg-type]
    return generate_latest(registry).decode()
