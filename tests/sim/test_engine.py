"""The event engine: batching, FIFO waits, hints, node events, gangs, invariants, determinism."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from gpupool.core import ConfigError, CycleResult, GpuRequest, Job, JobId, default_profile
from gpupool.core.model import WHOLE_GPU_MILLI, Node
from gpupool.sim.engine import Engine, EventKind
from tests.builders import job, mig, mig_node, node, share, whole

PROFILE = default_profile()


def small_cluster() -> list[Node]:
    return [
        node("a0", gpu=8, nvlink=True, gpu_mem=81920),
        node("a1", gpu=8, nvlink=True, gpu_mem=81920),
        node("t0", gpu=4, model="T4", gpu_mem=16384, cpu=32_000, mem=128_000),
        mig_node("m0"),
        node("c0", gpu=0, cpu=32_000, mem=128_000),
    ]


def stream(seed: int, n: int, gap_s: float = 30.0) -> list[Job]:
    """A mix every job of which fits the empty small_cluster()."""
    rng = random.Random(seed)
    out: list[Job] = []
    t = 0.0
    for i in range(n):
        t += round(rng.expovariate(1 / gap_s))  # whole seconds: bursts share timestamps
        dur = float(rng.randint(60, 900))
        kind = rng.choice(["slice", "slice", "whole", "gang", "mig", "cpu"])
        name = f"{kind}-{i:03d}"
        if kind == "slice":
            gpu = share(rng.choice([100, 250, 500, 900]), rng.choice([0, 4096, 12000]))
            out.append(job(name, gpu=gpu, cpu=2000, mem=8000, submit=t, duration=dur))
        elif kind == "whole":
            out.append(
                job(
                    name,
                    gpu=whole(rng.choice([1, 2, 4, 8])),
                    cpu=4000,
                    mem=16_000,
                    submit=t,
                    duration=dur,
                )
            )
        elif kind == "gang":
            out.append(
                job(
                    name,
                    tasks=rng.choice([2, 3]),
                    gpu=whole(rng.choice([2, 4])),
                    cpu=4000,
                    mem=16_000,
                    submit=t,
                    duration=dur,
                )
            )
        elif kind == "mig":
            out.append(job(name, gpu=mig("1g.10gb"), cpu=1000, mem=4000, submit=t, duration=dur))
        else:
            out.append(
                job(name, cpu=rng.choice([1000, 8000, 30_000]), mem=4000, submit=t, duration=dur)
            )
    return out


def check_table(engine: Engine) -> None:
    t = engine.state.table
    n = t.n
    assert (t.used_milli[:n] <= WHOLE_GPU_MILLI).all()
    assert (t.used_milli[:n] >= 0).all()
    assert (t.used_mib[:n] <= t.gpu_mem_cap[:n]).all()
    assert (t.cpu_free[:n] >= 0).all()
    assert (t.mem_free[:n] >= 0).all()
    for pool in t.mig_free.values():
        assert (pool[:n] >= 0).all()
    used, total = engine.gpu_allocated()
    assert 0 <= used <= total


def check_gangs_whole(engine: Engine, jobs: dict[JobId, Job]) -> None:
    held: dict[str, int] = {}
    for p in engine.state.placements():
        held[p.job] = held.get(p.job, 0) + 1
    for job_id, count in held.items():
        assert count == jobs[JobId(job_id)].task_count, f"{job_id} is partly placed"


# -- batching and FIFO -------------------------------------------------------------------


def test_a_burst_at_one_timestamp_is_one_cycle() -> None:
    engine = Engine([node("n0")], PROFILE)
    engine.submit_all(job(f"j{i}", gpu=share(100), submit=5.0, duration=10.0) for i in range(6))
    assert engine.step()
    assert engine.now == 5.0
    assert engine.cycles == 1
    assert engine.running == 6


def test_ties_at_one_timestamp_keep_the_order_they_were_scheduled_in() -> None:
    engine = Engine([node("n0")], PROFILE)
    for name in ("b", "c", "a"):
        engine.submit(job(name, submit=1.0, duration=1.0))
    engine.run()
    arrivals = [subject for _, what, subject, _ in engine.log if what == "arrive"]
    assert arrivals == ["b", "c", "a"]
    binds = [subject for _, what, subject, _ in engine.log if what == "bind"]
    assert binds == ["a", "b", "c"]  # offered in FIFO (submit_time_s, id) order


def test_waiting_jobs_start_in_fifo_order_when_room_frees() -> None:
    engine = Engine([node("n0", gpu=8)], PROFILE)
    engine.submit(job("big-a", gpu=whole(8), submit=0.0, duration=100.0))
    engine.submit(job("big-b", gpu=whole(8), submit=1.0, duration=50.0))
    engine.submit(job("small", gpu=whole(1), submit=2.0, duration=10.0))
    result = engine.run()
    recs = result.records
    assert recs[JobId("big-a")].start_s == 0.0
    assert recs[JobId("big-b")].start_s == 100.0  # first in line gets the freed node
    assert recs[JobId("small")].start_s == 150.0
    assert recs[JobId("small")].wait_s == 148.0
    assert recs[JobId("big-b")].end_s == 150.0  # its end moves by its wait
    assert "fewer than 8 whole GPUs free" in recs[JobId("big-b")].first_reason
    assert recs[JobId("small")].parks >= 1


def test_later_jobs_fill_gaps_that_earlier_waiting_jobs_cannot_use() -> None:
    engine = Engine([node("n0", gpu=8)], PROFILE)
    engine.submit(job("half", gpu=whole(4), submit=0.0, duration=100.0))
    engine.submit(job("all", gpu=whole(8), submit=1.0, duration=10.0))
    engine.submit(job("one", gpu=whole(1), submit=2.0, duration=10.0))
    recs = engine.run().records
    assert recs[JobId("one")].start_s == 2.0
    assert recs[JobId("all")].start_s == 100.0


def test_a_parked_job_is_not_offered_again_until_something_frees() -> None:
    engine = Engine([node("n0", gpu=2)], PROFILE)
    engine.submit(job("hog", gpu=whole(2), submit=0.0, duration=100.0))
    engine.submit(job("waiter", gpu=whole(1), submit=1.0, duration=5.0))
    for i in range(5):  # arrivals that fit nowhere either: no GPU can free for the waiter
        engine.submit(job(f"late-{i}", gpu=whole(2), submit=10.0 + i, duration=5.0))
    engine.run(until=50.0)
    rec = engine.records[JobId("waiter")]
    assert rec.parks == 1
    assert engine.offers == 7  # each job offered once
    engine.run()
    assert engine.records[JobId("waiter")].start_s == 100.0


def test_completion_on_a_node_the_request_cannot_use_does_not_reoffer_it() -> None:
    engine = Engine([node("big", gpu=8), node("tiny", gpu=1, cpu=4000, mem=8000)], PROFILE)
    engine.submit(job("fill", gpu=whole(8), submit=0.0, duration=100.0))
    engine.submit(job("wants4", gpu=whole(4), submit=1.0, duration=10.0))
    engine.submit(job("blip", gpu=whole(1), cpu=1000, mem=1000, submit=2.0, duration=3.0))
    engine.run(until=50.0)
    assert engine.records[JobId("blip")].end_s == 5.0  # freed 'tiny', which has 1 GPU
    assert engine.records[JobId("wants4")].parks == 1
    engine.run()
    assert engine.records[JobId("wants4")].start_s == 100.0


@pytest.mark.parametrize("seed", [1, 2])
def test_hints_change_no_decision(seed: int) -> None:
    jobs = stream(seed, 120, gap_s=8.0)  # dense: much waiting
    logs = []
    for hints in (True, False):
        engine = Engine(small_cluster(), PROFILE, hints=hints)
        engine.submit_all(jobs)
        result = engine.run()
        logs.append([e for e in result.log if e[1] in ("bind", "finish")])
        if hints:
            offers_with = result.offers
        else:
            assert result.offers > offers_with
    assert logs[0] == logs[1]


# -- invariants ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_no_card_or_node_is_overcommitted_and_gangs_stay_whole(seed: int) -> None:
    jobs = stream(seed, 150, gap_s=10.0)
    by_id = {j.id: j for j in jobs}
    engine = Engine(small_cluster(), PROFILE)
    engine.submit_all(jobs)
    engine.remove_node("a1", at=900.0)
    engine.add_node(node("a2", gpu=8), at=1200.0)
    engine.cordon("t0", at=300.0)
    engine.uncordon("t0", at=700.0)

    def after_cycle(eng: Engine, result: CycleResult) -> None:
        for bind in result.binds:
            assert len(bind.placements) == by_id[bind.job].task_count

    engine.on_cycle = after_cycle
    steps = 0
    while engine.step():
        steps += 1
        check_table(engine)
        check_gangs_whole(engine, by_id)
    assert steps > 100
    result = engine.result()
    assert all(r.completed for r in result.records.values())
    used, _ = engine.gpu_allocated()
    assert used == 0
    assert engine.pending == 0 and engine.running == 0


@pytest.mark.parametrize("seed", [6, 7])
def test_every_job_completes_when_the_cluster_can_hold_it(seed: int) -> None:
    jobs = stream(seed, 200, gap_s=5.0)
    engine = Engine(small_cluster(), PROFILE)
    engine.submit_all(jobs)
    result = engine.run()
    assert len(result.records) == 200
    for r in result.records.values():
        assert not r.rejected
        assert r.completed and r.start_s is not None and r.end_s is not None
        assert r.start_s >= r.submit_s
    assert result.series.pending[-1] == 0
    assert max(result.series.pending) > 0  # the stream is dense enough that some waited


def test_gang_waits_whole_rather_than_starting_partly() -> None:
    engine = Engine([node("n0", gpu=4), node("n1", gpu=4)], PROFILE)
    engine.submit(job("one", gpu=whole(2), submit=0.0, duration=50.0))
    engine.submit(job("gang", tasks=2, gpu=whole(4), submit=1.0, duration=10.0))
    engine.run(until=10.0)
    assert engine.state.job_placements(JobId("gang")) == []
    assert "gang gang: 1/2 tasks fit" in engine.records[JobId("gang")].first_reason
    engine.run()
    assert engine.records[JobId("gang")].start_s == 50.0
    assert sorted(engine.records[JobId("gang")].nodes) == ["n0", "n1"]


# -- determinism ---------------------------------------------------------------------------


def run_once(seed: int) -> tuple[list[tuple[float, str, str, str]], list[float], list[int]]:
    engine = Engine(small_cluster(), PROFILE)
    engine.submit_all(stream(seed, 150, gap_s=12.0))
    engine.remove_node("a0", at=600.0)
    engine.add_node(node("a9", gpu=8), at=650.0)
    result = engine.run()
    return result.log, result.series.time_s, result.series.gpu_used_milli


def test_same_input_gives_the_same_event_log() -> None:
    first = run_once(11)
    assert first == run_once(11)
    assert first[0] != run_once(12)[0]
    assert any(what == "evict" for _, what, _, _ in first[0])


def test_submission_order_of_simultaneous_jobs_does_not_change_placements() -> None:
    jobs = stream(13, 80, gap_s=20.0)
    shuffled = list(jobs)
    random.Random(0).shuffle(shuffled)
    logs = []
    for order in (jobs, shuffled):
        engine = Engine(small_cluster(), PROFILE)
        engine.submit_all(order)
        logs.append([e for e in engine.run().log if e[1] == "bind"])
    assert logs[0] == logs[1]


# -- node events ---------------------------------------------------------------------------


def test_a_removed_node_sends_its_jobs_back_to_wait_whole() -> None:
    engine = Engine([node("n0", gpu=4), node("n1", gpu=4)], PROFILE)
    engine.submit(job("gang", tasks=2, gpu=whole(4), submit=0.0, duration=100.0))
    engine.remove_node("n1", at=10.0)
    engine.add_node(node("n2", gpu=4), at=30.0)
    engine.run(until=20.0)
    assert engine.state.job_placements(JobId("gang")) == []  # the n0 half was released too
    assert engine.pending == 1
    result = engine.run()
    rec = result.records[JobId("gang")]
    assert rec.restarts == 1
    assert rec.start_s == 0.0  # first start is kept
    assert rec.end_s == 130.0  # restarted at 30, ran its 100 s; the old completion was ignored
    assert rec.nodes == ("n0", "n2")


def test_cordon_keeps_new_work_off_and_uncordon_lets_it_in() -> None:
    engine = Engine([node("n0", gpu=1)], PROFILE)
    engine.cordon("n0", at=0.0)
    engine.submit(job("j", gpu=whole(1), submit=1.0, duration=5.0))
    engine.uncordon("n0", at=20.0)
    result = engine.run()
    rec = result.records[JobId("j")]
    assert "cordoned" in rec.first_reason
    assert rec.start_s == 20.0
    kinds = [what for _, what, _, _ in result.log]
    assert EventKind.NODE_CORDONED in kinds and EventKind.NODE_UNCORDONED in kinds


def test_a_joining_node_starts_waiting_jobs_at_once() -> None:
    engine = Engine([node("n0", gpu=4)], PROFILE)
    engine.submit(job("hog", gpu=whole(4), submit=0.0, duration=100.0))
    engine.submit(job("j", gpu=whole(4), submit=0.0, duration=5.0))
    engine.add_node(node("n1", gpu=4), at=42.0)
    result = engine.run()
    assert result.records[JobId("j")].start_s == 42.0
    assert result.records[JobId("j")].nodes == ("n1",)
    assert result.series.gpu_total_milli[0] == 4000
    assert result.series.gpu_total_milli[-1] == 8000


# -- records, accounting, errors -----------------------------------------------------------


def test_utilisation_series_follows_allocation() -> None:
    engine = Engine([node("n0", gpu=2), mig_node("m0", cards=1)], PROFILE)
    engine.submit(job("w", gpu=whole(1), submit=0.0, duration=10.0))
    engine.submit(job("s", gpu=share(250), submit=5.0, duration=10.0))
    engine.submit(job("m", gpu=mig("1g.10gb"), submit=5.0, duration=1.0))
    result = engine.run()
    s = result.series
    assert s.time_s == [0.0, 5.0, 6.0, 10.0, 15.0]
    assert s.gpu_used_milli == [1000, 1390, 1250, 250, 0]  # a 1g.10gb instance stands for 140
    assert set(s.gpu_total_milli) == {3000}
    assert s.running == [1, 3, 2, 1, 0]
    assert result.gpu_hours() == pytest.approx((10 * 1.0 + 10 * 0.25 + 1 * 0.14) / 3600)
    frac = s.gpu_fraction()
    assert frac[0] == pytest.approx(1 / 3)
    assert s.time_weighted_mean(frac) == pytest.approx(
        (5 * 1000 + 1 * 1390 + 4 * 1250 + 5 * 250) / 15 / 3000
    )


def test_zero_duration_and_no_duration_jobs() -> None:
    engine = Engine([node("n0", gpu=1)], PROFILE)
    engine.submit(job("flash", gpu=whole(1), submit=3.0, duration=0.0))
    engine.submit(job("forever", cpu=1000, submit=3.0, duration=None))
    result = engine.run()
    assert result.records[JobId("flash")].end_s == 3.0
    forever = result.records[JobId("forever")]
    assert forever.start_s == 3.0 and forever.end_s is None
    assert engine.running == 1


def test_a_job_that_can_never_run_is_rejected_not_left_pending() -> None:
    engine = Engine([node("n0", gpu=2)], PROFILE)
    engine.submit(job("too-big", gpu=whole(4), submit=0.0, duration=1.0))
    engine.submit(
        job(
            "bad-model",
            gpu=GpuRequest(count=1, models=frozenset({"H100"})),
            submit=0.0,
            duration=1.0,
        )
    )
    result = engine.run()
    assert "more GPUs than any node has" in result.records[JobId("too-big")].rejected
    assert "no node has GPU model H100" in result.records[JobId("bad-model")].rejected
    assert engine.pending == 0
    assert result.records[JobId("too-big")].start_s is None


def test_events_in_the_past_and_duplicate_jobs_are_refused() -> None:
    engine = Engine([node("n0")], PROFILE)
    engine.submit(job("a", submit=10.0, duration=1.0))
    engine.run()
    with pytest.raises(ConfigError, match="in the past"):
        engine.submit(job("b", submit=1.0, duration=1.0))
    engine.submit(replace(job("a", duration=1.0), submit_time_s=20.0))
    with pytest.raises(ConfigError, match="submitted twice"):
        engine.run()


def test_run_until_stops_the_clock_there_and_resumes() -> None:
    engine = Engine([node("n0")], PROFILE)
    engine.submit_all(job(f"j{i}", submit=float(10 * i), duration=5.0) for i in range(5))
    engine.run(until=25.0)
    assert engine.now == 25.0
    assert engine.next_time == 30.0
    assert sum(1 for r in engine.records.values() if r.completed) == 3  # j2 ends at 25
    result = engine.run()
    assert result.end_s == 45.0
    assert np.all(np.diff(result.series.time_s) >= 0)


def test_progress_is_reported_in_simulated_time() -> None:
    seen: list[float] = []
    engine = Engine([node("n0")], PROFILE, progress=seen.append, progress_every=2)
    engine.submit_all(job(f"j{i}", submit=float(i), duration=1.0) for i in range(6))
    engine.run()
    assert seen == sorted(seen) and seen[-1] == 6.0 and len(seen) >= 3
