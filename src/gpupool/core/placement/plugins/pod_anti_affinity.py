"""Required pod anti-affinity, both ways, as kube-scheduler's ``InterPodAffinity`` filter
reads it: the task's own terms, and the terms of the pods already placed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.affinity import PodMeta
from gpupool.core.model import Task
from gpupool.core.placement.framework import CycleState, Mask, Rows
from gpupool.core.placement.plugins.pod_affinity import key_totals
from gpupool.core.placement.plugins.topology import domain_sums, domains


@dataclass(frozen=True, slots=True)
class PodAntiAffinity:
    """Drops nodes whose domain (of a term's topology key) holds a pod that one of the
    task's required anti-affinity terms matches, and nodes whose domain holds a pod with a
    required anti-affinity term that matches the task. A node without a term's label is not
    in any of its domains and passes that term."""

    name: ClassVar[str] = "pod-anti-affinity"
    resolvable: ClassVar[bool] = True  # the pods in the way may be preempted

    def filter(self, cs: CycleState, task: Task, rows: Rows) -> Mask:
        keep = np.ones(rows.size, np.bool_)
        terms = task.pod_set.pod_anti_affinity
        if terms:
            for key, sums in key_totals(cs, terms).items():
                keep &= _clear(domains(cs, key)[rows], sums)
        pod = task.pod_set.pod
        labels = tuple(sorted(pod.labels.items()))
        live = cs.table.live()
        for key in cs.pods.anti_affinity_keys():

            def match(meta: PodMeta, key: str = key) -> bool:
                return any(
                    t.topology_key == key and t.matches(pod.namespace, pod.labels)
                    for t in meta.anti_affinity
                )

            counts = cs.pods.counts(
                cs.table, ("repels", key, pod.namespace, labels), match, anti_only=True
            )
            if not counts.any():
                continue
            dom = domains(cs, key)
            keep &= _clear(dom[rows], domain_sums(dom, counts, live))
        return keep

    def reason(self, task: Task) -> str:
        terms = "; ".join(str(t) for t in task.pod_set.pod_anti_affinity)
        own = f" ({terms})" if terms else ""
        return f"a pod in the node's domain is kept apart by pod anti-affinity{own}"


def _clear(dom: Rows, sums: Rows) -> Mask:
    """True where the row lacks the label or its domain holds no counted pod."""
    if not sums.size:
        return np.ones(dom.size, np.bool_)
    mask: Mask = (dom < 0) | (sums[np.maximum(dom, 0)] == 0)
    return mask
