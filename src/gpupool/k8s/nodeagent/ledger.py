"""What the emulated nodes really did, and the counts that judge a scheduler by it.

The node agents record, for every container the device plugin served, which devices it got
and from which pod's annotation; for every pod, whether the kubelet admitted or rejected it.
From that:

- ``swapped_allocations``: containers whose card is not one gpupool recorded for their pod
  in ``gpupool.io/placement`` (pods without that annotation are not judged);
- ``misdirected_allocations``: containers served from *another* pod's
  ``hami.io/vgpu-devices-to-allocate`` (they run with that pod's card and memory limit even
  when the card happens to be the same);
- ``kubelet_rejections``: pods the kubelet failed at admission (any reason, by reason too);
- ``cards_over_split`` / ``cards_over_memory``: cards that at some moment held more
  container slices than their split count, or more memory than they have, among the pods
  admitted and not finished.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpupool.k8s.nodeagent.hami import Device
from gpupool.k8s.nodeagent.kubelet import Rejection

__all__ = ["ContainerAllocation", "Ledger", "RegisteredCard", "physical"]


@dataclass(frozen=True, slots=True)
class RegisteredCard:
    """A card as the node's register annotation declares it."""

    uuid: str
    split: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class ContainerAllocation:
    pod: str  # namespace/name of the pod the kubelet was admitting
    uid: str
    container: str
    devices: tuple[Device, ...]
    served: str  # namespace/name of the pod whose annotation the device plugin read
    served_uid: str
    via: str = ""  # how the device plugin found that pod: "lock <value>" or "scan"
    init: bool = False  # an init container: done before the app containers start


@dataclass
class _Pod:
    key: str
    node: str
    expected: frozenset[str] | None
    allocations: list[ContainerAllocation] = field(default_factory=list)
    active: bool = False


def physical(device_id: str) -> str:
    """The card a device ID names: HAMi's MIG entries are ``UUID[template-position]``."""
    return device_id.split("[", 1)[0]


def _pod_use(allocations: Iterable[ContainerAllocation]) -> dict[str, tuple[int, int]]:
    """Card -> (slices, MiB) one pod holds at most at once: its init containers run one
    after another and end before its app containers start, so a card carries the larger
    of its largest init container's share and the sum of its app containers' shares."""
    init: dict[str, tuple[int, int]] = {}
    app: dict[str, tuple[int, int]] = {}
    for a in allocations:
        for d in a.devices:
            uuid = physical(d.uuid)
            if a.init:
                n, mib = init.get(uuid, (0, 0))
                init[uuid] = (max(n, 1), max(mib, d.used_mib))
            else:
                n, mib = app.get(uuid, (0, 0))
                app[uuid] = (n + 1, mib + d.used_mib)
    return {
        u: (
            max(init.get(u, (0, 0))[0], app.get(u, (0, 0))[0]),
            max(init.get(u, (0, 0))[1], app.get(u, (0, 0))[1]),
        )
        for u in {*init, *app}
    }


class Ledger:
    def __init__(self) -> None:
        self.cards: dict[str, dict[str, RegisteredCard]] = {}  # node -> uuid -> card
        self.pods: dict[str, _Pod] = {}  # by uid
        self.rejections: list[tuple[str, Rejection]] = []
        self.swaps: list[ContainerAllocation] = []
        self.misdirected: list[ContainerAllocation] = []
        self.over_split: set[str] = set()
        self.over_memory: set[str] = set()
        self.admitted = 0

    def set_cards(self, node: str, cards: Iterable[RegisteredCard]) -> None:
        self.cards[node] = {c.uuid: c for c in cards}

    def begin(self, uid: str, key: str, node: str, expected: frozenset[str] | None) -> None:
        """A pod enters admission; ``expected``: the card UUIDs gpupool recorded for it."""
        self.pods[uid] = _Pod(key, node, expected)

    def allocated(self, a: ContainerAllocation) -> None:
        pod = self.pods.get(a.uid)
        if pod is None:
            return
        pod.allocations.append(a)
        if a.served_uid != a.uid:
            self.misdirected.append(a)
        if pod.expected is not None and any(
            physical(d.uuid) not in pod.expected for d in a.devices
        ):
            self.swaps.append(a)

    def admit(self, uid: str) -> None:
        pod = self.pods.get(uid)
        if pod is None:
            return
        pod.active = True
        self.admitted += 1
        self._check_cards(pod.node)

    def reject(self, uid: str, key: str, rejection: Rejection) -> None:
        self.rejections.append((key, rejection))
        pod = self.pods.get(uid)
        if pod is not None:
            pod.active = False

    def end(self, uid: str) -> None:
        pod = self.pods.get(uid)
        if pod is not None:
            pod.active = False

    def _check_cards(self, node: str) -> None:
        cards = self.cards.get(node) or {}
        slices: Counter[str] = Counter()
        memory: Counter[str] = Counter()
        for pod in self.pods.values():
            if not pod.active or pod.node != node:
                continue
            for uuid, (n, mib) in _pod_use(pod.allocations).items():
                slices[uuid] += n
                memory[uuid] += mib
        for uuid, n in slices.items():
            card = cards.get(uuid)
            if card is None:
                continue
            if n > card.split:
                self.over_split.add(uuid)
            if memory[uuid] > card.memory_mib:
                self.over_memory.add(uuid)

    def real_cards(self, uid: str) -> list[tuple[str, tuple[str, ...]]]:
        """(container, card UUIDs) as the device plugin really gave them to pod ``uid``."""
        pod = self.pods.get(uid)
        if pod is None:
            return []
        return [(a.container, tuple(d.uuid for d in a.devices)) for a in pod.allocations]

    def summary(self) -> dict[str, Any]:
        reasons: Counter[str] = Counter(r.reason for _, r in self.rejections)
        return {
            "swapped_allocations": len(self.swaps),
            "misdirected_allocations": len(self.misdirected),
            "kubelet_rejections": len(self.rejections),
            "rejections_by_reason": dict(sorted(reasons.items())),
            "cards_over_split": len(self.over_split),
            "cards_over_memory": len(self.over_memory),
            "pods_admitted": self.admitted,
        }

    def describe(self, limit: int = 5) -> str:
        """A few of the faults, for an assertion message."""
        lines = [f"{k}: {r.reason}: {r.message}" for k, r in self.rejections[:limit]]
        lines += [
            f"swap {a.pod}/{a.container}: got {[d.uuid for d in a.devices]} (from {a.served})"
            for a in self.swaps[:limit]
        ]
        lines += [
            f"misdirected {a.pod}/{a.container}: served from {a.served} ({a.via})"
            for a in self.misdirected[:limit]
        ]
        lines += [f"card over split count: {u}" for u in sorted(self.over_split)[:limit]]
        lines += [f"card over memory: {u}" for u in sorted(self.over_memory)[:limit]]
        return "; ".join(lines) or "no faults"
