"""How ElasticGPUs are made for a claim, as objects: on the cards a placement chose (a whole
card, a slice, a MIG instance: capacity and TFLOPS from the card), or from a remote pool's
free cards. The binder holds their capacity in the ClusterState; nothing here changes it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpupool.core.elastic.classes import ElasticGPUClass
from gpupool.core.elastic.objects import Capacity, ElasticGPU, Source
from gpupool.core.elastic.resolution import Option
from gpupool.core.elastic.tflops import peak_tflops
from gpupool.core.model import WHOLE_GPU_MILLI, NodeName, Placement, Task
from gpupool.core.placement.framework import CycleState, Profile
from gpupool.core.placement.place import feasible
from gpupool.core.snapshot import Snapshot
from gpupool.core.table import NodeTable


def place_on(
    task: Task, snap: Snapshot, node: NodeName, profile: Profile
) -> tuple[Placement | None, str]:
    """``task`` on ``node`` (a WaitForFirstConsumer claim's consumer's node), its cards chosen
    by the profile; None and why when the node cannot hold it now."""
    rows, status = feasible(task, snap, profile)
    row = snap.table.row(node)
    if not np.any(rows == row):
        return None, f"node {node} cannot hold it now ({status.message or 'taken'})"
    cs = CycleState(snap.table, snap.cache)
    shares = profile.cards.choose_cards(cs, task, row)
    if shares is None:
        return None, f"node {node}: no cards chosen"
    return Placement(task.id, task.job, node, 0, 0, shares), ""


def on_cards(
    p: Placement, names: list[str], cls: ElasticGPUClass, table: NodeTable
) -> list[ElasticGPU]:
    """One ElasticGPU per share of ``p``, named by ``names``: its capacity is the share (a MIG
    instance's: the instance's), its TFLOPS that part of the card's peak."""
    row = table.row(p.node)
    cards = {g.index: g for g in table.nodes[row].gpus}
    made = []
    for name, share in zip(names, p.shares, strict=True):
        card = cards[share.index]
        if share.mig_profile is not None:
            inst = next(i for i in card.mig if i.profile == share.mig_profile)
            cap = (inst.gpu_milli, inst.memory_mib)
        else:
            cap = (share.gpu_milli, share.memory_mib)
        peak = peak_tflops(card.model)
        made.append(
            ElasticGPU(
                name=name,
                source=cls.source,
                model=card.model,
                capacity=Capacity(
                    cap[0],
                    cap[1],
                    None if peak is None else round(peak * cap[0] / WHOLE_GPU_MILLI, 3),
                ),
                node=p.node,
                card=share.index,
                uuid=card.uuid,
                mig_profile=share.mig_profile,
                class_name=cls.name,
                reclaim_policy=cls.reclaim_policy,
            )
        )
    return made


def remote(
    cls: ElasticGPUClass, o: Option, taken: set[int], names: Callable[[int], list[str]]
) -> tuple[list[ElasticGPU], str]:
    """ElasticGPUs on the first free cards of the class's remote pool (``taken``: cards other
    ElasticGPUs hold), or none and why when the pool has too few."""
    pool = cls.parameters["pool"]
    count = int(cls.parameters["count"])
    free = [i for i in range(count) if i not in taken][: o.remote_cards]
    if len(free) < o.remote_cards:
        return [], (
            f"remote pool {pool} has {count - len(taken)} of its {count} GPUs free; "
            f"{o.remote_cards} needed"
        )
    model = cls.parameters["model"]
    memory = int(cls.parameters["memoryMib"])
    return [
        ElasticGPU(
            name=name,
            source=Source.REMOTE,
            model=model,
            capacity=Capacity(WHOLE_GPU_MILLI, memory, peak_tflops(model)),
            pool=pool,
            card=i,
            endpoint=cls.parameters.get("endpoint", ""),
            class_name=cls.name,
            reclaim_policy=cls.reclaim_policy,
        )
        for name, i in zip(names(len(free)), free, strict=True)
    ], ""
