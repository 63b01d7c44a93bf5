"""Topology spread constraints that must hold, as kube-scheduler's ``PodTopologySpread``
filter reads them (``whenUnsatisfiable: DoNotSchedule``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.affinity import PodMeta, SpreadConstraint
from gpupool.core.model import Task
from gpupool.core.placement.framework import CycleState, Mask, Rows
from gpupool.core.placement.plugins.topology import I64, domain_sums, domains

NO_DOMAIN = np.iinfo(np.int64).max // 2


def spread_counts(cs: CycleState, c: SpreadConstraint, namespace: str) -> I64:
    """Per table row, the pods of ``namespace`` there that the constraint's selector matches
    (no selector: none), leaving out pods being deleted as kube-scheduler does."""
    selector = c.selector

    def match(meta: PodMeta) -> bool:
        return (
            selector is not None
            and meta.namespace == namespace
            and not meta.terminating
            and selector.matches(meta.labels)
        )

    return cs.pods.counts(cs.table, ("spread", selector, namespace), match)


def eligible_rows(
    cs: CycleState, task: Task, constraints: tuple[SpreadConstraint, ...] | None = None
) -> Rows:
    """The nodes whose pods are counted: every node with all the constraints' topology
    labels (the task's ``DoNotSchedule`` ones unless given) that the task's node selector and
    required node affinity allow (Kubernetes' default ``nodeAffinityPolicy: Honor``,
    ``nodeTaintsPolicy: Ignore``)."""
    ps = task.pod_set
    spread = ps.spread if constraints is None else constraints
    t = cs.table
    key = (
        "inventory",
        "spread-eligible",
        tuple(sorted(ps.node_selector.items())),
        ps.node_affinity,
        tuple(c.topology_key for c in spread),
        t.version,
    )
    rows: Rows | None = cs.cache.get(key)
    if rows is None:
        live = t.live()
        keep = np.ones(live.size, np.bool_)
        for c in spread:
            keep &= domains(cs, c.topology_key)[live] >= 0
        for i, r in enumerate(live.tolist()):
            if not keep[i]:
                continue
            node = t.nodes[r]
            if any(node.labels.get(k) != v for k, v in ps.node_selector.items()) or (
                ps.node_affinity
                and not any(term.matches(node.name, node.labels) for term in ps.node_affinity)
            ):
                keep[i] = False
        rows = live[keep]
        cs.cache[key] = rows
    return rows


@dataclass(frozen=True, slots=True)
class PodTopologySpread:
    """Keeps nodes where placing the task leaves each constraint's skew within ``maxSkew``:
    the matching pods in the node's domain, plus one when the task matches the selector
    itself, less the fewest in any domain of the eligible nodes (0 when there are fewer
    domains than ``minDomains``). A node without a constraint's label never passes."""

    name: ClassVar[str] = "pod-topology-spread"
    resolvable: ClassVar[bool] = True  # the pods in the crowded domain may be preempted

    def filter(self, cs: CycleState, task: Task, rows: Rows) -> Mask:
        ps = task.pod_set
        keep = np.ones(rows.size, np.bool_)
        if not ps.spread:
            return keep
        eligible = eligible_rows(cs, task)
        for c in ps.spread:
            dom = domains(cs, c.topology_key)
            sums = domain_sums(dom, spread_counts(cs, c, ps.pod.namespace), eligible)
            present = np.zeros(sums.size, np.bool_)
            present[dom[eligible]] = True
            n_domains = int(np.count_nonzero(present))
            low = int(sums[present].min()) if n_domains else NO_DOMAIN
            if c.min_domains is not None and n_domains < c.min_domains:
                low = 0
            own = int(c.selector is not None and c.selector.matches(ps.pod.labels))
            d = dom[rows]
            here = np.where(d >= 0, sums[np.maximum(d, 0)] if sums.size else 0, 0)
            keep &= (d >= 0) & (here + own - low <= c.max_skew)
        return keep

    def reason(self, task: Task) -> str:
        rules = "; ".join(str(c) for c in task.pod_set.spread)
        return f"placing the pod would break its topology spread ({rules})"
