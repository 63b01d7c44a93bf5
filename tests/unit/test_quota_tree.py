"""Quota arithmetic: nominal, borrowing and lending limits, hierarchical cohorts, shares."""

from __future__ import annotations

import pytest

from gpupool.core import ConfigError
from gpupool.core.quota import (
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    LocalQueue,
    QueueConfig,
    Quota,
    Resource,
    ResourceFlavor,
)
from gpupool.core.quota_tree import QuotaTree

G = ("f", Resource.GPU_MILLI)


def cq(
    name: str,
    nominal: int,
    cohort: str | None = "c",
    borrow: int | None = None,
    lend: int | None = None,
    weight: float = 1.0,
    **kw: object,
) -> ClusterQueue:
    return ClusterQueue(
        name,
        (FlavorQuotas("f", {Resource.GPU_MILLI: Quota(nominal, borrow, lend)}),),
        cohort=cohort,
        weight=weight,
        **kw,
    )  # type: ignore[arg-type]


def tree(*queues: ClusterQueue, cohorts: tuple[Cohort, ...] = ()) -> QuotaTree:
    return QuotaTree(QueueConfig((ResourceFlavor("f"),), queues, cohorts).validate())


def test_standalone_queue_has_only_its_nominal() -> None:
    t = tree(cq("a", 8000, cohort=None))
    assert t.available("a", G) == 8000
    t.add("a", {G: 6000})
    assert t.available("a", G) == 2000
    assert t.shortfall("a", {G: 3000}) == [
        "queue a at quota for f GPUs (6/8 GPUs used, 3 asked, 2 available with borrowing)"
    ]


def test_borrowing_within_cohort_and_its_limit() -> None:
    t = tree(cq("a", 8000, borrow=2000), cq("b", 8000))
    assert t.available("a", G) == 10_000  # its 8 plus at most 2 of b's
    assert t.available("b", G) == 16_000  # no limit: all of a's too
    t.add("a", {G: 10_000})
    assert t.borrows("a", {G: 0}) is False and t.borrowed("a") == {G: 2000}
    assert t.available("b", G) == 6000
    t.add("a", {G: -10_000})
    assert t.usage("a")[G] == 0 and t.available("b", G) == 16_000


def test_lending_limit_keeps_a_reserved_part() -> None:
    t = tree(cq("a", 8000, lend=3000), cq("b", 8000))
    assert t.available("b", G) == 11_000  # a lends only 3 of its 8
    t.add("b", {G: 11_000})
    assert t.available("a", G) == 5000  # a's 5 reserved GPUs stay a's


def test_hierarchical_cohorts_with_their_own_quota() -> None:
    cohorts = (
        Cohort("root"),
        Cohort(
            "left", parent="root", flavors=(FlavorQuotas("f", {Resource.GPU_MILLI: Quota(4000)}),)
        ),
        Cohort("right", parent="root"),
    )
    t = tree(cq("a", 2000, cohort="left"), cq("b", 2000, cohort="right"), cohorts=cohorts)
    assert t.available("a", G) == 8000  # 2 own + 4 of left's + 2 lent by b through root
    t.add("b", {G: 2000})
    assert t.available("a", G) == 6000
    assert t.cohort_root("a") == "root"


def test_nominal_quota_is_entitled_first_whatever_the_weights() -> None:
    """Nominal quota is guaranteed (its owner may always reclaim it), so it is entitled
    first; weights share only what nobody holds as nominal."""
    t = tree(cq("a", 4000, weight=3.0), cq("b", 4000, weight=1.0))
    assert t.entitled("a")[G] == pytest.approx(4000)
    assert t.entitled("b")[G] == pytest.approx(4000)


def test_weights_share_the_quota_a_cohort_holds_of_its_own() -> None:
    own = Cohort("c", flavors=(FlavorQuotas("f", {Resource.GPU_MILLI: Quota(4000)}),))
    t = tree(cq("a", 2000, weight=3.0), cq("b", 2000, weight=1.0), cohorts=(own,))
    assert t.entitled("a")[G] == pytest.approx(2000 + 3000)
    assert t.entitled("b")[G] == pytest.approx(2000 + 1000)
    t.add("a", {G: 2500})
    t.add("b", {G: 1500})
    assert t.share("a") == pytest.approx(0.5) and t.share("b") == pytest.approx(0.5)


def test_department_weights_do_not_override_equal_nominal_quotas() -> None:
    """Two departments (weights 2 and 1) of two teams with equal nominal quotas: each team is
    entitled to its nominal quarter, not to 1/3 and 1/6."""
    depts = (
        Cohort("org"),
        Cohort("x", parent="org", weight=2.0),
        Cohort("y", parent="org", weight=1.0),
    )
    t = tree(
        cq("x1", 16000, cohort="x"),
        cq("x2", 16000, cohort="x"),
        cq("y1", 16000, cohort="y"),
        cq("y2", 16000, cohort="y"),
        cohorts=depts,
    )
    assert [t.entitled(q)[G] for q in ("x1", "x2", "y1", "y2")] == [16000.0] * 4


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            QueueConfig((ResourceFlavor("f"),), (cq("a", 8000, lend=9000),)),
            "lendingLimit=9000 is above nominalQuota=8000",
        ),
        (
            QueueConfig((ResourceFlavor("f"),), (ClusterQueue("a", (FlavorQuotas("x", {}),)),)),
            "flavor 'x' is not a ResourceFlavor",
        ),
        (
            QueueConfig((ResourceFlavor("f"),), (cq("a", 1), cq("a", 2))),
            "ClusterQueue 'a' is defined twice",
        ),
        (
            QueueConfig(
                (ResourceFlavor("f"),), (), (Cohort("x", parent="y"), Cohort("y", parent="x"))
            ),
            "cycle in the cohort tree: x -> y -> x",
        ),
        (
            QueueConfig(
                (ResourceFlavor("f"),), (cq("a", 1),), local_queues=(LocalQueue("team", "nope"),)
            ),
            "clusterQueue 'nope' does not exist",
        ),
        (
            QueueConfig((ResourceFlavor("f"),), (cq("a", 8000, borrow=1, non_preemptive=True),)),
            "a non-preemptive queue cannot borrow",
        ),
        (QueueConfig((ResourceFlavor("f"),), (cq("a", -1),)), "nominalQuota=-1"),
        (QueueConfig((ResourceFlavor("f"),), (cq("a", 1, weight=0),)), "weight=0"),
    ],
)
def test_bad_configuration_is_named(config: QueueConfig, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config.validate()


def test_a_cohort_whose_parent_is_not_declared_gets_an_implicit_one() -> None:
    t = tree(
        cq("a", 4000, cohort="team"),
        cq("b", 4000, cohort="team"),
        cohorts=(Cohort("team", parent="org"),),
    )
    assert t.cohort_root("a") == "org"
    t.add("a", {G: 6000})  # borrows from b through the cohort
    assert t.usage("a")[G] == 6000
