"""gpupool sim's measured-use hook (sim/measured.py): a run's scheduler places by what the
jobs actually use, sampled before each cycle, and the hook integrates hot-card time."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpupool.core import ConfigError, JobId
from gpupool.core.scheduler import Scheduler
from gpupool.sim.measured import SimMeasuredUse, parse_measured_use
from tests.builders import job, node, queue_config, share


@dataclass(frozen=True)
class Src:
    stream: str


def _run(measured: bool) -> tuple[Scheduler, SimMeasuredUse | None]:
    nodes = [node("n1", gpu=2)]
    spec = parse_measured_use({"staleAfter": "2m", "settle": 10,
                               "actualUse": {"finetune": {"compute": "190%"},
                                             "*": {"compute": [10, 40], "memory": "50%"}}})
    sources = {JobId("ft"): Src("finetune"), JobId("nb"): Src("notebooks")}
    hook = SimMeasuredUse(spec, sources, seed=1) if measured else None
    sched = Scheduler(nodes, queue_config({"default": 2}),
                      profile=hook.profile if hook else None)
    if hook:
        hook.attach(sched)
    sched.submit(job("ft", gpu=share(500, 20_000)), 0.0)
    if hook:
        hook.sample(sched, 0.0)
    sched.cycle(0.0)
    sched.submit(job("nb", gpu=share(300, 8192)), 30.0)
    if hook:
        hook.sample(sched, 30.0)  # the fine-tune's card reads 95 % busy
    sched.cycle(30.0)
    if hook:
        hook.sample(sched, 60.0)
    return sched, hook


def _cards(sched: Scheduler) -> dict[str, int]:
    return {p.job: p.shares[0].index for p in sched._state.placements()}


def test_a_sim_run_places_a_notebook_off_the_card_a_fine_tune_keeps_busy() -> None:
    by_requests, _ = _run(measured=False)
    cards = _cards(by_requests)
    assert cards["nb"] == cards["ft"]  # best fit by requests: the half-used card
    sched, hook = _run(measured=True)
    cards = _cards(sched)
    assert cards["nb"] != cards["ft"]
    assert hook is not None and hook.hot_card_gpu_s == 0.0
    assert hook.use_of("ft").compute_pct == 190.0
    assert 10.0 <= hook.use_of("nb").compute_pct <= 40.0
    reading = hook.model.readings(sched._state.table, node("n1").name, 60.0)
    assert reading[cards["ft"]].util_pct == pytest.approx(95.0)


def test_hot_card_time_is_integrated_between_samples() -> None:
    nodes = [node("n1", gpu=1)]
    spec = parse_measured_use({"actualUse": {"*": {"compute": "190%"}}})
    hook = SimMeasuredUse(spec, {}, seed=1)
    sched = Scheduler(nodes, queue_config({"default": 1}))  # by requests: both on one card
    sched.submit(job("a", gpu=share(500, 1000)), 0.0)
    sched.submit(job("b", gpu=share(500, 1000)), 0.0)
    sched.cycle(0.0)
    assert len(list(sched._state.placements())) == 2
    hook.sample(sched, 0.0)
    hook.sample(sched, 15.0)
    hook.sample(sched, 45.0)
    assert hook.hot_card_gpu_s == 45.0


@pytest.mark.parametrize("doc,field", [
    ({"hotPct": 0}, "spec.measuredUse.hotPct"),
    ({"targetPct": 100}, "spec.measuredUse.targetPct"),
    ({"window": "five"}, "spec.measuredUse.window"),
    ({"staleAfter": -1}, "stale_after_s"),
    ({"actualUse": {"x": {"compute": "abc"}}}, "spec.measuredUse.actualUse.x.compute"),
    ({"actualUse": {"x": {"power": 3}}}, "unknown field(s) power"),
    ({"hot": 3}, "unknown field(s) hot"),
])
def test_a_bad_measured_use_names_the_field(doc: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_measured_use(doc)
    assert field in str(info.value)
