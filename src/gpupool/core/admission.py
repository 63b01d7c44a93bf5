"""One job against quota and the cluster: ``try_admit`` walks the queue's flavors and the
job's forms, quota first, then placement, then quota again with what the placement takes.

The quota tree (``QuotaTree``, ``core/quota_tree.py``) and what a job costs in quota
(``request_demand``, ``placement_demand``, ``core/demand.py``) have modules of their own; their
names stay importable from here, where the cycle, preemption and the estimates read them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, replace

from gpupool.core.alternatives import OWN, variants
from gpupool.core.demand import placement_demand, request_demand, slice_charge_milli
from gpupool.core.model import Job, Placement, PodSet
from gpupool.core.placement.framework import Code, Profile, Status
from gpupool.core.placement.place import place_job
from gpupool.core.quota import Fungibility, ResourceFlavor
from gpupool.core.quota_tree import (
    ACCELERATOR_RESOURCES,
    ENTITLEMENT_BASIS,
    Key,
    QuotaTree,
    Vec,
)
from gpupool.core.reasons import Reason, Step, step
from gpupool.core.snapshot import Snapshot

__all__ = [
    "ACCELERATOR_RESOURCES",
    "ENTITLEMENT_BASIS",
    "Fit",
    "Key",
    "QuotaTree",
    "Vec",
    "flavor_job",
    "placement_demand",
    "request_demand",
    "slice_charge_milli",
    "try_admit",
]


@dataclass(frozen=True, slots=True)
class Fit:
    flavor: str
    placements: tuple[Placement, ...]
    demand: Vec
    borrowing: bool
    alternative: str = OWN
    """The form the job runs in: its own request, or the name of the alternative chosen."""


def flavor_job(job: Job, flavor: ResourceFlavor | None) -> Job | None:
    """The job restricted to the flavor's nodes (its labels added to every node selector);
    None when the job's own selector contradicts the flavor."""
    if flavor is None or not flavor.node_labels:
        return job
    pod_sets = []
    for ps in job.pod_sets:
        for k, v in flavor.node_labels.items():
            if ps.node_selector.get(k, v) != v:
                return None
        pod_sets.append(replace(ps, node_selector={**ps.node_selector, **flavor.node_labels}))
    return replace(job, pod_sets=tuple(pod_sets))


def try_admit(
    job: Job,
    cq: str,
    tree: QuotaTree,
    snap: Snapshot,
    profile: Profile,
    failed: dict[Hashable, Status] | None = None,
    only: tuple[str, str] | None = None,
) -> tuple[Fit | None, Status]:
    """Tries the queue's flavors in order, and in each the job's own request and then its
    alternatives: quota first (cheap), then placement, then quota again with what the
    placement really takes. Returns the fit, or why not.

    A fit that borrows is taken at once unless the queue's ``whenCanBorrow`` is
    ``TryNextFlavor``: then the later flavors are tried for a fit within nominal quota, and
    the first borrowing fit is taken only when none has one.

    ``failed`` memoises placement failures by request shape within one cycle: the snapshot
    only fills up during a cycle, so a shape that did not fit will not fit later in it.
    ``only``: (flavor, form) to try alone (``gpupool.core.fungibility`` walks them one by
    one).
    """
    queue = tree.queues[cq]
    flavors: list[str | None] = [fq.flavor for fq in queue.flavors] or [None]
    forms = variants(job)
    if only is not None:
        flavors = [f for f in flavors if (f or "") == only[0]]
        forms = [(name, vj) for name, vj in forms if name == only[1]]
    try_next = queue.fungibility.when_can_borrow is Fungibility.TRY_NEXT
    reasons: list[Reason] = []
    code = Code.UNSCHEDULABLE
    borrowing: Fit | None = None
    for fname in flavors:
        flavor = tree.flavors.get(fname) if fname else None
        key = fname or ""
        for form, vj in forms:
            said = fname if not form else f"{fname or 'any flavor'} as {form}"
            short = tree.short_reasons(cq, request_demand(vj, key))
            if short:
                reasons.extend(short)
                continue
            fj = flavor_job(vj, flavor)
            if fj is None:
                reasons.append(
                    step(
                        Step.FLAVOR,
                        f"node selector conflicts with flavor {fname}",
                        flavor=fname,
                        resolvable=False,
                    )
                )
                continue
            shape = (key, tuple(_shape(ps) for ps in fj.pod_sets), fj.min_member, _held(fj, snap))
            status = failed.get(shape) if failed is not None else None
            placements: list[Placement] = []
            if status is None:
                placements, status = place_job(fj, snap, profile)
            if not placements:
                if failed is not None:
                    failed[shape] = status
                scope = () if said is None else (said,)
                reasons.extend(r.within(*scope, flavor=fname) for r in status.reasons)
                code = (
                    status.code
                    if status.code is Code.UNRESOLVABLE and code is not Code.UNSCHEDULABLE
                    else Code.UNSCHEDULABLE
                )
                continue
            demand = placement_demand(placements, key, snap.table, tree.normalized)
            short = tree.short_reasons(cq, demand)
            if short:
                reasons.extend(short)
                continue
            fit = Fit(key, tuple(placements), demand, tree.borrows(cq, demand), form)
            if not (fit.borrowing and try_next):
                return fit, Status.ok()
            if borrowing is None:
                borrowing = fit
    if borrowing is not None:
        return borrowing, Status.ok()
    return None, Status(code, tuple(reasons))


def _held(job: Job, snap: Snapshot) -> Hashable:
    """Whether the room held for a reserved gang is open to ``job`` (the gang itself, or a
    job whose run limit ends before the gang's start): two jobs of one shape fit the same
    nodes only when both may use that room or neither may. Without it, the reserved gang
    was refused its own room for a whole cycle, every cycle, whenever a job of its shape
    (its queue's next gang) was tried before it."""
    res = snap.reservation
    if res is None:
        return None
    return (res.job, res.admits(job.id, job.run_limit_s, snap.now_s))


def _shape(ps: PodSet) -> Hashable:
    """What placement reads of a pod set: two pod sets of one shape fit the same nodes, so a
    failure of one within a cycle stands for the other (node and pod rules included: a pod
    whose affinity fails says nothing of a pod without it)."""
    return (
        ps.count,
        ps.cpu_milli,
        ps.memory_mib,
        ps.gpu,
        tuple(sorted(ps.node_selector.items())),
        ps.tolerations,
        ps.node_affinity,
        ps.pod_affinity,
        ps.pod_anti_affinity,
        ps.spread,
        ps.extended,
        ps.pod.namespace,
        tuple(sorted(ps.pod.labels.items())),
        ps.pod.anti_affinity,
    )
