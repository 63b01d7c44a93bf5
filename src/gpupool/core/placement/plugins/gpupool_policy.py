"""gpupool: FGD's fragment descent, with CPU, memory and GPU models coupled to the GPUs.

The default placement policy of gpupool. It keeps what makes FGD (Weng et al., ATC'23) work
and repairs what its measure cannot see. docs/policies.md has the measurements.

What it keeps from FGD
    A node is scored by how much placing the pod there lowers the node's fragment with respect
    to the typical pods M (the target workload): ``floor(100 * sigmoid(dF / 1000))``. The
    truncation is deliberate and essential: it sorts nodes into about a hundred classes of
    "equally good", and the table's fixed tie order then fills each class first-fit. Scored
    exactly (no truncation) the same measure leaves a point more GPU unallocated on openb, and
    with a fresh random tie-break per pod twice as much: most of FGD's packing comes from
    first-fit among nodes the measure cannot tell apart, so the classes stay coarse and the tie
    order fixed. Slices take the card that scores best (item 6 breaks ties of class); whole GPUs
    take the lowest-index free cards.

What it changes (1-5 are terms of the measure, so they act through the same classes)
    1. Memory joins CPU in "does typical pod m fit on this node". The scheduler refuses a
       node short of memory as surely as one short of CPU, so a node whose memory is gone
       strands its GPUs, which FGD counts as usable. Each typical group brings its mean
       memory request (memory is not part of the group key, as in FGD).
    2. Stranded GPUs. FGD asks only whether *one* pod of a type still fits, so a node with
       eight free cards and CPU for one more pod shows no fragment. Here the idle GPU that the
       node's free CPU (or memory) cannot feed counts as fragment, at the workload's CPU and
       memory per GPU milli, and per whole card for the fully free cards; the largest of these
       shortfalls counts, for every typical pod that uses GPUs. This is what sends a pod that
       eats CPU where CPU is plentiful rather than where GPUs are. Where CPU rather than GPUs
       is the constraint (the whole workload, its pods without GPUs included, would need more
       CPU at full GPU use than the cluster has), the pods without GPUs take cores the idle
       GPUs need, and the CPU per GPU milli is the whole workload's (:meth:`cpu_inv`).
    3. Scarce models. A typical pod bound to some models can only use those cards. Placing
       any pod's GPU demand on a node of such a model is charged the bound pods' popularity,
       each scaled by how small a share of the cluster's *free* GPU its cards hold, so pods
       that may run anywhere leave the models that run short to the pods that need them. The
       share looks ahead: the pods still to come take what is free in proportion to their
       popularity, so the model whose free cards run out faster than the cluster's is the one
       its bound pods will miss (:meth:`scarcity_key`). Scaled by the share of *cards*
       instead, a workload whose bound pods follow the cards (as many as each model's share
       of them) charges every model alike and protects none. FGD's only protection is the
       "no access" fragment, which is far weaker than the pull of item 2.
    4. Only typical pods that use GPUs enter the score. A typical pod without GPUs counts
       every idle GPU as fragment, which moves every candidate of a pod by the same amount
       (the pod's own GPU demand): it cannot prefer one node to another, and only shifts
       where the truncation cuts the classes, differently for every pod size.
    5. Pods without GPUs are placed by the measure alone, as FGD places them: the stranded
       term keeps them off nodes whose idle GPUs need the CPU, and their best class fills
       first-fit in the tie order, onto the nodes GPU pods fill, so both run out together.
       (Breaking that class by the most CPU left over, a worst fit on CPU, spread the large
       CPU-only pods over every node and lost to FGD with 23.5 % of pods CPU-only.)

    6. A slice's card, within the node. Of the cards that score in the node's best class
       (FGD takes the first), the slice takes the one whose gap it fills best by the eventual
       waste of what the typical pods would leave there (``fill.py``): a slice that fits a
       partly used card goes there rather than breaking a fresh one when neither moves the
       fragment by a class, so fresh cards stay whole for the large slices and whole GPUs. The
       node's score, and so the node, is unchanged.

A workload without whole-GPU pods, or whose pods ask no CPU or memory, strands nothing by the
per-card or the missing term: a rate of zero means no need, not that every free card is lost.

Cost is FGD's: every term depends only on the node's row and the pod's shape (and memory),
so scores are cached per (shape, row generation) and a decision recomputes only the rows
changed since the last pod of that shape. With model-bound typical pods the scarcity charge
moves with every node's use, so the cache then holds the fall of the measure per row (and
card) and the charge, per model and quantised, is applied on every read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from gpupool.core.model import WHOLE_GPU_MILLI, GpuKind, Task
from gpupool.core.placement.framework import CycleState, Rows
from gpupool.core.placement.plugins.fgd import (
    RowScored,
    cached_by_row,
    shape_key,
    sigmoid_score,
    slice_cards,
    whole_take,
)
from gpupool.core.placement.plugins.fill import fill_gain, waste_table
from gpupool.core.placement.plugins.frag import (
    F64,
    I64,
    Bool,
    RowTerms,
    TypicalPods,
    after_slice_terms,
    after_take_terms,
    row_terms,
    slice_milli,
)
from gpupool.core.placement.plugins.scarcity import ScarcityCharge


@dataclass(frozen=True, eq=False)
class GpupoolScore(RowScored, ScarcityCharge):
    """Score and card choice of the gpupool policy against ``typical_pods``."""

    typical_pods: TypicalPods
    name: ClassVar[str] = "gpupool"
    gpu_weight: int = field(init=False, repr=False)
    cpu_per_milli: float = field(init=False, repr=False)
    cpu_only_per_milli: float = field(init=False, repr=False)
    mem_per_milli: float = field(init=False, repr=False)
    cpu_per_card: float = field(init=False, repr=False)
    mem_per_card: float = field(init=False, repr=False)
    constrained: npt.NDArray[np.bool_] = field(init=False, repr=False)
    _cpu_inv: float = field(init=False, repr=False)
    _cpu_card_inv: float = field(init=False, repr=False)
    _mem_inv: float = field(init=False, repr=False)
    _mem_card_inv: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        tp = self.typical_pods
        w = tp.weight
        whole = tp.gm >= WHOLE_GPU_MILLI
        milli = float((w * tp.k * tp.gm).sum())
        cards = float((w[whole] * tp.k[whole]).sum())

        def per(amount: I64, mask: npt.NDArray[np.bool_], denominator: float) -> float:
            return float((w[mask] * amount[mask]).sum()) / denominator if denominator else 0.0

        every = np.ones(w.size, np.bool_)
        setter = object.__setattr__
        setter(self, "gpu_weight", int(w.sum()))
        setter(self, "cpu_per_milli", per(tp.cpu, every, milli))
        cpu_only = sum(
            count * shape.cpu_milli
            for shape, count in zip(tp.shapes, tp.counts, strict=True)
            if not (shape.gpu_milli > 0 and shape.gpu_count > 0)
        )
        setter(self, "cpu_only_per_milli", cpu_only / milli if milli else 0.0)
        setter(self, "mem_per_milli", per(tp.mem, every, milli))
        setter(self, "cpu_per_card", per(tp.cpu, whole, cards) / WHOLE_GPU_MILLI)
        setter(self, "mem_per_card", per(tp.mem, whole, cards) / WHOLE_GPU_MILLI)

        # reciprocals (0 when the workload names no CPU or memory: nothing is stranded by it)
        def inv(x: float) -> float:
            return 1.0 / x if x > 0 else 0.0

        setter(self, "_cpu_inv", inv(self.cpu_per_milli))
        setter(self, "_cpu_card_inv", inv(self.cpu_per_card))
        setter(self, "_mem_inv", inv(self.mem_per_milli))
        setter(self, "_mem_card_inv", inv(self.mem_per_card))
        setter(
            self,
            "constrained",
            np.asarray([bool(tp.shapes[i].models) for i in tp.gpu_index.tolist()], np.bool_),
        )

    # -- the measure -----------------------------------------------------------------------

    def cpu_inv(self, cs: CycleState) -> float:
        """1 / the CPU a node must keep per idle GPU milli (0: none).

        The GPU pods' own CPU per GPU milli, while GPUs are the constraint. Where the whole
        workload's CPU at full GPU use (its pods without GPUs included) exceeds the cluster's
        CPU, CPU is the constraint: the pods without GPUs, arriving among the GPU pods, then
        take cores the idle GPUs need, and the rate is the whole workload's. Per inventory.
        """
        if not self.cpu_only_per_milli:
            return self._cpu_inv
        t = cs.table
        key = ("inventory", "gpupool-cpu-rate", self.typical_pods, t.version)
        found = cs.cache.get(key)
        if found is None:
            live = t.live()
            rate = self.cpu_per_milli + self.cpu_only_per_milli
            short = rate * float(t.milli_total[live].sum()) > float(t.cpu_cap[live].sum())
            found = cs.cache[key] = 1.0 / rate if short else self._cpu_inv
        result: float = found
        return result

    def stranded(self, cpu: I64, mem: I64, idle: I64, full: I64, cpu_inv: float) -> F64:
        """Idle GPU milli the node's free CPU or memory cannot feed, at the workload's CPU and
        memory per GPU milli (all idle) and per whole card (fully free cards); the largest."""
        out = idle - cpu * cpu_inv if cpu_inv else np.zeros(idle.shape)
        whole = full * float(WHOLE_GPU_MILLI)
        if self._cpu_card_inv:
            out = np.maximum(out, whole - cpu * self._cpu_card_inv)
        if self._mem_inv:
            out = np.maximum(out, idle - mem * self._mem_inv)
        if self._mem_card_inv:
            out = np.maximum(out, whole - mem * self._mem_card_inv)
        return np.maximum(out, 0.0)

    def measure(
        self, cpu: I64, mem: I64, idle: I64, nfit: I64, usable: I64, full: I64, cpu_inv: float
    ) -> F64:
        """kept * fragment of node states given by their terms (any leading shape)."""
        tp = self.typical_pods
        q3 = (nfit >= tp.k) & (cpu[..., None] >= tp.cpu) & (mem[..., None] >= tp.mem)
        lost: I64 = np.where(q3, usable, 0) @ tp.weight
        frag = (self.gpu_weight * idle - lost).astype(np.float64)
        return frag + self.gpu_weight * self.stranded(cpu, mem, idle, full, cpu_inv)

    def before(
        self, cs: CycleState, rows: Rows, base: RowTerms, mem: I64, full: I64, cpu_inv: float
    ) -> F64:
        """The measure of the rows as they are, cached per row generation."""
        t = cs.table
        key = ("gpupool-before", self.typical_pods, cpu_inv)
        entry = cs.cache.get(key)
        if entry is None or entry[0].size < t.cap_rows:
            entry = cs.cache[key] = (
                np.full(t.cap_rows, -1, np.int64),
                np.zeros(t.cap_rows, np.float64),
            )
        gen_at, value = entry
        stale = gen_at[rows] != t.gen[rows]
        if stale.any():
            sr = rows[stale]
            value[sr] = self.measure(
                t.cpu_free[sr],
                mem[stale],
                base.idle[stale],
                base.nfit[stale],
                base.usable[stale],
                full[stale],
                cpu_inv,
            )
            gen_at[sr] = t.gen[sr]
        result: F64 = value[rows]
        return result

    def delta(self, cs: CycleState, task: Task, rows: Rows) -> tuple[F64, Bool]:
        """(kept * the fall of the measure, allowed) per row and card for a slice ([R, W]),
        per row for anything else ([R, 1], always allowed); no scarcity charge."""
        tp = self.typical_pods
        t = cs.table
        req = task.request
        base = row_terms(tp, t, rows, cs.cache)
        full = t.free_whole[rows]
        mem = t.mem_free[rows]
        cpu_inv = self.cpu_inv(cs)
        before = self.before(cs, rows, base, mem, full, cpu_inv)
        if req.kind is GpuKind.SLICE:
            cpu2, idle2, nfit2, usable2 = after_slice_terms(
                tp, t, rows, base, task.cpu_milli, slice_milli(t, rows, req), cs.cache
            )
            full2 = full[:, None] - (t.free_milli[rows] >= WHOLE_GPU_MILLI)
            after = self.measure(
                cpu2, (mem - task.memory_mib)[:, None], idle2, nfit2, usable2, full2, cpu_inv
            )
            return before[:, None] - after, slice_cards(cs, task, rows)
        take = whole_take(cs, task, rows)
        cpu2, idle2, nfit2, usable2 = after_take_terms(
            tp, t, rows, base, task.cpu_milli, take, cs.cache
        )
        full2 = full - np.count_nonzero(take, axis=1)
        after = self.measure(cpu2, mem - task.memory_mib, idle2, nfit2, usable2, full2, cpu_inv)
        return (before - after)[:, None], np.ones((rows.size, 1), np.bool_)

    def charged(
        self, task: Task, df: F64, ok: Bool, charge: F64, gain: F64 | None = None
    ) -> tuple[F64, I64]:
        """(score, card) from the fall of the measure less the pod's scarcity charge; the
        card is -1 unless a slice: of the cards in the best class, the one where the slice
        lowers the eventual waste most (``gain``, :func:`fill_gain`), the first on ties."""
        tp = self.typical_pods
        req = task.request
        fall = df - (req.total_milli * charge)[:, None] if req.total_milli else df
        s = np.where(ok, sigmoid_score(fall, tp.kept), -1)
        if req.kind is not GpuKind.SLICE:
            return s[:, 0].astype(np.float64), np.full(df.shape[0], -1, np.int64)
        best = s.max(axis=1)
        if gain is None:
            card = np.argmax(s, axis=1)
        else:
            card = np.argmax(np.where(s == best[:, None], gain, -np.inf), axis=1)
        return best.astype(np.float64), card

    def gain(self, cs: CycleState, task: Task, rows: Rows) -> F64 | None:
        """[R, W] :func:`fill_gain` of the task's slice on each card of ``rows``; None for
        anything but a slice."""
        if task.request.kind is not GpuKind.SLICE:
            return None
        t = cs.table
        ew = waste_table(self.typical_pods, cs.cache)
        return fill_gain(ew, t.free_milli[rows], slice_milli(t, rows, task.request))

    def evaluate(self, cs: CycleState, task: Task, rows: Rows) -> tuple[F64, I64]:
        """(score, card) per row, computed afresh; the card is -1 unless a slice."""
        df, ok = self.delta(cs, task, rows)
        return self.charged(task, df, ok, self.scarcity(cs, rows), self.gain(cs, task, rows))

    # -- plugin points ---------------------------------------------------------------------

    def _scores(self, cs: CycleState, task: Task, rows: Rows) -> tuple[F64, I64]:
        key = ("gpupool", self.typical_pods, shape_key(task), task.memory_mib, self.cpu_inv(cs))
        if not (self.constrained.any() and task.request.total_milli):
            return cached_by_row(cs, key, rows, lambda stale: self.evaluate(cs, task, stale))
        # the scarcity charge moves with the whole cluster's free capacity, so the fall of the
        # measure (and, for a slice, each card's fill gain) is what is cached per row; the
        # charge is applied on every read
        t = cs.table
        is_slice = task.request.kind is GpuKind.SLICE
        width = t.width if is_slice else 1
        entry = cs.cache.get(key)
        if entry is None or entry[0].size < t.cap_rows:
            entry = cs.cache[key] = (
                np.full(t.cap_rows, -1, np.int64),
                np.zeros((t.cap_rows, width), np.float64),
                np.zeros((t.cap_rows, width), np.bool_),
                np.zeros((t.cap_rows, width), np.float64),
            )
        gen_at, df, ok, gain = entry
        stale = rows[gen_at[rows] != t.gen[rows]]
        if stale.size:
            df[stale], ok[stale] = self.delta(cs, task, stale)
            fresh = self.gain(cs, task, stale)
            if fresh is not None:
                gain[stale] = fresh
            gen_at[stale] = t.gen[stale]
        return self.charged(
            task,
            df[rows],
            ok[rows],
            self.scarcity(cs, rows),
            gain[rows] if is_slice else None,
        )
