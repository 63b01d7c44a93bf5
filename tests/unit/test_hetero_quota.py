"""One quota system across vendors: a flavor per accelerator model, quota in devices per
flavor and in normalised compute across flavors, shares in normalised units, and jobs that
fall back to another vendor's cards in the queue's flavor order."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.core.devices import DeviceClass
from gpupool.core.model import Alternative, GpuRequest, Node
from gpupool.core.quota import (
    ACROSS_FLAVORS,
    ClusterQueue,
    FlavorFungibility,
    FlavorQuotas,
    Fungibility,
    QueueConfig,
    QueueSettings,
    Quota,
    Resource,
    ResourceFlavor,
)
from gpupool.core.scheduler import Scheduler
from gpupool.core.vendors import VENDOR_CLASSES
from tests.builders import gpus, job, node, whole

HALF_ASCEND = dataclasses.replace(VENDOR_CLASSES["ascend"], relative_capacity=0.5)
NORM = (ACROSS_FLAVORS, Resource.NORMALIZED_MILLI)


def npu_node(name: str, count: int = 8, device: DeviceClass = HALF_ASCEND) -> Node:
    cards = tuple(dataclasses.replace(g, device=device) for g in gpus(count, "910B", 65536))
    return node(name, cards=cards, labels={"flavor": "ascend"})


def gpu_node(name: str, count: int = 8) -> Node:
    return node(name, gpu=count, model="H100", gpu_mem=81920, labels={"flavor": "h100"})


def config(
    queues: dict[str, dict[str, int]],
    normalized: dict[str, int] | None = None,
    shares: bool = False,
    borrow: Fungibility = Fungibility.STOP,
    cohort: str | None = "all",
) -> QueueConfig:
    """Queues with GPUs per flavor (in flavor order) and, optionally, normalised quota."""
    return QueueConfig(
        flavors=(
            ResourceFlavor("h100", {"flavor": "h100"}),
            ResourceFlavor("ascend", {"flavor": "ascend"}),
        ),
        cluster_queues=tuple(
            ClusterQueue(
                name,
                tuple(FlavorQuotas(f, {Resource.GPU: Quota(n)}) for f, n in per.items()),
                cohort=cohort,
                normalized=Quota(normalized[name] * 1000) if normalized else None,
                fungibility=FlavorFungibility(when_can_borrow=borrow),
            )
            for name, per in queues.items()
        ),
        settings=QueueSettings(
            min_runtime_s=0.0, preemption_cooldown_s=0.0, normalized_shares=shares
        ),
    ).validate()


def fallback(name: str, queue: str, h100: int = 1, npu: int = 2) -> object:
    own = job(name, gpu=whole(h100, models=["H100"]), queue=queue)
    return dataclasses.replace(
        own,
        alternatives=(
            Alternative(
                "ascend", whole(npu, models=["910B"]), image="llm:cann", env={"ASCEND_VISIBLE": "1"}
            ),
        ),
    )


def test_normalised_compute_is_charged_by_each_cards_relative_capacity() -> None:
    s = Scheduler(
        [gpu_node("g"), npu_node("n")],
        config({"a": {"h100": 8, "ascend": 8}}, normalized={"a": 16}),
    )
    s.submit(job("on-gpu", gpu=whole(2, models=["H100"]), queue="a"), 0)
    s.submit(job("on-npu", gpu=whole(4, models=["910B"]), queue="a"), 0)
    s.cycle(0)
    usage = s.usage("a")
    assert usage[("h100", Resource.NORMALIZED_MILLI)] == 2000
    assert usage[("ascend", Resource.NORMALIZED_MILLI)] == 2000  # 4 cards at 0.5
    assert usage[NORM] == 4000
    assert usage[("ascend", Resource.GPU)] == 4


def test_normalised_quota_across_flavors_limits_every_vendor_together() -> None:
    s = Scheduler(
        [gpu_node("g"), npu_node("n")],
        config({"a": {"h100": 8, "ascend": 8}}, normalized={"a": 4}, cohort=None),
    )
    s.submit(job("g4", gpu=whole(3, models=["H100"]), queue="a"), 0)
    s.submit(job("n4", gpu=whole(4, models=["910B"]), queue="a"), 0)  # 2 normalised: over 4
    s.submit(job("n2", gpu=whole(2, models=["910B"]), queue="a"), 0)  # 1 normalised: fits
    r = s.cycle(0)
    assert sorted(b.job for b in r.binds) == ["g4", "n2"]
    park = next(p for p in r.parks if p.job == "n4")
    assert "all flavors normalised GPUs" in park.status.message
    assert s.usage("a")[NORM] == 4000


def test_without_normalised_quota_nothing_normalised_is_charged() -> None:
    s = Scheduler([gpu_node("g")], config({"a": {"h100": 8}}))
    s.submit(job("j", gpu=whole(2), queue="a"), 0)
    s.cycle(0)
    assert not s.tree.normalized
    assert all(r is not Resource.NORMALIZED_MILLI for _, r in s.usage("a"))


def test_shares_in_normalised_units_do_not_count_slow_cards_as_fast_ones() -> None:
    # Both queues hold 4 cards; a's are half as fast: in cards both are at 4/8 of their
    # entitlement, in normalised compute a holds 2 of 8 and b 4 of 8.
    for shares, expect_equal in ((False, True), (True, False)):
        s = Scheduler(
            [gpu_node("g"), npu_node("n")],
            config(
                {"a": {"h100": 4, "ascend": 4}, "b": {"h100": 4, "ascend": 4}},
                normalized={"a": 8, "b": 8},
                shares=shares,
            ),
        )
        s.submit(job("a", gpu=whole(4, models=["910B"]), queue="a"), 0)
        s.submit(job("b", gpu=whole(4, models=["H100"]), queue="b"), 0)
        s.cycle(0)
        if expect_equal:
            assert s.share("a") == pytest.approx(s.share("b"))
        else:
            assert s.share("a") == pytest.approx(0.25)
            assert s.share("b") == pytest.approx(0.5)


def test_a_job_falls_back_to_its_alternative_on_the_next_flavor() -> None:
    s = Scheduler([gpu_node("g", count=1), npu_node("n")], config({"a": {"h100": 8, "ascend": 8}}))
    for i in range(3):
        s.submit(fallback(f"j{i}", "a"), 0)  # type: ignore[arg-type]
    r = s.cycle(0)
    by_job = {b.job: b for b in r.binds}
    assert (by_job["j0"].flavor, by_job["j0"].alternative) == ("h100", "")
    for j in ("j1", "j2"):
        assert (by_job[j].flavor, by_job[j].alternative) == ("ascend", "ascend")
        assert len(by_job[j].placements[0].shares) == 2  # the alternative's 2 cards
    assert s.usage("a")[("ascend", Resource.GPU)] == 4


def test_a_pinned_job_waits_where_its_fallback_would_run() -> None:
    s = Scheduler([gpu_node("g", count=1), npu_node("n")], config({"a": {"h100": 8, "ascend": 8}}))
    s.submit(job("first", gpu=whole(1, models=["H100"]), queue="a"), 0)
    s.submit(job("pinned", gpu=whole(1, models=["H100"]), queue="a"), 0)
    r = s.cycle(0)
    assert [b.job for b in r.binds] == ["first"]
    assert any(p.job == "pinned" for p in r.parks)


def test_flavor_order_comes_before_the_jobs_own_order() -> None:
    # The queue lists ascend first: the job's alternative runs there although its own
    # request (H100) would fit too.
    cfg = config({"a": {"ascend": 8, "h100": 8}})
    s = Scheduler([gpu_node("g"), npu_node("n")], cfg)
    s.submit(fallback("j", "a"), 0)  # type: ignore[arg-type]
    (b,) = s.cycle(0).binds
    assert (b.flavor, b.alternative) == ("ascend", "ascend")


@pytest.mark.parametrize(
    ("borrow", "flavor"), [(Fungibility.STOP, "h100"), (Fungibility.TRY_NEXT, "ascend")]
)
def test_when_can_borrow_decides_between_borrowing_and_the_next_flavor(
    borrow: Fungibility, flavor: str
) -> None:
    # a has no nominal H100 quota (b lends it); its Ascend quota is its own.
    cfg = config({"a": {"h100": 0, "ascend": 8}, "b": {"h100": 8, "ascend": 0}}, borrow=borrow)
    s = Scheduler([gpu_node("g"), npu_node("n")], cfg)
    s.submit(fallback("j", "a"), 0)  # type: ignore[arg-type]
    (b,) = s.cycle(0).binds
    assert b.flavor == flavor


def test_try_next_flavor_still_borrows_when_no_flavor_fits_within_nominal() -> None:
    cfg = config(
        {"a": {"h100": 0, "ascend": 0}, "b": {"h100": 8, "ascend": 8}}, borrow=Fungibility.TRY_NEXT
    )
    s = Scheduler([gpu_node("g"), npu_node("n")], cfg)
    s.submit(fallback("j", "a"), 0)  # type: ignore[arg-type]
    (b,) = s.cycle(0).binds
    assert b.flavor == "h100"


def test_jobs_of_one_queue_split_across_vendors_when_the_first_is_full() -> None:
    s = Scheduler(
        [gpu_node("g", count=1), npu_node("n", count=2)],
        config({"a": {"h100": 1, "ascend": 2}, "b": {"h100": 1, "ascend": 0}}),
    )
    s.submit(fallback("borrower", "a", h100=1, npu=2), 0)  # type: ignore[arg-type]
    s.submit(fallback("other", "a", h100=1, npu=2), 0)  # type: ignore[arg-type]
    r = s.cycle(0)
    assert {b.job: b.alternative for b in r.binds} == {"borrower": "", "other": "ascend"}


def test_alternatives_keep_cpu_counts_and_gpu_free_pod_sets() -> None:
    from gpupool.core.alternatives import chosen, variants
    from gpupool.core.model import PodSet

    j = dataclasses.replace(
        job("j", tasks=2, gpu=whole(1)),
        pod_sets=(
            PodSet("launcher", cpu_milli=500),
            PodSet("w", count=2, cpu_milli=4000, gpu=whole(1)),
        ),
        alternatives=(Alternative("npu", GpuRequest(count=2, models=frozenset({"910B"}))),),
    )
    forms = dict(variants(j))
    assert forms[""] is j
    npu = forms["npu"]
    assert npu.pod_sets[0].gpu == GpuRequest() and npu.pod_sets[1].gpu.count == 2
    assert npu.pod_sets[1].cpu_milli == 4000 and npu.task_count == 3
    assert chosen(j, "npu") == npu


def test_a_restored_job_runs_on_in_its_alternative_and_an_unknown_one_is_refused() -> None:
    from gpupool.core.errors import InvalidJobError
    from gpupool.core.model import JobId

    s = Scheduler([gpu_node("g", count=1), npu_node("n")], config({"a": {"h100": 8, "ascend": 8}}))
    s.submit(job("first", gpu=whole(1, models=["H100"]), queue="a"), 0)
    s.submit(fallback("j", "a"), 0)  # type: ignore[arg-type]
    binds = {b.job: b for b in s.cycle(0).binds}
    again = Scheduler(
        [gpu_node("g", count=1), npu_node("n")], config({"a": {"h100": 8, "ascend": 8}})
    )
    j = fallback("j", "a")
    with pytest.raises(InvalidJobError) as err:
        again.restore(j, binds["j"].placements, 0.0, "ascend", alternative="tpu")  # type: ignore[arg-type]
    assert (err.value.field, err.value.value) == ("alternative", "tpu")
    assert again.running_job(JobId("j")) is None  # nothing taken
    again.restore(j, binds["j"].placements, 0.0, "ascend", alternative="ascend")  # type: ignore[arg-type]
    r = again.running_job(JobId("j"))
    assert r is not None and r.alternative == "ascend"
    assert again.tree.usage("a")[("ascend", Resource.GPU)] == 2
