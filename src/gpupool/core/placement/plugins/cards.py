"""Card choice inside the chosen node (kube-scheduler's Reserve step for devices)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from gpupool.core.model import WHOLE_GPU_MILLI, GpuKind, GpuRequest, GpuShare, Task
from gpupool.core.placement.framework import CycleState
from gpupool.core.placement.plugins.eligible import card_mask


def mig_room(
    cs: CycleState, req: GpuRequest, rows: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Per card of ``rows``: the free instances of the profile it would give (the first of
    ``req.mig_choices`` it has free, HAMi's choice per card) and that profile's place in
    the choices (-1: none free). Instances of one card's profiles are counted apart (see
    ``k8s/hami/mig.py``), so a card gives the instances of one profile here."""
    t = cs.table
    free = np.zeros((rows.size, t.gpu_model.shape[1]), np.int64)
    which = np.full(free.shape, -1, np.int64)
    for k, name in enumerate(req.mig_choices):
        pool = t.mig_free.get(name)
        if pool is None:
            continue
        here = np.asarray(pool[rows])
        take = (which < 0) & (here >= 1)
        free[take] = here[take]
        which[take] = k
    return free, which


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
        ok = mig_room(cs, req, np.asarray([row], np.int64))[0][0] >= 1
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
            free, which = mig_room(cs, req, np.asarray([row], np.int64))
            choices = req.mig_choices
            if req.mig_instances == 1:
                g = min(cands, key=lambda i: (free[0, i], i))
                return (GpuShare(g, 0, 0, choices[which[0, g]]),)
            out: list[GpuShare] = []  # the cards with fewest free first, each filled in turn
            for g in sorted(cands, key=lambda i: (free[0, i], i)):
                take = min(int(free[0, g]), req.mig_instances - len(out))
                out.extend(GpuShare(g, 0, 0, choices[which[0, g]]) for _ in range(take))
            return tuple(out) if len(out) == req.mig_instances else None
        if len(cands) < req.count:
            return None
        node = t.nodes[row]
        peers = {g.index: frozenset(g.nvlink_peers) for g in node.gpus if g.nvlink_peers}
        chosen = nvlink_group(cands, peers, req.count)
        return tuple(GpuShare(g, WHOLE_GPU_MILLI, int(t.gpu_mem_cap[row, g])) for g in chosen)
