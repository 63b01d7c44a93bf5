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
  aggregate may already hold a peak higher than both). A pod that left since the newest
  sample takes its estimate off that sample (which was taken while it ran); its memory stays
  until a sample shows it gone, as it may have held less than it asked;
* a departure also **cuts the window**: the samples taken before it (and within ``settle_s``
  after it, which may still show it) describe holders the card no longer has, so the
  aggregate is taken over the samples from ``settle_s`` after the departure on, and until
  there is one the newest sample with the estimates is the load. Without the cut a pod that
  kept its card busy would go on counting there for most of the window after it left
  (a p90 of 5 minutes holds a peak until nine in ten of its samples are newer), and slices
  would avoid a card that is free;
* a new slice's estimate is not always its request: a slice without a core limit uses what
  its work makes it, so each workload's slices are measured where they hold a card alone and
  a new one is counted at what they were measured to use (``core/usage_workload.py``);
* memory is the newest sample's framebuffer use, with the same estimates (a window's peak
  would keep a departed pod's memory for the whole window); a new slice's memory estimate
  is what its workload's slices were measured holding (never above its request), and once
  a sample may show part of the pod (its own series read it at or before the sample), only
  what the estimate exceeds of that reading is counted on top;
* a card whose newest sample is older than ``stale_after_s`` (or that was never measured, or
  whose source is down) **falls back to requests**: its load is what placements request of it,
  and its node says so in a reason.

The view a cycle reads (:class:`CardLoad`, ``core/usage_view.py``) is kept per table and
brought up to date by row; within a cycle, placements assumed after the view was made
(earlier jobs of the cycle, the tasks of a gang in a trial) show in it through the table's
requested columns, so every decision sees the ones before it.

Pure: times are passed in (seconds on the adapter's clock), nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpupool.core.errors import ConfigError
from gpupool.core.model import WHOLE_GPU_MILLI, NodeName, Placement, TaskId
from gpupool.core.table import NodeTable
from gpupool.core.usage_view import IDLE_FREE_PCT, CardLoad
from gpupool.core.usage_workload import TaskSample, WorkloadUse

__all__ = [
    "IDLE_FREE_PCT",
    "CardLoad",
    "CardReading",
    "CardSample",
    "LoadModel",
    "LoadSettings",
    "TaskSample",
    "hot_milli",
]

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
        if not (
            isinstance(self.settle_s, int | float)
            and math.isfinite(self.settle_s)
            and self.settle_s >= 0
        ):
            raise ConfigError(
                f"measured use: settle_s={self.settle_s!r} must be a number of seconds, 0 or more"
            )
        if not (isinstance(self.quantile, int | float) and 0 < self.quantile <= 1):
            raise ConfigError(
                f"measured use: quantile={self.quantile!r} must be above 0 and at most 1"
            )
        return self


@dataclass(slots=True)
class _Card:
    """The samples of one card within the window (aggregates live in the model's columns)."""

    slot: int
    cut_s: float = -math.inf
    """Samples older than this describe holders that left; the aggregate leaves them out."""
    times: deque[float] = field(default_factory=deque)
    utils: deque[float] = field(default_factory=deque)
    used: deque[float] = field(default_factory=deque)  # NaN where a sample had no memory


@dataclass(frozen=True, slots=True)
class _Recent:
    """A placement (or, ``left``, a departure) not yet shown by the card's samples."""

    time_s: float
    milli: float
    mib: float
    left: bool = False
    task: TaskId | None = None


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


_COLUMNS = ("last_s", "last_util", "last_used", "last_free", "agg_util", "est_milli", "est_mib")
_VIEWS = 4
"""Tables with a view kept (the scheduler's snapshot, the state's table, a bench's)."""


class LoadModel:
    """Per-card samples within the window, pods placed since, and the source's health.

    Each card's aggregates are kept in numpy columns (one slot a card) and recomputed only
    when its samples change; the views (:class:`CardLoad`) read those columns and patch only
    the cards whose estimate changed (told as it changes) and the rows the table moved.
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
        self._recent: dict[tuple[NodeName, int], list[_Recent]] = {}
        self._cap = 0
        self._grow(64)
        self.source_down = ""
        """Why the last read of the source failed ("" when it succeeded)."""
        self.revision = 0
        """Bumped by every change that moves every card's view (a read, a failure)."""
        self._views: dict[int, CardLoad] = {}
        self.workloads = WorkloadUse(self.settings.quantile, self.settings.settle_s)
        """What each workload's slices were measured to use (``core/usage_workload.py``)."""
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

    @property
    def slots(self) -> int:
        """Cards the model has samples of."""
        return len(self._keys)

    def card_key(self, slot: int) -> tuple[NodeName, int]:
        return self._keys[slot]

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
            if s.util_pct is not None or s.used_mib is not None:
                self.workloads.read(
                    s.node,
                    s.gpu,
                    s.time_s,
                    None if s.util_pct is None else float(s.util_pct),
                    None if s.used_mib is None else float(s.used_mib),
                )
            touched[card.slot] = card
            new += 1
        for card in touched.values():
            self._fold(card)
        self.samples_total += new
        self.revision += 1
        if now_s is not None:
            self.source_down = ""
            self.last_read_s = now_s
        return new

    def add_tasks(self, samples: Iterable[TaskSample]) -> None:
        """Take samples of tasks' own use of their cards (oldest first): readings of what
        their workloads use. The cards' loads come from the card samples (:meth:`add`); a
        pod's memory reading only trims its own estimate where a card sample may show it."""
        shown: set[tuple[NodeName, int]] = set()
        for s in sorted(samples, key=lambda s: s.time_s):
            self.workloads.read_task(s)
            if s.used_mib is not None and (s.node, s.gpu) in self._recent:
                shown.add((s.node, s.gpu))
        for key in shown:
            self._settle(key)
        if shown:
            self.revision += 1

    def _fold(self, card: _Card) -> None:
        k = card.slot
        horizon = self.last_s[k] - self.settings.window_s
        while card.times and card.times[0] < horizon:
            card.times.popleft()
            card.utils.popleft()
            card.used.popleft()
        # NaN != NaN: samples without a compute reading are left out
        utils = [u for u in card.utils if u == u]
        if utils and card.cut_s > card.times[0]:
            utils = [
                u for t, u in zip(card.times, card.utils, strict=True) if t >= card.cut_s and u == u
            ]
            # -inf, not NaN: the card is measured, but no sample since the cut makes an
            # aggregate, so the newest sample with the estimates is its load
            self.agg_util[k] = _quantile(utils, self.settings.quantile) if utils else -math.inf
        else:
            self.agg_util[k] = _quantile(utils, self.settings.quantile)
        self._settle(self._keys[k])

    def _settle(self, key: tuple[NodeName, int]) -> None:
        """Drop the estimates the card's newest sample shows; sum the rest into its columns."""
        card = self._cards.get(key)
        recent = self._recent.get(key)
        if card is None:
            return
        k = card.slot
        last = float(self.last_s[k])
        # A placement shows in samples from settle_s after it; a departure comes off only the
        # samples taken before it (a later one may or may not show it gone: it is taken as
        # it is, the estimate never taking off what the sample may not hold)
        kept = (
            []
            if not recent
            else [
                r
                for r in recent
                if (r.time_s > last if r.left else r.time_s > last - self.settings.settle_s)
            ]
        )
        if kept:
            self._recent[key] = kept
        else:
            self._recent.pop(key, None)
        self.est_milli[k] = float(sum(r.milli for r in kept))
        # what a pod's own series read of it by the newest sample is in that sample already
        shown = self.workloads.shown_mib
        self.est_mib[k] = float(
            sum(r.mib if r.task is None else max(0.0, r.mib - shown(r.task, last)) for r in kept)
        )

    def placed(self, p: Placement, now_s: float, sign: int = 1) -> None:
        """A placement bound at ``now_s``: its estimate (its request, or for a slice what its
        workload's slices were measured to use, ``core/usage_workload.py``) stands in for it
        until it shows (``sign`` -1: a placement that left, whose estimate comes off until
        it is gone from the samples)."""
        counted = self.workloads.placed(p, now_s) if sign > 0 else self.workloads.released(p)
        for s, (est, est_mib) in zip(p.shares, counted, strict=True):
            if s.mig_profile is None and (s.gpu_milli or s.memory_mib):
                key = (p.node, s.index)
                # A pod that left takes its compute off, not its memory: it may have held
                # less than it asked, and taking off its request would free memory that
                # others hold (work outside the requests); the next sample shows it gone.
                mib = est_mib if sign > 0 else 0.0
                self._recent.setdefault(key, []).append(
                    _Recent(now_s, sign * est, mib, sign < 0, p.task if sign > 0 else None)
                )
                card = self._cards.get(key)
                if card is None:
                    continue
                if sign < 0:
                    card.cut_s = max(card.cut_s, now_s + self.settings.settle_s)
                    self._fold(card)  # the window cut, the departure's estimate taken
                else:
                    self.est_milli[card.slot] += est
                    self.est_mib[card.slot] += mib
                for v in self._views.values():  # each view takes the card's new measure
                    v.card_moved(card.slot)

    def released(self, p: Placement, now_s: float) -> None:
        """A placement that ended at ``now_s`` (see :meth:`placed`)."""
        self.placed(p, now_s, -1)

    def failed(self, reason: str) -> None:
        """The source could not be read: every card falls back to requests, with ``reason``."""
        self.source_down = reason or "the source of measured use could not be read"
        self.revision += 1

    # -- views -----------------------------------------------------------------------------

    def measure(self, slot: int, card_mib: float) -> tuple[float, int]:
        """:meth:`measures` of one card, in plain Python."""
        last_util = float(self.last_util[slot])
        load = max(
            float(self.agg_util[slot]) * 10.0,
            (0.0 if math.isnan(last_util) else last_util) * 10.0 + float(self.est_milli[slot]),
            0.0,  # a departure's estimate may exceed what the sample showed of it
        )
        used = float(self.last_used[slot])
        if math.isnan(used):
            return load, -1
        last_free = float(self.last_free[slot])
        card = card_mib if math.isnan(last_free) else used + last_free
        return load, int(max(0.0, card - max(0.0, used + float(self.est_mib[slot]))))

    def measures(self, slots: I64, card_mib: F64) -> tuple[F64, I64]:
        """(compute load in milli, memory free in MiB or -1 without a memory reading) of
        ``slots``, fresh cards: the windowed aggregate or the newest sample plus estimates,
        whichever is higher; the newest memory reading plus estimates (``card_mib``: each
        card's memory, for samples that read no free memory)."""
        last_util = self.last_util[slots]
        last_util = np.where(np.isnan(last_util), 0.0, last_util)
        # at least 0: a departure's estimate may exceed what the sample showed of it
        load = np.maximum(
            self.agg_util[slots] * 10.0, np.maximum(last_util * 10.0 + self.est_milli[slots], 0.0)
        )
        used = self.last_used[slots]
        has = ~np.isnan(used)
        last_free = self.last_free[slots]
        card = np.where(np.isnan(last_free), card_mib, used + last_free)
        left = np.maximum(0.0, card - np.maximum(0.0, used + self.est_mib[slots]))
        return (
            np.asarray(load, np.float64),
            np.where(has, np.where(has, left, 0.0), -1.0).astype(np.int64),
        )

    def cells(self, table: NodeTable) -> tuple[I64, I64]:
        """Row and column of each slot in ``table`` (-1 where the node or card is gone)."""
        rows = np.full(len(self._keys), -1, np.int64)
        cols = np.full(len(self._keys), -1, np.int64)
        for k, (node, gpu) in enumerate(self._keys):
            row = table.index.get(node)
            if row is not None and 0 <= gpu < table.gpu_count[row]:
                rows[k], cols[k] = row, gpu
        return rows, cols

    def view(self, table: NodeTable, now_s: float) -> CardLoad:
        """Every card's load at ``now_s``, aligned with ``table``: the table's view, brought
        up to date (rebuilt after a read of the source, an inventory change or a card going
        stale; otherwise patched where rows or estimates changed)."""
        v = self._views.get(id(table))
        if v is None or not v.is_for(table):
            if len(self._views) >= _VIEWS:
                self._views.pop(next(iter(self._views)))
            v = self._views[id(table)] = CardLoad(self, table)
        return v.refresh(table, now_s)

    def _util(self, slot: int) -> float:
        """The card's windowed aggregate of compute, percent; the newest sample where a
        departure cut the window and no sample since makes one."""
        agg = float(self.agg_util[slot])
        return float(self.last_util[slot]) if agg == -math.inf else agg

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
            out.append(
                CardReading(
                    gpu=g,
                    measured=fresh,
                    load_milli=round(float(view.milli[row, g])),
                    util_pct=round(self._util(k), 1) if fresh else None,
                    used_mib=int(used) if fresh and not math.isnan(used) else None,
                    free_mib=int(view.free_mib[row, g])
                    if fresh and view.free_mib[row, g] >= 0
                    else None,
                    age_s=round(max(0.0, now_s - float(self.last_s[k])), 1) if k >= 0 else None,
                    estimate_milli=est_milli if fresh else 0,
                )
            )
        return out


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
