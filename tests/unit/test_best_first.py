"""Best-first evaluation (``core/placement/best_first.py``) keeps the row the full evaluation
keeps, with the same failure reasons; and what plugins declare of themselves (``neutral``,
``bound``) holds, since both evaluations rest on it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpupool.bench import placement as bench
from gpupool.core import ClusterState, ConfigError, Status, place_job
from gpupool.core.affinity import NodeAffinityTerm, NodeRequirement
from gpupool.core.model import Job, Placement, Task
from gpupool.core.placement import best_first
from gpupool.core.placement.framework import CycleState, Profile
from gpupool.core.placement.plugins.measured import TargetLoadPacking
from gpupool.core.placement.registry import (
    DEFAULT_SCORES,
    MEASURED_SCORES,
    builtin_registry,
    measured_profile,
)
from gpupool.core.snapshot import Snapshot
from gpupool.core.usage import CardSample, LoadModel, LoadSettings
from tests.builders import job, mig, mig_node, node, share, whole

Decision = tuple[object, ...]


def _both(profile: Profile) -> tuple[Profile, Profile]:
    lazy, full = replace(profile, best_first=True), replace(profile, best_first=False)
    assert lazy.best_first and not full.best_first
    return lazy, full


def _bench_decisions(
    monkeypatch: pytest.MonkeyPatch, profile: Profile, cycle_pods: int
) -> tuple[list[Decision], int]:
    """Every decision of a seeded bench stream (warm-up included), and how many of them
    best-first evaluation decided (the others: the full evaluation)."""
    got: list[Decision] = []
    chosen = [0]
    real_place, real_choose = bench.place_task, best_first.choose

    def spy(task: Task, snap: object, prof: Profile) -> tuple[Placement | None, Status]:
        p, status = real_place(task, snap, prof)  # type: ignore[arg-type]
        got.append((task.id, p and (p.node, p.shares), status.code, status.message))
        return p, status

    def counted(task: Task, snap: Snapshot, prof: Profile) -> tuple[int, Status] | None:
        out = real_choose(task, snap, prof)
        chosen[0] += out is not None
        return out

    monkeypatch.setattr(bench, "place_task", spy)
    monkeypatch.setattr(best_first, "choose", counted)
    bench.run(
        40, 8, 600, seed=5, profile=profile, measured=True, scrape_every=60, cycle_pods=cycle_pods
    )
    monkeypatch.undo()
    return got, chosen[0]


@pytest.mark.parametrize("cycle_pods", [1, 6])
def test_best_first_decides_the_bench_stream_as_the_full_evaluation(
    cycle_pods: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    lazy, full = _both(measured_profile(scores={"binpack": 1.0, **MEASURED_SCORES}))
    by_best_first, chosen = _bench_decisions(monkeypatch, lazy, cycle_pods)
    by_every_row, none = _bench_decisions(monkeypatch, full, cycle_pods)
    assert len(by_best_first) > 600
    assert sum(d[1] is None for d in by_best_first) > 5  # failures, with their reasons
    assert by_best_first == by_every_row
    assert chosen > len(by_best_first) // 2 and none == 0


def _term(zone: str) -> NodeAffinityTerm:
    return NodeAffinityTerm((NodeRequirement("zone", "In", (zone,)),))


def _stream(rng: np.random.Generator, count: int) -> list[Job]:
    """Slices (one card and two), whole GPUs, MIG instances, gangs, CPU-only pods, some with
    a preferred zone (a score normalised over the candidates)."""
    out = []
    for i in range(count):
        kind = int(rng.integers(0, 7))
        gpu = (
            share(int(rng.choice((100, 250, 500, 700))), int(rng.choice((2048, 8192, 20000))))
            if kind <= 2
            else whole(int(rng.integers(1, 3)))
            if kind == 3
            else mig("1g.10gb")
            if kind == 4
            else None
        )
        tasks = 3 if kind == 5 else 1
        j = job(f"j{i}", tasks=tasks, gpu=gpu if kind != 5 else share(300, 4096))
        if kind == 2 and gpu is not None:
            gpu = replace(gpu, cards=2)
            j = job(f"j{i}", gpu=gpu)
        if rng.random() < 0.2:
            ps = replace(j.pod_sets[0], preferred_node_affinity=((10, _term("a")),))
            j = replace(j, pod_sets=(ps,))
        out.append(j)
    return out


def _cluster() -> tuple[ClusterState, LoadModel]:
    nodes = [
        node(f"n{i}", gpu=4, labels={"zone": "ab"[i % 2]}, cpu=16_000, mem=64_000) for i in range(8)
    ]
    nodes += [mig_node("m0"), mig_node("m1")]
    return ClusterState(nodes), LoadModel(LoadSettings(stale_after_s=120.0))


def _scrape(state: ClusterState, rng: np.random.Generator, now_s: float) -> list[CardSample]:
    t = state.table
    return [
        CardSample(
            t.nodes[i].name,
            g,
            now_s,
            float(min(100.0, t.used_milli[i, g] / 10.0 * rng.uniform(0.2, 1.6))),
            int(t.used_mib[i, g] * rng.uniform(0.3, 1.0) + rng.integers(0, 12_000)),
        )
        for i in t.live().tolist()
        for g in range(int(t.gpu_count[i]))
    ]


def test_best_first_places_gangs_mig_and_preferences_as_the_full_evaluation() -> None:
    lazy, full = _both(measured_profile(scores={**DEFAULT_SCORES, **MEASURED_SCORES}))
    state, model = _cluster()
    rng = np.random.default_rng(11)
    held: list[Placement] = []
    decided = failed = 0
    for cycle, jobs in enumerate(np.array_split(np.array(_stream(rng, 240), object), 40)):
        now_s = cycle * 15.0
        if cycle % 3 == 0:
            model.add(_scrape(state, rng, now_s), now_s=now_s)
        while len(held) > 30:  # departures
            gone = held.pop(int(rng.integers(0, len(held))))
            state.forget(gone.task)
            model.released(gone, now_s)
        snap = state.snapshot()
        snap.load = model.view(snap.table, now_s)
        for j in jobs.tolist():
            got, status = place_job(j, snap, lazy)
            expect, expect_status = place_job(j, snap, full)
            assert [(p.task, p.node, p.shares) for p in got] == [
                (p.task, p.node, p.shares) for p in expect
            ]
            assert (status.code, status.message) == (expect_status.code, expect_status.message)
            decided += 1
            failed += not got
            for p in got:
                snap.assume(p)
                state.assume(p)
                model.placed(p, now_s)
                held.append(p)
    assert decided == 240 and 5 < failed < 200


@pytest.mark.parametrize("kind", ["none", "slice", "two-slice", "whole", "mig", "preferred"])
def test_a_neutral_plugin_keeps_every_row_or_scores_zero(kind: str) -> None:
    """For each task kind, with and without measured load: a plugin that says it is neutral
    keeps every row (a filter) or scores 0 on every row (a score), and a lazy score never
    exceeds its bound."""
    state, model = _cluster()
    rng = np.random.default_rng(3)
    for j in _stream(rng, 60)[:30]:
        placed, _ = place_job(j, state.snapshot(), measured_profile())
        for p in placed:
            state.assume(p)
    model.add(_scrape(state, rng, 0.0), now_s=0.0)
    gpu = {
        "none": None,
        "slice": share(300, 8192),
        "two-slice": replace(share(300, 8192), cards=2),
        "whole": whole(1),
        "mig": mig("1g.10gb"),
        "preferred": share(100, 1024),
    }[kind]
    j = job("probe", gpu=gpu)
    if kind == "preferred":
        ps = replace(j.pod_sets[0], preferred_node_affinity=((10, _term("b")),))
        j = replace(j, pod_sets=(ps,))
    task = next(j.tasks())
    profile = measured_profile(scores={**DEFAULT_SCORES, **MEASURED_SCORES})
    seen = 0
    for load in (None, model.view(state.table, 1.0)):
        cs = CycleState(state.table, {}, load=load)
        rows = state.table.live()
        for f in profile.filters:
            if getattr(f, "neutral", None) and f.neutral(cs, task):  # type: ignore[attr-defined]
                assert f.filter(cs, task, rows).all(), f.name
                seen += 1
        for s, _ in profile.scores:
            score = s.score(cs, task, rows)
            if getattr(s, "neutral", None) and s.neutral(cs, task):  # type: ignore[attr-defined]
                assert not score.any(), s.name
                seen += 1
            if hasattr(s, "bound"):
                assert (score <= s.bound(cs, task)).all(), s.name
    assert seen >= 4


def test_a_lazy_score_without_a_bound_is_refused() -> None:
    class Unbounded(TargetLoadPacking):
        bound = None  # type: ignore[assignment]

    registry = builtin_registry()
    with pytest.raises(ConfigError, match="lazy but has no bound"):
        Profile(
            "p",
            (),
            ((Unbounded(), 1.0),),
            registry.create("best-fit-cards"),
        )
