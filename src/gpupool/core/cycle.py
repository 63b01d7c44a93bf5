"""run_cycle(): the only place the steps of a scheduling cycle are sequenced."""

from __future__ import annotations

from collections.abc import Iterable

from gpupool.core.cluster import ClusterState
from gpupool.core.decisions import Bind, CycleResult, Park
from gpupool.core.model import Job
from gpupool.core.placement.framework import Profile
from gpupool.core.placement.place import place_job


def run_cycle(state: ClusterState, pending: Iterable[Job], profile: Profile) -> CycleResult:
    """Places ``pending`` jobs in the order given; each sees the ones placed before it.

    Decisions come out; nothing is bound here. Placements are assumed in ``state`` at once,
    so the adapter confirms or forgets each after its bind.
    """
    snap = state.snapshot()                                   # 1. one consistent view
    result = CycleResult(cycle=state.next_cycle())
    for job in pending:                                       # 2. in the queue's order
        placements, status = place_job(job, snap, profile)    # 3. filter -> score -> cards
        if not placements:
            result.parks.append(Park(job.id, status))         # 4. parked, with the reason
            continue
        for p in placements:                                  # 5. reserve: the whole gang
            snap.assume(p)
            state.assume(p)
        result.binds.append(Bind(job.id, tuple(placements)))  # 6. the adapter binds
    return result
