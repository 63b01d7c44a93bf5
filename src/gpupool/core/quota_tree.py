"""Quota accounting over the queue tree.

``QuotaTree`` keeps each ClusterQueue's usage per (flavor, resource) and answers "may this
queue use this much more", with Kueue's hierarchical borrowing arithmetic (see the docstring
of ``gpupool.core.quota``). Usage changes move only the path from the queue to the root, so a
check costs the depth of the tree, not the number of queues.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpupool.core import said
from gpupool.core.errors import NotFoundError
from gpupool.core.model import WHOLE_GPU_MILLI
from gpupool.core.quota import (
    ACROSS_FLAVORS,
    RESOURCES,
    ClusterQueue,
    FlavorQuotas,
    QueueConfig,
    Quota,
    Resource,
    ResourceFlavor,
)
from gpupool.core.reasons import Reason, Step, step

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
        self._members: dict[str, tuple[str, ...]] = {}  # cohort root -> its queues
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

    def cohort_queues(self, cq: str) -> tuple[str, ...]:
        """The ClusterQueues of ``cq``'s cohort tree (``cq`` among them), sorted by name. The
        tree's shape is fixed once built, so each tree's list is made once."""
        root = self.cohort_root(cq)
        got = self._members.get(root)
        if got is None:
            got = tuple(sorted(q for q in self.queues if self.cohort_root(q) == root))
            self._members[root] = got
        return got

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
