"""Measured GPU use: per-card samples folded into a load model that placement reads.

Requests are a poor proxy for what a card does: shared notebooks and inference replicas often
use a small part of the compute they ask for, while a few cards run hot. An adapter reads
per-card samples (DCGM exporter metrics through Prometheus on Kubernetes; the virtual cluster's
exporter in ``serve``; the simulated jobs' use in ``sim``) and hands them to a
:class:`LoadModel`. Each cycle the model gives a :class:`CardLoad` view aligned with the node
table, and the measured placement plugins read it.

The load of one card (design note: docs/policies.md, "Measured use"):

* the **windowed aggregate**: the ``quantile`` (p90 by default) of the compute samples of the
  last ``window_s`` seconds;
* plus an **estimate for pods placed since the last sample**: a pod placed at ``t`` shows in
  samples taken from ``t + settle_s`` on; until then its request stands in for it. The estimate
  is added to the newest sample, and counts only where that sum exceeds the aggregate (the
  aggregate may already hold a peak higher than both). A pod that left since the last sample
  takes its requested compute off the same way (it still shows in the sample); its memory
  stays until a sample shows it gone, as it may have held less than it asked;
* memory is the newest sample's framebuffer use, with the same estimates (a window's peak
  would keep a departed pod's memory for the whole window);
* a card whose newest sample is older than ``stale_after_s`` (or that was never measured, or
  whose source is down) **falls back to requests**: its load is what placements request of it,
  and its node says so in a reason.

Within a cycle, placements assumed after the view was made (earlier jobs of the cycle, the
tasks of a gang in a trial) change the table's requested columns; the view adds that change
to the measured load, so every decision sees the ones before it.

Pure: times are passed in (seconds on the adapter's clock), nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gpupool.core.errors import ConfigError
from gpupool.core.model import WHOLE_GPU_MILLI, NodeName, Placement
from gpupool.core.table import NodeTable

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Bool = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class CardSample:
    """One reading of one card at ``time_s``.

    ``util_pct``: the share of time the card's compute was busy, 0..100 (DCGM's
    ``DCGM_FI_DEV_GPU_UTIL``, or ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` × 100 on MIG cards, where
    ``GPU_UTIL`` reads 0). ``used_mib``/``free_mib``: framebuffer used and free (DCGM's
    ``FB_USED``/``FB_FREE``, MiB); None when not read.
    """

    node: NodeName
    gpu: int
    time_s: float
    util_pct: float | None = None
    used_mib: int | None = None
    free_mib: int | None = None


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """How samples become a load; every field is checked by :meth:`validate`."""

    window_s: float = 300.0
    """Samples this old or newer make the windowed aggregate (5 minutes)."""
    quantile: float = 0.9
    """The compute aggregate: this quantile of the window's samples (p90)."""
    stale_after_s: float = 120.0
    """A card whose newest sample is older than this falls back to requests."""
    settle_s: float = 30.0
    """A pod placed at t shows in samples from t + settle_s on; until then its request is
    its estimate."""

    def validate(self) -> LoadSettings:
        for name in ("window_s", "stale_after_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"measured use: {name}={value!r} must be a number above 0")
        if not (isinstance(self.settle_s, int | float) and math.isfinite(self.settle_s)
                and self.settle_s >= 0):
            raise ConfigError(f"measured use: settle_s={self.settle_s!r} must be a number of "
                              "seconds, 0 or more")
        if not (isinstance(self.quantile, int | float) and 0 < self.quantile <= 1):
            raise ConfigError(f"measured use: quantile={self.quantile!r} must be above 0 and "
                              "at most 1")
        return self


@dataclass(slots=True)
class _Card:
    """The samples of one card within the window (aggregates live in the model's columns)."""

    slot: int
    times: deque[float] = field(default_factory=deque)
    utils: deque[float] = field(default_factory=deque)
    used: deque[float] = field(default_factory=deque)  # NaN where a sample had no memory


@dataclass(frozen=True, slots=True)
class CardReading:
    """One card as ``describe node`` shows it: measured beside requested."""

    gpu: int
    measured: bool
    load_milli: int
    """The load placement uses: measured (with estimates) or, on fallback, requested."""
    util_pct: float | None
    """The windowed aggregate of compute, percent; None without fresh samples."""
    used_mib: int | None
    free_mib: int | None
    age_s: float | None
    """Seconds since the newest sample; None when never measured."""
    estimate_milli: int
    """Compute of pods placed since the last sample, counted on top of the newest sample."""


@dataclass(frozen=True, slots=True)
class CardLoad:
    """One cycle's view of every card's load, aligned with the node table's cells.

    ``milli``/``free_mib`` hold the load and free memory at the time of the view; the
    methods below add what the table's requested columns changed since (placements assumed
    later in the cycle, or in a trial).
    """

    milli: F64
    """[rows, width] compute load, milli of a card (measured, or requested on fallback)."""
    free_mib: I64
    """[rows, width] framebuffer free as measured, less estimates; -1 on fallback cards."""
    measured: Bool
    """[rows, width] True where the card has fresh samples."""
    base_milli: I64
    base_mib: I64
    now_s: float
    reasons: Mapping[NodeName, str]
    """Nodes placed (wholly or partly) by requests, and why."""
    source: str = ""
    """Why the signal source as a whole is not used ("" when it is)."""
    load_offset: F64 | None = None
    """``milli - base_milli``: the load now is this plus the table's requested compute."""
    free_offset: I64 | None = None
    """``free_mib + base_mib`` on measured cards (a huge value elsewhere): the measured free
    memory now is this less the table's requested memory."""
    lazy: dict[str, Any] = field(default_factory=dict, compare=False)
    """Per-node columns computed on first use (whole-GPU tasks only need them)."""

    def node_load(self, table: NodeTable, rows: npt.NDArray[np.int64]) -> F64:
        """[len(rows)] summed load of each node's usable cards now (each card counted up to a
        whole card), milli: the measured cards' load, plus what is requested now of every
        card less what was requested of the measured ones at the view (a card at its split
        count counts as full)."""
        off = self.lazy.get("node_offset")
        if off is None:
            on = self.measured & table.gpu_usable
            off = self.lazy["node_offset"] = np.where(
                on, np.minimum(self.milli, 1000.0) - self.base_milli, 0.0).sum(axis=1)
        return np.asarray(off[rows] + table.milli_total[rows] - table.milli_free[rows],
                          np.float64)

    def outside(self, table: NodeTable) -> Bool:
        """[rows] nodes with a card free by request at the view whose memory is not idle as
        measured (``IDLE_FREE_PCT``): only those need the whole-GPU memory check."""
        out = self.lazy.get("outside")
        if out is None:
            off = self.free_offset if self.free_offset is not None else _free_offset(
                self.free_mib, self.measured, self.base_mib)
            open_ = table.gpu_usable & (self.base_milli == 0) & (self.base_mib == 0)
            out = self.lazy["outside"] = (
                open_ & (off < table.gpu_mem_cap * IDLE_FREE_PCT / 100.0)).any(axis=1)
        return np.asarray(out, np.bool_)

    @property
    def measured_cards(self) -> int:
        return int(np.count_nonzero(self.measured))

    def load(self, table: NodeTable, rows: npt.NDArray[np.int64]) -> F64:
        """[len(rows), width] compute load now, in milli of a card."""
        off = self.load_offset if self.load_offset is not None \
            else self.milli - self.base_milli
        return np.asarray(off[rows] + table.used_milli[rows], np.float64)

    def free(self, table: NodeTable, rows: npt.NDArray[np.int64]) -> I64:
        """[len(rows), width] memory free now: measured where fresh, else by requests."""
        off = self.free_offset if self.free_offset is not None else _free_offset(
            self.free_mib, self.measured, self.base_mib)
        return np.asarray(np.minimum(off[rows] - table.used_mib[rows], table.free_mib[rows]),
                          np.int64)


_COLUMNS = ("last_s", "last_util", "last_used", "last_free", "agg_util", "est_milli", "est_mib")


class LoadModel:
    """Per-card samples within the window, pods placed since, and the source's health.

    Each card's aggregates are kept in numpy columns (one slot a card) and recomputed only
    when its samples change, so the view a cycle asks for is a few vector operations even at
    thousands of cards.
    """

    last_s: F64
    last_util: F64
    last_used: F64
    last_free: F64
    agg_util: F64
    est_milli: F64
    est_mib: F64

    def __init__(self, settings: LoadSettings | None = None) -> None:
        self.settings = (settings or LoadSettings()).validate()
        self._cards: dict[tuple[NodeName, int], _Card] = {}
        self._keys: list[tuple[NodeName, int]] = []
        self._recent: dict[tuple[NodeName, int], list[tuple[float, int, int]]] = {}
        self._cap = 0
        self._grow(64)
        self._where: tuple[int, int, I64, I64] | None = None  # (table id, version, rows, cols)
        self.source_down = ""
        """Why the last read of the source failed ("" when it succeeded)."""
        self._rev = 0  # bumped by every change a view depends on
        self._cached: tuple[Any, ...] | None = None
        self.samples_total = 0
        self.last_read_s: float | None = None

    def _grow(self, cap: int) -> None:
        for name in _COLUMNS:
            old: F64 | None = getattr(self, name, None)
            fill = -math.inf if name == "last_s" else 0.0 if name.startswith("est") else math.nan
            new = np.full(cap, fill, np.float64)
            if old is not None:
                new[: old.size] = old
            setattr(self, name, new)
        self._cap = cap

    # -- facts -----------------------------------------------------------------------------

    def add(self, samples: Iterable[CardSample], now_s: float | None = None) -> int:
        """Take samples (any order; one no newer than the card's newest is ignored); returns
        how many were new. Samples older than the window are dropped. ``now_s``: the time of
        a successful read of the source, which clears a failure."""
        touched: dict[int, _Card] = {}
        new = 0
        for s in sorted(samples, key=lambda s: s.time_s):
            key = (s.node, s.gpu)
            card = self._cards.get(key)
            if card is None:
                if len(self._keys) == self._cap:
                    self._grow(self._cap * 2)
                card = self._cards[key] = _Card(len(self._keys))
                self._keys.append(key)
                self._where = None
                touched[card.slot] = card
            k = card.slot
            if s.time_s <= self.last_s[k]:
                continue
            card.times.append(s.time_s)
            card.utils.append(math.nan if s.util_pct is None else float(s.util_pct))
            card.used.append(math.nan if s.used_mib is None else float(s.used_mib))
            self.last_s[k] = s.time_s
            self.last_util[k] = card.utils[-1]
            self.last_used[k] = card.used[-1]
            self.last_free[k] = math.nan if s.free_mib is None else float(s.free_mib)
            touched[card.slot] = card
            new += 1
        for card in touched.values():
            self._fold(card)
        self.samples_total += new
        self._rev += 1
        if now_s is not None:
            self.source_down = ""
            self.last_read_s = now_s
        return new

    def _fold(self, card: _Card) -> None:
        k = card.slot
        horizon = self.last_s[k] - self.settings.window_s
        while card.times and card.times[0] < horizon:
            card.times.popleft()
            card.utils.popleft()
            card.used.popleft()
        # NaN != NaN: samples without a compute reading are left out
        self.agg_util[k] = _quantile([u for u in card.utils if u == u], self.settings.quantile)
        self._settle(self._keys[k])

    def _settle(self, key: tuple[NodeName, int]) -> None:
        """Drop the estimates the card's newest sample shows; sum the rest into its columns."""
        card = self._cards.get(key)
        recent = self._recent.get(key)
        if card is None:
            return
        k = card.slot
        kept = [] if not recent else \
            [r for r in recent if r[0] > self.last_s[k] - self.settings.settle_s]
        if kept:
            self._recent[key] = kept
        else:
            self._recent.pop(key, None)
        self.est_milli[k] = float(sum(r[1] for r in kept))
        self.est_mib[k] = float(sum(r[2] for r in kept))

    def placed(self, p: Placement, now_s: float, sign: int = 1) -> None:
        """A placement bound at ``now_s``: its request is its estimate until it shows
        (``sign`` -1: a placement that left, whose requested compute comes off until it is
        gone from the samples)."""
        for s in p.shares:
            if s.mig_profile is None and (s.gpu_milli or s.memory_mib):
                key = (p.node, s.index)
                # A pod that left takes its compute off, not its memory: it may have held
                # less than it asked, and taking off its request would free memory that
                # others hold (work outside the requests); the next sample shows it gone.
                mib = s.memory_mib if sign > 0 else 0
                self._recent.setdefault(key, []).append((now_s, sign * s.gpu_milli, mib))
                card = self._cards.get(key)
                if card is not None:
                    self.est_milli[card.slot] += sign * s.gpu_milli
                    self.est_mib[card.slot] += mib
                    self._patch(card.slot)

    def _patch(self, k: int) -> None:
        """Bring one card of the cached view up to its estimate (a placement in or out need
        not rebuild the view of every card)."""
        c = self._cached
        if c is None or self._where is None or k >= self._where[2].size:
            return
        row, col = int(self._where[2][k]), int(self._where[3][k])
        if row < 0 or not c[3][row, col]:
            return  # not in the table, or not measured: it places by requests anyway
        last_util = 0.0 if math.isnan(self.last_util[k]) else float(self.last_util[k])
        c[4][row, col] = max(float(self.agg_util[k]) * 10.0,
                             last_util * 10.0 + float(self.est_milli[k]))
        used_now = float(self.last_used[k])
        if not math.isnan(used_now):
            last_free = float(self.last_free[k])
            if math.isnan(last_free):  # capacity from the table: rebuild at the next view
                self._cached = None
                return
            cap = used_now + last_free
            c[5][row, col] = int(max(0.0, cap - max(0.0, used_now + float(self.est_mib[k]))))

    def released(self, p: Placement, now_s: float) -> None:
        """A placement that ended at ``now_s`` (see :meth:`placed`)."""
        self.placed(p, now_s, -1)

    def failed(self, reason: str) -> None:
        """The source could not be read: every card falls back to requests, with ``reason``."""
        self.source_down = reason or "the source of measured use could not be read"
        self._rev += 1

    # -- views -----------------------------------------------------------------------------

    def _cells(self, table: NodeTable) -> tuple[I64, I64]:
        """Row and column of each slot in ``table`` (-1 where the node or card is gone)."""
        w = self._where
        if w is not None and w[0] == id(table) and w[1] == table.version \
                and w[2].size == len(self._keys):
            return w[2], w[3]
        rows = np.full(len(self._keys), -1, np.int64)
        cols = np.full(len(self._keys), -1, np.int64)
        for k, (node, gpu) in enumerate(self._keys):
            row = table.index.get(node)
            if row is not None and 0 <= gpu < table.gpu_count[row]:
                rows[k], cols[k] = row, gpu
        self._where = (id(table), table.version, rows, cols)
        return rows, cols

    def view(self, table: NodeTable, now_s: float) -> CardLoad:
        """Every card's load at ``now_s``, aligned with ``table``.

        The measured part is cached until a sample, an estimate or the source's health
        changes, the table's inventory changes, or a fresh card turns stale; a view then costs
        two copies of the requested columns and one overlay."""
        base_milli = table.used_milli.copy()
        base_mib = table.used_mib.copy()
        key = (self._rev, id(table), table.version, table.cap_rows, table.width)
        c = self._cached
        if c is None or c[0] != key or not c[1] <= now_s <= c[2]:
            c = self._cached = (key, now_s, *self._measure(table, now_s))
        _, _, _, measured, milli_m, free, reasons = c
        milli = np.where(measured, milli_m, base_milli)
        return CardLoad(milli, free, measured, base_milli, base_mib, now_s, reasons,
                        self.source_down, milli - base_milli,
                        _free_offset(free, measured, base_mib))

    def _measure(self, table: NodeTable, now_s: float
                 ) -> tuple[float, Bool, F64, I64, dict[NodeName, str]]:
        """(valid until, measured mask, measured load, measured free, fallback reasons)."""
        n, w = table.cap_rows, table.width
        milli = np.zeros((n, w), np.float64)
        free = np.full((n, w), -1, np.int64)
        measured = np.zeros((n, w), np.bool_)
        stale = np.zeros(0, np.int64)
        until = math.inf
        m = len(self._keys)
        if not self.source_down and m:
            rows, cols = self._cells(table)
            present = rows >= 0
            last_s = self.last_s[:m]
            agg = self.agg_util[:m]
            fresh = present & (now_s - last_s <= self.settings.stale_after_s) & ~np.isnan(agg)
            stale = np.flatnonzero(present & ~fresh)
            k = np.flatnonzero(fresh)
            if k.size:
                until = float(last_s[k].min()) + self.settings.stale_after_s
            r, c = rows[k], cols[k]
            flat = r * w + c
            measured.ravel()[flat] = True
            last_util = self.last_util[k]
            last_util = np.where(np.isnan(last_util), 0.0, last_util)
            milli.ravel()[flat] = np.maximum(agg[k] * 10.0,
                                             last_util * 10.0 + self.est_milli[k])
            used_now = self.last_used[k]
            km = ~np.isnan(used_now)
            k, flat, used_now = k[km], flat[km], used_now[km]
            last_free = self.last_free[k]
            cap = np.where(np.isnan(last_free), table.gpu_mem_cap.ravel()[flat],
                           used_now + last_free)
            used = np.maximum(0.0, used_now + self.est_mib[k])
            free.ravel()[flat] = np.maximum(0.0, cap - used).astype(np.int64)
        return until, measured, milli, free, self._reasons(table, measured, stale)

    def _reasons(self, table: NodeTable, measured: Bool, stale: I64) -> dict[NodeName, str]:
        out: dict[NodeName, str] = {}
        rows = table.live()
        with_gpus = rows[table.gpu_count[rows] > 0]
        if self.source_down:
            why = f"{self.source_down}: placed by requests"
            return {table.nodes[i].name: why for i in with_gpus.tolist()}
        partly = with_gpus[np.count_nonzero(measured[with_gpus], axis=1)
                           < table.gpu_count[with_gpus]]
        if not partly.size:
            return out
        limit = self.settings.stale_after_s
        stale_by_node: dict[NodeName, list[int]] = {}
        for k in stale.tolist():
            node, gpu = self._keys[k]
            stale_by_node.setdefault(node, []).append(gpu)
        for i in partly.tolist():
            node = table.nodes[i].name
            old = sorted(stale_by_node.get(node, []))
            unseen = [g for g in range(int(table.gpu_count[i]))
                      if not measured[i, g] and g not in old]
            parts = []
            if old:
                parts.append(f"GPU {', '.join(map(str, old))} stale (no sample in the last "
                             f"{limit:g} s)")
            if unseen:
                parts.append(f"GPU {', '.join(map(str, unseen))} never measured")
            out[node] = "; ".join(parts) + ": placed by requests"
        return out

    def readings(self, table: NodeTable, node: NodeName, now_s: float) -> list[CardReading]:
        """The cards of ``node`` as measured and as placement counts them."""
        row = table.row(node)
        view = self.view(table, now_s)
        out = []
        for g in range(int(table.gpu_count[row])):
            card = self._cards.get((node, g))
            k = card.slot if card is not None else -1
            est_milli = int(self.est_milli[k]) if k >= 0 else 0
            fresh = bool(view.measured[row, g])
            used = self.last_used[k] if k >= 0 else math.nan
            out.append(CardReading(
                gpu=g, measured=fresh, load_milli=round(float(view.milli[row, g])),
                util_pct=round(float(self.agg_util[k]), 1) if fresh else None,
                used_mib=int(used) if fresh and not math.isnan(used) else None,
                free_mib=int(view.free_mib[row, g]) if fresh and view.free_mib[row, g] >= 0
                else None,
                age_s=round(max(0.0, now_s - float(self.last_s[k])), 1) if k >= 0 else None,
                estimate_milli=est_milli if fresh else 0,
            ))
        return out


IDLE_FREE_PCT = 95.0
"""A card free by requests takes whole-GPU work only if at least this share of its memory is
free as measured: an idle card shows a little used (driver and ECC reservations, about 1 %);
more means work no request accounts for."""

_NO_LIMIT = 1 << 50


def _free_offset(free: I64, measured: Bool, base_mib: I64) -> I64:
    return np.asarray(np.where(measured & (free >= 0), free + base_mib, _NO_LIMIT), np.int64)


def _quantile(values: list[float], q: float) -> float:
    """numpy's default (linear) quantile, in plain Python: a window holds a few dozen samples,
    where sorting a list beats building an array."""
    if not values:
        return math.nan
    values.sort()
    pos = q * (len(values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def hot_milli(pct: float) -> float:
    """A percentage of a card as milli-GPU."""
    return pct * WHOLE_GPU_MILLI / 100.0
