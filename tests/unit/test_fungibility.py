"""Kueue's ``flavorFungibility`` in full over a job's forms: ``whenCanPreempt`` stops the
flavor walk at a flavor where the job would preempt, ``preference`` picks between a flavor
that needs borrowing and one that needs preemption, and Kueue's spellings are read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpupool.config import read_queue_config
from gpupool.core.admission import Fit
from gpupool.core.fungibility import Choice, Mode, better, stops
from gpupool.core.preemption import Running, Victim
from gpupool.core.quota import (
    ClusterQueue,
    FlavorFungibility,
    FlavorQuotas,
    Fungibility,
    Preference,
    QueueConfig,
    QueueSettings,
    Quota,
    Resource,
    ResourceFlavor,
)
from gpupool.core.scheduler import Scheduler
from tests.builders import job, whole
from tests.unit.test_hetero_quota import fallback, gpu_node, npu_node

STOP, NEXT = Fungibility.STOP, Fungibility.TRY_NEXT
B_OVER_P, P_OVER_B = Preference.BORROWING_OVER_PREEMPTION, Preference.PREEMPTION_OVER_BORROWING


def config(queues: dict[str, dict[str, int]], f: FlavorFungibility) -> QueueConfig:
    """Queues in one cohort with GPUs per flavor (H100 first, then Ascend)."""
    return QueueConfig(
        flavors=(
            ResourceFlavor("h100", {"flavor": "h100"}),
            ResourceFlavor("ascend", {"flavor": "ascend"}),
        ),
        cluster_queues=tuple(
            ClusterQueue(
                name,
                tuple(FlavorQuotas(fl, {Resource.GPU: Quota(n)}) for fl, n in per.items()),
                cohort="all",
                fungibility=f,
            )
            for name, per in queues.items()
        ),
        settings=QueueSettings(min_runtime_s=0.0, preemption_cooldown_s=0.0),
    ).validate()


def urgent(name: str) -> object:
    return dataclasses.replace(fallback(name, "a"), priority=10)  # type: ignore[type-var]


@pytest.mark.parametrize(
    ("preempt", "evicted", "bound"),
    [
        (NEXT, [], ("ascend", "ascend")),  # Kueue's default: the next flavor before preempting
        (STOP, ["low"], None),  # MayStopSearch: preempt in the first flavor
    ],
)
def test_when_can_preempt_decides_between_preempting_and_the_next_flavor(
    preempt: Fungibility, evicted: list[str], bound: tuple[str, str] | None
) -> None:
    s = Scheduler(
        [gpu_node("g"), npu_node("n")],
        config({"a": {"h100": 8, "ascend": 8}}, FlavorFungibility(STOP, preempt)),
    )
    s.submit(job("low", gpu=whole(8, models=["H100"]), queue="a"), 0)
    assert [b.job for b in s.cycle(0).binds] == ["low"]
    s.submit(urgent("hi"), 10)  # type: ignore[arg-type]
    r = s.cycle(10)
    assert [e.job for e in r.evicts] == evicted
    assert [(b.flavor, b.alternative) for b in r.binds] == ([bound] if bound else [])
    if evicted:  # the room held is the H100 card, in the job's own form
        r = s.cycle(11)
        assert [(b.job, b.flavor, b.alternative) for b in r.binds] == [("hi", "h100", "")]


def test_when_can_preempt_goes_on_when_the_first_flavor_has_no_victims() -> None:
    s = Scheduler(
        [gpu_node("g"), npu_node("n")],
        config({"a": {"h100": 8, "ascend": 8}}, FlavorFungibility(STOP, STOP)),
    )
    s.submit(
        dataclasses.replace(job("peer", gpu=whole(8, models=["H100"]), queue="a"), priority=10), 0
    )
    s.cycle(0)
    s.submit(urgent("hi"), 10)  # type: ignore[arg-type]
    r = s.cycle(10)
    assert not r.evicts  # "peer" has the same priority: no victim in h100
    assert [(b.flavor, b.alternative) for b in r.binds] == [("ascend", "ascend")]


def borrow_or_preempt(f: FlavorFungibility) -> tuple[list[str], list[tuple[str, str]]]:
    """Queue a has no H100 of its own (b lends 8) and 2 Ascend cards, held by its own
    low-priority job: its urgent job fits on H100 only by borrowing, on Ascend only by
    preempting. Returns (evicted, [(flavor, form) bound])."""
    s = Scheduler(
        [gpu_node("g"), npu_node("n", count=2)],
        config({"a": {"h100": 0, "ascend": 2}, "b": {"h100": 8, "ascend": 0}}, f),
    )
    s.submit(job("low", gpu=whole(2, models=["910B"]), queue="a"), 0)
    assert [b.job for b in s.cycle(0).binds] == ["low"]
    s.submit(urgent("hi"), 10)  # type: ignore[arg-type]
    r = s.cycle(10)
    evicted = [e.job for e in r.evicts]
    if evicted:  # admitted next cycle where it preempted: no borrowing needed there now
        assert [(b.job, b.flavor, b.alternative) for b in s.cycle(11).binds] == [
            ("hi", "ascend", "ascend")
        ]
    return evicted, [(b.flavor, b.alternative) for b in r.binds]


@pytest.mark.parametrize(
    ("f", "evicted", "bound"),
    [
        (FlavorFungibility(STOP, NEXT), [], [("h100", "")]),
        (FlavorFungibility(NEXT, NEXT, B_OVER_P), [], [("h100", "")]),
        (FlavorFungibility(NEXT, NEXT, P_OVER_B), ["low"], []),
        # borrowing is passed over, the preemption after it stops the walk
        (FlavorFungibility(NEXT, STOP), ["low"], []),
        # borrowing stops the walk before the preemption is reached
        (FlavorFungibility(STOP, STOP), [], [("h100", "")]),
    ],
)
def test_preference_between_borrowing_and_preemption(
    f: FlavorFungibility, evicted: list[str], bound: list[tuple[str, str]]
) -> None:
    assert borrow_or_preempt(f) == (evicted, bound)


def choice(borrowing: bool, *kinds: str) -> Choice:
    fit = Fit("f", (), {}, borrowing)
    running = Running(job("v"), "q", "f", (), {}, 0.0)
    return Choice(fit, tuple(Victim(running, k) for k in kinds))


def test_modes_rank_as_kueues() -> None:
    assert choice(False).mode is Mode.FIT
    assert choice(False, "reclaim", "fair-share").mode is Mode.RECLAIM
    assert choice(False, "reclaim", "within-queue").mode is Mode.PREEMPT
    fit_borrow, reclaim, preempt = (
        choice(True),
        choice(False, "reclaim"),
        choice(False, "within-queue"),
    )
    assert better(fit_borrow, reclaim, B_OVER_P) and not better(reclaim, fit_borrow, B_OVER_P)
    assert better(reclaim, fit_borrow, P_OVER_B) and not better(fit_borrow, reclaim, P_OVER_B)
    assert better(reclaim, preempt, B_OVER_P) and better(reclaim, preempt, P_OVER_B)
    assert not better(preempt, preempt, B_OVER_P)  # ties keep the earlier candidate


@pytest.mark.parametrize(
    ("c", "f", "stop"),
    [
        (choice(False), FlavorFungibility(NEXT, NEXT), True),
        (choice(True), FlavorFungibility(STOP, NEXT), True),
        (choice(True), FlavorFungibility(NEXT, STOP), False),
        (choice(False, "reclaim"), FlavorFungibility(NEXT, NEXT), False),
        (choice(False, "reclaim"), FlavorFungibility(NEXT, STOP), True),
        (choice(True, "reclaim"), FlavorFungibility(NEXT, STOP), False),
        (choice(True, "reclaim"), FlavorFungibility(STOP, STOP), True),
    ],
)
def test_where_the_walk_stops(c: Choice, f: FlavorFungibility, stop: bool) -> None:
    assert stops(c, f) is stop


@pytest.mark.parametrize(
    ("spec", "expect"),
    [
        ("{}", FlavorFungibility()),
        ("{whenCanBorrow: Borrow, whenCanPreempt: Preempt}", FlavorFungibility(STOP, STOP)),
        (
            "{whenCanBorrow: TryNextFlavor, whenCanPreempt: MayStopSearch}",
            FlavorFungibility(NEXT, STOP),
        ),
        (
            "{whenCanBorrow: TryNextFlavor, whenCanPreempt: TryNextFlavor, "
            "preference: PreemptionOverBorrowing}",
            FlavorFungibility(NEXT, NEXT, P_OVER_B),
        ),
    ],
)
def test_kueues_flavor_fungibility_is_read_and_acted_on(
    tmp_path: Path, spec: str, expect: FlavorFungibility
) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: a100}\n"
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: q}\n"
        f"spec:\n  namespaceSelector: {{}}\n  flavorFungibility: {spec}\n"
        "  resourceGroups:\n  - flavors:\n    - name: a100\n"
        "      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]\n"
    )
    read = read_queue_config(path)
    assert read.config.cluster_queues[0].fungibility == expect
    assert read.ignored == ()


@pytest.mark.parametrize(
    ("preempt", "basis"),
    [
        (NEXT, "fits now"),  # Kueue's default: the Ascend form starts now, nothing preempted
        (STOP, "preempting 1 job(s) (within-queue) in flavor h100"),
    ],
)
def test_the_wait_estimate_follows_the_flavor_walk(preempt: Fungibility, basis: str) -> None:
    """The estimate foresees what the cycle then does: with ``whenCanPreempt:
    MayStopSearch`` the urgent job preempts in the first flavor, not starting on the second
    one as the two passes without the walk would foresee."""
    s = Scheduler(
        [gpu_node("g"), npu_node("n")],
        config({"a": {"h100": 8, "ascend": 8}}, FlavorFungibility(STOP, preempt)),
    )
    s.submit(job("low", gpu=whole(8, models=["H100"]), queue="a"), 0)
    s.cycle(0)
    s.submit(urgent("hi"), 10)  # type: ignore[arg-type]
    est = s.estimate_details(10)["hi"]  # type: ignore[index]
    assert (est.start_s, est.basis) == (10, basis)
    r = s.cycle(10)
    assert [e.job for e in r.evicts] == (["low"] if preempt is STOP else [])
