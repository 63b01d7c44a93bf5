"""Binding invariants of elastic GPUs over random clusters, classes and claim streams.

After every step: a claim is bound to at most one set of ElasticGPUs (all on one node or in
one pool, each naming it back); no ElasticGPU is bound twice; a deleted claim's ElasticGPUs
follow their reclaim policy; no card is over-committed, with jobs placed on the same cluster
between the claims.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.core import ClusterState, GpuRequest, Job, JobId, Node, PodSet, TaskId
from gpupool.core.cycle import run_cycle
from gpupool.core.elastic import (
    TASK_PREFIX,
    Binder,
    ClaimPhase,
    ClaimRequests,
    ElasticGPUClaim,
    ElasticGPUClass,
    GpuPhase,
    ReclaimPolicy,
    Source,
)
from gpupool.core.errors import InvalidJobError
from gpupool.core.placement.registry import default_profile
from tests.property.strategies import clusters

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CLASSES = [
    ElasticGPUClass("phys-d", "physical"),
    ElasticGPUClass("phys-r", "physical", reclaim_policy="Retain"),
    ElasticGPUClass("slice-d", "hami-core"),
    ElasticGPUClass("slice-r", "hami-core", reclaim_policy="Retain"),
    ElasticGPUClass("mig", "mig"),
    ElasticGPUClass("late", "hami-core", binding_mode="WaitForFirstConsumer"),
    ElasticGPUClass(
        "remote", "remote", {"pool": "p", "model": "A100", "memoryMib": "40960", "count": "3"}
    ),
]


@st.composite
def requests(draw: st.DrawFn) -> ClaimRequests:
    kind = draw(st.sampled_from(("cards", "slice", "tflops")))
    if kind == "cards":
        return ClaimRequests(cards=draw(st.sampled_from((1, 1, 2, 4))))
    if kind == "slice":
        return ClaimRequests(
            gpu_milli=draw(st.integers(1, 999)),
            memory_mib=draw(st.sampled_from((0, 1024, 10240, 30000))),
        )
    return ClaimRequests(tflops=draw(st.sampled_from((20.0, 100.0, 400.0, 1500.0))))


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[str, int, object]]:
    out: list[tuple[str, int, object]] = []
    for _ in range(draw(st.integers(1, 25))):
        op = draw(
            st.sampled_from(
                (
                    "claim",
                    "claim",
                    "claim",
                    "again",
                    "delete",
                    "consume",
                    "job",
                    "reconcile",
                    "lose-node",
                )
            )
        )
        out.append(
            (
                op,
                draw(st.integers(0, 30)),
                (draw(st.sampled_from([*(c.name for c in CLASSES), ""])), draw(requests()))
                if op == "claim"
                else draw(st.integers(0, 9)),
            )
        )
    return out


def check(b: Binder, deleted: dict[str, ReclaimPolicy | None]) -> None:
    gpus = {g.name: g for g in b.gpus()}
    holders: dict[str, str] = {}
    for c in b.claims():
        if c.phase is ClaimPhase.PENDING:
            assert c.elastic_gpus == ()
            continue
        assert c.elastic_gpus, c
        mine = [gpus[n] for n in c.elastic_gpus]
        assert len({(g.node, g.pool) for g in mine}) == 1, "one node or one pool per claim"
        for g in mine:
            assert g.name not in holders, f"{g.name} bound to {holders.get(g.name)} and {c.key}"
            holders[g.name] = c.key
            assert g.claim_ref is not None and g.claim_ref.key == c.key
            assert g.phase in (GpuPhase.BOUND, GpuPhase.FAILED)
    for g in gpus.values():
        if g.phase is GpuPhase.BOUND:
            assert g.claim_ref is not None and holders.get(g.name) == g.claim_ref.key
        if g.phase is GpuPhase.AVAILABLE:
            assert g.claim_ref is None
        held = b.state.placement(_task(g.name)) is not None
        if g.source is not Source.REMOTE:
            assert held == (g.phase is not GpuPhase.FAILED), g
    for name, policy in deleted.items():
        if policy is ReclaimPolicy.DELETE:
            assert name not in gpus and b.state.placement(_task(name)) is None
        elif policy is ReclaimPolicy.RETAIN:
            assert gpus[name].phase in (GpuPhase.RELEASED, GpuPhase.FAILED)
    t = b.state.table
    n = t.n
    usable = t.gpu_usable[:n]
    assert (t.used_milli[:n][usable] <= 1000).all()
    assert (t.used_mib[:n][usable] <= t.gpu_mem_cap[:n][usable]).all()
    assert all((a[:n] >= 0).all() for a in t.mig_free.values())
    assert (t.cpu_free[:n] >= 0).all() and (t.mem_free[:n] >= 0).all()
    assert np.all(t.used_milli[:n] >= 0)


def _task(name: str) -> TaskId:
    return TaskId(f"{TASK_PREFIX}{name}")


@SETTINGS
@given(cluster=clusters(max_nodes=4), plan=steps())
def test_binding_invariants(cluster: list[Node], plan: list[tuple[str, int, object]]) -> None:
    state = ClusterState(cluster)
    b = Binder(state, classes=CLASSES)
    profile = default_profile()
    deleted: dict[str, ReclaimPolicy | None] = {}
    names = [f"c{i}" for i in range(31)]
    jobs = 0
    for op, i, arg in plan:
        key = f"default/{names[i]}"
        known = {c.key: c for c in b.claims()}
        if op == "claim":
            cls, req = arg  # type: ignore[misc]
            if key in known:
                continue
            try:
                c = b.submit(ElasticGPUClaim(names[i], req, class_name=cls))
            except InvalidJobError:
                assert key not in {x.key for x in b.claims()}  # nothing created
                continue
            before = (len(b.gpus()), state.fingerprint())
            assert b.submit(c) == b.claim(key)  # exactly once
            assert (len(b.gpus()), state.fingerprint()) == before
        elif op == "again" and known:
            c = list(known.values())[i % len(known)]
            before = (len(b.gpus()), state.fingerprint())
            b.submit(ElasticGPUClaim(c.name, c.requests, c.namespace, c.class_name))
            assert (len(b.gpus()), state.fingerprint()) == before
        elif op == "delete" and known:
            c = list(known.values())[i % len(known)]
            policies = {n: b.gpu(n).reclaim_policy for n in c.elastic_gpus}
            out = b.delete_claim(c.key)
            for n in out.deleted:
                deleted[n] = ReclaimPolicy.DELETE
                assert policies[n] is ReclaimPolicy.DELETE
            for n in out.retained:
                deleted[n] = ReclaimPolicy.RETAIN
                assert policies[n] is ReclaimPolicy.RETAIN
            assert set(out.deleted) | set(out.retained) == set(c.elastic_gpus)
        elif op == "consume" and known and state.nodes():
            c = list(known.values())[i % len(known)]
            was = c.phase
            live = state.nodes()
            after = b.consume(c.key, live[int(str(arg)) % len(live)].name)
            if was is not ClaimPhase.PENDING:
                assert after == c
        elif op == "job":
            jobs += 1
            gpu = [
                GpuRequest(count=1),
                GpuRequest(gpu_milli=400, memory_mib=8000),
                GpuRequest(count=2),
            ][int(str(arg)) % 3]
            run_cycle(state, [Job(JobId(f"job{jobs}"), (PodSet("w", 1, 0, 0, gpu),))], profile)
        elif op == "reconcile":
            for c in b.reconcile():
                assert c.phase is ClaimPhase.BOUND
        elif op == "lose-node" and state.nodes():
            live = state.nodes()
            victim = live[int(str(arg)) % len(live)].name
            b.node_removed(victim)
            state.remove_node(victim)
        for c in b.claims():  # a freed name may be given to a new ElasticGPU
            for n in c.elastic_gpus:
                deleted.pop(n, None)
        check(b, deleted)
