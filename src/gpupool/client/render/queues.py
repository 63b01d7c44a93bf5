"""Queue objects: ClusterQueues, LocalQueues, flavors and cohorts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpupool.client.render.text import table


def _gpu_total(vec: Mapping[str, Mapping[str, int]] | None) -> float:
    return sum(int(r.get("gpuMilli", 0)) for r in (vec or {}).values()) / 1000


def cluster_queue_row(cq: Mapping[str, Any], wide: bool = False) -> list[object]:
    spec, st = cq.get("spec", {}), cq.get("status", {})
    used, nominal = _gpu_total(st.get("usage")), _gpu_total(st.get("nominal"))
    row: list[object] = [
        cq.get("metadata", {}).get("name"),
        spec.get("cohort") or spec.get("cohortName"),
        st.get("pendingJobs", 0),
        st.get("runningJobs", 0),
        f"{used:g}/{nominal:g}",
        f"{_gpu_total(st.get('borrowed')):g}",
        f"{float(st.get('share', 0.0)):.2f}",
        "-" if st.get("entitledGpus") is None else f"{float(st['entitledGpus']):g}",
    ]
    if wide:
        usage, nom = st.get("usage") or {}, st.get("nominal") or {}
        per = []
        for f in sorted(set(usage) | set(nom)):
            u = int(usage.get(f, {}).get("gpuMilli", 0)) / 1000
            n = int(nom.get(f, {}).get("gpuMilli", 0)) / 1000
            if u or n:
                per.append(f"{f}:{u:g}/{n:g}")
        row.append(" ".join(per))
    return row


def cluster_queues_table(items: Iterable[Mapping[str, Any]], wide: bool = False) -> str:
    """SHARE is usage over the entitlement the scheduler acts on; ENTITLED is that
    entitlement in GPUs (nominal quota first, then a cohort's own quota by weight)."""
    headers = (
        "NAME",
        "COHORT",
        "PENDING",
        "RUNNING",
        "GPUS(USED/NOMINAL)",
        "BORROWED",
        "SHARE",
        "ENTITLED",
        *(("FLAVORS",) if wide else ()),
    )
    return table(headers, (cluster_queue_row(q, wide) for q in items))


def local_queues_table(items: Iterable[Mapping[str, Any]]) -> str:
    return table(
        ("NAMESPACE", "NAME", "CLUSTERQUEUE", "PENDING", "RUNNING"),
        (
            [
                q.get("metadata", {}).get("namespace"),
                q.get("metadata", {}).get("name"),
                q.get("spec", {}).get("clusterQueue"),
                q.get("status", {}).get("pendingJobs", 0),
                q.get("status", {}).get("runningJobs", 0),
            ]
            for q in items
        ),
    )


def flavors_table(items: Iterable[Mapping[str, Any]]) -> str:
    return table(
        ("NAME", "NODES", "GPUS", "NODE-LABELS"),
        (
            [
                f.get("metadata", {}).get("name"),
                f.get("status", {}).get("nodes", 0),
                f.get("status", {}).get("gpus", 0),
                ",".join(
                    f"{k}={v}"
                    for k, v in sorted((f.get("spec", {}).get("nodeLabels") or {}).items())
                ),
            ]
            for f in items
        ),
    )


def cohorts_table(items: Iterable[Mapping[str, Any]]) -> str:
    return table(
        ("NAME", "PARENT", "CLUSTERQUEUES", "COHORTS"),
        (
            [
                c.get("metadata", {}).get("name"),
                c.get("spec", {}).get("parent") or c.get("spec", {}).get("parentName"),
                ",".join(c.get("status", {}).get("clusterQueues") or []),
                ",".join(c.get("status", {}).get("cohorts") or []),
            ]
            for c in items
        ),
    )
