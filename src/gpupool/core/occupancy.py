"""What the nodes and cards hold now, as views and dashboards read it: a node's CPU and memory
in use, each card's compute and memory in use, the free compute stranded by fragmentation.

Read from the node table (``core.table``) so that adapters need not: a MIG card's use is its
taken instances valued by ``core.mig`` (each by the share its card declares), the same rule
the simulator and the demo use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpupool.core import mig
from gpupool.core.model import WHOLE_GPU_MILLI, Node
from gpupool.core.table import NodeTable


@dataclass(frozen=True, slots=True)
class CardUse:
    index: int
    used_milli: int
    """Compute in use; on a MIG card, its taken instances' declared shares."""
    used_mib: int
    """Memory in use; on a MIG card, its taken instances' memory."""
    mig_free: tuple[tuple[str, int], ...] = ()
    """Free instances per MIG profile, in the card's order of profiles."""
    counted: bool = True
    """Whether its use counts in the node's and the cluster's figures: a healthy whole card,
    or a MIG card."""


@dataclass(frozen=True, slots=True)
class NodeUse:
    node: Node
    cpu_used_milli: int
    memory_used_mib: int
    cards: tuple[CardUse, ...]

    @property
    def gpu_milli_used(self) -> int:
        """Compute in use over the node's counted cards, MIG cards by ``core.mig``."""
        return sum(c.used_milli for c in self.cards if c.counted)


def node_use(t: NodeTable, row: int) -> NodeUse:
    node = t.nodes[row]
    cards = []
    for g in node.gpus:
        if g.mig:
            free = tuple((m.profile, int(t.mig_free[m.profile][row, g.index])) for m in g.mig)
            taken = {m.profile: m.count - n for m, (_, n) in zip(g.mig, free, strict=True)}
            cards.append(
                CardUse(
                    g.index,
                    mig.taken_milli(g, taken),
                    sum(n * mig.instance_mib(g, p) for p, n in taken.items()),
                    free,
                )
            )
        else:
            cards.append(
                CardUse(
                    g.index,
                    int(t.used_milli[row, g.index]),
                    int(t.used_mib[row, g.index]),
                    counted=bool(t.gpu_usable[row, g.index]),
                )
            )
    return NodeUse(
        node,
        int(t.cpu_cap[row] - t.cpu_free[row]),
        int(t.mem_cap[row] - t.mem_free[row]),
        tuple(cards),
    )


def fragmentation(t: NodeTable) -> tuple[int, int]:
    """(free compute, the part of it that is fragmented) in milli-GPU over the usable cards
    of live nodes: free compute on partly used cards, or on nodes with no CPU or memory
    left."""
    live = t.live()
    usable = t.gpu_usable[live]
    used = t.used_milli[live]
    free = np.where(usable, WHOLE_GPU_MILLI - used, 0)
    partly = usable & (used > 0)
    starved = (t.cpu_free[live] <= 0) | (t.mem_free[live] <= 0)
    fragmented = int(free[partly].sum() + free[~partly & starved[:, None]].sum())
    return int(free.sum()), fragmented
