from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.model import Task
from gpupool.core.placement.framework import CycleState, Mask, Rows


@dataclass(frozen=True, slots=True)
class NodeAffinity:
    """Keeps nodes that match one of the task's required node affinity terms (Kubernetes'
    ``requiredDuringSchedulingIgnoredDuringExecution``; the kubelet refuses a pod bound
    elsewhere)."""

    name: ClassVar[str] = "node-affinity"
    resolvable: ClassVar[bool] = False

    def filter(self, cs: CycleState, task: Task, rows: Rows) -> Mask:
        terms = task.pod_set.node_affinity
        if not terms:
            return np.ones(rows.size, np.bool_)
        t = cs.table
        key = ("inventory", "node-affinity", terms, t.version)
        mask = cs.cache.get(key)
        if mask is None:
            mask = np.fromiter(
                (any(term.matches(node.name, node.labels) for term in terms)
                 for node in t.nodes),
                np.bool_, count=t.n)
            cs.cache[key] = mask
        result: Mask = mask[rows]
        return result

    def reason(self, task: Task) -> str:
        terms = " or ".join(f"({term})" for term in task.pod_set.node_affinity)
        return f"node affinity does not match {terms}"
