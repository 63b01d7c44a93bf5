"""ElasticGPUs and claims taken back after a restart: one policy for every mode.

The objects a store kept (a state file, the API server's custom resources) go back into a new
binder with no new decision. What cannot hold its card again fails alone, with the reason, and
the rest is kept: an ElasticGPU whose node is not in the cluster, or whose card another holder
took (never, unless the store was edited), is Failed, and a claim Bound to it is Lost (as
``Binder.node_removed`` does for a node that leaves). Nothing else is thrown away.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from gpupool.core.cluster import ClusterState
from gpupool.core.elastic.binder import Binder
from gpupool.core.elastic.objects import (
    ClaimPhase,
    ElasticGPU,
    ElasticGPUClaim,
    GpuPhase,
    Source,
)
from gpupool.core.elastic.resolution import TASK_PREFIX
from gpupool.core.errors import ConflictError, NotFoundError
from gpupool.core.model import TaskId


@dataclass(frozen=True, slots=True)
class Recovered:
    """What a recovery failed: ElasticGPU name -> why (its claim, if Bound, is Lost)."""

    failed: dict[str, str]


def recover(
    binder: Binder, gpus: Iterable[ElasticGPU], claims: Iterable[ElasticGPUClaim]
) -> Recovered:
    """Take ``gpus`` and ``claims`` back into ``binder`` (new, holding its classes only),
    failing those that cannot hold their card again (see the module's docstring)."""
    gpus, by_key = list(gpus), {c.key: c for c in claims}
    live = {n.name for n in binder.state.nodes()}
    failed: dict[str, str] = {}
    away = [g for g in gpus if _holds_card(g) and g.node not in live]
    gpus = _fail(gpus, by_key, away, lambda g: f"node {g.node} is not in the cluster", failed)
    try:
        binder.restore(gpus, by_key.values())
    except ConflictError:
        taken = _taken(binder.state, gpus)
        gpus = _fail(
            gpus, by_key, taken, lambda g: f"card {g.card} of node {g.node} was taken", failed
        )
        binder.restore(gpus, by_key.values())
    return Recovered(failed)


def _holds_card(g: ElasticGPU) -> bool:
    return g.source is not Source.REMOTE and g.phase is not GpuPhase.FAILED


def _taken(state: ClusterState, gpus: Sequence[ElasticGPU]) -> list[ElasticGPU]:
    """The ElasticGPUs that cannot take their card back (tried one by one, then let go)."""
    bad = []
    for g in gpus:
        if not _holds_card(g):
            continue
        probe = Binder(state)
        try:
            probe.restore([replace(g, claim_ref=None, phase=GpuPhase.AVAILABLE)], [])
        except (ConflictError, NotFoundError):
            bad.append(g)
            continue
        state.forget(TaskId(f"{TASK_PREFIX}{g.name}"))
    return bad


def _fail(
    gpus: list[ElasticGPU],
    claims: dict[str, ElasticGPUClaim],
    hit: Sequence[ElasticGPU],
    why: Callable[[ElasticGPU], str],
    failed: dict[str, str],
) -> list[ElasticGPU]:
    """``hit`` marked Failed, the claims Bound to them Lost, before the binder holds them."""
    names = {g.name for g in hit}
    out = []
    for g in gpus:
        if g.name in names:
            g = replace(g, phase=GpuPhase.FAILED, message=why(g))
            failed[g.name] = g.message
            ref = g.claim_ref
            if ref is not None and ref.key in claims and claims[ref.key].phase is ClaimPhase.BOUND:
                claims[ref.key] = replace(claims[ref.key], phase=ClaimPhase.LOST, message=g.message)
        out.append(g)
    return out
