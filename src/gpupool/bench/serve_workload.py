"""What ``gpupool bench serve`` loads a server with: a cluster of three flavors, one cohort of
ClusterQueues with LocalQueues in eight namespaces, and the Job documents it submits (see
:mod:`.serve` for the sizes and why)."""

from __future__ import annotations

import json
import random
from typing import Any

FLAVORS = (
    ("h100", "H100-80GB", "80Gi", 192, "2Ti"),
    ("a100", "A100-80GB", "80Gi", 128, "1Ti"),
    ("l4", "L4", "24Gi", 64, "512Gi"),
)
CLUSTER_QUEUES = 4
NAMESPACES = 8
GPUS_PER_NODE = 8


def cluster_doc(nodes: int) -> dict[str, Any]:
    counts = _split(nodes)
    pools = []
    for (name, model, mem, cpu, ram), count in zip(FLAVORS, counts, strict=True):
        if count:
            pools.append(
                {
                    "name": name,
                    "count": count,
                    "cpu": cpu,
                    "memory": ram,
                    "labels": {"gpupool.io/flavor": name},
                    "gpus": {"model": model, "count": GPUS_PER_NODE, "memory": mem},
                }
            )
    return {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "bench"},
        "nodePools": pools,
    }


def _split(nodes: int) -> list[int]:
    base, extra = divmod(nodes, len(FLAVORS))
    return [base + (1 if i < extra else 0) for i in range(len(FLAVORS))]


def queue_docs(nodes: int) -> list[dict[str, Any]]:
    kueue = "kueue.x-k8s.io/v1beta1"
    counts = _split(nodes)
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": kueue,
            "kind": "ResourceFlavor",
            "metadata": {"name": name},
            "spec": {"nodeLabels": {"gpupool.io/flavor": name}},
        }
        for (name, *_), count in zip(FLAVORS, counts, strict=True)
        if count
    ]
    docs.append({"apiVersion": kueue, "kind": "Cohort", "metadata": {"name": "bench"}, "spec": {}})
    for q in range(CLUSTER_QUEUES):
        flavors = []
        for (name, *_), count in zip(FLAVORS, counts, strict=True):
            if count:
                share = count * GPUS_PER_NODE * 1000 // CLUSTER_QUEUES
                flavors.append(
                    {
                        "name": name,
                        "resources": [{"name": "nvidia.com/gpu", "nominalQuota": f"{share}m"}],
                    }
                )
        docs.append(
            {
                "apiVersion": kueue,
                "kind": "ClusterQueue",
                "metadata": {"name": f"team-{q}"},
                "spec": {
                    "cohort": "bench",
                    "namespaceSelector": {},
                    # gpupool's preemption, which Kueue's objects must ask for
                    "preemption": {
                        "withinClusterQueue": "LowerPriority",
                        "reclaimWithinCohort": "Any",
                    },
                    "resourceGroups": [
                        {"coveredResources": ["nvidia.com/gpu"], "flavors": flavors}
                    ],
                },
            }
        )
    for n in range(NAMESPACES):
        docs.append(
            {
                "apiVersion": kueue,
                "kind": "LocalQueue",
                "metadata": {"name": "jobs", "namespace": f"ns-{n}"},
                "spec": {"clusterQueue": f"team-{n % CLUSTER_QUEUES}"},
            }
        )
    return docs


def job_bodies(count: int, seed: int) -> list[bytes]:
    """``count`` Job documents, JSON-encoded: half slices of a card, the rest 1-2 GPU pods."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        ns = f"ns-{rng.randrange(NAMESPACES)}"
        r = rng.random()
        gpu: dict[str, Any]
        if r < 0.5:
            milli = rng.choice((250, 500))
            gpu = {"milli": milli, "memory": f"{milli * 12}Mi"}
        elif r < 0.85:
            gpu = {"count": 1}
        else:
            gpu = {"count": 2}
        doc = {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "Job",
            "metadata": {"name": f"bench-{i:07d}", "namespace": ns},
            "spec": {
                "queue": "jobs",
                "duration": f"{rng.randint(30, 180)}s",
                "user": f"user-{rng.randrange(16)}",
                "podSets": [{"name": "main", "count": 1, "cpu": 2, "memory": "8Gi", "gpu": gpu}],
            },
        }
        out.append(json.dumps(doc, separators=(",", ":")).encode())
    return out
