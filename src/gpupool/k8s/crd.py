"""gpupool's CRDs (``gpupool.io/v1alpha1``): the queue objects in, their status out.

The kinds are the queue kinds ``gpupool.config`` reads (ResourceFlavor, ClusterQueue,
Cohort, LocalQueue), with Kueue's field names; ``deploy/crds/`` defines them. Objects are
read as the documents ``load_queue_config`` takes (server-filled fields dropped).

Status, kept current by the leader every ``interval_s``: a ClusterQueue's
``pendingWorkloads``, ``admittedWorkloads`` and ``flavorsUsage`` (per flavor, per resource,
in the core's units: ``gpu`` cards, ``gpu_milli``, ``gpu_memory_mib``, ``cpu_milli``,
``memory_mib``); a Cohort's, the same summed over the ClusterQueues below it (at any depth);
a LocalQueue's ``pendingWorkloads`` and ``admittedWorkloads``; a ResourceFlavor's ``nodes``
and ``gpus`` (the nodes its labels select). A status is written only when it changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from gpupool.k8s.kube import MERGE_PATCH, Kube, KubeError

if TYPE_CHECKING:
    from gpupool.k8s.controller import Controller

__all__ = ["API", "CRD_KINDS", "CrdStatus", "queue_documents"]

log = logging.getLogger("gpupool.k8s.crd")

API = "gpupool.io/v1alpha1"
CRD_KINDS = {
    "ResourceFlavor": "resourceflavors",
    "Cohort": "cohorts",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
}


async def queue_documents(kube: Kube) -> tuple[list[dict[str, Any]], bool]:
    """Every gpupool queue object as a document; and whether the CRDs are installed."""
    docs: list[dict[str, Any]] = []
    present = False
    for kind, plural in CRD_KINDS.items():
        try:
            body = await kube.request("GET", f"/apis/{API}/{plural}")
        except KubeError as exc:
            if exc.status == 404:
                continue
            raise
        present = True
        for item in sorted(
            body.get("items") or (),
            key=lambda i: (i["metadata"].get("namespace") or "", i["metadata"]["name"]),
        ):
            meta = item.get("metadata") or {}
            doc: dict[str, Any] = {
                "apiVersion": API,
                "kind": kind,
                "metadata": {k: meta[k] for k in ("name", "namespace") if meta.get(k)},
            }
            if "spec" in item:
                doc["spec"] = item["spec"]
            docs.append(doc)
    return docs, present


class CrdStatus:
    """Writes queue status from the controller's scheduler while this replica leads."""

    def __init__(self, kube: Kube, controller: Controller, interval_s: float = 2.0) -> None:
        self.kube = kube
        self.controller = controller
        self.interval_s = interval_s
        self._last: dict[str, dict[str, Any]] = {}

    def compute(self) -> dict[str, dict[str, Any]]:
        """Path of each status subresource -> the status it should hold."""
        sched = self.controller.sched
        if sched is None:
            return {}
        pending_cq: Counter[str] = Counter()
        admitted_cq: Counter[str] = Counter()
        pending_lq: Counter[str] = Counter()
        admitted_lq: Counter[str] = Counter()
        for p in sched.pending():
            pending_cq[p.queue] += 1
            pending_lq[p.job.queue] += 1
        for r in sched.running():
            admitted_cq[r.queue] += 1
            admitted_lq[r.job.queue] += 1
        out: dict[str, dict[str, Any]] = {}
        for cq in sched.config.cluster_queues:
            usage: dict[str, dict[str, int]] = {}
            for (flavor, resource), amount in sorted(sched.usage(cq.name).items()):
                usage.setdefault(flavor or "any", {})[str(resource)] = int(amount)
            out[f"/apis/{API}/clusterqueues/{cq.name}/status"] = {
                "pendingWorkloads": pending_cq[cq.name],
                "admittedWorkloads": admitted_cq[cq.name],
                "flavorsUsage": [
                    {"name": f, "resources": [{"name": k, "total": v} for k, v in res.items()]}
                    for f, res in usage.items()
                ],
            }
        members: dict[str, set[str]] = {}
        parents = {c.name: c.parent for c in sched.config.cohorts}
        for cq in sched.config.cluster_queues:
            cohort = cq.cohort
            while cohort is not None and cq.name not in members.get(cohort, ()):
                members.setdefault(cohort, set()).add(cq.name)
                cohort = parents.get(cohort)
        for c in sched.config.cohorts:
            queues = members.get(c.name, set())
            total: dict[str, dict[str, int]] = {}
            for q in queues:
                for (flavor, resource), amount in sched.usage(q).items():
                    res = total.setdefault(flavor or "any", {})
                    res[str(resource)] = res.get(str(resource), 0) + int(amount)
            out[f"/apis/{API}/cohorts/{c.name}/status"] = {
                "pendingWorkloads": sum(pending_cq[q] for q in queues),
                "admittedWorkloads": sum(admitted_cq[q] for q in queues),
                "flavorsUsage": [
                    {
                        "name": f,
                        "resources": [{"name": k, "total": v} for k, v in sorted(res.items())],
                    }
                    for f, res in sorted(total.items())
                ],
            }
        nodes = list(self.controller.nodes_by_name.values())
        for f in sched.config.flavors:
            matched = [
                n for n in nodes if all(n.labels.get(k) == v for k, v in f.node_labels.items())
            ]
            out[f"/apis/{API}/resourceflavors/{f.name}/status"] = {
                "nodes": len(matched),
                "gpus": sum(n.gpu_count for n in matched),
            }
        for lq in sched.config.local_queues:
            key = f"{lq.namespace}/{lq.name}"
            n_pending = pending_lq[key] + (pending_lq[lq.name] if lq.namespace else 0)
            n_admitted = admitted_lq[key] + (admitted_lq[lq.name] if lq.namespace else 0)
            out[f"/apis/{API}/namespaces/{lq.namespace}/localqueues/{lq.name}/status"] = {
                "pendingWorkloads": n_pending,
                "admittedWorkloads": n_admitted,
            }
        return out

    async def write(self) -> int:
        """Writes changed statuses; returns how many were written."""
        written = 0
        for path, status in self.compute().items():
            if self._last.get(path) == status:
                continue
            try:
                await self.kube.request("PATCH", path, {"status": status}, content_type=MERGE_PATCH)
            except KubeError as exc:
                if exc.status != 404:
                    log.warning("status %s: %s", path, exc)
                continue
            self._last[path] = status
            written += 1
        return written

    async def run(self) -> None:
        while True:
            if self.controller.is_leader():
                await self.write()
            await asyncio.sleep(self.interval_s)
