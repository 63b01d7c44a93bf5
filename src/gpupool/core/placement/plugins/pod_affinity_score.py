"""Preferred pod affinity and anti-affinity as a score, as kube-scheduler's
``InterPodAffinity`` score reads the incoming pod's preferred terms."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.model import Task
from gpupool.core.placement.framework import CycleState, Rows, Scores
from gpupool.core.placement.plugins.pod_affinity import term_counts
from gpupool.core.placement.plugins.topology import domain_sums, domains


@dataclass(frozen=True, slots=True)
class PodAffinityPreference:
    """Per node, the sum over the task's preferred terms of the term's weight times the
    pods the term matches in the node's domain (subtracted for anti-affinity), scaled to
    0..100 between the lowest and the highest candidate (all equal: 0 everywhere)."""

    name: ClassVar[str] = "pod-affinity-preference"

    def neutral(self, cs: CycleState, task: Task) -> bool:
        """Without preferred terms the score is 0 everywhere (whatever the candidates)."""
        ps = task.pod_set
        return not ps.preferred_affinity and not ps.preferred_anti_affinity

    def score(self, cs: CycleState, task: Task, rows: Rows) -> Scores:
        ps = task.pod_set
        total = np.zeros(rows.size, np.float64)
        if not ps.preferred_affinity and not ps.preferred_anti_affinity:
            return total
        live = cs.table.live()
        for sign, weighted in ((1.0, ps.preferred_affinity), (-1.0, ps.preferred_anti_affinity)):
            for weight, term in weighted:
                dom = domains(cs, term.topology_key)
                sums = domain_sums(dom, term_counts(cs, term), live)
                if not sums.size:
                    continue
                d = dom[rows]
                here = np.where(d >= 0, sums[np.maximum(d, 0)], 0)
                total += sign * weight * here
        low, high = float(total.min()), float(total.max())
        if high == low:
            return np.zeros(rows.size, np.float64)
        scaled: Scores = (total - low) * (100.0 / (high - low))
        return scaled
