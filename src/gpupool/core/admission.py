"""Quota accounting over the queue tree, and what a job costs in quota.

``QuotaTree`` keeps each ClusterQueue's usage per (flavor, resource) and answers "may this
queue use this much more", with Kueue's hierarchical borrowing arithmetic (see the docstring
of ``gpupool.core.quota``). Usage changes move only the path from the queue to the root, so a
check costs the depth of the tree, not the number of queues.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from gpupool.core import said
from gpupool.core.alternatives import OWN, variants
from gpupool.core.errors import NotFoundError
from gpupool.core.model import WHOLE_GPU_MILLI, GpuKind, Job, Placement, PodSet
from gpupool.core.placement.framework import Code, Profile, Status
from gpupool.core.placement.place import place_job
from gpupool.core.quota import (
    ACROSS_FLAVORS,
    RESOURCES,
    ClusterQueue,
    FlavorQuotas,
    Fungibility,
    QueueConfig,
    Quota,
    Resource,
    ResourceFlavor,
)
from gpupool.core.reasons import Reason, Step, step
from gpupool.core.snapshot import Snapshot
from gpupool.core.table import NodeTable

Key = tuple[str, Resource]  # (flavor, resource)
Vec = dict[Key, int]

ACCELERATOR_RESOURCES = frozenset({Resource.GPU, Resource.GPU_MILLI, Resource.GPU_MEMORY_MIB})


@dataclass(slots=True)
class _QNode:
    name: str
    is_queue: bool
    weight: float
    parent: _QNode | None = None
    children: list[_QNode] = field(default_factory=list)
    nominal: Vec = field(default_factory=dict)
    borrowing_limit: dict[Key, int] = field(default_factory=dict)
    lending_limit: dict[Key, int] = field(default_factory=dict)
    subtree: Vec = field(default_factory=dict)
    total: Vec = field(default_factory=dict)
    guaranteed: Vec = field(default_factory=dict)
    usage: Vec = field(default_factory=dict)
    entitled: dict[Key, float] = field(default_factory=dict)

    def in_parent(self, key: Key, usage: int | None = None) -> int:
        """What this node uses of its parent's pool: usage beyond its guaranteed part."""
        u = self.usage.get(key, 0) if usage is None else usage
        return max(0, u - self.guaranteed.get(key, 0))


def _load(
    node: _QNode,
    flavors: Iterable[FlavorQuotas],
    non_preemptive: bool = False,
    normalized: Quota | None = None,
) -> None:
    if normalized is not None:
        flavors = [*flavors, FlavorQuotas(ACROSS_FLAVORS, {Resource.NORMALIZED_MILLI: normalized})]
    for fq in flavors:
        for res, q in fq.resources.items():
            key = (fq.flavor, res)
            node.nominal[key] = q.nominal
            if non_preemptive:
                node.borrowing_limit[key] = 0
            elif q.borrowing_limit is not None:
                node.borrowing_limit[key] = q.borrowing_limit
            if q.lending_limit is not None:
                node.lending_limit[key] = q.lending_limit


class QuotaTree:
    def __init__(self, config: QueueConfig) -> None:
        self.config = config
        self.queues: dict[str, ClusterQueue] = {q.name: q for q in config.cluster_queues}
        self.flavors: dict[str, ResourceFlavor] = {f.name: f for f in config.flavors}
        self._nodes: dict[str, _QNode] = {}
        self.normalized = (
            config.settings.normalized_shares
            or any(q.normalized is not None for q in config.cluster_queues)
            or any(c.normalized is not None for c in config.cohorts)
        )
        """Whether normalised compute is charged (some quota or the shares use it)."""
        cohorts = {c.name: c for c in config.cohorts}
        for c in config.cohorts:
            n = self._nodes[c.name] = _QNode(c.name, False, c.weight)
            _load(n, c.flavors, normalized=c.normalized)
        for q in config.cluster_queues:
            n = self._nodes[q.name] = _QNode(q.name, True, q.weight)
            _load(n, q.flavors, q.non_preemptive, q.normalized)
            if q.cohort is not None and q.cohort not in self._nodes:
                self._nodes[q.cohort] = _QNode(q.cohort, False, 1.0)  # implicit cohort
        for name, n in list(self._nodes.items()):  # an implicit parent is added on the way
            parent = (
                self.queues[name].cohort
                if n.is_queue
                else cohorts[name].parent
                if name in cohorts
                else None
            )
            if parent is not None:
                if parent not in self._nodes:
                    self._nodes[parent] = _QNode(parent, False, 1.0)
                n.parent = self._nodes[parent]
                n.parent.children.append(n)
        for root in self.roots():
            self._sum_quota(root)
            self._entitle(root, {k: float(v) for k, v in root.total.items()})

    # -- structure -------------------------------------------------------------------------

    def roots(self) -> list[_QNode]:
        return [n for n in self._nodes.values() if n.parent is None]

    def _sum_quota(self, n: _QNode) -> None:
        n.subtree = dict(n.nominal)
        n.total = dict(n.nominal)
        for c in n.children:
            self._sum_quota(c)
            for k, v in c.subtree.items():
                n.subtree[k] = n.subtree.get(k, 0) + v - c.guaranteed.get(k, 0)
            for k, v in c.total.items():
                n.total[k] = n.total.get(k, 0) + v
        n.guaranteed = {
            k: max(0, v - n.lending_limit[k]) if k in n.lending_limit else 0
            for k, v in n.subtree.items()
        }
        if n.parent is None:  # a root lends to nobody: all of it is its own
            n.guaranteed = dict(n.subtree)

    def _entitle(self, n: _QNode, entitled: dict[Key, float]) -> None:
        """Entitlements down the tree, nominal quota first: each child is entitled to the
        nominal quota of its subtree (guaranteed: its owner may always reclaim it), and what
        is left of the parent's entitlement (quota a cohort holds of its own) is split among
        the children by weight. A root is entitled to all the quota in its tree.

        So with equal nominal quotas covering the cluster, every queue is entitled to its
        nominal quota whatever the weights; weights share only what nobody is guaranteed.
        Where the children's quota exceeds the parent's entitlement (it cannot, for quota
        declared in one tree), it is scaled down to fit."""
        n.entitled = entitled
        if not n.children:
            return
        weights = sum(c.weight for c in n.children)
        keys = set(entitled)
        for c in n.children:
            keys.update(c.total)
        out: list[dict[Key, float]] = [{} for _ in n.children]
        for k in keys:
            have = entitled.get(k, 0.0)
            owned = sum(c.total.get(k, 0) for c in n.children)
            scale = min(1.0, have / owned) if owned > 0 else 0.0
            rest = max(0.0, have - owned)
            for i, c in enumerate(n.children):
                out[i][k] = c.total.get(k, 0) * scale + rest * c.weight / weights
        for i, c in enumerate(n.children):
            self._entitle(c, out[i])

    def node(self, cq: str) -> _QNode:
        n = self._nodes.get(cq)
        if n is None or not n.is_queue:
            raise NotFoundError(
                f"ClusterQueue {cq!r} does not exist; known: "
                f"{', '.join(sorted(self.queues)) or 'none'}"
            )
        return n

    def cohort_root(self, cq: str) -> str:
        n = self.node(cq)
        while n.parent is not None:
            n = n.parent
        return n.name

    # -- quota arithmetic ------------------------------------------------------------------

    def limited(self, cq: str, flavor: str) -> list[Key]:
        n = self.node(cq)
        return [k for k in n.nominal if k[0] == flavor]

    def available(self, cq: str, key: Key) -> int:
        return self._available(self.node(cq), key)

    def _available(self, n: _QNode, key: Key) -> int:
        usage = n.usage.get(key, 0)
        if n.parent is None:
            return n.subtree.get(key, 0) - usage
        guaranteed = n.guaranteed.get(key, 0)
        local = max(0, guaranteed - usage)
        from_parent = self._available(n.parent, key)
        limit = n.borrowing_limit.get(key)
        if limit is not None:
            stored = n.subtree.get(key, 0) - guaranteed
            from_parent = min(from_parent, stored - n.in_parent(key) + limit)
        return local + max(0, from_parent)

    def shortfall(self, cq: str, demand: Mapping[Key, int]) -> list[str]:
        """Why ``demand`` does not fit the queue's quota now; empty when it fits."""
        return [r.message for r in self.short_reasons(cq, demand)]

    def short_reasons(self, cq: str, demand: Mapping[Key, int]) -> list[Reason]:
        """``shortfall`` as ``quota`` reasons, each naming the flavor it is about (none for
        the normalised total across flavors)."""
        n = self.node(cq)
        out = []
        # GPUs first, then GPU memory, CPU, memory: what the job is about leads the sentence
        for key, amount in sorted(
            demand.items(), key=lambda kv: (kv[0][0], RESOURCES.index(kv[0][1]))
        ):
            if amount <= 0 or key not in n.nominal:
                continue
            free = self._available(n, key)
            if amount > free:
                out.append(
                    step(
                        Step.QUOTA,
                        _describe_short(cq, key, n.usage.get(key, 0), n.nominal[key], amount, free),
                        flavor=None if key[0] == ACROSS_FLAVORS else key[0],
                    )
                )
        return out

    def borrows(self, cq: str, demand: Mapping[Key, int]) -> bool:
        n = self.node(cq)
        return any(
            n.usage.get(k, 0) + v > n.nominal.get(k, 0)
            for k, v in demand.items()
            if k in n.nominal and v > 0
        )

    def below_nominal(self, cq: str) -> bool:
        """Whether the queue holds less than its nominal quota of accelerators in every flavor
        it has accelerator quota in (every accelerator resource of each flavor below
        nominal): wherever its next job goes, it may start without borrowing. Below in one
        flavor only is not enough: a queue whose jobs all go to the other would borrow there
        ahead of the queues owed capacity. A queue without accelerator quota never is."""
        n = self.node(cq)
        flavors: dict[str, bool] = {}
        for (flavor, res), nominal in n.nominal.items():
            if res not in ACCELERATOR_RESOURCES or nominal <= 0:
                continue
            below = n.usage.get((flavor, res), 0) < nominal
            flavors[flavor] = flavors.get(flavor, True) and below
        return bool(flavors) and all(flavors.values())

    def borrowed(self, cq: str) -> dict[Key, int]:
        n = self.node(cq)
        return {k: n.usage.get(k, 0) - v for k, v in n.nominal.items() if n.usage.get(k, 0) > v}

    def add(self, cq: str, demand: Mapping[Key, int], sign: int = 1) -> None:
        n = self.node(cq)
        for key, amount in demand.items():
            if amount == 0:
                continue
            node: _QNode | None = n
            delta = sign * amount
            while node is not None and delta != 0:
                before = node.in_parent(key)
                node.usage[key] = node.usage.get(key, 0) + delta
                delta = node.in_parent(key) - before
                node = node.parent

    def usage(self, cq: str) -> dict[Key, int]:
        return dict(self.node(cq).usage)

    def nominal(self, cq: str) -> dict[Key, int]:
        return dict(self.node(cq).nominal)

    def share(self, cq: str, extra: Mapping[Key, int] | None = None) -> float:
        """Weighted dominant share: the largest usage / entitlement over resources (1.0 is
        exactly the queue's fair share)."""
        n = self.node(cq)
        used: dict[Resource, float] = {}
        ent: dict[Resource, float] = {}
        normalized = (
            self.config.settings.normalized_shares
            and n.entitled.get((ACROSS_FLAVORS, Resource.NORMALIZED_MILLI), 0.0) > 0
        )
        for key, e in n.entitled.items():
            if e <= 0:
                continue
            r = key[1]
            if r is Resource.NORMALIZED_MILLI:
                if not normalized or key[0] != ACROSS_FLAVORS:
                    continue  # counted once, across flavors, and only for normalised shares
            elif normalized and r in _DEVICE_UNITS:
                continue  # measured in normalised compute instead
            ent[r] = ent.get(r, 0.0) + e
            used[r] = used.get(r, 0.0) + n.usage.get(key, 0) + (extra.get(key, 0) if extra else 0)
        return max((used[r] / ent[r] for r in ent), default=0.0)

    def entitled(self, cq: str) -> dict[Key, float]:
        return dict(self.node(cq).entitled)

    def entitled_gpus(self, cq: str) -> float:
        """The queue's entitlement in GPUs, summed over its flavors (compute: milli-GPU over
        1000, or whole cards where the quota counts cards): what the share is measured
        against, as the dashboard, the CLI and the scenario report state it."""
        ent = self.node(cq).entitled
        total = 0.0
        for f in sorted({f for f, _ in ent}):
            total += max(
                ent.get((f, Resource.GPU_MILLI), 0.0) / WHOLE_GPU_MILLI,
                ent.get((f, Resource.GPU), 0.0),
            )
        return total


_DEVICE_UNITS = (Resource.GPU, Resource.GPU_MILLI)
"""GPU compute counted in cards of any model; replaced by the across-flavors normalised
compute when shares are normalised."""


ENTITLEMENT_BASIS = (
    "entitlement: nominal quota first (guaranteed), then the quota a cohort holds of its own "
    "split among its children by fair-sharing weight; share: usage over entitlement, GPUs "
    "summed over flavors, the largest over resources, plus the share held over the last hour "
    "when ordering queues"
)
"""How the entitlement and the share are computed, in one sentence for people."""


def _describe_short(cq: str, key: Key, usage: int, nominal: int, amount: int, free: int) -> str:
    """One quota clause in the units a user writes (GPUs, CPUs, Gi; ``core.said``), never the
    core's own names (``cpu_milli``, ``gpu_memory_mib``)."""
    flavor, res = key
    flavor = "all flavors" if flavor == ACROSS_FLAVORS else flavor
    memory = res in (Resource.MEMORY_MIB, Resource.GPU_MEMORY_MIB)
    div = (
        1000 if res in (Resource.GPU_MILLI, Resource.CPU_MILLI, Resource.NORMALIZED_MILLI) else 1
    )  # milli
    unit = (
        ""
        if memory
        else " CPUs"
        if res is Resource.CPU_MILLI
        else " normalised GPUs"
        if res is Resource.NORMALIZED_MILLI
        else " GPUs"
    )

    def say(v: int) -> str:
        return said.mib(v) if memory else said.count(v / div)

    return (
        f"queue {cq} at quota for {flavor} {said.resource_name(res)} ({say(usage)}/"
        f"{say(nominal)}{unit} used, {say(amount)} asked, {say(max(free, 0))} available "
        "with borrowing)"
    )


# -- what a job costs -----------------------------------------------------------------------


def request_demand(job: Job, flavor: str) -> Vec:
    """A lower bound of the job's quota cost, from its request alone (before placement).

    Whole cards count their memory only once placed (the card decides it); everything else
    is exact. Used to skip placement when quota alone already says no.
    """
    d: Vec = {}

    def put(res: Resource, v: int) -> None:
        if v:
            d[(flavor, res)] = d.get((flavor, res), 0) + v

    for ps in job.pod_sets:
        n = ps.count
        put(Resource.CPU_MILLI, n * ps.cpu_milli)
        put(Resource.MEMORY_MIB, n * ps.memory_mib)
        g = ps.gpu
        if g.kind is GpuKind.WHOLE:
            put(Resource.GPU, n * g.count)
            put(Resource.GPU_MILLI, n * g.count * WHOLE_GPU_MILLI)
            put(Resource.GPU_MEMORY_MIB, n * g.count * g.memory_mib)
        elif g.kind is GpuKind.SLICE:
            put(Resource.GPU_MILLI, n * g.gpu_milli * g.cards)
            put(Resource.GPU_MEMORY_MIB, n * g.memory_mib * g.cards)
    if job.min_member is not None and job.min_member < job.task_count:
        # Only the gang minimum must be admitted together: scale down to it.
        frac = job.min_member / job.task_count
        d = {k: int(v * frac) for k, v in d.items()}
    return d


def slice_charge_milli(gpu_milli: int, memory_mib: int, card_mib: int) -> int:
    """What a slice of one card costs in GPUs (milli-GPU): the larger of its compute share
    and its memory share of the card, so a slice that holds most of a card's memory with
    little compute is charged for the card it blocks (dominant share within the card)."""
    if card_mib <= 0:
        return gpu_milli
    by_memory = -(-memory_mib * WHOLE_GPU_MILLI // card_mib)  # rounded up
    return min(WHOLE_GPU_MILLI, max(gpu_milli, by_memory))


def placement_demand(
    placements: Iterable[Placement], flavor: str, table: NodeTable, normalized: bool = False
) -> Vec:
    """The exact quota cost of placements: cards, compute and memory as placed. A slice's
    compute (``gpu_milli``) is charged by :func:`slice_charge_milli`. With ``normalized``
    (the tree counts normalised compute), compute is charged again in normalised units
    (``normalized_milli``, by each card's relative capacity), for the flavor and for all
    flavors together."""
    d: Vec = {}

    def put(res: Resource, v: int) -> None:
        if v:
            d[(flavor, res)] = d.get((flavor, res), 0) + v

    for p in placements:
        put(Resource.CPU_MILLI, p.cpu_milli)
        put(Resource.MEMORY_MIB, p.memory_mib)
        row = table.row(p.node) if p.shares else -1
        for s in p.shares:
            if s.mig_profile is not None:
                node = table.nodes[row]
                inst = next(i for i in node.gpus[s.index].mig if i.profile == s.mig_profile)
                milli = inst.gpu_milli
                put(Resource.GPU_MEMORY_MIB, inst.memory_mib)
            elif s.gpu_milli >= WHOLE_GPU_MILLI:
                put(Resource.GPU, 1)
                milli = s.gpu_milli
                put(Resource.GPU_MEMORY_MIB, s.memory_mib)
            else:
                card = table.nodes[row].gpus[s.index]
                milli = slice_charge_milli(s.gpu_milli, s.memory_mib, card.memory_mib)
                put(Resource.GPU_MEMORY_MIB, s.memory_mib)
            put(Resource.GPU_MILLI, milli)
            if not normalized:
                continue
            norm = table.device(row, s.index).normalized_milli(milli)
            put(Resource.NORMALIZED_MILLI, norm)
            if norm:
                d[(ACROSS_FLAVORS, Resource.NORMALIZED_MILLI)] = (
                    d.get((ACROSS_FLAVORS, Resource.NORMALIZED_MILLI), 0) + norm
                )
    return d


# -- one job against quota and the cluster ---------------------------------------------------


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
            shape = (key, tuple(_shape(ps) for ps in fj.pod_sets), fj.min_member)
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
