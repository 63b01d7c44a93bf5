"""Card choice inside the chosen node (kube-scheduler's Reserve step for devices)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.model import WHOLE_GPU_MILLI, GpuKind, GpuShare, Task
from gpupool.core.placement.framework import CycleState
from gpupool.core.placement.plugins.eligible import card_mask


def fitting_cards(cs: CycleState, task: Task, row: int) -> list[int]:
    """Indices of the cards of ``row`` that can hold one unit of the request."""
    t = cs.table
    req = task.request
    kind = req.kind
    if kind is GpuKind.WHOLE:
        ok = (t.free_milli[row] == WHOLE_GPU_MILLI) & (t.used_mib[row] == 0)
    elif kind is GpuKind.SLICE:
        ok = t.slice_room(np.asarray([row], np.int64), req)[0]
    elif kind is GpuKind.MIG:
        pool = t.mig_free.get(req.mig_profile or "")
        if pool is None:
            return []
        ok = pool[row] >= 1
    else:
        return []
    allowed = card_mask(cs, req)
    if allowed is not None:
        ok = ok & allowed[row]
    return [int(i) for i in np.flatnonzero(ok)]


def nvlink_group(candidates: list[int], peers: dict[int, frozenset[int]], k: int) -> list[int]:
    """k cards among ``candidates`` with the most NVLink links between them.

    Greedy from each start card: add the candidate linked to most chosen cards (lowest index on
    ties). Exact for the rings and fully connected meshes of 8-GPU boards, cheap for any k.
    """
    if not peers or k <= 1 or k >= len(candidates):
        return candidates[:k]
    if all(
        peers.get(g, frozenset()).issuperset(c for c in candidates if c != g) for g in candidates
    ):
        return candidates[:k]  # a full mesh among the free cards: any k are equally linked
    best: tuple[int, list[int]] | None = None
    for start in candidates:
        chosen = [start]
        links = 0
        while len(chosen) < k:
            gain, pick = max(
                (
                    (sum(1 for c in chosen if c in peers.get(g, ())), -g)
                    for g in candidates
                    if g not in chosen
                ),
            )
            chosen.append(-pick)
            links += gain
        if best is None or links > best[0]:
            best = (links, sorted(chosen))
    assert best is not None
    return best[1]


@dataclass(frozen=True, slots=True)
class BestFitCards:
    """Slices go to the fitting cards with the least compute free (then least memory), so
    fully free cards stay whole, each taking its memory of the card it lands on; whole GPUs
    take NVLink-connected cards when the node declares peers, else the lowest indices; MIG
    instances go to the card with fewest of them free (several: those cards, each filled in
    turn)."""

    name: ClassVar[str] = "best-fit-cards"

    def choose_cards(self, cs: CycleState, task: Task, row: int) -> tuple[GpuShare, ...] | None:
        req = task.request
        kind = req.kind
        if kind is GpuKind.NONE:
            return ()
        cands = fitting_cards(cs, task, row)
        t = cs.table
        if kind is GpuKind.SLICE:
            if len(cands) < req.cards:
                return None

            def fill(i: int) -> tuple[int, int, int]:
                return (t.free_milli[row, i], t.free_mib[row, i], i)

            if req.cards == 1 and not req.memory_percent:
                return (GpuShare(min(cands, key=fill), req.gpu_milli, req.memory_mib),)
            chosen = sorted(cands, key=fill)[: req.cards]
            return tuple(
                GpuShare(g, req.gpu_milli, req.slice_mib(int(t.gpu_mem_cap[row, g])))
                for g in sorted(chosen)
            )
        if kind is GpuKind.MIG:
            if not cands:
                return None
            pool = t.mig_free[req.mig_profile or ""]
            if req.mig_instances == 1:
                g = min(cands, key=lambda i: (pool[row, i], i))
                return (GpuShare(g, 0, 0, req.mig_profile),)
            out: list[GpuShare] = []  # the cards with fewest free first, each filled in turn
            for g in sorted(cands, key=lambda i: (pool[row, i], i)):
                take = min(int(pool[row, g]), req.mig_instances - len(out))
                out.extend(GpuShare(g, 0, 0, req.mig_profile) for _ in range(take))
            return tuple(out) if len(out) == req.mig_instances else None
        if len(cands) < req.count:
            return None
        node = t.nodes[row]
        peers = {g.index: frozenset(g.nvlink_peers) for g in node.gpus if g.nvlink_peers}
        chosen = nvlink_group(cands, peers, req.count)
        return tuple(GpuShare(g, WHOLE_GPU_MILLI, int(t.gpu_mem_cap[row, g])) for g in chosen)
