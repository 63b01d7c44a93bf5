"""Per-node answers of the measured plugins, kept across decisions and recomputed by row.

For a slice, ``measured-memory`` and ``hot-card-spread`` ask of every candidate node how many
of its cards hold the slice by request *and* by measured memory, and how loaded the coolest of
them is. The answer depends only on the node's row in the table and in the view
(``core/usage_view.py``), so it is kept with the view, per request, and a decision recomputes
only the candidates changed since that request was last asked (placements in or out, in the
cycle or in a gang's trial and its undo; the view's patches and rebuilds) instead of gathering
every candidate's cards again: kube-scheduler's NodeInfo generations, applied to measured use.
A node that is no candidate is never recomputed. The saving depends on how often a request's
shape repeats: a shape asked after many others recomputes the candidates they changed.

Whole-GPU checks are not kept this way: they already read one value a node (the view's
``outside`` and ``node_offset``), and a row scan costs as much as they do (BENCHMARKS.md,
"Issue 18, fifth round").

Each answer is the same arithmetic, on the same cells, as the per-candidate computation it
replaces, so placements are unchanged (``tests/unit/test_measured_rows.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gpupool.core.model import WHOLE_GPU_MILLI, GpuRequest
from gpupool.core.placement.framework import CycleState, Rows
from gpupool.core.placement.plugins.eligible import card_mask

if TYPE_CHECKING:
    from gpupool.core.usage_view import CardLoad

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Cells = npt.NDArray[np.bool_]

_FEW_ROWS = 32
"""Up to this many rows, a reduction along the cards costs less than the calls around one
without a loop per row."""

MEMOS_KEPT = 64
"""Requests whose answers a view keeps (past this, the least recently asked goes)."""


class RowAnswers:
    """Columns over the view's rows and which rows hold a current answer: a row changed since
    ``seen`` (``CardLoad.changed``) is marked stale, and recomputed only when a decision asks
    for it (a node that is no candidate for that request is never recomputed)."""

    __slots__ = ("columns", "seen", "valid")

    def __init__(self, columns: tuple[npt.NDArray[np.generic], ...]) -> None:
        self.columns = columns
        self.valid = np.zeros(columns[0].size, np.bool_)
        self.seen = (-1, -1)

    def stale(self, cs: CycleState, load: CardLoad, rows: Rows) -> Rows:
        """Those of ``rows`` without a current answer (changed since last asked, or never
        asked); the caller computes them and hands them to :meth:`put`."""
        changed, self.seen = load.changed(cs.table, self.seen)
        if changed.size:
            self.valid[changed] = False
        return rows.compress(~self.valid.take(rows))

    def put(self, rows: Rows, values: tuple[npt.NDArray[np.generic], ...]) -> None:
        for col, v in zip(self.columns, values, strict=True):
            col[rows] = v
        self.valid[rows] = True


def kept(load: CardLoad, key: Hashable, make: Callable[[int], RowAnswers]) -> RowAnswers:
    """The answers kept under ``key`` with ``load`` (made by ``make`` the first time)."""
    memos = load.memos
    got = memos.pop(key, None)  # re-inserted last: the dict's order is the order of use
    if not isinstance(got, RowAnswers):
        got = make(load.stamp.size)
        if len(memos) >= MEMOS_KEPT:
            memos.pop(next(iter(memos)))
    memos[key] = got
    return got


# -- slices ------------------------------------------------------------------------------------


def slice_cells(cs: CycleState, load: CardLoad, req: GpuRequest, rows: Rows) -> Cells:
    """[len(rows), width]: cards that can hold the slice by request *and* by measured memory."""
    t = cs.table
    free = load.free(t, rows)  # measured where fresh, never above free by request
    if t.plain:
        need = (
            np.maximum(req.memory_mib, t.gpu_mem_cap.take(rows, 0) * req.memory_percent // 100)
            if req.memory_percent
            else req.memory_mib
        )
        fits: Cells = (t.free_milli.take(rows, 0) >= max(req.gpu_milli, 1)) & (free >= need)
    else:
        fits = t.slice_room(rows, req)
        fits &= free >= (
            np.maximum(req.memory_mib, t.gpu_mem_cap[rows] * req.memory_percent // 100)
            if req.memory_percent
            else req.memory_mib
        )
    allowed = card_mask(cs, req)
    if allowed is not None:
        fits &= allowed[rows]
    return fits


def row_slice_cells(cs: CycleState, load: CardLoad, req: GpuRequest, row: int) -> list[bool]:
    """:func:`slice_cells` of one row, in plain Python on a plain table (numpy's per-call cost
    would dominate eight cells)."""
    t = cs.table
    if not t.plain:
        return [bool(x) for x in slice_cells(cs, load, req, np.asarray([row], np.int64))[0]]
    milli = max(req.gpu_milli, 1)
    pct = req.memory_percent
    free_off = load.free_offset[row].tolist()
    used = t.used_mib[row].tolist()
    free_req = t.free_mib[row].tolist()
    free_milli = t.free_milli[row].tolist()
    cap = t.gpu_mem_cap[row].tolist() if pct else None
    allowed = card_mask(cs, req)
    ok = allowed[row].tolist() if allowed is not None else None
    out = []
    for g, fm in enumerate(free_milli):
        need = max(req.memory_mib, cap[g] * pct // 100) if cap is not None else req.memory_mib
        out.append(
            fm >= milli
            and min(free_off[g] - used[g], free_req[g]) >= need
            and (ok is None or bool(ok[g]))
        )
    return out


def _slice_answers(n: int) -> RowAnswers:
    return RowAnswers((np.zeros(n, np.int64), np.full(n, np.inf, np.float64)))


def slice_answers(cs: CycleState, load: CardLoad, req: GpuRequest, rows: Rows) -> tuple[I64, F64]:
    """At ``rows``: how many cards hold the slice by request and by measured memory, and the
    load now of the coolest of them (inf where none does)."""
    got = kept(load, ("slice", req), _slice_answers)
    todo = got.stale(cs, load, rows)
    if todo.size:
        fits = slice_cells(cs, load, req, todo)
        coolest = _row_min(np.where(fits, load.load(cs.table, todo), np.inf))
        got.put(todo, (np.count_nonzero(fits, axis=1), coolest))
    count, least = got.columns
    return count.take(rows), least.take(rows)  # type: ignore[return-value]


def _row_min(values: F64) -> F64:
    """[rows] least value of each row: ``min`` along the short axis for a few rows, else by
    ``argmin``, which numpy runs without a loop per row (one call against five)."""
    if values.shape[0] <= _FEW_ROWS:
        return np.asarray(values.min(axis=1, initial=np.inf))
    at = values.argmin(axis=1)
    return np.asarray(values.ravel().take(np.arange(values.shape[0]) * values.shape[1] + at))


# -- whole GPUs --------------------------------------------------------------------------------


def whole_cells(cs: CycleState, load: CardLoad, req: GpuRequest, rows: Rows) -> Cells:
    """[len(rows), width]: cards free by request whose measured memory is free too (a card
    free by request holds no requested memory, so whether it is idle as measured is the
    view's ``idle`` cell)."""
    t = cs.table
    fits: Cells = (t.free_milli.take(rows, 0) == WHOLE_GPU_MILLI) & (t.used_mib.take(rows, 0) == 0)
    fits &= load.idle.take(rows, 0)
    allowed = card_mask(cs, req)
    if allowed is not None:
        fits &= allowed[rows]
    return fits
