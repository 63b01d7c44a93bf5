"""Whether a placement has room on its node: what ``NodeTable.apply`` checks before it takes
anything, so a placement that would over-commit a node or a card changes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpupool.core.errors import ConflictError
from gpupool.core.model import Placement

if TYPE_CHECKING:
    from gpupool.core.table import NodeTable


def check_room(table: NodeTable, i: int, p: Placement) -> None:
    """Raises ConflictError when taking ``p`` on row ``i`` would over-commit the node or one
    of its cards: CPU, memory, a card's compute and memory, its split count, a MIG
    instance, or a share its division rule cannot give."""
    where = f"placing {p.task} on {p.node}"
    if p.cpu_milli > table.cpu_free[i]:
        raise ConflictError(f"{where}: {p.cpu_milli} milli-CPU asked, {table.cpu_free[i]} free")
    if p.memory_mib > table.mem_free[i]:
        raise ConflictError(f"{where}: {p.memory_mib} MiB asked, {table.mem_free[i]} free")
    seen: set[int] = set()
    for s in p.shares:
        if not 0 <= s.index < table.gpu_count[i]:
            raise ConflictError(f"{where}: the node has no GPU {s.index}")
        if s.mig_profile is not None:
            pool = table.mig_free.get(s.mig_profile)
            asked = sum(
                1 for o in p.shares if o.index == s.index and o.mig_profile == s.mig_profile
            )
            if pool is None or pool[i, s.index] < asked:
                raise ConflictError(
                    f"{where}: GPU {s.index} has fewer than {asked} free {s.mig_profile}"
                )
            continue
        if s.index in seen:
            raise ConflictError(f"{where}: GPU {s.index} listed twice")
        seen.add(s.index)
        if table.holders[i, s.index] >= table.holder_cap[i, s.index]:
            raise ConflictError(
                f"{where}: GPU {s.index} already has {table.holders[i, s.index]} holders, "
                f"its split count"
            )
        if not table.plain and not table.devices[int(table.gpu_device[i, s.index])].allows(
            s.gpu_milli, s.memory_mib, int(table.gpu_mem_cap[i, s.index])
        ):
            dev = table.devices[int(table.gpu_device[i, s.index])]
            raise ConflictError(
                f"{where}: GPU {s.index} ({dev.vendor}, division {dev.division}) cannot "
                f"give a share of {s.gpu_milli} milli and {s.memory_mib} MiB"
            )
        if s.gpu_milli > table.free_milli[i, s.index] or s.memory_mib > table.free_mib[i, s.index]:
            raise ConflictError(
                f"{where}: GPU {s.index} has {table.free_milli[i, s.index]} milli and "
                f"{table.free_mib[i, s.index]} MiB free, {s.gpu_milli} milli and "
                f"{s.memory_mib} MiB asked"
            )
