"""ClusterState: the long-lived truth of what runs where.

Placements go through three steps, as kube-scheduler assumes a pod before binding it:
``assume`` takes the capacity at once (the next cycle sees it gone), then ``confirm`` when the
adapter's bind succeeded, or ``forget`` when it failed, which gives the capacity back exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from gpupool.core.affinity import PodMeta
from gpupool.core.errors import ConflictError, NotFoundError
from gpupool.core.model import JobId, Node, NodeName, Placement, TaskId
from gpupool.core.podindex import PodIndex
from gpupool.core.snapshot import Snapshot
from gpupool.core.table import NodeTable


@dataclass(slots=True)
class _Held:
    placement: Placement
    confirmed: bool


class ClusterState:
    def __init__(self, nodes: Iterable[Node] = (), gpu_width: int = 8) -> None:
        nodes = list(nodes)
        width = max([gpu_width, *(len(n.gpus) for n in nodes)])
        self.table = NodeTable(gpu_width=width, capacity=max(16, len(nodes)))
        self._held: dict[TaskId, _Held] = {}
        self._by_node: dict[NodeName, set[TaskId]] = {}
        self._snapshot: Snapshot | None = None
        self._cycle = 0
        self.pods = PodIndex()
        """Pods on each node for pod affinity and topology spread: the placements held here
        (with their pod) and the pods the adapter counts (:meth:`set_pod`)."""
        for node in nodes:
            self.add_node(node)

    # -- inventory -------------------------------------------------------------------------

    def add_node(self, node: Node) -> None:
        self.table.add_node(node)
        self._by_node[node.name] = set()

    def update_node(self, node: Node) -> None:
        """New spec for a known node: cordon, uncordon, GPU health, labels, taints."""
        self.table.set_node(node)

    def set_outside(self, name: NodeName, cpu_milli: int, memory_mib: int) -> None:
        """CPU and memory that pods placed by others hold on the node (absolute)."""
        self.table.set_outside(name, cpu_milli, memory_mib)

    def set_binds_in_flight(self, name: NodeName, count: int) -> None:
        """How many GPU placements on the node the adapter is still binding (absolute)."""
        self.table.set_binds_in_flight(name, count)

    def set_pod(self, key: str, node: NodeName | None, meta: PodMeta | None = None) -> None:
        """A pod placed by others on ``node`` (None, or no ``meta``: it left)."""
        if node is None or meta is None:
            self.pods.drop(key)
        else:
            self.pods.put(key, node, meta)

    def remove_node(self, name: NodeName) -> list[Placement]:
        """Remove a node; returns the placements that were on it (now forgotten)."""
        self.table.row(name)
        lost = [self._held[t].placement for t in sorted(self._by_node.get(name, ()))]
        for p in lost:
            self.forget(p.task)
        self.table.remove_node(name)
        self._by_node.pop(name, None)
        return lost

    def node(self, name: NodeName) -> Node:
        return self.table.nodes[self.table.row(name)]

    def nodes(self) -> list[Node]:
        t = self.table
        return [t.nodes[i] for i in t.live().tolist()]

    def set_tie_order(self, names: Sequence[NodeName]) -> None:
        """Order in which equal scores are broken: the first name listed wins."""
        for r, name in enumerate(names):
            self.table.rank[self.table.row(name)] = r
        self.table.version += 1

    # -- placements ------------------------------------------------------------------------

    def assume(self, p: Placement) -> None:
        if p.task in self._held:
            raise ConflictError(
                f"task {p.task} is already placed on {self._held[p.task].placement.node}"
            )
        self.table.apply(p, +1)
        self._held[p.task] = _Held(p, confirmed=False)
        self._by_node[p.node].add(p.task)
        self.pods.add(p)

    def confirm(self, task: TaskId) -> None:
        self._get(task).confirmed = True

    def forget(self, task: TaskId) -> Placement:
        """Give back what ``task`` holds: after a failed bind, on completion or eviction."""
        held = self._held.pop(task, None)
        if held is None:
            raise NotFoundError(f"task {task} holds nothing")
        self.table.apply(held.placement, -1)
        self._by_node[held.placement.node].discard(task)
        self.pods.remove(held.placement)
        return held.placement

    def _get(self, task: TaskId) -> _Held:
        try:
            return self._held[task]
        except KeyError:
            raise NotFoundError(f"task {task} holds nothing") from None

    def placement(self, task: TaskId) -> Placement | None:
        held = self._held.get(task)
        return held.placement if held else None

    def is_confirmed(self, task: TaskId) -> bool:
        return self._get(task).confirmed

    def placements(self) -> Iterator[Placement]:
        for held in self._held.values():
            yield held.placement

    def placements_on(self, node: NodeName) -> list[Placement]:
        return [self._held[t].placement for t in sorted(self._by_node.get(node, ()))]

    def job_placements(self, job: JobId) -> list[Placement]:
        return [h.placement for h in self._held.values() if h.placement.job == job]

    # -- views -----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The per-cycle view, brought up to date incrementally."""
        if self._snapshot is None:
            self._snapshot = Snapshot(self.table)
        else:
            self._snapshot.sync(self.table)
        self._snapshot.sync_pods(self.pods)
        return self._snapshot

    def next_cycle(self) -> int:
        self._cycle += 1
        return self._cycle

    def totals(self) -> dict[str, int]:
        t = self.table
        live = t.live()
        usable = t.gpu_usable[live]
        return {
            "nodes": int(live.size),
            "gpus": int(usable.sum()),
            "gpu_milli_total": int(usable.sum()) * 1000,
            "gpu_milli_used": int(t.used_milli[live][usable].sum()),
            "cpu_milli_total": int(t.cpu_cap[live].sum()),
            "cpu_milli_used": int((t.cpu_cap[live] - t.cpu_free[live]).sum()),
            "memory_mib_total": int(t.mem_cap[live].sum()),
            "memory_mib_used": int((t.mem_cap[live] - t.mem_free[live]).sum()),
        }

    def fingerprint(self) -> tuple[object, ...]:
        """Everything that allocation changes, for tests that state is restored exactly."""
        t, n = self.table, self.table.n
        return (
            t.cpu_free[:n].tobytes(),
            t.mem_free[:n].tobytes(),
            t.used_milli[:n].tobytes(),
            t.used_mib[:n].tobytes(),
            t.free_whole[:n].tobytes(),
            tuple(sorted((p, a[:n].tobytes()) for p, a in t.mig_free.items())),
            tuple(sorted(self._held)),
        )
