"""Reject at submission what can never run, naming the field, the value and the rule.

Two layers: rules of the request itself (a slice over one card, negative quantities), then
rules against this cluster's inventory (a model nobody has, more cards than any node holds,
CPU, memory and GPUs that no single node offers together even when empty). Usage is never
consulted: a job that cannot run *now* waits; only one that cannot run *ever* is rejected. A
job with alternatives is rejected only when none of its forms could run (with its own form's
reason).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np

from gpupool.core import said
from gpupool.core.alternatives import variants
from gpupool.core.errors import InvalidJobError
from gpupool.core.model import WHOLE_GPU_MILLI, GpuKind, Job, PodSet
from gpupool.core.table import NodeTable
from gpupool.core.table_shapes import NO_SHAPE

MAX_REPLICAS = 100_000
MAX_CPU_MILLI = 10_000_000  # 10,000 cores
MAX_MEMORY_MIB = 1 << 30  # 1 PiB


def check_request(job: Job) -> None:
    """Rules that hold whatever the cluster."""

    def bad(field: str, value: object, rule: str) -> InvalidJobError:
        return InvalidJobError(field, value, rule, job=job.id)

    if not job.id:
        raise bad("id", job.id, "a job needs a non-empty id")
    if not job.pod_sets:
        raise bad("pod_sets", [], "a job needs at least one pod set")
    names = [ps.name for ps in job.pod_sets]
    if len(set(names)) != len(names):
        raise bad("pod_sets[].name", names, "pod set names must be unique within a job")
    for i, ps in enumerate(job.pod_sets):
        _check_pod_set(ps, f"pod_sets[{i}]", bad)
    if job.min_member is not None and not 1 <= job.min_member <= job.task_count:
        raise bad(
            "min_member", job.min_member, f"must be between 1 and the job's {job.task_count} tasks"
        )
    if job.duration_s is not None and not job.duration_s >= 0:
        raise bad("duration_s", job.duration_s, "must be zero or more seconds")


def _check_pod_set(ps: PodSet, at: str, bad: Callable[[str, object, str], InvalidJobError]) -> None:
    def need(ok: bool, field: str, value: object, rule: str) -> None:
        if not ok:
            raise bad(f"{at}.{field}", value, rule)

    need(1 <= ps.count <= MAX_REPLICAS, "count", ps.count, f"must be 1..{MAX_REPLICAS} replicas")
    need(
        0 <= ps.cpu_milli <= MAX_CPU_MILLI,
        "cpu_milli",
        ps.cpu_milli,
        f"must be 0..{MAX_CPU_MILLI} milli-CPU",
    )
    need(
        0 <= ps.memory_mib <= MAX_MEMORY_MIB,
        "memory_mib",
        ps.memory_mib,
        f"must be 0..{MAX_MEMORY_MIB} MiB",
    )
    g = ps.gpu
    need(g.count >= 0, "gpu.count", g.count, "must be zero or more whole GPUs")
    need(g.count <= 64, "gpu.count", g.count, "at most 64 whole GPUs per task")
    need(g.gpu_milli >= 0, "gpu.gpu_milli", g.gpu_milli, "must be zero or more milli-GPU")
    need(g.memory_mib >= 0, "gpu.memory_mib", g.memory_mib, "must be zero or more MiB")
    if g.mig_profile:
        need(
            g.count == 0 and g.gpu_milli == 0 and g.memory_mib == 0,
            "gpu.mig_profile",
            g.mig_profile,
            "a MIG request names one profile and no count, milli or memory",
        )
    elif g.count > 0:
        need(
            g.gpu_milli == 0,
            "gpu.gpu_milli",
            g.gpu_milli,
            "whole GPUs (count) and a slice (gpu_milli) cannot be combined; "
            "a slice is part of one card",
        )
    else:
        need(
            g.gpu_milli < WHOLE_GPU_MILLI,
            "gpu.gpu_milli",
            g.gpu_milli,
            "a slice is 1..999 milli-GPU of one card; ask for whole GPUs with count",
        )
    need(1 <= g.cards <= 64, "gpu.cards", g.cards, "a slice goes on 1..64 distinct cards")
    need(
        0 <= g.memory_percent <= 100,
        "gpu.memory_percent",
        g.memory_percent,
        "must be 0..100 percent of a card's memory",
    )


class Validator:
    """Checks jobs against one cluster; inventory summaries are cached per table version."""

    def __init__(self) -> None:
        self._cache: dict[Hashable, str | None] = {}
        self._version = -1

    def check(self, job: Job, table: NodeTable) -> None:
        check_request(job)
        if table.version != self._version:
            self._cache.clear()
            self._version = table.version
        first: InvalidJobError | None = None
        for _, form in variants(job):  # one form that could run is enough
            problem = self._problem(form, table)
            if problem is None:
                return
            first = first or problem
        assert first is not None
        raise first

    def _problem(self, job: Job, table: NodeTable) -> InvalidJobError | None:
        for i, ps in enumerate(job.pod_sets):
            key = (ps.cpu_milli, ps.memory_mib, ps.gpu, tuple(sorted(ps.node_selector.items())))
            if key not in self._cache:
                self._cache[key] = _never_fits(ps, table)
            problem = self._cache[key]
            if problem is not None:
                field, value, rule = problem.split("\x00")
                return InvalidJobError(f"pod_sets[{i}].{field}", _num(value), rule, job=job.id)
        return None


def _num(value: str) -> object:
    try:
        return int(value)
    except ValueError:
        return value


def _never_fits(ps: PodSet, t: NodeTable) -> str | None:
    """None when some node, empty, could hold one replica; else 'field\\0value\\0rule'."""
    live = t.live()
    g = ps.gpu
    kind = g.kind

    def out(field: str, value: object, rule: str) -> str:
        return f"{field}\x00{value}\x00{rule}"

    if live.size == 0:
        return out("count", ps.count, "the cluster has no nodes")
    for m in sorted(g.models):
        if m not in t.model_code:
            return out(
                "gpu.models",
                m,
                f"no node has GPU model {m}; models here: {', '.join(sorted(t.models)) or 'none'}",
            )
    cpu_ok = t.cpu_cap[live] >= ps.cpu_milli
    if not cpu_ok.any():
        return out(
            "cpu_milli",
            ps.cpu_milli,
            f"larger than any node (largest has {said.cpus(int(t.cpu_cap[live].max()))})",
        )
    mem_ok = t.mem_cap[live] >= ps.memory_mib
    if not mem_ok.any():
        return out(
            "memory_mib",
            ps.memory_mib,
            f"larger than any node (largest has {said.mib(int(t.mem_cap[live].max()))})",
        )
    node_ok = cpu_ok & mem_ok
    if ps.node_selector:
        sel = np.fromiter(
            (
                all(t.nodes[i].labels.get(k) == v for k, v in ps.node_selector.items())
                for i in live.tolist()
            ),
            np.bool_,
            count=live.size,
        )
        if not sel.any():
            return out("node_selector", dict(ps.node_selector), "no node has these labels")
        node_ok &= sel
    if kind is GpuKind.NONE:
        if not node_ok.any():
            return out(
                "cpu_milli",
                ps.cpu_milli,
                f"no node has {said.cpus(ps.cpu_milli)} and {said.mib(ps.memory_mib)} together",
            )
        return None
    cards = t.gpu_usable[live].copy()
    if g.models:
        cards &= np.isin(t.gpu_model[live], [t.model_code[m] for m in g.models])
    if kind is GpuKind.MIG:
        pool = t.mig_free.get(g.mig_profile or "")
        if pool is None:
            return out(
                "gpu.mig_profile",
                g.mig_profile,
                f"no GPU offers this MIG profile; profiles here: "
                f"{', '.join(sorted(t.mig_profiles)) or 'none'}",
            )
        cards = t.gpu_mig[live] & (t.gpu_model[live] >= 0)
        if g.models:
            cards &= np.isin(t.gpu_model[live], [t.model_code[m] for m in g.models])
        per_node = cards.any(axis=1)
    elif kind is GpuKind.SLICE:
        if not t.plain:
            shaped = cards & (t.slice_need(live, g)[0] < NO_SHAPE)
            if cards.any() and not shaped.any():
                return out(
                    "gpu.gpu_milli",
                    g.gpu_milli,
                    "no card here can be divided into this slice (whole-only cards, "
                    "or no template or fraction holds it)",
                )
            cards = shaped
        biggest = int(t.gpu_mem_cap[live][cards].max()) if cards.any() else 0
        if g.memory_mib > biggest:
            return out(
                "gpu.memory_mib",
                g.memory_mib,
                f"more than any single GPU has (largest: {said.mib(biggest)})",
            )
        counts = (cards & (t.gpu_mem_cap[live] >= g.memory_mib)).sum(axis=1)
        if g.cards > 1 and int(counts.max()) < g.cards:
            return out(
                "gpu.cards",
                g.cards,
                f"more GPUs than any node has (most on one node: {int(counts.max())})",
            )
        per_node = counts >= g.cards
    else:
        cards &= t.gpu_mem_cap[live] >= g.memory_mib
        counts = cards.sum(axis=1)
        if int(counts.max()) < g.count:
            return out(
                "gpu.count",
                g.count,
                f"more GPUs than any node has (most on one node: {int(counts.max())}"
                + (f" of {'|'.join(sorted(g.models))}" if g.models else "")
                + ")",
            )
        per_node = counts >= g.count
    if not (per_node & node_ok).any():
        return out(
            "gpu",
            _describe(ps),
            "no node offers this GPU request together with the CPU, memory and labels",
        )
    return None


def _describe(ps: PodSet) -> str:
    g = ps.gpu
    if g.kind is GpuKind.WHOLE:
        return f"{said.gpus(g.count)}, {said.cpus(ps.cpu_milli)}, {said.mib(ps.memory_mib)}"
    if g.kind is GpuKind.MIG:
        return f"MIG {g.mig_profile}, {said.cpus(ps.cpu_milli)}, {said.mib(ps.memory_mib)}"
    return (
        f"{said.card_share(g.gpu_milli)} + {said.mib(g.memory_mib)}, "
        f"{said.cpus(ps.cpu_milli)}, {said.mib(ps.memory_mib)}"
    )
