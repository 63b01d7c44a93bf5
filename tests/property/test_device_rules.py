"""Over any mixed cluster and job stream: no card holds a share its division rule cannot give,
no slice holds less than it asked, and no card is over-committed."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.core import Node
from gpupool.core.devices import NVIDIA, DeviceClass, Division
from gpupool.core.model import Job
from gpupool.core.vendors import VENDOR_CLASSES
from tests.property.strategies import clusters, job_streams
from tests.property.test_invariants import check_capacity, drive

CLASSES = (NVIDIA, *VENDOR_CLASSES.values(), DeviceClass("acme", Division.WHOLE))


@st.composite
def mixed(draw: st.DrawFn) -> list[Node]:
    """Random clusters whose nodes' cards each take one vendor's class (MIG stays NVIDIA's)."""
    nodes = draw(clusters())
    out = []
    for n in nodes:
        device = draw(st.sampled_from(CLASSES))
        gpus = tuple(g if g.mig else dataclasses.replace(g, device=device) for g in n.gpus)
        out.append(dataclasses.replace(n, gpus=gpus))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=mixed(),
    jobs=job_streams(),
    finish=st.lists(st.integers(0, 50), min_size=0, max_size=6),
    profile=st.sampled_from(("binpack", "spread")),
)
def test_no_share_breaks_its_cards_division_rule(
    nodes: list[Node], jobs: list[Job], finish: list[int], profile: str
) -> None:
    state, _ = drive(nodes, jobs, finish, profile)
    check_capacity(state)
    asked = {t.id: t.request for j in jobs for t in j.tasks()}
    t = state.table
    for p in state.placements():
        row = t.row(p.node)
        for s in p.shares:
            if s.mig_profile is not None:
                continue
            card = state.node(p.node).gpus[s.index]
            assert card.device.allows(s.gpu_milli, s.memory_mib, card.memory_mib), (card, s)
            req = asked[p.task]
            if s.gpu_milli < 1000:  # a slice: never less than asked
                assert s.gpu_milli >= req.gpu_milli
                assert s.memory_mib >= req.slice_mib(int(t.gpu_mem_cap[row, s.index]))
                assert card.device.division is not Division.WHOLE
