"""gpupool sim's measured-use hook (sim/measured.py): a run's scheduler places by what the
jobs actually use, sampled before each cycle, and the hook integrates hot-card time."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from gpupool.core import ConfigError, JobId
from gpupool.core.scheduler import Scheduler
from gpupool.core.usage_workload import workload_of
from gpupool.sim.measured import SimMeasuredUse, parse_measured_use
from gpupool.sim.scenario import Scenario, ScenarioRun, generate_jobs, load_scenario, simulate
from gpupool.sim.scenario_aggregate import summarise
from gpupool.sim.scenario_summary import summarise_run
from gpupool.sim.scenario_tables import render_report
from tests.builders import job, node, queue_config, share


@dataclass(frozen=True)
class Src:
    stream: str


def _run(measured: bool) -> tuple[Scheduler, SimMeasuredUse | None]:
    nodes = [node("n1", gpu=2)]
    spec = parse_measured_use(
        {
            "staleAfter": "2m",
            "settle": 10,
            "actualUse": {
                "finetune": {"compute": "190%"},
                "*": {"compute": [10, 40], "memory": "50%"},
            },
        }
    )
    sources = {JobId("ft"): Src("finetune"), JobId("nb"): Src("notebooks")}
    hook = SimMeasuredUse(spec, sources, seed=1) if measured else None
    sched = Scheduler(nodes, queue_config({"default": 2}), profile=hook.profile if hook else None)
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


def test_a_sim_run_feeds_each_pods_own_use_so_slices_sharing_a_card_teach_their_workloads() -> None:
    """A fine-tune (190 % of its 500 milli) and a notebook (20 % of its 300, half its memory)
    share the one card: no card sample is either's alone, so only their own per-pod samples
    (their parts of the card's busy time and memory, as HAMi's monitor reports them) teach
    their workloads."""
    spec = parse_measured_use(
        {
            "staleAfter": "2m",
            "settle": 10,
            "actualUse": {
                "finetune": {"compute": "190%"},
                "*": {"compute": "20%", "memory": "50%"},
            },
        }
    )
    hook = SimMeasuredUse(spec, {JobId("ft"): Src("finetune"), JobId("nb"): Src("nb")}, seed=1)
    sched = Scheduler([node("n1", gpu=1)], queue_config({"default": 1}), profile=hook.profile)
    hook.attach(sched)
    ft, nb = job("ft", gpu=share(500, 20_000)), job("nb", gpu=share(300, 8192))
    sched.submit(ft, 0.0)
    sched.submit(nb, 0.0)
    hook.sample(sched, 0.0)
    sched.cycle(0.0)
    assert len(list(sched._state.placements())) == 2  # one card, both slices
    for t in (15.0, 30.0, 45.0, 60.0):
        hook.sample(sched, t)
    learned = hook.model.workloads
    # the card reads 100 % (950 + 60 milli of demand): the fine-tune's part is 94 of it
    assert learned.expected(workload_of(next(ft.tasks())), 500) == pytest.approx(940.0)
    assert learned.expected(workload_of(next(nb.tasks())), 300) == 300.0  # 60 of 300: floor
    assert learned.expected_mib(workload_of(next(nb.tasks())), 8192) == pytest.approx(4096.0)


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


@pytest.mark.parametrize(
    "doc,field",
    [
        ({"hotPct": 0}, "spec.measuredUse.hotPct"),
        ({"targetPct": 100}, "spec.measuredUse.targetPct"),
        ({"window": "five"}, "spec.measuredUse.window"),
        ({"staleAfter": -1}, "stale_after_s"),
        ({"actualUse": {"x": {"compute": "abc"}}}, "spec.measuredUse.actualUse.x.compute"),
        ({"actualUse": {"x": {"power": 3}}}, "unknown field(s) power"),
        ({"hot": 3}, "unknown field(s) hot"),
        ({"placeBy": "both"}, "spec.measuredUse.placeBy"),
    ],
)
def test_a_bad_measured_use_names_the_field(doc: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_measured_use(doc)
    assert field in str(info.value)


# -- the hook in scenario runs (spec.measuredUse) --------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "measured-use.yaml"


def _by(scenario: Scenario, place_by: str) -> Scenario:
    assert scenario.measured is not None
    return replace(scenario, measured=replace(scenario.measured, place_by=place_by))


def test_the_example_scenario_reads_its_measured_use() -> None:
    s = load_scenario(EXAMPLE)
    assert s.measured is not None
    assert s.measured.places_by_measured
    assert set(s.measured.actual_use) == {"notebooks", "inference", "finetune", "*"}
    assert s.measured.settings.stale_after_s == 120.0


def test_a_measured_scenario_run_keeps_cards_cooler_than_the_same_run_by_requests() -> None:
    s = load_scenario(EXAMPLE).shortened(5400.0)
    by_requests = summarise_run(simulate(_by(s, "requests"), 1))
    measured = summarise_run(simulate(_by(s, "measured"), 1))
    req, meas = by_requests["measured_use"], measured["measured_use"]
    assert (req["place_by"], meas["place_by"]) == ("requests", "measured")
    assert req["samples"] > 0 and meas["samples"] > 0  # both runs read every card
    assert req["hot_card_gpu_s"] > 0  # by requests, fine-tunes and slices share cards
    assert meas["hot_card_gpu_s"] < req["hot_card_gpu_s"]
    assert meas["memory_over_card_s"] == 0.0
    assert measured["jobs"]["submitted"] == by_requests["jobs"]["submitted"]


def test_a_scenario_without_measured_use_places_by_requests_and_reports_nothing_measured() -> None:
    s = load_scenario(EXAMPLE).shortened(1800.0)
    plain = replace(s, measured=None)
    run = ScenarioRun(plain, 1, *generate_jobs(plain, 1), None, 64)
    assert run.measured is None
    assert run.sched.measured_use is None
    assert "measured_use" not in summarise_run(run.loop())
    hooked = ScenarioRun(s, 1, *generate_jobs(s, 1), None, 64)
    assert hooked.sched.measured_use is hooked.measured.model  # type: ignore[union-attr]


def test_the_report_carries_hot_card_time() -> None:
    s = load_scenario(EXAMPLE).shortened(1800.0)
    summary = summarise(s, [simulate(s, 1), simulate(s, 2)])
    agg = summary["aggregate"]["measured_use"]
    assert agg["place_by"] == "measured"
    assert set(agg["hot_card_gpu_s"]) >= {"mean", "min", "max"}
    text = render_report(summary)
    assert "## Measured use" in text and "hot-card time" in text


def test_a_bad_measured_use_in_a_scenario_file_names_the_file_and_the_field(tmp_path: Path) -> None:
    bad = EXAMPLE.read_text().replace("placeBy: measured", "placeBy: guessed")
    path = tmp_path / "bad.yaml"
    path.write_text(bad)
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    text = str(info.value)
    assert "bad.yaml" in text and "spec.measuredUse.placeBy" in text and "guessed" in text
