"""The cycle's view of measured use: each card's load and free memory beside the node table.

A :class:`CardLoad` belongs to one load model and one node table (the scheduler's snapshot,
or the state's table for ``describe node``) and lives as long as both: the model hands out the
same view each cycle, brought up to date (design note: docs/policies.md, "Measured use").

* **Rebuilt whole** only when what every card's load rests on changes: a read of the source
  (new samples, or a failure), the table's inventory, or a fresh card's newest sample growing
  stale (the view knows the earliest time that happens). Samples come once per read window,
  so this is once per window, not once per decision.
* **Patched by row** otherwise: rows whose generation moved in the table (placements in or
  out since the last view) and cards whose estimate for pods placed since the last sample
  changed. A decision after one placement costs a row or two, not the whole table.

The view keeps each card's load as an *offset* from what the table requests of it at the view
(``load_offset``, ``free_offset``): the load now is the offset plus the table's requested
columns now, so placements assumed later in the cycle (earlier jobs of the cycle, the tasks of
a gang in a trial) show in every later decision without a copy of the table. Per node it keeps
the columns the plugins ask of every candidate (``node_offset``, ``outside``), so their
filters and scores read one value a node and go to the cards only where it matters.

Pure: the time of the view is passed in.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Hashable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gpupool.core.model import WHOLE_GPU_MILLI, NodeName, Task
from gpupool.core.table import NodeTable

if TYPE_CHECKING:
    from gpupool.core.usage import LoadModel

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Bool = npt.NDArray[np.bool_]
Rows = npt.NDArray[np.int64]

IDLE_FREE_PCT = 95.0
"""A card free by requests takes whole-GPU work only if at least this share of its memory is
free as measured: an idle card shows a little used (driver and ECC reservations, about 1 %);
more means work no request accounts for."""

_NO_ROWS: Rows = np.zeros(0, np.int64)

NO_LIMIT = 1 << 50
"""``free_offset`` of a card placed by requests: no measured limit on its memory."""


class CardLoad:
    """One table's view of every card's measured load, kept current by :meth:`refresh`.

    Cells (``[cap_rows, width]``): ``measured`` True where the card has fresh samples;
    ``mload``/``mfree`` its measured load (milli) and free memory (MiB, -1 without a memory
    reading) with the estimates; ``load_offset``/``free_offset`` those less/plus what the
    table requested of the card at the view (0 and ``NO_LIMIT`` on cards placed by
    requests); ``idle`` True where a card free by request may take whole-GPU work (its memory
    free as measured, ``IDLE_FREE_PCT``). Rows: ``node_offset`` (summed load of the usable
    measured cards, each at most a whole card, less their requests) and ``outside`` (a usable
    card holds memory no request accounts for). ``milli`` and ``free_mib`` read the load and
    free memory of every card now. ``stamp`` marks each row patched, from a counter
    (``stamps``) that only grows; ``memos`` holds the plugins' per-node answers kept with the
    view (``plugins/measured_rows.py``), which :meth:`changed` tells what to recompute.
    """

    def __init__(self, model: LoadModel, table: NodeTable) -> None:
        self._model = model
        self._table = weakref.ref(table)
        self._shape = (-1, -1, -1)
        self._mapped: tuple[tuple[int, int, int], int] = ((-1, -1, -1), -1)
        self._rev = -1
        self._moved: set[int] = set()  # rows whose cards' estimates changed since
        self._slots = -1
        self._built_s = math.inf
        self._until = -math.inf
        self._stale = np.zeros(0, np.int64)
        self._reasons: dict[NodeName, str] | None = None
        self.now_s = 0.0
        self.source = ""
        """Why the signal source as a whole is not used ("" when it is)."""
        self._alloc(table)

    def _alloc(self, table: NodeTable) -> None:
        n, w = table.cap_rows, table.width
        self.measured: Bool = np.zeros((n, w), np.bool_)
        self.mload: F64 = np.zeros((n, w), np.float64)
        self.mfree: I64 = np.full((n, w), -1, np.int64)
        self.idle_mib: F64 = np.zeros((n, w), np.float64)
        self.load_offset: F64 = np.zeros((n, w), np.float64)
        self.free_offset: I64 = np.full((n, w), NO_LIMIT, np.int64)
        self.idle: Bool = np.ones((n, w), np.bool_)
        self.node_offset: F64 = np.zeros(n, np.float64)
        self.outside: Bool = np.zeros(n, np.bool_)
        self.gen: I64 = np.full(n, -1, np.int64)
        self.stamp: I64 = np.zeros(n, np.int64)
        self.stamps = 0
        self.memos: dict[Hashable, object] = {}
        self.slot_row: I64 = np.zeros(0, np.int64)
        self.slot_col: I64 = np.zeros(0, np.int64)

    def is_for(self, table: NodeTable) -> bool:
        return self._table() is table

    # -- keeping current -------------------------------------------------------------------

    def refresh(self, table: NodeTable, now_s: float) -> CardLoad:
        """Bring the view to ``table`` as it is now, at ``now_s``."""
        m = self._model
        shape = (table.version, table.cap_rows, table.width)
        if (
            shape != self._shape
            or self._rev != m.revision
            or self._slots != m.slots
            or not self._built_s <= now_s <= self._until
        ):
            self._build(table, now_s, shape)
        else:
            n = table.n
            dirty = np.flatnonzero(self.gen[:n] != table.gen[:n])
            if self._moved:
                dirty = np.asarray(sorted(self._moved.union(dirty.tolist())), np.int64)
                self._moved.clear()
            if dirty.size:
                self._rows(table, dirty)
        self.now_s = now_s
        return self

    def _build(self, table: NodeTable, now_s: float, shape: tuple[int, int, int]) -> None:
        m = self._model
        if shape[1:] != self._shape[1:]:
            self._alloc(table)
        self._shape = shape
        self._rev = m.revision
        self._slots = m.slots
        self._built_s = now_s
        self._until = math.inf
        self._reasons = None
        self.source = m.source_down
        n, w = table.cap_rows, table.width
        if (shape, m.slots) != self._mapped:  # where each card of the model is in the table
            self.slot_row, self.slot_col = m.cells(table)
            self.idle_mib = np.asarray(table.gpu_mem_cap * (IDLE_FREE_PCT / 100.0), np.float64)
            self._mapped = (shape, m.slots)
        rows, cols = self.slot_row, self.slot_col
        present = rows >= 0
        self.measured = np.zeros((n, w), np.bool_)
        self._stale = np.zeros(0, np.int64)
        self.mload = np.zeros((n, w), np.float64)
        self.mfree = np.full((n, w), -1, np.int64)
        if not m.source_down and rows.size:
            last_s = m.last_s[: rows.size]
            fresh = (
                present
                & (now_s - last_s <= m.settings.stale_after_s)
                & ~np.isnan(m.agg_util[: rows.size])
            )
            self._stale = np.flatnonzero(present & ~fresh)
            k = np.flatnonzero(fresh)
            if k.size:
                self._until = float(last_s[k].min()) + m.settings.stale_after_s
            self.measured[rows[k], cols[k]] = True
            cap = table.gpu_mem_cap[rows[k], cols[k]].astype(np.float64)
            load, free = m.measures(k, cap)
            self.mload[rows[k], cols[k]] = load
            self.mfree[rows[k], cols[k]] = free
        self.gen = np.full(n, -1, np.int64)
        self._moved.clear()
        self._rows(table, np.arange(table.n, dtype=np.int64))

    def card_moved(self, slot: int) -> None:
        """The model's estimate for ``slot`` changed: take its new measure now (one card, in
        plain Python) and recompute its row at the next refresh."""
        if slot >= self.slot_row.size or self._table() is None:
            return  # a card new since the last build: the next build maps it
        row, col = int(self.slot_row[slot]), int(self.slot_col[slot])
        if row < 0 or not self.measured[row, col]:
            return
        table = self._table()
        assert table is not None
        load, free = self._model.measure(slot, float(table.gpu_mem_cap[row, col]))
        self.mload[row, col] = load
        self.mfree[row, col] = free
        self._moved.add(row)

    def _rows(self, table: NodeTable, r: Rows) -> None:
        """Recompute the offsets and the per-node columns of rows ``r`` from the measures and
        the table's requested columns as they are."""
        meas = self.measured.take(r, 0)
        used = table.used_milli.take(r, 0)
        mload = self.mload.take(r, 0)
        self.load_offset[r] = np.where(meas, mload - used, 0.0)
        mfree = self.mfree.take(r, 0)
        off = np.where(mfree >= 0, mfree + table.used_mib.take(r, 0), NO_LIMIT)
        self.free_offset[r] = off
        idle = off >= self.idle_mib.take(r, 0)
        self.idle[r] = idle
        usable = table.gpu_usable.take(r, 0)
        whole = float(WHOLE_GPU_MILLI)
        self.node_offset[r] = np.where(meas & usable, np.minimum(mload, whole) - used, 0.0).sum(
            axis=1
        )
        self.outside[r] = (usable > idle).any(axis=1)
        self.gen[r] = table.gen.take(r)
        self.stamps += 1
        self.stamp[r] = self.stamps

    def changed(self, table: NodeTable, seen: tuple[int, int]) -> tuple[Rows, tuple[int, int]]:
        """Rows whose cells changed in ``table`` or in this view since ``seen`` (what an
        earlier call returned as now), and now: what a per-row answer kept across decisions
        must recompute (``plugins/measured_rows.py``). Table generations and view stamps only
        grow, so a row changed since is a row stamped above what was seen."""
        now = (table._counter, self.stamps)
        if now == seen:
            return _NO_ROWS, now
        n = table.n
        return np.flatnonzero((table.gen[:n] > seen[0]) | (self.stamp[:n] > seen[1])), now

    @property
    def milli(self) -> F64:
        """[cap_rows, width] compute load of every card now, milli of a card (measured with
        estimates, or requested on fallback cards)."""
        table = self._table()
        used = table.used_milli if table is not None else 0
        return np.asarray(self.load_offset + used, np.float64)

    @property
    def free_mib(self) -> I64:
        """[cap_rows, width] framebuffer free now as measured less estimates; -1 on cards
        placed by requests (or without a memory reading)."""
        table = self._table()
        used = table.used_mib if table is not None else 0
        return np.asarray(
            np.where(self.free_offset < NO_LIMIT, self.free_offset - used, -1), np.int64
        )

    # -- what plugins read -----------------------------------------------------------------

    def load(self, table: NodeTable, rows: Rows) -> F64:
        """[len(rows), width] compute load now, in milli of a card."""
        return np.asarray(
            self.load_offset.take(rows, 0) + table.used_milli.take(rows, 0), np.float64
        )

    def free(self, table: NodeTable, rows: Rows) -> I64:
        """[len(rows), width] memory free now: measured where fresh, else by requests."""
        return np.asarray(
            np.minimum(
                self.free_offset.take(rows, 0) - table.used_mib.take(rows, 0),
                table.free_mib.take(rows, 0),
            ),
            np.int64,
        )

    def expected_milli(self, task: Task) -> float:
        """Compute ``task``'s slice is expected to add to its card: its request, or more where
        its workload's slices were measured using more (``core/usage_workload.py``)."""
        return self._model.workloads.expected_of(task)

    def node_load(self, table: NodeTable, rows: Rows) -> F64:
        """[len(rows)] summed load of each node's usable cards now (each card counted up to a
        whole card), milli: the measured cards' load, plus what is requested now of every
        card less what was requested of the measured ones at the view (a card at its split
        count counts as full)."""
        return np.asarray(
            self.node_offset.take(rows)
            + table.milli_total.take(rows)
            - table.milli_free.take(rows),
            np.float64,
        )

    @property
    def measured_cards(self) -> int:
        return int(np.count_nonzero(self.measured))

    @property
    def reasons(self) -> dict[NodeName, str]:
        """Nodes placed (wholly or partly) by requests, and why."""
        if self._reasons is None:
            table = self._table()
            self._reasons = {} if table is None else self._why(table)
        return self._reasons

    def _why(self, table: NodeTable) -> dict[NodeName, str]:
        m = self._model
        out: dict[NodeName, str] = {}
        rows = table.live()
        with_gpus = rows[table.gpu_count[rows] > 0]
        if self.source:
            why = f"{self.source}: placed by requests"
            return {table.nodes[i].name: why for i in with_gpus.tolist()}
        partly = with_gpus[
            np.count_nonzero(self.measured[with_gpus], axis=1) < table.gpu_count[with_gpus]
        ]
        if not partly.size:
            return out
        limit = m.settings.stale_after_s
        stale_by_node: dict[NodeName, list[int]] = {}
        for k in self._stale.tolist():
            node, gpu = m.card_key(k)
            stale_by_node.setdefault(node, []).append(gpu)
        for i in partly.tolist():
            node = table.nodes[i].name
            old = sorted(stale_by_node.get(node, []))
            unseen = [
                g
                for g in range(int(table.gpu_count[i]))
                if not self.measured[i, g] and g not in old
            ]
            parts = []
            if old:
                parts.append(
                    f"GPU {', '.join(map(str, old))} stale (no sample in the last {limit:g} s)"
                )
            if unseen:
                parts.append(f"GPU {', '.join(map(str, unseen))} never measured")
            out[node] = "; ".join(parts) + ": placed by requests"
        return out
