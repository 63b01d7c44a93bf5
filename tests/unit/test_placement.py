"""Filters, scores, card choice and gangs on small hand-checkable clusters."""

from __future__ import annotations

import pytest

from gpupool.core import (
    ClusterState,
    Code,
    ConfigError,
    Profile,
    Taint,
    Toleration,
    builtin_registry,
    default_profile,
    place_job,
    place_task,
    run_cycle,
)
from gpupool.core.model import GpuShare
from tests.builders import gpus, job, mig, mig_node, node, share, whole


def first_task(j):  # type: ignore[no-untyped-def]
    return next(j.tasks())


def test_slice_goes_to_the_fullest_card_that_fits() -> None:
    state = ClusterState([node("a", gpu=4)])
    prof = default_profile()
    run_cycle(state, [job("x", gpu=share(600))], prof)
    run_cycle(state, [job("y", gpu=share(300))], prof)
    # y fits beside x on card 0 (400 free) rather than opening a fresh card
    assert state.placement("y/main-0").shares == (GpuShare(0, 300, 0),)  # type: ignore[arg-type, union-attr]
    p, _ = place_task(first_task(job("z", gpu=share(500))), state.snapshot(), prof)
    assert p is not None and p.shares[0].index == 1


def test_slice_needs_milli_and_memory_on_the_same_card() -> None:
    state = ClusterState([node("a", gpu=2, gpu_mem=20000)])
    prof = default_profile()
    run_cycle(state, [job("x", gpu=share(500, 19000)), job("y", gpu=share(600, 100))], prof)
    # card 0: 500 milli and 1000 MiB free; card 1: 400 milli and 19900 MiB free
    p, status = place_task(first_task(job("w", gpu=share(450, 5000))), state.snapshot(), prof)
    assert p is None
    assert status.message == "0/1 nodes fit: 1 no GPU with 45% of a card and 5000Mi free"
    p, _ = place_task(first_task(job("z", gpu=share(400, 5000))), state.snapshot(), prof)
    assert p is not None and p.shares[0].index == 1


def test_whole_gpus_never_use_a_shared_card() -> None:
    state = ClusterState([node("a", gpu=2)])
    prof = default_profile()
    run_cycle(state, [job("x", gpu=share(100))], prof)
    p, status = place_task(first_task(job("y", gpu=whole(2))), state.snapshot(), prof)
    assert p is None and status.code is Code.UNSCHEDULABLE
    assert "fewer than 2 whole GPUs free" in status.message


def test_whole_gpus_prefer_an_nvlink_connected_set() -> None:
    # 8 cards in two NVLink islands {0..3} and {4..7}; 0, 1 and 4 are busy.
    cards = tuple(
        g.__class__(
            g.index,
            g.model,
            g.memory_mib,
            g.uuid,
            g.healthy,
            g.mig,
            tuple(j for j in (range(4) if g.index < 4 else range(4, 8)) if j != g.index),
        )
        for g in gpus(8)
    )
    state = ClusterState([node("a", cards=cards)])
    prof = default_profile()
    run_cycle(state, [job("busy", tasks=3, gpu=whole(1))], prof)
    assert sorted(p.shares[0].index for p in state.job_placements("busy")) == [0, 1, 2]  # type: ignore[arg-type]
    p, _ = place_task(first_task(job("pair", gpu=whole(2))), state.snapshot(), prof)
    assert p is not None
    assert sorted(s.index for s in p.shares) in ([4, 5], [4, 6], [4, 7], [5, 6], [5, 7], [6, 7])


def test_fit_error_counts_each_reason() -> None:
    nodes = [node(f"t4-{i}", gpu=4, model="T4", gpu_mem=16384) for i in range(8)]
    nodes += [node(f"c-{i}", gpu=8, schedulable=False) for i in range(4)]
    state = ClusterState(nodes)
    p, status = place_task(
        first_task(job("x", gpu=share(500, 20000, models=["T4"]))),
        state.snapshot(),
        default_profile(),
    )
    assert p is None
    assert (
        status.message
        == "0/12 nodes fit: 8 no GPU with 50% of a card and 20000Mi free, 4 cordoned or not ready"
    )


def test_unresolvable_when_only_inventory_filters_reject() -> None:
    state = ClusterState([node("a", labels={"zone": "x"})])
    _, status = place_task(
        first_task(job("x", selector={"zone": "y"})), state.snapshot(), default_profile()
    )
    assert status.code is Code.UNRESOLVABLE
    assert "labels do not match zone=y" in status.message


def test_taints_need_tolerations() -> None:
    t = Taint("dedicated", "ml")
    state = ClusterState([node("a", taints=(t,))])
    prof = default_profile()
    p, status = place_task(first_task(job("x")), state.snapshot(), prof)
    assert p is None and "taint" in status.message
    p, _ = place_task(
        first_task(job("y", tolerations=(Toleration("dedicated", "Equal", "ml"),))),
        state.snapshot(),
        prof,
    )
    assert p is not None


def test_models_and_card_memory_floor() -> None:
    state = ClusterState(
        [
            node("small", gpu=8, model="A100", gpu_mem=40960),
            node("big", gpu=8, model="A100", gpu_mem=81920),
        ]
    )
    prof = default_profile()
    p, _ = place_task(first_task(job("x", gpu=whole(1, memory_mib=80000))), state.snapshot(), prof)
    assert p is not None and p.node == "big" and p.shares[0].memory_mib == 81920
    p, status = place_task(
        first_task(job("y", gpu=whole(1, models=["H100"]))), state.snapshot(), prof
    )
    assert p is None and "no H100 GPU" in status.message


def test_mig_instances_are_counted_per_card() -> None:
    state = ClusterState([mig_node("m", per_card=2, cards=2)])
    prof = default_profile()
    result = run_cycle(state, [job(f"j{i}", gpu=mig("1g.10gb")) for i in range(5)], prof)
    assert len(result.binds) == 4 and len(result.parks) == 1
    assert "no free MIG 1g.10gb instance" in result.parks[0].status.message
    assert state.table.mig_free["1g.10gb"][0, :2].tolist() == [0, 0]


def test_unhealthy_cards_are_never_chosen() -> None:
    state = ClusterState([node("a", gpu=2, unhealthy=[0])])
    result = run_cycle(state, [job("x", tasks=2, gpu=whole(1), min_member=1)], default_profile())
    assert [p.shares[0].index for p in result.binds[0].placements] == [1]


def test_gang_is_whole_or_nothing_and_holds_nothing_while_waiting() -> None:
    state = ClusterState([node("a", gpu=8), node("b", gpu=8)])
    prof = default_profile()
    before = state.fingerprint()
    placements, status = place_job(job("g", tasks=3, gpu=whole(8)), state.snapshot(), prof)
    assert placements == [] and status.code is Code.UNSCHEDULABLE
    assert status.message.startswith("gang g: 2/3 tasks fit; g/main-2: 0/2 nodes fit")
    assert state.fingerprint() == before
    assert state.snapshot().table.free_whole[:2].tolist() == [8, 8]


def test_binpack_and_spread_disagree() -> None:
    state = ClusterState([node("a", gpu=4), node("b", gpu=4)])
    pack = default_profile()
    run_cycle(state, [job("x", gpu=whole(1))], pack)
    p, _ = place_task(first_task(job("y", gpu=whole(1))), state.snapshot(), pack)
    assert p is not None and p.node == "a"
    spread = default_profile(scores={"spread": 1})
    p, _ = place_task(first_task(job("y", gpu=whole(1))), state.snapshot(), spread)
    assert p is not None and p.node == "b"


def test_ties_go_to_the_tie_order() -> None:
    state = ClusterState([node("a"), node("b"), node("c")])
    state.set_tie_order(["c", "a", "b"])  # type: ignore[list-item]
    p, _ = place_task(first_task(job("x", gpu=whole(1))), state.snapshot(), default_profile())
    assert p is not None and p.node == "c"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"filters": ["gpu-fit", "nope"], "scores": {}, "cards": "best-fit-cards"},
            "unknown plugin 'nope'; known plugins:",
        ),
        (
            {"filters": ["gpu-fit", "gpu-fit"], "scores": {}, "cards": "best-fit-cards"},
            "listed twice",
        ),
        (
            {"filters": ["binpack"], "scores": {}, "cards": "best-fit-cards"},
            "cannot be used as a filter",
        ),
        ({"filters": [], "scores": {"binpack": 0}, "cards": "best-fit-cards"}, "positive weight"),
        ({"filters": [], "scores": {}, "cards": "gpu-fit"}, "cannot be used as a cards"),
        (
            {"filters": [], "scores": {}, "cards": "best-fit-cards", "args": {"spread": {}}},
            "not in the profile",
        ),
    ],
)
def test_profile_fails_fast(kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=message):
        Profile.build(builtin_registry(), **kwargs)
