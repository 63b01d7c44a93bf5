"""Which pods are on which node, as pod affinity and topology spread count them.

Entries are keyed by a string: ``task:<id>`` for placements the core holds (added and
removed with them), a pod's ``namespace/name`` for pods the adapter counts (other
schedulers', DaemonSets'). Plugins ask for per-node counts of the pods a rule matches
(:meth:`PodIndex.counts`); each distinct question is answered once over every entry and then
kept up to date as entries come and go, so a gang placed task by task pays one increment per
task, not a recount.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator

import numpy as np
import numpy.typing as npt

from gpupool.core.affinity import PodMeta
from gpupool.core.model import NodeName, Placement
from gpupool.core.table import NodeTable

__all__ = ["PodIndex", "placement_key"]

Counts = npt.NDArray[np.int64]
Matcher = Callable[[PodMeta], bool]


def placement_key(p: Placement) -> str:
    return f"task:{p.task}"


class PodIndex:
    def __init__(self) -> None:
        self._pods: dict[str, tuple[NodeName, PodMeta]] = {}
        self._repelling: dict[str, tuple[NodeName, PodMeta]] = {}  # those with anti-affinity
        self.version = 0
        # question -> (table version, match, per-row counts, only pods with anti-affinity)
        self._counts: dict[Hashable, tuple[int, Matcher, Counts, bool]] = {}
        self._table: NodeTable | None = None
        self._anti_keys: dict[str, int] = {}  # topology key -> anti-affinity terms with it

    def put(self, key: str, node: NodeName, meta: PodMeta) -> None:
        old = self._pods.get(key)
        if old is not None and old[0] == node and old[1] == meta:
            return
        self.drop(key)
        self._pods[key] = (node, meta)
        if meta.anti_affinity:
            self._repelling[key] = (node, meta)
        self._bump(node, meta, +1)

    def drop(self, key: str) -> None:
        old = self._pods.pop(key, None)
        if old is not None:
            self._repelling.pop(key, None)
            self._bump(old[0], old[1], -1)

    def add(self, p: Placement) -> None:
        if p.pod is not None:
            self.put(placement_key(p), p.node, p.pod)

    def remove(self, p: Placement) -> None:
        if p.pod is not None:
            self.drop(placement_key(p))

    def _bump(self, node: NodeName, meta: PodMeta, sign: int) -> None:
        self.version += 1
        for term in meta.anti_affinity:
            left = self._anti_keys.get(term.topology_key, 0) + sign
            if left:
                self._anti_keys[term.topology_key] = left
            else:
                self._anti_keys.pop(term.topology_key, None)
        t = self._table
        if t is None or not self._counts:
            return
        row = t.index.get(node)
        if row is None:  # a node the table does not hold: counted nowhere
            return
        anti = bool(meta.anti_affinity)
        for version, match, counts, anti_only in self._counts.values():
            if (
                (anti or not anti_only)
                and version == t.version
                and counts.size > row
                and match(meta)
            ):
                counts[row] += sign

    def copy(self) -> PodIndex:
        out = PodIndex()
        out._pods = dict(self._pods)
        out._repelling = dict(self._repelling)
        out._anti_keys = dict(self._anti_keys)
        out.version = self.version
        return out

    def __iter__(self) -> Iterator[tuple[str, NodeName, PodMeta]]:
        for key, (node, meta) in self._pods.items():
            yield key, node, meta

    def __len__(self) -> int:
        return len(self._pods)

    def anti_affinity_keys(self) -> frozenset[str]:
        """The topology keys of the required anti-affinity terms of the pods here."""
        return frozenset(self._anti_keys)

    def counts(
        self, table: NodeTable, question: Hashable, match: Matcher, anti_only: bool = False
    ) -> Counts:
        """Per table row, how many pods ``match`` accepts (``question`` names ``match``:
        equal questions must match the same pods; ``anti_only``: ``match`` accepts only pods
        with anti-affinity terms, so others need not be asked). Do not change the array."""
        if table is not self._table:
            self._table, self._counts = table, {}
        held = self._counts.get(question)
        if held is not None and held[0] == table.version and held[2].size == table.cap_rows:
            return held[2]
        counts = np.zeros(table.cap_rows, np.int64)
        for node, meta in (self._repelling if anti_only else self._pods).values():
            row = table.index.get(node)
            if row is not None and match(meta):
                counts[row] += 1
        self._counts[question] = (table.version, match, counts, anti_only)
        return counts
