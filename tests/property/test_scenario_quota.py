"""Quota holds through whole scenario runs: the quota oracle (``quota_oracle.py``) watches every
cycle of the scenario simulator over random quota trees and tenants' streams."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.config.fields import Dist
from gpupool.core.quota import (
    ClusterQueue,
    FlavorQuotas,
    QueueConfig,
    QueueSettings,
    Quota,
    Resource,
)
from gpupool.core.quota import ResourceFlavor as Flavor
from gpupool.sim.scenario import Scenario, Shape, Stream, Tenant, simulate
from tests.builders import node
from tests.property.quota_oracle import QuotaOracle

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DURATION_S = 3600.0


@st.composite
def quota_trees(draw: st.DrawFn) -> QueueConfig:
    queues = []
    for i in range(draw(st.integers(2, 3))):
        nominal = draw(st.integers(0, 8))
        non_preemptive = draw(st.integers(0, 4)) == 0  # such a queue does not borrow
        borrow = 0 if non_preemptive else draw(st.one_of(st.none(), st.integers(0, 8)))
        queues.append(
            ClusterQueue(
                f"q{i}",
                (FlavorQuotas("gpu", {Resource.GPU: Quota(nominal, borrow)}),),
                cohort=draw(st.sampled_from(("c1", "c1", None))),
                weight=draw(st.sampled_from((1.0, 2.0))),
                non_preemptive=non_preemptive,
            )
        )
    return QueueConfig(
        (Flavor("gpu"),),
        tuple(queues),
        settings=QueueSettings(
            min_runtime_s=draw(st.sampled_from((0.0, 60.0))),
            max_preemptions_per_job=draw(st.integers(0, 2)),
        ),
    )


@st.composite
def streams(draw: st.DrawFn, index: int) -> Stream:
    gpus = draw(st.sampled_from((1, 2, 4, 8)))
    shape = Shape(
        Dist("uniform", 60.0, draw(st.sampled_from((300.0, 1800.0)))),
        gpus=gpus,
        tasks=draw(st.integers(1, 2)),
        priority=draw(st.integers(0, 2)),
    )
    if draw(st.booleans()):
        return Stream(
            f"s{index}", "poisson", shape, rate_per_h=draw(st.integers(5, 60)), max_jobs=40
        )
    return Stream(
        f"s{index}",
        "burst",
        shape,
        burst_at_s=float(draw(st.integers(0, 1800))),
        burst_count=draw(st.integers(1, 12)),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    config = draw(quota_trees())
    tenants = tuple(
        Tenant(
            f"t{i}",
            q.name,
            q.name,
            (f"u{i}",),
            tuple(draw(streams(k)) for k in range(draw(st.integers(1, 2)))),
        )
        for i, q in enumerate(config.cluster_queues)
    )
    nodes = tuple(node(f"n{i}", gpu=8) for i in range(draw(st.integers(1, 3))))
    grace = draw(st.sampled_from((0.0, 30.0)))
    return Scenario(
        "random", "", DURATION_S, 10.0, grace, (0.0, DURATION_S), tenants, nodes, config
    )


@SETTINGS
@given(scenario=scenarios(), seed=st.integers(1, 3))
def test_no_queue_goes_above_its_quota_in_any_cycle(scenario: Scenario, seed: int) -> None:
    oracle = QuotaOracle(scenario.config)
    result = simulate(scenario, seed, observe=oracle)
    assert oracle.checks == result.cycles
    assert not oracle.violations, oracle.violations[:5]


def test_the_oracle_sees_a_queue_above_its_quota() -> None:
    """The same run, judged against a tighter quota than the scheduler had: the oracle must
    report it (so a run it passes is evidence, not silence)."""
    loose = QueueConfig(
        (Flavor("gpu"),), (ClusterQueue("q0", (FlavorQuotas("gpu", {Resource.GPU: Quota(8)}),)),)
    )
    tight = QueueConfig(
        (Flavor("gpu"),), (ClusterQueue("q0", (FlavorQuotas("gpu", {Resource.GPU: Quota(4)}),)),)
    )
    shape = Shape(Dist("fixed", 600.0), gpus=2)
    scenario = Scenario(
        "burst",
        "",
        DURATION_S,
        10.0,
        0.0,
        (0.0, DURATION_S),
        (Tenant("t0", "q0", "q0", ("u",), (Stream("s", "burst", shape, burst_count=4),)),),
        (node("n0", gpu=8),),
        loose,
    )
    fair, strict = QuotaOracle(loose), QuotaOracle(tight)
    simulate(scenario, 1, observe=lambda t, s: (fair(t, s), strict(t, s)))
    assert not fair.violations
    assert strict.violations and "q0 gpu.gpu: running jobs 8" in strict.violations[0]
