"""Node affinity: the required terms as a filter, the preferred terms as a score (as
kube-scheduler's ``NodeAffinity`` plugin does both)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.model import Task
from gpupool.core.placement.framework import CycleState, Mask, Rows, Scores


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
                (any(term.matches(node.name, node.labels) for term in terms) for node in t.nodes),
                np.bool_,
                count=t.n,
            )
            cs.cache[key] = mask
        result: Mask = mask[rows]
        return result

    def reason(self, task: Task) -> str:
        terms = " or ".join(f"({term})" for term in task.pod_set.node_affinity)
        return f"node affinity does not match {terms}"


@dataclass(frozen=True, slots=True)
class NodeAffinityPreference:
    """Per node, the sum of the weights of the task's preferred node affinity terms
    (``preferredDuringSchedulingIgnoredDuringExecution``) it matches, scaled so that the
    best candidate scores 100 and a node matching none 0, as kube-scheduler's
    ``NodeAffinity`` score and its default normalisation do (no term matched anywhere: 0
    everywhere). A term with no requirements matches no node (Kubernetes: a no-op)."""

    name: ClassVar[str] = "node-affinity-preference"

    def neutral(self, cs: CycleState, task: Task) -> bool:
        """Without preferred terms the score is 0 everywhere (whatever the candidates)."""
        return not task.pod_set.preferred_node_affinity

    def score(self, cs: CycleState, task: Task, rows: Rows) -> Scores:
        weighted = task.pod_set.preferred_node_affinity
        if not weighted:
            return np.zeros(rows.size, np.float64)
        t = cs.table
        key = ("inventory", "node-affinity-preference", weighted, t.version)
        sums = cs.cache.get(key)
        if sums is None:
            sums = np.fromiter(
                (
                    sum(w for w, term in weighted if term.matches(node.name, node.labels))
                    for node in t.nodes
                ),
                np.float64,
                count=t.n,
            )
            cs.cache[key] = sums
        here = np.asarray(sums[rows], np.float64)
        high = float(here.max()) if here.size else 0.0
        if high <= 0:
            return np.zeros(rows.size, np.float64)
        scaled: Scores = np.floor(here * (100.0 / high))
        return scaled
