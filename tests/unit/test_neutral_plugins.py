"""Plugins neutral for a task (``neutral(cs, task)``: a filter keeping every row, a score of
0 on every row) are not called; placement is then what calling every plugin gives, failure
reasons included, and each plugin's ``neutral`` holds where it says so."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import cast

import numpy as np
import pytest

from gpupool.bench import placement as bench
from gpupool.core import ClusterState, NodeName, Status, place_job
from gpupool.core.affinity import (
    LabelSelector,
    NodeAffinityTerm,
    NodeRequirement,
    PodAffinityTerm,
    PodMeta,
    SpreadConstraint,
)
from gpupool.core.model import Job, Placement, Task
from gpupool.core.placement.framework import CycleState, FilterPlugin, Profile, ScorePlugin
from gpupool.core.placement.registry import DEFAULT_SCORES, MEASURED_SCORES, measured_profile
from gpupool.core.snapshot import Snapshot
from gpupool.core.usage import CardSample, LoadModel, LoadSettings
from tests.builders import job, mig, mig_node, node, share, whole

Decision = tuple[object, ...]
ALL_SCORES = {**DEFAULT_SCORES, **MEASURED_SCORES, "bind-queue": 1.0}


class _Called:
    """One of a profile's plugins with its ``neutral`` hidden: placement calls it for every
    task, as it did before plugins could say they had nothing to say."""

    __slots__ = ("_plugin",)

    def __init__(self, plugin: object) -> None:
        self._plugin = plugin

    def __getattr__(self, attr: str) -> object:
        if attr == "neutral":
            raise AttributeError(attr)
        return getattr(self._plugin, attr)


def every_plugin_called(profile: Profile) -> Profile:
    """``profile`` with every plugin's ``neutral`` hidden."""
    full = Profile(
        profile.name,
        tuple(cast(FilterPlugin, _Called(f)) for f in profile.filters),
        tuple((cast(ScorePlugin, _Called(s)), w) for s, w in profile.scores),
        profile.cards,
    )
    assert all(n is None for _, n in full.filter_checks)
    assert all(n is None for _, _, n in full.score_checks)
    return full


def _neutral(profile: Profile, cs: CycleState, task: Task) -> set[str]:
    """The names of the plugins neutral for ``task``."""
    checks = [*profile.filter_checks, *((s, n) for s, _, n in profile.score_checks)]
    return {p.name for p, n in checks if n is not None and n(cs, task)}


def _bench_decisions(
    monkeypatch: pytest.MonkeyPatch, profile: Profile, cycle_pods: int, measured: bool
) -> tuple[list[Decision], Counter[str]]:
    """Every decision of a seeded bench stream (warm-up included), and per plugin the
    decisions it was neutral for."""
    got: list[Decision] = []
    skipped: Counter[str] = Counter()
    real_place = bench.place_task

    def spy(task: Task, snap: object, prof: Profile) -> tuple[Placement | None, Status]:
        s = cast(Snapshot, snap)
        skipped.update(_neutral(prof, CycleState(s.table, s.cache, load=s.load), task))
        p, status = real_place(task, s, prof)
        got.append((task.id, p and (p.node, p.shares), status.code, status.message))
        return p, status

    monkeypatch.setattr(bench, "place_task", spy)
    bench.run(
        40,
        8,
        600,
        seed=5,
        profile=profile,
        measured=measured,
        scrape_every=60,
        cycle_pods=cycle_pods,
    )
    monkeypatch.undo()
    return got, skipped


@pytest.mark.parametrize("measured", [True, False])
@pytest.mark.parametrize("cycle_pods", [1, 6])
def test_skipping_neutral_plugins_places_the_bench_stream_as_calling_every_plugin(
    cycle_pods: int, measured: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = measured_profile(scores={"binpack": 1.0, **MEASURED_SCORES})
    skipping, skipped = _bench_decisions(monkeypatch, profile, cycle_pods, measured)
    calling, none = _bench_decisions(
        monkeypatch, every_plugin_called(profile), cycle_pods, measured
    )
    assert len(skipping) > 600
    # with measured load some decisions fail (measured-memory), with their reasons
    assert sum(d[1] is None for d in skipping) > 5 or not measured
    assert skipping == calling
    assert not none
    measured_plugins = ("measured-memory", "hot-card-spread", "target-load-packing")
    for name in measured_plugins:  # each skipped for some decisions, called for others
        assert 0 < skipped[name] < len(skipping) or not measured
        assert skipped[name] == len(skipping) or measured


def _term(zone: str) -> NodeAffinityTerm:
    return NodeAffinityTerm((NodeRequirement("zone", "In", (zone,)),))


def _app(app: str) -> LabelSelector:
    return LabelSelector((("app", app),))


def _with_preferences(j: Job, rng: np.random.Generator) -> Job:
    """``j`` labelled with an app, and now and then one of the preferences the default
    scores read (node affinity, pod affinity or anti-affinity, soft spread)."""
    app = str(rng.choice(("web", "db")))
    fields: dict[str, object] = {"pod": PodMeta("default", {"app": app})}
    which = int(rng.integers(0, 8))
    if which == 0:
        fields["preferred_node_affinity"] = ((10, _term("a")),)
    elif which == 1:
        fields["preferred_affinity"] = ((20, PodAffinityTerm("zone", _app("db"), None)),)
    elif which == 2:
        fields["preferred_anti_affinity"] = ((30, PodAffinityTerm("zone", _app(app), None)),)
    elif which == 3:
        fields["soft_spread"] = (SpreadConstraint(1, "zone", _app(app)),)
    ps = replace(j.pod_sets[0], **fields)  # type: ignore[arg-type]
    return replace(j, pod_sets=(ps,))


def _stream(rng: np.random.Generator, count: int) -> list[Job]:
    """Slices (one card and two), whole GPUs, MIG instances, gangs of 3, CPU-only pods."""
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
        if kind == 2 and gpu is not None:
            gpu = replace(gpu, cards=2)
        j = job(f"j{i}", tasks=3, gpu=share(300, 4096)) if kind == 5 else job(f"j{i}", gpu=gpu)
        out.append(_with_preferences(j, rng))
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


@pytest.mark.parametrize("measured", [True, False])
def test_skipping_neutral_plugins_places_gangs_mig_and_preferences_as_calling_every_plugin(
    measured: bool,
) -> None:
    skipping = measured_profile(scores=ALL_SCORES)
    calling = every_plugin_called(skipping)
    state, model = _cluster()
    rng = np.random.default_rng(11)
    held: list[Placement] = []
    decided = failed = 0
    skipped: Counter[str] = Counter()
    for cycle, jobs in enumerate(np.array_split(np.array(_stream(rng, 240), object), 40)):
        now_s = cycle * 15.0
        if measured and cycle % 3 == 0:
            model.add(_scrape(state, rng, now_s), now_s=now_s)
        while len(held) > 60:  # departures
            gone = held.pop(int(rng.integers(0, len(held))))
            state.forget(gone.task)
            model.released(gone, now_s)
        for i in range(0, 8, 3):  # binds in flight on some nodes, every other cycle
            state.set_binds_in_flight(NodeName(f"n{i}"), (cycle % 2) * int(rng.integers(0, 3)))
        snap = state.snapshot()
        snap.load = model.view(snap.table, now_s) if measured else None
        for j in jobs.tolist():
            cs = CycleState(snap.table, snap.cache, pods=snap.pods, load=snap.load)
            skipped.update(_neutral(skipping, cs, next(j.tasks())))
            got, status = place_job(j, snap, skipping)
            expect, expect_status = place_job(j, snap, calling)
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
    assert decided == 240 and 5 < failed < 200, failed
    # every plugin with a ``neutral`` was skipped for some jobs and called for others
    for name in (*ALL_SCORES, "measured-memory"):
        if name == "binpack" or (not measured and name in (*MEASURED_SCORES, "measured-memory")):
            continue
        assert 0 < skipped[name] < decided, name


@pytest.mark.parametrize(
    "kind", ["none", "slice", "two-slice", "whole", "mig", "preferred", "gang"]
)
def test_a_neutral_plugin_keeps_every_row_or_scores_zero(kind: str) -> None:
    """For each task kind, with and without measured load, with and without binds in
    flight: a plugin that says it is neutral keeps every row (a filter) or scores 0 on every
    row (a score)."""
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
        "gang": share(200, 2048),
    }[kind]
    j = job("probe", gpu=gpu, tasks=3 if kind == "gang" else 1)
    if kind == "preferred":
        ps = replace(
            j.pod_sets[0],
            pod=PodMeta("default", {"app": "web"}),
            preferred_node_affinity=((10, _term("b")),),
            preferred_affinity=((20, PodAffinityTerm("zone", _app("db"), None)),),
            soft_spread=(SpreadConstraint(1, "zone", _app("web")),),
        )
        j = replace(j, pod_sets=(ps,))
    task = next(j.tasks())
    profile = measured_profile(scores=ALL_SCORES)
    neutral = {True: 0, False: 0}
    for binds in (0, 2):
        state.set_binds_in_flight(NodeName("n1"), binds)
        for load in (None, model.view(state.table, 1.0)):
            cs = CycleState(state.table, {}, pods=state.pods, load=load)
            rows = state.table.live()
            for f, check in profile.filter_checks:
                if check is not None:
                    says = bool(check(cs, task))
                    neutral[says] += 1
                    if says:
                        assert f.filter(cs, task, rows).all(), f.name
            for s, _, check in profile.score_checks:
                if check is not None:
                    says = bool(check(cs, task))
                    neutral[says] += 1
                    if says:
                        assert not s.score(cs, task, rows).any(), s.name
    assert neutral[True] >= 4
    assert neutral[False] >= 1 or kind in ("none", "mig", "gang")
