"""One recovery policy after a restart, for serve and k8s alike: an ElasticGPU that cannot hold
its card again (its node gone, its card taken) fails alone and its claim is Lost; the rest is
kept as it was."""

from __future__ import annotations

from gpupool.config.elastic import gpu_from_json, gpu_to_json
from gpupool.core import ClusterState, GpuShare, NodeName, Placement, TaskId
from gpupool.core.elastic import Binder, ClaimPhase, ElasticGPU, GpuPhase, recover
from gpupool.core.model import JobId
from tests.builders import node
from tests.unit.test_elastic import binder, claim, classes


def saved() -> tuple[list[ElasticGPU], list, dict[str, str]]:
    b = binder(node("n0", gpu=2), node("n1", gpu=2))
    one = b.submit(claim("one", "phys", cards=1))
    two = b.submit(claim("two", "phys", cards=1))
    gpus = [gpu_from_json(gpu_to_json(g)) for g in b.gpus()]
    where = {c.key: c.node for c in (one, two)}
    return gpus, [b.claim(one.key), b.claim(two.key)], where


def test_a_taken_card_fails_only_its_elastic_gpu() -> None:
    gpus, claims, _ = saved()
    victim = next(g for g in gpus if g.claim_ref is not None and g.claim_ref.key == claims[0].key)
    state = ClusterState([node("n0", gpu=2), node("n1", gpu=2)])
    state.assume(
        Placement(
            TaskId("j/0"),
            JobId("j"),
            NodeName(victim.node),
            0,
            0,
            (GpuShare(victim.card, 1000, 0),),
        )
    )  # a job holds that card now
    fresh = Binder(state, classes=classes())
    out = recover(fresh, gpus, claims)
    assert list(out.failed) == [victim.name]
    assert f"card {victim.card} of node {victim.node} was taken" in out.failed[victim.name]
    assert fresh.claim(claims[0].key).phase is ClaimPhase.LOST
    assert fresh.claim(claims[1].key).phase is ClaimPhase.BOUND  # kept, on its card
    kept = [g for g in fresh.gpus() if g.phase is not GpuPhase.FAILED]
    assert len(kept) == 1 and state.totals()["gpu_milli_used"] == 2000


def test_an_elastic_gpu_on_a_node_that_is_gone_fails_and_its_claim_is_lost() -> None:
    gpus, claims, where = saved()
    gone = where[claims[0].key]
    other = "n1" if gone == "n0" else "n0"
    fresh = Binder(ClusterState([node(other, gpu=2)]), classes=classes())
    out = recover(fresh, gpus, claims)
    assert out.failed and all(
        f"node {gone} is not in the cluster" == why for why in out.failed.values()
    )
    for c in claims:  # Lost where its node is gone, Bound where it is still here
        want = ClaimPhase.LOST if where[c.key] == gone else ClaimPhase.BOUND
        assert fresh.claim(c.key).phase is want
