"""Golden tests of the openb policies on small hand-checkable clusters: scores and cards."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from gpupool.core import (
    ClusterState,
    ConfigError,
    GpuShare,
    NodeName,
    Placement,
    TaskId,
    place_task,
)
from gpupool.core.model import JobId, Task
from gpupool.core.placement.framework import CycleState, Profile
from gpupool.core.placement.plugins.frag import PodShape, TypicalPods
from gpupool.core.placement.registry import builtin_registry, openb_profile
from tests.builders import gpus, job, node, share, whole


def place(
    state: ClusterState,
    name: str,
    host: str,
    cpu: int = 0,
    mem: int = 0,
    shares: tuple[tuple[int, int], ...] = (),
) -> None:
    state.assume(
        Placement(
            TaskId(name),
            JobId(name),
            NodeName(host),
            cpu,
            mem,
            tuple(GpuShare(i, m, 0) for i, m in shares),
        )
    )


def task_of(gpu: object = None, cpu: int = 1000, mem: int = 1024) -> Task:
    return next(job("t", gpu=gpu, cpu=cpu, mem=mem).tasks())  # type: ignore[arg-type]


def scores(profile: Profile, state: ClusterState, task: Task) -> list[float]:
    snap = state.snapshot()
    cs = CycleState(snap.table, snap.cache)
    plugin = profile.scores[0][0]
    return plugin.score(cs, task, snap.table.live()).tolist()


def decide(profile: Profile, state: ClusterState, task: Task) -> tuple[str, tuple[int, ...]]:
    p, status = place_task(task, state.snapshot(), profile)
    assert p is not None, status.message
    return p.node, tuple(s.index for s in p.shares)


HALF = TypicalPods((PodShape(1000, 500, 1),), (1,), 1)


def two_nodes() -> ClusterState:
    state = ClusterState([node("n0", gpu=1, cpu=64_000), node("n1", gpu=1, cpu=64_000)])
    place(state, "u", "n1", shares=((0, 400),))  # n1: one card with 600 free
    return state


def test_fgd_scores_are_the_truncated_sigmoid_of_the_fragment_decrease() -> None:
    state = two_nodes()
    prof = openb_profile("fgd", typical_pods=HALF)
    # n0: 1000 -> 500 free, the 500 slice still fits: no change -> 50
    # n1: 600 -> 100 free: 100 milli become fragment -> floor(100 * sigmoid(-0.1)) = 47
    assert scores(prof, state, task_of(share(500))) == [50.0, math.floor(100 / (1 + math.e**0.1))]
    assert decide(prof, state, task_of(share(500))) == ("n0", (0,))


def test_fgd_slice_takes_the_best_card_first_index_on_ties() -> None:
    state = ClusterState([node("n", gpu=3, cpu=64_000)])
    place(state, "u", "n", shares=((1, 600),))  # cards: 1000, 400, 1000
    prof = openb_profile("fgd", typical_pods=HALF)
    # card 1's 400 free are fragment (too small for 500): a 400 slice there removes them
    # (score 59); on card 0 or 2 it leaves 600, which still fits 500 (score 50)
    assert decide(prof, state, task_of(share(400))) == ("n", (1,))
    # a 500 slice: card 1 cannot hold it; cards 0 and 2 tie -> card 0
    assert decide(prof, state, task_of(share(500))) == ("n", (0,))


def test_fgd_whole_cards_take_lowest_free_indices() -> None:
    state = ClusterState([node("n", gpu=4, cpu=64_000)])
    place(state, "u", "n", shares=((0, 100),))
    assert decide(openb_profile("fgd", typical_pods=HALF), state, task_of(whole(2))) == (
        "n",
        (1, 2),
    )


def test_bestfit_raw_score_and_min_max_normalisation() -> None:
    state = ClusterState(
        [
            node("n0", gpu=8, cpu=128_000),
            node("n1", gpu=2, cpu=32_000),
            node("n2", gpu=4, cpu=64_000),
        ]
    )
    task = task_of(whole(1), cpu=8000)

    def raw(cpu: int, idle: int) -> int:
        return int((1 - ((cpu - 8000) / 128000 * 0.5 + (idle - 1000) / 8000 * 0.5)) * 100)

    r = [raw(128_000, 8000), raw(32_000, 2000), raw(64_000, 4000)]
    lo, hi = min(r), max(r)
    assert scores(openb_profile("bestfit"), state, task) == [(x - lo) * 100 // (hi - lo) for x in r]
    assert decide(openb_profile("bestfit"), state, task)[0] == "n1"


def test_dotprod_prefers_the_smaller_dot_product() -> None:
    state = ClusterState([node("n0", gpu=8, cpu=128_000), node("n1", gpu=2, cpu=32_000)])
    task = task_of(share(500), cpu=16_000)
    expect = [
        int(100 * (1 - (c / 128000 * 16000 / 128000 + g / 8000 * 500 / 8000) / 2))
        for c, g in ((128_000, 8000), (32_000, 2000))
    ]
    assert scores(openb_profile("dotprod"), state, task) == expect
    assert decide(openb_profile("dotprod"), state, task) == ("n1", (0,))


def test_gpupacking_levels() -> None:
    state = ClusterState([node("e8", gpu=8), node("e4", gpu=4), node("u", gpu=4)])
    place(state, "x", "u", shares=((0, 400), (1, 1000)))  # u: 600 free, busy, 2 free cards
    prof = openb_profile("gpupacking")
    assert scores(prof, state, task_of(share(500))) == [25.0, 29.0, 94.0]  # 100 - 600//100
    assert scores(prof, state, task_of(share(700))) == [25.0, 29.0, 49.0]  # fresh card: u=1
    assert scores(prof, state, task_of(whole(2))) == [25.0, 29.0, 48.0]
    assert scores(prof, state, task_of(cpu=1000)) == [0.0, 0.0, 0.0]
    assert decide(prof, state, task_of(share(500))) == ("u", (0,))
    # best-fit cards: the fitting card with the least left
    assert decide(prof, state, task_of(share(300))) == ("u", (0,))


def test_gpuclustering_levels() -> None:
    state = ClusterState([node("empty"), node("shared"), node("mixed"), node("other")])
    place(state, "s", "shared", shares=((0, 500),))
    place(state, "s2", "mixed", shares=((0, 500),))
    place(state, "w", "mixed", shares=((1, 1000),))
    place(state, "w2", "other", shares=((0, 1000),))
    prof = openb_profile("gpuclustering")
    base = [25 * (8000 - idle) // 8000 for idle in (8000, 7500, 6500, 7000)]
    assert scores(prof, state, task_of(share(300))) == [
        25 + base[0],
        75 + base[1],
        50 + base[2],
        base[3],
    ]
    assert scores(prof, state, task_of(whole(1))) == [
        25 + base[0],
        base[1],
        50 + base[2],
        75 + base[3],
    ]
    assert scores(prof, state, task_of()) == [0.0] * 4


def test_random_is_seeded_and_picks_feasible_nodes_and_fitting_cards() -> None:
    def run(seed: int) -> list[tuple[str, tuple[int, ...]]]:
        state = ClusterState([node(f"n{i}", gpu=4, cpu=64_000) for i in range(6)])
        place(state, "full", "n3", shares=tuple((g, 1000) for g in range(4)))
        prof = openb_profile("random", seed=seed)
        out = []
        for i in range(20):
            t = next(job(f"p{i}", gpu=share(300)).tasks())
            p, _ = place_task(t, state.snapshot(), prof)
            assert p is not None
            state.assume(p)
            out.append((p.node, tuple(s.index for s in p.shares)))
        return out

    a = run(1)
    assert a == run(1)
    assert a != run(2)
    assert all(n != "n3" for n, _ in a)
    assert len({n for n, _ in a}) > 1 and len({c for _, c in a}) > 1


def test_profiles_need_typical_pods_and_know_every_policy() -> None:
    with pytest.raises(ConfigError, match="typical pods"):
        openb_profile("fgd")
    names = set(builtin_registry().names())
    assert {
        "fgd",
        "bestfit",
        "dotprod",
        "gpupacking",
        "gpuclustering",
        "random",
        "gpupool",
    } <= names
    prof = openb_profile("gpupool", typical_pods=HALF)
    assert [f.name for f in prof.filters] == ["node-resources", "gpu-model", "gpu-fit"]
    assert prof.cards.name == "gpupool"


# -- gpupool ----------------------------------------------------------------------------------

WORKLOAD = TypicalPods(
    (PodShape(10_000, 1000, 1), PodShape(3000, 500, 1)), (1, 1), 2, memory_mib=(40_000, 8000)
)


def test_gpupool_pod_without_gpus_goes_where_cpu_is_not_needed() -> None:
    # "busy": every card taken, 40 cores free; "idle": 4 free cards and 48 cores (they need
    # 10 cores a card). FGD sees no fragment change on either; gpupool sends the pod to busy.
    state = ClusterState([node("idle", gpu=4, cpu=48_000), node("busy", gpu=4, cpu=48_000)])
    place(state, "b", "busy", cpu=8000, shares=tuple((g, 1000) for g in range(4)))
    state.set_tie_order([NodeName("idle"), NodeName("busy")])
    task = task_of(cpu=12_000)
    assert decide(openb_profile("fgd", typical_pods=WORKLOAD), state, task)[0] == "idle"
    assert decide(openb_profile("gpupool", typical_pods=WORKLOAD), state, task)[0] == "busy"


def test_gpupool_counts_gpus_stranded_by_memory() -> None:
    # a CPU-light, memory-heavy pod: on "small" it would leave 2 free cards with too little
    # memory for the workload's 40 GB pods; "large" keeps enough.
    state = ClusterState(
        [
            node("small", gpu=2, cpu=64_000, mem=100_000),
            node("large", gpu=2, cpu=64_000, mem=400_000),
        ]
    )
    state.set_tie_order([NodeName("small"), NodeName("large")])
    task = task_of(share(500), cpu=1000, mem=60_000)
    assert decide(openb_profile("gpupool", typical_pods=WORKLOAD), state, task)[0] == "large"


def test_gpupool_keeps_scarce_models_for_pods_bound_to_them() -> None:
    bound = TypicalPods(
        (PodShape(3000, 1000, 1, frozenset({"T4"})), PodShape(3000, 1000, 1)), (1, 1), 2
    )
    state = ClusterState([node("t4", gpu=2, model="T4"), node("a", gpu=8, model="A100")])
    state.set_tie_order([NodeName("t4"), NodeName("a")])
    free = task_of(whole(1), cpu=3000)
    assert decide(openb_profile("gpupool", typical_pods=bound), state, free)[0] == "a"
    pinned = next(job("p", gpu=whole(1, models=["T4"]), cpu=3000).tasks())
    assert decide(openb_profile("gpupool", typical_pods=bound), state, pinned)[0] == "t4"


PROPORTIONAL = TypicalPods(
    (
        PodShape(1000, 1000, 1, frozenset({"A"})),
        PodShape(1000, 1000, 1, frozenset({"B"})),
        PodShape(1000, 1000, 1),
    ),
    (2, 1, 1),
    4,
)
"""Pods bound to each model in proportion to its cards (A 8 cards, B 4), as gpuspec mixes
bind them: by cards alone, both models are equally scarce."""


def test_gpupool_scarcity_follows_the_free_share_of_each_model() -> None:
    # B holds a third of the cards but, with 3 of b1's 4 taken and a2 full, 1 of the 5 free
    # ones: B's bound pods will miss it first. An unbound pod goes to a1. Charged by the share
    # of cards (8 and 4 of 12, equal charges), FGD's no-access term (A's bound pods, twice
    # B's, count b1's idle card as fragment) and the tie order sent it to b1.
    state = ClusterState(
        [
            node("a1", gpu=4, cpu=64_000, model="A"),
            node("a2", gpu=4, cpu=64_000, model="A"),
            node("b1", gpu=4, cpu=64_000, model="B"),
        ]
    )
    place(state, "full", "a2", shares=tuple((g, 1000) for g in range(4)))
    place(state, "most", "b1", shares=((0, 1000), (1, 1000), (2, 1000)))
    state.set_tie_order([NodeName("b1"), NodeName("a1"), NodeName("a2")])
    prof = openb_profile("gpupool", typical_pods=PROPORTIONAL)
    task = task_of(whole(1))
    assert decide(prof, state, task)[0] == "a1"
    # the charge moves with other nodes' use: cached scores of an unchanged row follow it
    snap = state.snapshot()
    cs = CycleState(snap.table, snap.cache)
    plugin = prof.scores[0][0]
    rows = snap.table.live()
    first = plugin.score(cs, task, rows)
    place(state, "more", "a1", shares=((0, 1000), (1, 1000), (2, 1000)))
    snap = state.snapshot()
    cs = CycleState(snap.table, snap.cache)
    again = plugin.score(cs, task, rows)
    assert np.array_equal(again, plugin.evaluate(cs, task, rows)[0])  # type: ignore[attr-defined]
    assert again[2] > first[2]  # b1 untouched, but A now has no more free cards than B


def test_gpupool_free_share_counts_each_card_of_a_node_with_several_models() -> None:
    # "mixed" holds 2 A and 2 B cards; its free milli must be split by card, as if it were
    # two nodes of one model each.
    cards = gpus(2, "A") + tuple(replace(g, index=g.index + 2) for g in gpus(2, "B"))

    def key(state: ClusterState) -> tuple[int, ...]:
        snap = state.snapshot()
        plugin = openb_profile("gpupool", typical_pods=PROPORTIONAL).scores[0][0]
        return plugin.scarcity_key(CycleState(snap.table, snap.cache))  # type: ignore[attr-defined,no-any-return]

    mixed = ClusterState([node("mixed", cards=cards), node("b", gpu=4, model="B")])
    place(mixed, "x", "mixed", shares=((0, 1000), (1, 1000), (2, 500)))
    split = ClusterState(
        [node("a", gpu=2, model="A"), node("m-b", gpu=2, model="B"), node("b", gpu=4, model="B")]
    )
    place(split, "x", "a", shares=((0, 1000), (1, 1000)))
    place(split, "y", "m-b", shares=((0, 500),))
    # A has no free milli (share capped), B 5500 of 5500: the free share of each
    assert key(mixed) == key(split)
    assert key(mixed)[1] == 0  # every free milli is B's


def test_gpupool_scores_are_cached_per_row_generation() -> None:
    state = two_nodes()
    prof = openb_profile("gpupool", typical_pods=WORKLOAD)
    task = task_of(share(500))
    snap = state.snapshot()
    cs = CycleState(snap.table, snap.cache)
    plugin = prof.scores[0][0]
    rows = snap.table.live()
    first = plugin.score(cs, task, rows)
    place(state, "more", "n0", shares=((0, 100),))
    snap = state.snapshot()
    cs = CycleState(snap.table, snap.cache)
    again = plugin.score(cs, task, rows)
    fresh = plugin.evaluate(cs, task, rows)[0]  # type: ignore[attr-defined]
    assert np.array_equal(again, fresh)
    assert again[1] == first[1]


SLICES_ONLY = TypicalPods(
    (PodShape(2000, 500, 1), PodShape(1000, 200, 1)), (1, 1), 2, memory_mib=(8000, 4000)
)


def test_gpupool_without_whole_gpu_pods_does_not_count_free_cards_as_stranded() -> None:
    # Every typical pod is a slice. A 100-milli slice leaves "used" (600 free) still able to
    # take both typical slices, so no node's fragment moves and the tie order decides: "used".
    # Counting fully free cards as stranded (a per-card CPU of 0 for a workload without
    # whole-GPU pods) made breaking "fresh"'s card look like a gain.
    state = ClusterState([node("used", gpu=1, cpu=64_000), node("fresh", gpu=1, cpu=64_000)])
    place(state, "u", "used", shares=((0, 400),))
    state.set_tie_order([NodeName("used"), NodeName("fresh")])
    task = task_of(share(100))
    assert decide(openb_profile("fgd", typical_pods=SLICES_ONLY), state, task)[0] == "used"
    assert decide(openb_profile("gpupool", typical_pods=SLICES_ONLY), state, task)[0] == "used"


def test_gpupool_pod_without_gpus_fills_its_best_class_in_tie_order() -> None:
    # Neither node has idle GPUs, so a CPU-only pod moves no fragment on either: the tie order
    # decides ("tight" first), not the CPU left over ("roomy" keeps 100 cores for the large
    # CPU-only pods to come).
    state = ClusterState([node("roomy", gpu=2, cpu=128_000), node("tight", gpu=2, cpu=32_000)])
    for host in ("roomy", "tight"):
        place(state, f"w-{host}", host, cpu=8000, shares=((0, 1000), (1, 1000)))
    state.set_tie_order([NodeName("tight"), NodeName("roomy")])
    task = task_of(cpu=16_000)
    prof = openb_profile("gpupool", typical_pods=WORKLOAD)
    assert scores(prof, state, task) == [50.0, 50.0]
    assert decide(prof, state, task)[0] == "tight"


WITH_CPU_PODS = TypicalPods((PodShape(4000, 1000, 1), PodShape(8000)), (1, 1), 2)


@pytest.mark.parametrize(("cores", "short"), [(30_000, False), (23_000, True)])
def test_gpupool_reserves_cpu_for_pods_without_gpus_only_where_cpu_is_the_constraint(
    cores: int,
    short: bool,
) -> None:
    # Half the workload is CPU-only pods of 8 cores: at full GPU use the workload asks 12
    # cores a GPU, 48 for the cluster's 4 GPUs. With 2 x 30 cores that fits (GPUs are the
    # constraint) and idle GPUs keep only the GPU pods' 4 cores each; with 2 x 23 it does not,
    # so they keep 12: the CPU-only pod then leaves "idle" (2 idle GPUs, 15 cores after it)
    # for "busy" (no idle GPU). FGD takes the tie order either way.
    state = ClusterState([node("idle", gpu=2, cpu=cores), node("busy", gpu=2, cpu=cores)])
    place(state, "b", "busy", cpu=cores - 10_000, shares=((0, 1000), (1, 1000)))
    state.set_tie_order([NodeName("idle"), NodeName("busy")])
    task = task_of(cpu=8000)
    assert decide(openb_profile("fgd", typical_pods=WITH_CPU_PODS), state, task)[0] == "idle"
    assert decide(openb_profile("gpupool", typical_pods=WITH_CPU_PODS), state, task)[0] == (
        "busy" if short else "idle"
    )
