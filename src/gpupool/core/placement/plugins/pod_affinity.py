"""Required pod affinity, as kube-scheduler's ``InterPodAffinity`` filter reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.affinity import PodAffinityTerm, PodMeta
from gpupool.core.model import Task
from gpupool.core.placement.framework import CycleState, Mask, Rows
from gpupool.core.placement.plugins.topology import I64, domain_sums, domains


def term_counts(cs: CycleState, term: PodAffinityTerm) -> I64:
    """Per table row, the pods there that ``term`` matches."""

    def match(meta: PodMeta) -> bool:
        return term.matches(meta.namespace, meta.labels)

    return cs.pods.counts(cs.table, ("term", term), match)


def key_totals(cs: CycleState, terms: tuple[PodAffinityTerm, ...]) -> dict[str, I64]:
    """Per topology key, per domain: the pods matching a term of that key, summed over the
    terms (kube-scheduler's count for anti-affinity)."""
    live = cs.table.live()
    totals: dict[str, I64] = {}
    for term in terms:
        dom = domains(cs, term.topology_key)
        sums = domain_sums(dom, term_counts(cs, term), live)
        have = totals.get(term.topology_key)
        totals[term.topology_key] = sums if have is None else have + sums
    return totals


def all_terms_totals(cs: CycleState, terms: tuple[PodAffinityTerm, ...]) -> dict[str, I64]:
    """Per topology key of the terms, per domain: the pods matching *every* term
    (kube-scheduler counts a pod for affinity only when it matches them all)."""

    def match(meta: PodMeta) -> bool:
        return all(t.matches(meta.namespace, meta.labels) for t in terms)

    counts = cs.pods.counts(cs.table, ("all-terms", terms), match)
    live = cs.table.live()
    return {t.topology_key: domain_sums(domains(cs, t.topology_key), counts, live) for t in terms}


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """Keeps nodes where, for every required pod affinity term of the task, a pod matching
    all the terms runs in the node's domain of the term's topology key; a node without that
    label never passes. When no such pod runs anywhere and the task matches all its own
    terms, it may go to any node that has the labels (the first pod of a group with
    affinity to itself)."""

    name: ClassVar[str] = "pod-affinity"
    resolvable: ClassVar[bool] = False

    def filter(self, cs: CycleState, task: Task, rows: Rows) -> Mask:
        terms = task.pod_set.pod_affinity
        if not terms:
            return np.ones(rows.size, np.bool_)
        totals = all_terms_totals(cs, terms)
        has_labels = np.ones(rows.size, np.bool_)
        found = np.ones(rows.size, np.bool_)
        for term in terms:
            dom = domains(cs, term.topology_key)[rows]
            has_labels &= dom >= 0
            sums = totals[term.topology_key]
            found &= (dom >= 0) & (sums[np.maximum(dom, 0)] > 0 if sums.size else False)
        anywhere = any(int(s.sum()) > 0 for s in totals.values())
        pod = task.pod_set.pod
        if not anywhere and all(t.matches(pod.namespace, pod.labels) for t in terms):
            return has_labels
        mask: Mask = found & has_labels
        return mask

    def reason(self, task: Task) -> str:
        terms = "; ".join(str(t) for t in task.pod_set.pod_affinity)
        return f"no pod the pod affinity needs in the node's domain ({terms})"
