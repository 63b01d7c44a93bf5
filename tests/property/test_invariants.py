"""Invariants over any cluster and any job stream."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.core import ClusterState, Job, Node, default_profile, place_job, run_cycle
from gpupool.core.decisions import CycleResult
from tests.property.strategies import clusters, job_streams

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROFILES = {"binpack": default_profile(), "spread": default_profile(scores={"spread": 1})}


def drive(
    nodes: list[Node], jobs: list[Job], finish: list[int], profile: str
) -> tuple[ClusterState, list[CycleResult]]:
    """Cycles over the stream; after each cycle, finishes the jobs ``finish`` points at."""
    state = ClusterState(nodes)
    results = []
    pending = list(jobs)
    for k in range(3):
        result = run_cycle(state, pending, PROFILES[profile])
        results.append(result)
        bound = {b.job for b in result.binds}
        pending = [j for j in pending if j.id not in bound]
        for b in result.binds:
            for p in b.placements:
                state.confirm(p.task)
        running = sorted({p.job for p in state.placements()})
        for idx in finish[k::3]:
            if running:
                victim = running[idx % len(running)]
                for p in state.job_placements(victim):
                    state.forget(p.task)
                running.remove(victim)
    return state, results


def check_capacity(state: ClusterState) -> None:
    """Recompute usage from placements, independently of the table, and compare."""
    t = state.table
    milli: dict[tuple[str, int], int] = defaultdict(int)
    mib: dict[tuple[str, int], int] = defaultdict(int)
    mig: dict[tuple[str, int, str], int] = defaultdict(int)
    holders: dict[tuple[str, int], int] = defaultdict(int)
    cpu: dict[str, int] = defaultdict(int)
    mem: dict[str, int] = defaultdict(int)
    for p in state.placements():
        cpu[p.node] += p.cpu_milli
        mem[p.node] += p.memory_mib
        for s in p.shares:
            if s.mig_profile:
                mig[(p.node, s.index, s.mig_profile)] += 1
            else:
                milli[(p.node, s.index)] += s.gpu_milli
                mib[(p.node, s.index)] += s.memory_mib
                holders[(p.node, s.index)] += 1
    for node in state.nodes():
        i = t.row(node.name)
        assert cpu[node.name] <= node.cpu_milli and mem[node.name] <= node.memory_mib
        assert t.cpu_free[i] == node.cpu_milli - cpu[node.name]
        for g in node.gpus:
            used, used_mib = milli[(node.name, g.index)], mib[(node.name, g.index)]
            assert used <= 1000 and used_mib <= g.memory_mib
            assert t.used_milli[i, g.index] == used and t.used_mib[i, g.index] == used_mib
            held = holders[(node.name, g.index)]
            assert t.holders[i, g.index] == held
            if g.max_holders:
                assert held <= g.max_holders, f"{node.name} GPU {g.index}: {held} holders"
            if used:
                assert g.healthy and not g.is_mig
            for inst in g.mig:
                assert mig[(node.name, g.index, inst.profile)] <= inst.count
    assert (t.free_milli[: t.n] <= 1000).all()


@given(
    nodes=clusters(),
    jobs=job_streams(),
    finish=st.lists(st.integers(0, 50), max_size=6),
    profile=st.sampled_from(sorted(PROFILES)),
)
@SETTINGS
def test_no_gpu_node_or_card_is_overcommitted(
    nodes: list[Node], jobs: list[Job], finish: list[int], profile: str
) -> None:
    state, _ = drive(nodes, jobs, finish, profile)
    check_capacity(state)


@given(nodes=clusters(), jobs=job_streams())
@SETTINGS
def test_gangs_are_all_or_nothing(nodes: list[Node], jobs: list[Job]) -> None:
    state, results = drive(nodes, jobs, [], "binpack")
    by_id = {j.id: j for j in jobs}
    for result in results:
        for b in result.binds:
            j = by_id[b.job]
            assert j.gang_size <= len(b.placements) <= j.task_count
        for park in result.parks:
            assert state.job_placements(park.job) == []


@given(nodes=clusters(), jobs=job_streams())
@SETTINGS
def test_trials_and_forget_restore_the_exact_prior_state(
    nodes: list[Node], jobs: list[Job]
) -> None:
    state = ClusterState(nodes)
    profile = default_profile()
    run_cycle(state, jobs[: len(jobs) // 2], profile)
    before = state.fingerprint()
    snap = state.snapshot()
    snap_before = tuple(
        a[: snap.table.n].tobytes()
        for a in (snap.table.free_milli, snap.table.free_mib, snap.table.cpu_free)
    )
    for j in jobs[len(jobs) // 2 :]:
        place_job(j, snap, profile)  # trials only: must leave no trace
    assert (
        tuple(
            a[: snap.table.n].tobytes()
            for a in (snap.table.free_milli, snap.table.free_mib, snap.table.cpu_free)
        )
        == snap_before
    )
    result = run_cycle(state, jobs[len(jobs) // 2 :], profile)
    for b in result.binds:
        for p in b.placements:
            state.forget(p.task)
    assert state.fingerprint() == before


@given(nodes=clusters(), jobs=job_streams(), finish=st.lists(st.integers(0, 50), max_size=6))
@SETTINGS
def test_same_inputs_same_decisions(nodes: list[Node], jobs: list[Job], finish: list[int]) -> None:
    a = drive(nodes, jobs, finish, "binpack")[1]
    b = drive(nodes, jobs, finish, "binpack")[1]
    assert [(r.binds, [(p.job, p.status) for p in r.parks]) for r in a] == [
        (r.binds, [(p.job, p.status) for p in r.parks]) for r in b
    ]


def test_free_columns_are_consistent_after_a_busy_stream() -> None:
    """A deterministic heavier run, checked against an independent recomputation."""
    from tests.builders import job, node, share, whole

    state = ClusterState([node(f"n{i}", gpu=8) for i in range(20)])
    rng = np.random.default_rng(7)
    jobs = [
        job(
            f"j{i}",
            tasks=int(rng.integers(1, 4)),
            gpu=share(int(rng.integers(1, 1000)))
            if rng.random() < 0.6
            else whole(int(rng.choice([1, 2, 4]))),
        )
        for i in range(300)
    ]
    run_cycle(state, jobs, default_profile())
    check_capacity(state)


@given(nodes=clusters(), jobs=job_streams(), profile=st.sampled_from(sorted(PROFILES)))
@SETTINGS
def test_slices_take_their_share_of_the_card_they_land_on(
    nodes: list[Node], jobs: list[Job], profile: str
) -> None:
    """A slice holds ``cards`` distinct cards, each with its compute and with its memory taken
    of that card (a percentage of the chosen card, not of some other one)."""
    state, _ = drive(nodes, jobs, [], profile)
    requests = {j.id: j.pod_sets[0].gpu for j in jobs}
    for p in state.placements():
        req = requests[p.job]
        if req.kind.value != "slice":
            continue
        node = next(n for n in state.nodes() if n.name == p.node)
        assert len(p.shares) == req.cards
        assert len({s.index for s in p.shares}) == req.cards
        for s in p.shares:
            card = node.gpus[s.index]
            assert s.gpu_milli == req.gpu_milli
            assert s.memory_mib == req.slice_mib(card.memory_mib)
            assert not req.models or card.model in req.models
