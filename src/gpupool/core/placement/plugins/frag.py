"""The fragmentation measure of FGD (Weng et al., ATC'23), vectorised over nodes.

A node's GPU *fragment* with respect to a target workload M (the "typical pods") is the idle
GPU compute that a pod drawn from M could not use there, averaged over M by popularity:

    F_n(M) = sum_m p_m * f(n, m)
    f(n, m) = idle GPU milli on cards too small for m     when m fits on n (GPU and CPU)
            = all idle GPU milli of n                      otherwise

"Fits" means: m asks for GPUs, at least ``k_m`` cards of an allowed model each have
``gm_m`` milli free, and the node has ``cpu_m`` milli-CPU free. A pod without GPUs never
"fits" in this sense, so it counts every idle GPU as fragment (it cannot use any); a node
without idle GPU has F = 0. Memory takes no part. (The reference decides the model match
per node; here it is per card, which is the same on nodes with one model.)

M comes from the original trace: pods grouped by (cpu, milli per GPU, GPU count, models),
the most popular groups kept until they cover 95 % of pods (the group that crosses the
threshold included), popularities renormalised over the kept groups (:func:`typical_pods`).

Exact arithmetic. ``p_m = count_m / kept`` with integer counts, so ``kept * F_n`` is an
integer; everything here computes that scaled integer (:attr:`TypicalPods.kept` divides it
back). Two states with the same fragment therefore compare exactly equal, which the
truncated FGD score relies on (a difference of 0 must give exactly 50).

How F is evaluated fast. With ``fit[i, m]`` = card i can hold m's per-card share,
``nfit[m] = sum_i fit[i, m]``, ``usable[m] = sum_i g[i] * fit[i, m]`` and
``q3[m] = nfit[m] >= k_m and cpu >= cpu_m``:

    kept * F = C * idle - sum_m count_m * q3[m] * usable[m]        (C = sum of all counts)

A hypothetical change of one card (a slice placed on card j) moves ``nfit`` and ``usable``
by that card's terms alone, so scoring every card of every node costs an array of
[rows, cards, typical pods] rather than [rows, cards, typical pods, cards]. Per-row terms are
cached in the snapshot cache against the row's generation (:func:`row_terms`), so only rows
that changed since the last call are recomputed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gpupool.core.model import GpuRequest
from gpupool.core.table import NodeTable
from gpupool.core.table_shapes import NO_SHAPE

I64 = npt.NDArray[np.int64]
Bool = npt.NDArray[np.bool_]
F64 = npt.NDArray[np.float64]

DEFAULT_THRESHOLD_PCT = 95
"""Share of the trace's pods the kept typical-pod groups must cover, in percent."""


@dataclass(frozen=True, slots=True)
class PodShape:
    """What the frag measure sees of a pod: CPU, GPU share per card, card count, models.

    ``gpu_milli`` is per card (1000 for whole cards, 0 with ``gpu_count`` 0 for no GPU);
    ``models`` the allowed GPU models, empty for any. Memory is not part of it.
    """

    cpu_milli: int
    gpu_milli: int = 0
    gpu_count: int = 0
    models: frozenset[str] = frozenset()

    @property
    def sort_key(self) -> tuple[int, int, int, str]:
        return (self.cpu_milli, self.gpu_milli, self.gpu_count, "|".join(sorted(self.models)))


@dataclass(frozen=True)
class TypicalPods:
    """The target workload M: pod shapes with integer popularity counts.

    ``counts[m] / kept`` is the renormalised popularity of ``shapes[m]``; ``total`` is the
    number of pods the groups were drawn from; ``memory_mib[m]``, when given, the mean memory
    request of the group (not part of FGD's measure, which ignores memory; policies that
    account for memory read it). Arrays for the vector code are derived once.
    """

    shapes: tuple[PodShape, ...]
    counts: tuple[int, ...]
    total: int
    memory_mib: tuple[int, ...] = ()
    cpu: I64 = field(init=False, repr=False, compare=False)
    gm: I64 = field(init=False, repr=False, compare=False)
    k: I64 = field(init=False, repr=False, compare=False)
    weight: I64 = field(init=False, repr=False, compare=False)
    mem: I64 = field(init=False, repr=False, compare=False)
    gpu_index: I64 = field(init=False, repr=False, compare=False)
    count_all: int = field(init=False, repr=False, compare=False)
    constrained: bool = field(init=False, repr=False, compare=False)
    _hash: int = field(init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        return self._hash

    def __post_init__(self) -> None:
        if len(self.shapes) != len(self.counts) or not self.shapes:
            raise ValueError("typical pods need one count per shape, and at least one shape")
        if self.memory_mib and len(self.memory_mib) != len(self.shapes):
            raise ValueError("typical pods need one memory figure per shape, or none")
        gpu = [i for i, s in enumerate(self.shapes) if s.gpu_milli > 0 and s.gpu_count > 0]
        sel = np.asarray(gpu, np.int64)
        setter = object.__setattr__
        setter(self, "gpu_index", sel)
        setter(self, "cpu", np.asarray([self.shapes[i].cpu_milli for i in gpu], np.int64))
        setter(self, "gm", np.asarray([self.shapes[i].gpu_milli for i in gpu], np.int64))
        setter(self, "k", np.asarray([self.shapes[i].gpu_count for i in gpu], np.int64))
        setter(self, "weight", np.asarray([self.counts[i] for i in gpu], np.int64))
        memory = self.memory_mib or (0,) * len(self.shapes)
        setter(self, "mem", np.asarray([memory[i] for i in gpu], np.int64))
        setter(self, "count_all", int(sum(self.counts)))
        setter(self, "constrained", any(self.shapes[i].models for i in gpu))
        setter(self, "_hash", hash((self.shapes, self.counts, self.total, self.memory_mib)))

    @property
    def kept(self) -> int:
        """Pods covered by the kept groups: the denominator of every popularity."""
        return self.count_all

    @property
    def popularity(self) -> F64:
        return np.asarray(self.counts, np.float64) / self.count_all

    def frag_milli(self, scaled: I64 | int) -> F64:
        """A scaled fragment (``kept * F``) back in milli-GPU."""
        return np.asarray(scaled, np.float64) / self.count_all


def typical_pods(
    pods: Iterable[PodShape],
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    memory_mib: Iterable[int] | None = None,
) -> TypicalPods:
    """Group pods by shape and keep the most popular groups covering ``threshold_pct``.

    Groups are ordered by count, descending, ties by shape descending (CPU, milli, count,
    models); groups are taken until their pods reach ``threshold_pct`` % of all pods, the
    crossing group included. ``memory_mib``, parallel to ``pods``, gives each kept group its
    mean memory request (rounded); memory never splits a group.
    """
    pods = list(pods)
    counter = Counter(pods)
    memory_sum: Counter[PodShape] = Counter()
    if memory_mib is not None:
        memory = list(memory_mib)
        if len(memory) != len(pods):
            raise ValueError(f"{len(memory)} memory figures for {len(pods)} pods")
        for shape, mib in zip(pods, memory, strict=True):
            memory_sum[shape] += mib
    total = sum(counter.values())
    if not total:
        raise ValueError("typical pods need at least one pod")
    ordered = sorted(counter.items(), key=lambda kv: (kv[1], kv[0].sort_key), reverse=True)
    expected = threshold_pct * total / 100.0
    shapes: list[PodShape] = []
    counts: list[int] = []
    cum = 0
    for shape, count in ordered:
        if cum >= expected:
            break
        shapes.append(shape)
        counts.append(count)
        cum += count
    means = (
        tuple(round(memory_sum[sh] / n) for sh, n in zip(shapes, counts, strict=True))
        if memory_mib is not None
        else ()
    )
    return TypicalPods(tuple(shapes), tuple(counts), total, means)


# -- the node state the measure reads --------------------------------------------------------


def idle_cards(table: NodeTable, rows: I64) -> I64:
    """Idle milli per card slot (0 for slots without a usable card)."""
    return np.maximum(table.free_milli[rows], 0)


def card_eligibility(
    tp: TypicalPods, table: NodeTable, cache: MutableMapping[Hashable, Any]
) -> Bool | None:
    """[table rows, cards, GPU typical pods]: may card i serve typical pod m (its model)?

    None when no typical pod names models (every card serves every pod). Inventory only, so
    cached per table version.
    """
    if not tp.constrained:
        return None
    key = ("inventory", "frag-eligible", tp, table.version)
    mask = cache.get(key)
    if mask is None:
        codes = len(table.models)
        allowed = np.zeros((codes + 1, tp.gm.size), np.bool_)  # last row: no card (-1)
        for j, i in enumerate(tp.gpu_index.tolist()):
            models = tp.shapes[i].models
            for code, model in enumerate(table.models):
                allowed[code, j] = not models or model in models
        mask = cache[key] = allowed[table.gpu_model]
    result: Bool = mask
    return result


@dataclass(slots=True)
class RowTerms:
    """Per-row terms of the measure: idle milli, and per GPU typical pod the cards that fit
    it and the milli on them; ``frag`` = kept * F_n."""

    idle: I64
    nfit: I64
    usable: I64
    frag: I64


def terms(tp: TypicalPods, cpu: I64, g: I64, elig: Bool | None) -> RowTerms:
    """Terms for node states given as CPU free [R] and idle milli per card [R, W]."""
    fit = g[:, :, None] >= tp.gm  # [R, W, M]
    if elig is not None:
        fit &= elig
    nfit = fit.sum(axis=1)
    usable = np.einsum("rw,rwm->rm", g, fit.astype(np.int64))
    idle = g.sum(axis=1)
    return RowTerms(idle, nfit, usable, scaled_frag(tp, cpu, idle, nfit, usable))


def scaled_frag(tp: TypicalPods, cpu: I64, idle: I64, nfit: I64, usable: I64) -> I64:
    """kept * F for states given by their terms; any leading shape, M last for nfit/usable."""
    q3 = (nfit >= tp.k) & (cpu[..., None] >= tp.cpu)
    lost: I64 = np.where(q3, usable, 0) @ tp.weight
    return np.asarray(tp.count_all * idle - lost, np.int64)


def node_frag(
    tp: TypicalPods, table: NodeTable, rows: I64, cache: MutableMapping[Hashable, Any] | None = None
) -> I64:
    """kept * F_n(M) for ``rows`` of ``table``, computed afresh (no generation cache)."""
    elig = None if cache is None else card_eligibility(tp, table, cache)
    if elig is None and tp.constrained:
        elig = card_eligibility(tp, table, {})
    return terms(
        tp, table.cpu_free[rows], idle_cards(table, rows), None if elig is None else elig[rows]
    ).frag


def row_terms(
    tp: TypicalPods, table: NodeTable, rows: I64, cache: MutableMapping[Hashable, Any]
) -> RowTerms:
    """Terms for ``rows``, recomputing only rows whose generation moved since last asked."""
    key = ("frag-terms", tp)
    entry = cache.get(key)
    m = tp.gm.size
    if entry is None or entry[0].size < table.cap_rows:
        cap = table.cap_rows
        entry = cache[key] = (
            np.full(cap, -1, np.int64),
            RowTerms(
                np.zeros(cap, np.int64),
                np.zeros((cap, m), np.int64),
                np.zeros((cap, m), np.int64),
                np.zeros(cap, np.int64),
            ),
        )
    gen_at, store = entry
    stale = rows[gen_at[rows] != table.gen[rows]]
    if stale.size:
        elig = card_eligibility(tp, table, cache)
        fresh = terms(
            tp,
            table.cpu_free[stale],
            idle_cards(table, stale),
            None if elig is None else elig[stale],
        )
        store.idle[stale] = fresh.idle
        store.nfit[stale] = fresh.nfit
        store.usable[stale] = fresh.usable
        store.frag[stale] = fresh.frag
        gen_at[stale] = table.gen[stale]
    return RowTerms(store.idle[rows], store.nfit[rows], store.usable[rows], store.frag[rows])


# -- hypothetical states ---------------------------------------------------------------------


def slice_milli(table: NodeTable, rows: I64, req: GpuRequest) -> int | I64:
    """The compute a slice of ``req`` takes of each card of ``rows``: ``req.gpu_milli`` while
    every card divides as NVIDIA's do, else [R, W] as each card's division rule shapes it
    (cards that cannot hold it keep the request; callers mask them)."""
    if table.plain:
        return req.gpu_milli
    need = table.slice_need(rows, req)[0]
    return np.where(need >= NO_SHAPE, req.gpu_milli, need)


def after_slice_terms(
    tp: TypicalPods,
    table: NodeTable,
    rows: I64,
    base: RowTerms,
    cpu_milli: int,
    gpu_milli: int | I64,
    cache: MutableMapping[Hashable, Any],
) -> tuple[I64, I64, I64, I64]:
    """(cpu, idle [R, 1]; nfit, usable [R, W, M]) of each row after a slice of ``gpu_milli``
    and ``cpu_milli`` goes on card j (CPU and idle are the same whichever card, and broadcast
    against the cards). ``gpu_milli`` may differ per card ([R, W], :func:`slice_milli`); idle
    is then [R, W]. Entries for cards that cannot hold it are meaningless."""
    g = idle_cards(table, rows)[:, :, None]  # [R, W, 1]
    per_card = isinstance(gpu_milli, np.ndarray)
    g2 = g - (gpu_milli[:, :, None] if isinstance(gpu_milli, np.ndarray) else gpu_milli)
    fit = g >= tp.gm
    fit2 = g2 >= tp.gm
    elig = card_eligibility(tp, table, cache)
    if elig is not None:
        e = elig[rows]
        fit &= e
        fit2 &= e
    nfit = base.nfit[:, None, :] - fit + fit2
    usable = base.usable[:, None, :] - g * fit + g2 * fit2
    cpu = (table.cpu_free[rows] - cpu_milli)[:, None]
    idle = base.idle[:, None] - gpu_milli if per_card else (base.idle - gpu_milli)[:, None]
    return cpu, idle, nfit, usable


def after_take_terms(
    tp: TypicalPods,
    table: NodeTable,
    rows: I64,
    base: RowTerms,
    cpu_milli: int,
    take: I64,
    cache: MutableMapping[Hashable, Any],
) -> tuple[I64, I64, I64, I64]:
    """(cpu, idle [R]; nfit, usable [R, M]) of each row after ``cpu_milli`` and ``take[r, i]``
    milli of card i go (``take`` all zeros for a pod without GPUs: only the CPU moves)."""
    cpu = table.cpu_free[rows] - cpu_milli
    if not take.any():
        return cpu, base.idle, base.nfit, base.usable
    g = idle_cards(table, rows)
    g2 = g - take
    moved = (take > 0)[:, :, None]
    fit = (g[:, :, None] >= tp.gm) & moved
    fit2 = (g2[:, :, None] >= tp.gm) & moved
    elig = card_eligibility(tp, table, cache)
    if elig is not None:
        e = elig[rows]
        fit &= e
        fit2 &= e
    nfit = base.nfit - fit.sum(axis=1) + fit2.sum(axis=1)
    usable = (
        base.usable
        - np.einsum("rw,rwm->rm", g, fit.astype(np.int64))
        + np.einsum("rw,rwm->rm", g2, fit2.astype(np.int64))
    )
    return cpu, base.idle - take.sum(axis=1), nfit, usable


def frag_after_slice(
    tp: TypicalPods,
    table: NodeTable,
    rows: I64,
    base: RowTerms,
    cpu_milli: int,
    gpu_milli: int | I64,
    cache: MutableMapping[Hashable, Any],
) -> I64:
    """[R, W]: kept * F of each row after a slice of ``gpu_milli`` and ``cpu_milli`` goes on
    card j. Entries for cards that cannot hold the slice are meaningless; mask them."""
    frag = scaled_frag(tp, *after_slice_terms(tp, table, rows, base, cpu_milli, gpu_milli, cache))
    return np.broadcast_to(frag, (rows.size, table.width))


def frag_after_take(
    tp: TypicalPods,
    table: NodeTable,
    rows: I64,
    base: RowTerms,
    cpu_milli: int,
    take: I64,
    cache: MutableMapping[Hashable, Any],
) -> I64:
    """[R]: kept * F of each row after ``cpu_milli`` and ``take[r, i]`` milli of card i go."""
    return scaled_frag(tp, *after_take_terms(tp, table, rows, base, cpu_milli, take, cache))
