"""Which MIG instances sit where on each node's MIG-mode cards, whoever placed them, and the
counts the core is given for those cards (``k8s/hami/mig.py`` says why counts alone do not
do: a profile's placements overlap other profiles').

An instance is recorded from the moment gpupool chooses its placement (just before the bind
is sent, so the pods of one cycle see each other's), and from the
``hami.io/vgpu-mig-allocations`` annotation of every pod bound to a node (gpupool's after a
restart, and HAMi's own scheduler's); it goes when the pod ends. After each change the
node's cards are counted again: per profile, the instances the core holds (gpupool's pods
it placed) plus how many more fit beside every instance on the card.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpupool.core.model import Node
from gpupool.k8s.hami.mig import MigAllocation, MigCard, Span, instances
from gpupool.k8s.hami.register import MIG_MODE, HamiDevice, HamiMigProfile

__all__ = ["MigLedger"]


@dataclass
class MigLedger:
    profiles: dict[str, dict[str, tuple[HamiMigProfile, ...]]] = field(default_factory=dict)
    """Node -> card UUID -> the profiles its MIG-mode card registers."""
    pods: dict[str, tuple[str, tuple[MigAllocation, ...], bool]] = field(default_factory=dict)
    """Pod key -> (node, its instances, whether the core holds them)."""

    def set_devices(self, node: str, devices: Sequence[HamiDevice]) -> None:
        mig = {d.id: d.mig_profiles for d in devices if d.mode == MIG_MODE}
        if mig:
            self.profiles[node] = mig
        else:
            self.profiles.pop(node, None)

    def has_mig(self, node: str) -> bool:
        return node in self.profiles

    def take(self, key: str, node: str, allocations: Sequence[MigAllocation], held: bool) -> bool:
        """Records the pod's instances; whether anything changed."""
        entry = (node, tuple(allocations), held)
        if not allocations:
            return self.drop(key) is not None
        if self.pods.get(key) == entry:
            return False
        self.pods[key] = entry
        return True

    def drop(self, key: str) -> str | None:
        """Forgets the pod's instances; the node they were on (None: it had none)."""
        old = self.pods.pop(key, None)
        return None if old is None else old[0]

    def of(self, key: str) -> tuple[MigAllocation, ...]:
        entry = self.pods.get(key)
        return () if entry is None else entry[1]

    def occupied(self, node: str, uuid: str) -> list[Span]:
        return [
            a.span
            for n, allocs, _ in self.pods.values()
            if n == node
            for a in allocs
            if a.uuid == uuid
        ]

    def profile(self, node: str, uuid: str, name: str) -> HamiMigProfile | None:
        return next((p for p in self.profiles.get(node, {}).get(uuid, ()) if p.name == name), None)

    def counted(self, node: Node) -> Node:
        """``node`` with its MIG-mode cards' instance counts as the instances on them leave
        them (unchanged when it has no such card)."""
        mine = self.profiles.get(str(node.name))
        if not mine:
            return node
        held: dict[str, dict[str, int]] = {}
        for n, allocs, in_core in self.pods.values():
            if n == node.name and in_core:
                for a in allocs:
                    per = held.setdefault(a.uuid, {})
                    per[a.profile] = per.get(a.profile, 0) + 1
        gpus = tuple(
            replace(
                g,
                mig=instances(
                    mine[g.uuid],
                    self.occupied(str(node.name), g.uuid),
                    held.get(g.uuid, {}),
                    usable=g.healthy,
                ),
            )
            if g.uuid in mine
            else g
            for g in node.gpus
        )
        return replace(node, gpus=gpus)

    def cards(self, nodes: Mapping[str, Node]) -> Iterator[MigCard]:
        """Every healthy MIG-mode card of ``nodes``, with the placements its instances take
        (what the choice of a pod's profile reads), made as they are read."""
        for name, per in self.profiles.items():
            node = nodes.get(name)
            for g in node.gpus if node is not None else ():
                if g.healthy and per.get(g.uuid):
                    yield MigCard(g, per[g.uuid], tuple(self.occupied(name, g.uuid)))
