"""Placement by measured use: the plugins that read the cycle's :class:`CardLoad`.

Three policies (design note: docs/policies.md, "Measured use"), each neutral when the cycle
has no measured load (``cs.load`` None), so a profile that names them places by requests
alone until a signal source is configured:

* ``measured-memory`` (filter): a slice never goes to a card whose *measured* free
  framebuffer is below what it asks, even where the requests on the card say it fits (work
  outside the requests, a leaked CUDA context, a pod using more than it declared);
* ``hot-card-spread`` (score): a slice prefers a node where it can land on a card that stays
  at or below ``hot_pct`` of its compute once the slice's expected use (its request, or what
  its workload's slices were measured to use, ``core/usage_workload.py``) is added;
* ``target-load-packing`` (score): whole-GPU work packs onto nodes up to ``target_pct`` of
  their measured compute (Trimaran's TargetLoadPacking curve, for GPUs), and beyond it is
  indifferent: the load there is on cards the task does not share;
* ``measured-cards`` (card choice): a slice takes the fullest-by-request card among those that
  stay cool, else the coolest; whole GPUs take cards idle as measured; MIG as ``best-fit-cards``.

Cards a node falls back to requests for (stale or no samples) carry their requested compute
as their load and their request-based free memory, so these plugins then agree with requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.errors import ConfigError
from gpupool.core.model import WHOLE_GPU_MILLI, GpuKind, GpuShare, Task
from gpupool.core.placement.framework import CycleState, Mask, Rows, Scores
from gpupool.core.placement.plugins.cards import BestFitCards, nvlink_group
from gpupool.core.placement.plugins.eligible import card_mask
from gpupool.core.placement.plugins.measured_rows import (
    row_slice_cells,
    slice_answers,
    slice_cells,
    whole_cells,
)
from gpupool.core.usage_view import IDLE_FREE_PCT


def _pct(name: str, plugin: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 100:
        raise ConfigError(
            f"plugin {plugin!r}: {name}={value!r} must be a percentage above 0 and at most 100"
        )
    return float(value)


@dataclass(frozen=True, slots=True)
class MeasuredMemory:
    """Keeps nodes where a card has the slice's memory free as measured, not only as requested;
    for whole GPUs, cards free by request that are idle in memory as measured too."""

    name: ClassVar[str] = "measured-memory"
    resolvable: ClassVar[bool] = True

    def neutral(self, cs: CycleState, task: Task) -> bool:
        """Keeps every row without measured load, and for a task without cards or with MIG."""
        return cs.load is None or task.request.kind not in (GpuKind.WHOLE, GpuKind.SLICE)

    def filter(self, cs: CycleState, task: Task, rows: Rows) -> Mask:
        req = task.request
        load = cs.load
        if load is None or not rows.size:
            return np.ones(rows.size, np.bool_)
        if req.kind is GpuKind.WHOLE:
            out = np.ones(rows.size, np.bool_)
            # only nodes with memory held outside the requests need the card-level check
            check = np.flatnonzero(load.outside.take(rows))
            if check.size:
                out[check] = whole_cells(cs, load, req, rows[check]).sum(axis=1) >= req.count
            return out
        if req.kind is not GpuKind.SLICE:
            return np.ones(rows.size, np.bool_)
        count, _ = slice_answers(cs, load, req, rows)
        return np.asarray(count >= req.cards)

    def reason(self, task: Task) -> str:
        req = task.request
        if req.kind is GpuKind.WHOLE:
            return (
                f"fewer than {req.count} whole GPUs with {IDLE_FREE_PCT:g}% of their "
                "memory free as measured"
            )
        mem = (
            f"{req.memory_percent}% of its memory"
            if req.memory_percent
            else f"{req.memory_mib} MiB"
        )
        return f"no GPU with {mem} free as measured"


@dataclass(frozen=True, slots=True)
class HotCardSpread:
    """Slices prefer nodes with a card that stays at or below ``hot_pct`` once they land."""

    name: ClassVar[str] = "hot-card-spread"
    hot_pct: float = 80.0

    def __post_init__(self) -> None:
        _pct("hot_pct", self.name, self.hot_pct)

    def neutral(self, cs: CycleState, task: Task) -> bool:
        """0 everywhere but for a slice with measured load."""
        return cs.load is None or task.request.kind is not GpuKind.SLICE

    def score(self, cs: CycleState, task: Task, rows: Rows) -> Scores:
        req = task.request
        load = cs.load
        if load is None or req.kind is not GpuKind.SLICE:
            return np.zeros(rows.size, np.float64)
        hot = self.hot_pct * WHOLE_GPU_MILLI / 100.0
        add = load.expected_milli(task)  # the request, or what its workload uses
        if req.cards <= 1:
            # the least load of a card that holds the slice, kept per node with the view
            coolest = slice_answers(cs, load, req, rows)[1]
        else:
            pred = np.where(slice_cells(cs, load, req, rows), load.load(cs.table, rows), np.inf)
            coolest = np.sort(pred, axis=1)[:, req.cards - 1]
        # 100 where a fitting card stays cool, falling to 0 a whole card above; 0 where none
        # fits (an infinite load is over by more than a card)
        over = coolest + add
        over -= hot
        over /= WHOLE_GPU_MILLI
        np.clip(over, 0.0, 1.0, out=over)
        out = 1.0 - over
        out *= 100.0
        np.floor(out, out=out)
        if req.cards <= 1:  # a node with a fitting card at most hot - add loaded: 100
            out[coolest <= hot - add] = 100.0
        return out


@dataclass(frozen=True, slots=True)
class TargetLoadPacking:
    """Whole-GPU work packs onto nodes up to ``target_pct`` of their measured compute.

    The score of a node whose measured compute, with the task's cards added at full use, is
    U % of what its usable cards can do: ``(100 - T) * U / T + T`` up to the target T
    (Trimaran's TargetLoadPacking curve, rising side), then 100.

    Trimaran's falling side (``T * (100 - U) / (100 - T)`` down to 0 at 100 %) is left out:
    it spreads work away from load the task would share. A whole card is held alone, and the
    task takes only cards free by request and idle as measured, so the load of the node's
    other cards is load it does not share; penalising it spread 1-, 2- and 4-card jobs over
    more nodes and left fewer nodes with enough free cards for the next one (BENCHMARKS.md,
    "Placement by measured GPU use", third round).
    """

    name: ClassVar[str] = "target-load-packing"
    target_pct: float = 80.0

    def __post_init__(self) -> None:
        _pct("target_pct", self.name, self.target_pct)
        if self.target_pct >= 100:
            raise ConfigError(
                f"plugin {self.name!r}: target_pct={self.target_pct!r} must be below 100"
            )

    def neutral(self, cs: CycleState, task: Task) -> bool:
        """0 everywhere but for whole GPUs with measured load."""
        return cs.load is None or task.request.kind is not GpuKind.WHOLE

    def score(self, cs: CycleState, task: Task, rows: Rows) -> Scores:
        req = task.request
        load = cs.load
        if load is None or req.kind is not GpuKind.WHOLE:
            return np.zeros(rows.size, np.float64)
        t = cs.table
        busy = load.node_load(t, rows)
        total = np.maximum(t.milli_total.take(rows), 1)
        u = 100.0 * (busy + req.count * WHOLE_GPU_MILLI) / total
        target = self.target_pct
        rising = (100.0 - target) * u / target + target
        return np.asarray(np.floor(rising.clip(0.0, 100.0)), np.float64)


@dataclass(frozen=True, slots=True)
class MeasuredCards:
    """A slice takes, among the cards that fit by request and by measured memory, the one with
    least compute free by request of those that stay at or below ``hot_pct`` with it (packing
    where packing makes nothing hot; a card whole-GPU work could take is broken last), else
    the coolest; other requests as ``best-fit-cards``."""

    name: ClassVar[str] = "measured-cards"
    hot_pct: float = 80.0

    def __post_init__(self) -> None:
        _pct("hot_pct", self.name, self.hot_pct)

    def choose_cards(self, cs: CycleState, task: Task, row: int) -> tuple[GpuShare, ...] | None:
        req = task.request
        load = cs.load
        if load is None or req.kind not in (GpuKind.SLICE, GpuKind.WHOLE):
            return BestFitCards().choose_cards(cs, task, row)
        t = cs.table
        if req.kind is GpuKind.WHOLE:
            ok = (t.free_milli[row] == WHOLE_GPU_MILLI) & (t.used_mib[row] == 0) & load.idle[row]
            allowed = card_mask(cs, req)
            if allowed is not None:
                ok &= allowed[row]
            idle = np.flatnonzero(ok).tolist()
            if len(idle) < req.count:
                return None
            # one card needs no NVLink group (``nvlink_group`` returns the first)
            peers = (
                {g.index: frozenset(g.nvlink_peers) for g in t.nodes[row].gpus if g.nvlink_peers}
                if req.count > 1
                else {}
            )
            return tuple(
                GpuShare(g, WHOLE_GPU_MILLI, int(t.gpu_mem_cap[row, g]))
                for g in nvlink_group(idle, peers, req.count)
            )
        fits = row_slice_cells(cs, load, req, row)
        cands = [g for g, ok in enumerate(fits) if ok]
        if len(cands) < req.cards:
            return None
        # one row: its cells as Python lists (numpy's per-call cost would dominate)
        pred = (load.load_offset[row] + t.used_milli[row] + load.expected_milli(task)).tolist()
        hot = self.hot_pct * WHOLE_GPU_MILLI / 100.0
        cool = [g for g in cands if pred[g] <= hot]
        if len(cool) >= req.cards:
            # A clean card (free by request and idle as measured) is broken last: whole-GPU
            # work can use it, while a card holding memory outside the requests cannot.
            free_milli = t.free_milli[row].tolist()
            free_mib = t.free_mib[row].tolist()
            used_mib = t.used_mib[row].tolist()
            idle = load.idle[row].tolist()
            chosen = sorted(
                cool,
                key=lambda g: (
                    free_milli[g] == WHOLE_GPU_MILLI and used_mib[g] == 0 and idle[g],
                    free_milli[g],
                    free_mib[g],
                    g,
                ),
            )
        else:
            chosen = sorted(cands, key=lambda g: (pred[g], g))
        picked = sorted(chosen[: req.cards])
        return tuple(
            GpuShare(g, req.gpu_milli, req.slice_mib(int(t.gpu_mem_cap[row, g]))) for g in picked
        )
