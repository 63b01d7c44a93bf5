"""``ScheduleAnyway`` topology spread as a score, as kube-scheduler's ``PodTopologySpread``
score reads a pod's soft constraints."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.model import Task
from gpupool.core.placement.framework import CycleState, Rows, Scores
from gpupool.core.placement.plugins.topology import domain_sums, domains
from gpupool.core.placement.plugins.topology_spread import eligible_rows, spread_counts

MAX_SCORE = 100


@dataclass(frozen=True, slots=True)
class PodTopologySpreadPreference:
    """Fewer matching pods in a node's domains score higher. Per candidate node: the sum over
    the soft constraints of the matching pods in its domain (counted over the nodes the pod
    may use that have every constraint's label) times ln(domains among the candidates + 2),
    plus ``maxSkew - 1``, rounded; then ``100 * (max + min - s) / max`` in integers (100
    everywhere when max is 0). Candidates lacking a constraint's label score 0."""

    name: ClassVar[str] = "pod-topology-spread-preference"

    def neutral(self, cs: CycleState, task: Task) -> bool:
        """Without soft constraints the score is 0 everywhere (whatever the candidates)."""
        return not task.pod_set.soft_spread

    def score(self, cs: CycleState, task: Task, rows: Rows) -> Scores:
        ps = task.pod_set
        soft = ps.soft_spread
        out = np.zeros(rows.size, np.float64)
        if not soft or not rows.size:
            return out
        scored = np.ones(rows.size, np.bool_)
        for c in soft:
            scored &= domains(cs, c.topology_key)[rows] >= 0
        counted = eligible_rows(cs, task, soft)
        raw = np.zeros(rows.size, np.float64)
        for c in soft:
            dom = domains(cs, c.topology_key)
            sums = domain_sums(dom, spread_counts(cs, c, ps.pod.namespace), counted)
            d = dom[rows]
            size = int(np.unique(d[scored]).size)
            weight = math.log(size + 2)
            here = np.where(d >= 0, sums[np.maximum(d, 0)] if sums.size else 0, 0)
            raw += here * weight + (c.max_skew - 1)
        ints = np.round(raw).astype(np.int64)
        if not scored.any():
            return out
        low, high = int(ints[scored].min()), int(ints[scored].max())
        if high == 0:
            out[scored] = MAX_SCORE
            return out
        out[scored] = (MAX_SCORE * (high + low - ints[scored])) // high
        return out
