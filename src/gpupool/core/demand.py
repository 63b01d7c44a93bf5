"""What a job costs in quota: a lower bound from its request alone, and the exact cost of its
placements (cards, compute and memory as placed; a slice charged for what it blocks of its
card; normalised compute where the tree counts it)."""

from __future__ import annotations

from collections.abc import Iterable

from gpupool.core.model import WHOLE_GPU_MILLI, GpuKind, Job, Placement
from gpupool.core.quota import ACROSS_FLAVORS, Resource
from gpupool.core.quota_tree import Vec
from gpupool.core.table import NodeTable


def request_demand(job: Job, flavor: str) -> Vec:
    """A lower bound of the job's quota cost, from its request alone (before placement).

    Whole cards count their memory only once placed (the card decides it); everything else
    is exact. Used to skip placement when quota alone already says no.
    """
    d: Vec = {}

    def put(res: Resource, v: int) -> None:
        if v:
            d[(flavor, res)] = d.get((flavor, res), 0) + v

    for ps in job.pod_sets:
        n = ps.count
        put(Resource.CPU_MILLI, n * ps.cpu_milli)
        put(Resource.MEMORY_MIB, n * ps.memory_mib)
        g = ps.gpu
        if g.kind is GpuKind.WHOLE:
            put(Resource.GPU, n * g.count)
            put(Resource.GPU_MILLI, n * g.count * WHOLE_GPU_MILLI)
            put(Resource.GPU_MEMORY_MIB, n * g.count * g.memory_mib)
        elif g.kind is GpuKind.SLICE:
            put(Resource.GPU_MILLI, n * g.gpu_milli * g.cards)
            put(Resource.GPU_MEMORY_MIB, n * g.memory_mib * g.cards)
    if job.min_member is not None and job.min_member < job.task_count:
        # Only the gang minimum must be admitted together: scale down to it.
        frac = job.min_member / job.task_count
        d = {k: int(v * frac) for k, v in d.items()}
    return d


def slice_charge_milli(gpu_milli: int, memory_mib: int, card_mib: int) -> int:
    """What a slice of one card costs in GPUs (milli-GPU): the larger of its compute share
    and its memory share of the card, so a slice that holds most of a card's memory with
    little compute is charged for the card it blocks (dominant share within the card)."""
    if card_mib <= 0:
        return gpu_milli
    by_memory = -(-memory_mib * WHOLE_GPU_MILLI // card_mib)  # rounded up
    return min(WHOLE_GPU_MILLI, max(gpu_milli, by_memory))


def placement_demand(
    placements: Iterable[Placement], flavor: str, table: NodeTable, normalized: bool = False
) -> Vec:
    """The exact quota cost of placements: cards, compute and memory as placed. A slice's
    compute (``gpu_milli``) is charged by :func:`slice_charge_milli`. With ``normalized``
    (the tree counts normalised compute), compute is charged again in normalised units
    (``normalized_milli``, by each card's relative capacity), for the flavor and for all
    flavors together."""
    d: Vec = {}

    def put(res: Resource, v: int) -> None:
        if v:
            d[(flavor, res)] = d.get((flavor, res), 0) + v

    for p in placements:
        put(Resource.CPU_MILLI, p.cpu_milli)
        put(Resource.MEMORY_MIB, p.memory_mib)
        row = table.row(p.node) if p.shares else -1
        for s in p.shares:
            if s.mig_profile is not None:
                node = table.nodes[row]
                inst = next(i for i in node.gpus[s.index].mig if i.profile == s.mig_profile)
                milli = inst.gpu_milli
                put(Resource.GPU_MEMORY_MIB, inst.memory_mib)
            elif s.gpu_milli >= WHOLE_GPU_MILLI:
                put(Resource.GPU, 1)
                milli = s.gpu_milli
                put(Resource.GPU_MEMORY_MIB, s.memory_mib)
            else:
                card = table.nodes[row].gpus[s.index]
                milli = slice_charge_milli(s.gpu_milli, s.memory_mib, card.memory_mib)
                put(Resource.GPU_MEMORY_MIB, s.memory_mib)
            put(Resource.GPU_MILLI, milli)
            if not normalized:
                continue
            norm = table.device(row, s.index).normalized_milli(milli)
            put(Resource.NORMALIZED_MILLI, norm)
            if norm:
                d[(ACROSS_FLAVORS, Resource.NORMALIZED_MILLI)] = (
                    d.get((ACROSS_FLAVORS, Resource.NORMALIZED_MILLI), 0) + norm
                )
    return d
