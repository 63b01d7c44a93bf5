"""FGD: fragmentation gradient descent (Weng et al., "Beware of Fragmentation", ATC'23).

Score: a node is worth what placing the pod there does to its fragment F_n(M) (see
``frag.py``): ``floor(100 * sigmoid((F_n - F_n') / 1000))`` with F in milli-GPU, so the
difference is in whole GPUs, 50 means "no change" and the smallest increase wins (steepest
descent). The score is truncated to an integer on purpose, as the reference does: it merges
near-equal nodes into ties, which the table's tie order then breaks.

Hypothetical state F_n': a slice is tried on every card of the node that can hold it and the
best card kept (the first card on equal integer scores), and the card plugin places the slice
on that same card. Whole cards take the lowest-index fully free cards (which ones does not
change F, all being full); a pod without GPUs changes only the CPU free, which can still move
typical pods from "fits" to "lacks CPU".

Cost: scores depend only on the node's row and the pod's shape, so they are cached per
(shape, row generation) in the snapshot cache; a decision recomputes only the rows that
changed since the last pod of that shape.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from gpupool.core.model import WHOLE_GPU_MILLI, GpuKind, GpuShare, Task
from gpupool.core.placement.framework import CycleState, Rows, Scores
from gpupool.core.placement.plugins.cards import BestFitCards
from gpupool.core.placement.plugins.eligible import card_mask
from gpupool.core.placement.plugins.frag import (
    F64,
    I64,
    TypicalPods,
    frag_after_slice,
    frag_after_take,
    row_terms,
    slice_milli,
)


def shape_key(task: Task) -> tuple[Hashable, ...]:
    """What a shape-only score depends on: CPU and the GPU request (memory aside)."""
    req = task.request
    return (
        task.cpu_milli,
        req.kind,
        req.count,
        req.gpu_milli,
        req.memory_mib,
        req.models,
        req.cards,
        req.memory_percent,
        req.uuids,
        req.excluded_uuids,
    )


def whole_take(cs: CycleState, task: Task, rows: Rows) -> I64:
    """[R, W] milli each row gives up to ``task``: the lowest-index fully free allowed cards
    for whole GPUs, nothing for a pod without GPUs (slices are handled per card)."""
    t = cs.table
    req = task.request
    take = np.zeros((rows.size, t.width), np.int64)
    if req.kind is not GpuKind.WHOLE:
        return take
    whole = (t.free_milli[rows] == WHOLE_GPU_MILLI) & (t.used_mib[rows] == 0)
    allowed = card_mask(cs, req)
    if allowed is not None:
        whole &= allowed[rows]
    first_k = whole & (np.cumsum(whole, axis=1) <= req.count)
    take[first_k] = WHOLE_GPU_MILLI
    return take


def slice_cards(cs: CycleState, task: Task, rows: Rows) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """[R, W]: cards that can hold the task's slice (compute, memory, model)."""
    t = cs.table
    req = task.request
    ok = t.slice_room(rows, req)
    allowed = card_mask(cs, req)
    if allowed is not None:
        ok &= allowed[rows]
    result: np.ndarray[Any, np.dtype[np.bool_]] = ok
    return result


def sigmoid_score(delta_scaled: I64 | F64, kept: int) -> I64:
    """floor(100 * sigmoid(dF / 1000)) with dF in milli-GPU given as kept * dF."""
    x = delta_scaled / kept / 1000.0
    return np.asarray(np.trunc(100.0 / (1.0 + np.exp(-x))), np.int64)


def fgd_evaluate(tp: TypicalPods, cs: CycleState, task: Task, rows: Rows) -> tuple[I64, I64]:
    """(score, card) per row: FGD's integer score and, for a slice, the card it picks
    (-1 otherwise). Computed afresh; see :class:`FgdScore` for the cached path."""
    t = cs.table
    base = row_terms(tp, t, rows, cs.cache)
    req = task.request
    if req.kind is GpuKind.SLICE:
        after = frag_after_slice(
            tp, t, rows, base, task.cpu_milli, slice_milli(t, rows, req), cs.cache
        )
        s = sigmoid_score(base.frag[:, None] - after, tp.kept)
        s = np.where(slice_cards(cs, task, rows), s, -1)
        card = np.argmax(s, axis=1)
        return s[np.arange(rows.size), card], card
    take = whole_take(cs, task, rows)
    after = frag_after_take(tp, t, rows, base, task.cpu_milli, take, cs.cache)
    return sigmoid_score(base.frag - after, tp.kept), np.full(rows.size, -1, np.int64)


def cached_by_row(
    cs: CycleState,
    key: Hashable,
    rows: Rows,
    compute: Callable[[Rows], tuple[npt.ArrayLike, npt.ArrayLike]],
) -> tuple[F64, I64]:
    """Per-row (score, card) pairs cached against row generations under ``key``.

    ``compute(stale_rows) -> (score, card)`` runs only on rows that changed since cached.
    """
    t = cs.table
    entry = cs.cache.get(key)
    if entry is None or entry[0].size < t.cap_rows:
        cap = t.cap_rows
        entry = cs.cache[key] = (
            np.full(cap, -1, np.int64),
            np.zeros(cap, np.float64),
            np.full(cap, -1, np.int64),
        )
    gen_at, score, card = entry
    stale = rows[gen_at[rows] != t.gen[rows]]
    if stale.size:
        s, c = compute(stale)
        score[stale] = s
        card[stale] = c
        gen_at[stale] = t.gen[stale]
    return score[rows], card[rows]


def exclusive_cards(cs: CycleState, task: Task, row: int) -> tuple[GpuShare, ...] | None:
    """The lowest-index fully free allowed cards for whole GPUs; () without GPUs."""
    req = task.request
    if req.kind is GpuKind.NONE:
        return ()
    t = cs.table
    take = whole_take(cs, task, np.asarray([row], np.int64))[0]
    idx = np.flatnonzero(take)
    if idx.size < req.count:
        return None
    return tuple(
        GpuShare(int(g), WHOLE_GPU_MILLI, int(t.gpu_mem_cap[row, g])) for g in idx.tolist()
    )


class RowScored:
    """Score and card choice read from one cached evaluation per (row, pod shape): the score
    of each row, and for a slice the card it was scored on; whole cards go to the lowest free
    indices. Subclasses supply ``_scores``."""

    def _scores(self, cs: CycleState, task: Task, rows: Rows) -> tuple[F64, I64]:
        raise NotImplementedError

    def score(self, cs: CycleState, task: Task, rows: Rows) -> Scores:
        return self._scores(cs, task, rows)[0]

    def choose_cards(self, cs: CycleState, task: Task, row: int) -> tuple[GpuShare, ...] | None:
        req = task.request
        if req.kind is not GpuKind.SLICE:
            return exclusive_cards(cs, task, row)
        if req.cards != 1 or req.memory_percent:
            return BestFitCards().choose_cards(cs, task, row)
        score, card = self._scores(cs, task, np.asarray([row], np.int64))
        if score[0] < 0:
            return None
        return (GpuShare(int(card[0]), req.gpu_milli, req.memory_mib),)


@dataclass(frozen=True, eq=False)
class FgdScore(RowScored):
    """Score and card choice of FGD against the typical pods ``typical_pods``."""

    typical_pods: TypicalPods
    name: ClassVar[str] = "fgd"

    def _scores(self, cs: CycleState, task: Task, rows: Rows) -> tuple[F64, I64]:
        tp = self.typical_pods
        return cached_by_row(
            cs, ("fgd", tp, shape_key(task)), rows, lambda stale: fgd_evaluate(tp, cs, task, stale)
        )
