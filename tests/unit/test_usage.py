"""The measured-use load model (core/usage.py) and the plugins that read it."""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.core import ClusterState, ConfigError, NodeName, place_task
from gpupool.core.model import GpuShare, JobId, Placement, TaskId
from gpupool.core.placement.framework import CycleState
from gpupool.core.placement.plugins.measured import TargetLoadPacking
from gpupool.core.placement.registry import default_profile, measured_profile
from gpupool.core.usage import CardSample, LoadModel, LoadSettings
from tests.builders import job, node, share, whole

N1, N2 = NodeName("n1"), NodeName("n2")


def samples(
    node_name: NodeName,
    gpu: int,
    utils: list[float],
    start: float = 0.0,
    step: float = 15.0,
    used: int | None = None,
    free: int | None = None,
) -> list[CardSample]:
    return [
        CardSample(node_name, gpu, start + i * step, u, used, free) for i, u in enumerate(utils)
    ]


def state(*names: str, gpu: int = 2) -> ClusterState:
    return ClusterState([node(n, gpu=gpu) for n in names])


def test_windowed_quantile_is_the_load_and_old_samples_leave_the_window() -> None:
    s = state("n1")
    m = LoadModel(LoadSettings(window_s=60, quantile=0.9, stale_after_s=1000))
    # 90 % busy long ago, then 20 %: once the old samples leave the 60 s window, 20 % is the load
    m.add(samples(N1, 0, [90.0] * 4 + [20.0] * 6))
    view = m.view(s.table, now_s=150.0)
    row = s.table.row(N1)
    assert view.measured[row, 0] and not view.measured[row, 1]
    assert view.milli[row, 0] == pytest.approx(200.0)
    m2 = LoadModel(LoadSettings(window_s=1000, quantile=0.9, stale_after_s=1000))
    m2.add(samples(N1, 0, [90.0] * 4 + [20.0] * 6))
    assert m2.view(s.table, 150.0).milli[row, 0] > 800.0  # p90 of the whole history


def test_stale_card_falls_back_to_requests_with_a_reason() -> None:
    s = state("n1")
    p = Placement(TaskId("t"), JobId("j"), N1, 0, 0, (GpuShare(0, 600, 1000),))
    s.assume(p)
    m = LoadModel(LoadSettings(stale_after_s=60))
    m.add(samples(N1, 0, [10.0]))  # one sample at t=0
    row = s.table.row(N1)
    fresh = m.view(s.table, now_s=30.0)
    assert fresh.measured[row, 0] and fresh.milli[row, 0] == pytest.approx(100.0)
    old = m.view(s.table, now_s=200.0)
    assert not old.measured[row, 0]
    assert old.milli[row, 0] == 600  # what is requested of it
    assert "GPU 0 stale (no sample in the last 60 s)" in old.reasons[N1]
    assert "GPU 1 never measured" in old.reasons[N1]
    assert old.reasons[N1].endswith("placed by requests")


def test_source_down_places_every_card_by_requests() -> None:
    s = state("n1", "n2")
    m = LoadModel()
    m.add(samples(N1, 0, [5.0]), now_s=0.0)
    m.failed("Prometheus at http://x:9090 unreachable: connection refused")
    view = m.view(s.table, 1.0)
    assert view.measured_cards == 0
    assert view.reasons[N2].startswith("Prometheus at http://x:9090 unreachable")
    m.add(samples(N1, 0, [5.0], start=10.0), now_s=10.0)  # a good read clears it
    assert m.view(s.table, 11.0).measured_cards == 1


def test_estimate_for_pods_placed_since_the_last_sample_counts_only_above_the_window() -> None:
    s = state("n1")
    row = s.table.row(N1)
    m = LoadModel(LoadSettings(window_s=300, settle_s=30, stale_after_s=1000))
    m.add(samples(N1, 0, [80.0, 10.0, 10.0]))  # p90 of the window is ~66 %; newest 10 %
    p = Placement(TaskId("t"), JobId("j"), N1, 0, 0, (GpuShare(0, 300, 2000),))
    s.assume(p)
    m.placed(p, now_s=31.0)
    view = m.view(s.table, 35.0)
    # newest 100 milli + 300 estimated = 400 < the window's p90: the aggregate stands
    agg = view.milli[row, 0]
    assert agg > 600.0
    m.placed(Placement(TaskId("u"), JobId("k"), N1, 0, 0, (GpuShare(0, 500, 0),)), 31.0)
    assert m.view(s.table, 35.0).milli[row, 0] == pytest.approx(100.0 + 800.0)
    # a sample taken settle_s after the placements shows them: the estimate is dropped
    m.add([CardSample(N1, 0, 62.0, 50.0)])
    p90 = float(np.quantile([80.0, 10.0, 10.0, 50.0], 0.9)) * 10.0  # 710, above 500 + 0
    assert m.view(s.table, 63.0).milli[row, 0] == pytest.approx(p90)


def test_assumptions_later_in_the_cycle_add_to_the_measured_load() -> None:
    s = state("n1")
    row = s.table.row(N1)
    m = LoadModel()
    m.add(samples(N1, 0, [30.0]))
    snap = s.snapshot()
    snap.load = m.view(snap.table, 1.0)
    with snap.trial():
        snap.assume(Placement(TaskId("t"), JobId("j"), N1, 0, 0, (GpuShare(0, 250, 100),)))
        assert snap.load.load(snap.table, row_array(row))[0, 0] == pytest.approx(550.0)
    assert snap.load.load(snap.table, row_array(row))[0, 0] == pytest.approx(300.0)


def row_array(row: int) -> np.ndarray:
    return np.asarray([row], np.int64)


@pytest.mark.parametrize(
    "field,value", [("window_s", 0), ("stale_after_s", -1.0), ("quantile", 1.5), ("settle_s", -2)]
)
def test_bad_settings_name_the_field(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=field):
        LoadSettings(**{field: value}).validate()


def test_measured_memory_rejects_a_card_short_of_memory_that_requests_say_fits() -> None:
    s = state("n1", gpu=1)  # 40960 MiB cards, nothing requested
    m = LoadModel()
    m.add(samples(N1, 0, [5.0], used=35_000, free=5_960))
    task = next(job("nb", gpu=share(200, 8192)).tasks())
    snap = s.snapshot()
    prof = measured_profile()
    p, _ = place_task(task, snap, prof)
    assert p is not None  # no measurement in the snapshot yet: by requests
    snap.load = m.view(snap.table, 1.0)
    p, status = place_task(task, snap, prof)
    assert p is None
    assert "1 no GPU with 8192 MiB free as measured" in status.message


def test_slices_go_to_a_cool_card_and_requests_alone_would_pick_the_hot_one() -> None:
    s = state("n1")  # 2 cards
    # card 0: a training slice asking 500 milli that keeps the card 95 % busy
    train = Placement(TaskId("train"), JobId("train"), N1, 0, 0, (GpuShare(0, 500, 10_000),))
    s.assume(train)
    m = LoadModel()
    m.add(
        samples(N1, 0, [95.0] * 3, used=10_000, free=30_960)
        + samples(N1, 1, [0.0] * 3, used=0, free=40_960)
    )
    task = next(job("nb", gpu=share(300, 4096)).tasks())
    snap = s.snapshot()
    by_requests, _ = place_task(task, snap, default_profile())
    assert by_requests is not None and by_requests.shares[0].index == 0  # best fit: hot card
    snap.load = m.view(snap.table, 40.0)
    measured, _ = place_task(task, snap, measured_profile())
    assert measured is not None and measured.shares[0].index == 1


def test_hot_card_spread_prefers_the_node_with_a_cool_card() -> None:
    s = state("n1", "n2", gpu=1)
    m = LoadModel()
    m.add(samples(N1, 0, [90.0] * 3) + samples(N2, 0, [20.0] * 3))
    task = next(job("nb", gpu=share(300, 1024)).tasks())
    snap = s.snapshot()
    snap.load = m.view(snap.table, 40.0)
    p, _ = place_task(task, snap, measured_profile())
    assert p is not None and p.node == N2


def test_target_load_packing_packs_whole_gpus_past_the_target_where_the_load_is_not_shared() -> (
    None
):
    s = ClusterState([node("n1", gpu=4), node("n2", gpu=4), node("n3", gpu=4)])
    m = LoadModel()
    # n1: 3 cards busy 100 % (outside work or whole GPUs measured), n2: 1 card busy, n3 idle
    m.add(
        samples(N1, 0, [100.0])
        + samples(N1, 1, [100.0])
        + samples(N1, 2, [100.0])
        + samples(N2, 0, [100.0])
        + [CardSample(NodeName("n3"), 0, 0.0, 0.0)]
    )
    snap = s.snapshot()
    snap.load = m.view(snap.table, 1.0)
    task = next(job("train", gpu=whole(1)).tasks())
    prof = measured_profile(scores={"target-load-packing": 1.0}, target_pct=60)
    p, _ = place_task(task, snap, prof)
    # after placement: n1 100 % (past the target), n2 50 %, n3 25 %. The card it takes on
    # n1 is idle and held alone; the busy cards beside it are load it does not share, so the
    # fullest node is no worse than one at the target (Trimaran's falling side would pick n2).
    assert p is not None and p.node == NodeName("n1")
    rows = np.asarray([snap.table.row(NodeName(n)) for n in ("n1", "n2", "n3")], np.int64)
    cs = CycleState(snap.table, {}, load=snap.load)
    scores = TargetLoadPacking(target_pct=60).score(cs, task, rows)
    assert scores.tolist() == [100.0, 93.0, 76.0]  # rising to the target, then flat


def test_measured_profile_without_a_load_places_as_the_default_profile() -> None:
    s = ClusterState([node(f"n{i}", gpu=4) for i in range(4)])
    jobs = [job(f"j{i}", gpu=share(100 * (i % 7 + 1), 1024 * (i % 5 + 1))) for i in range(20)]
    jobs += [job(f"w{i}", gpu=whole(1 + i % 2)) for i in range(5)]
    a, b = s.snapshot(), ClusterState([node(f"n{i}", gpu=4) for i in range(4)]).snapshot()
    for j in jobs:
        t = next(j.tasks())
        pa, _ = place_task(t, a, default_profile())
        pb, _ = place_task(t, b, measured_profile())
        assert pa == pb
        if pa is not None:
            a.assume(pa)
            b.assume(pb)  # type: ignore[arg-type]


@pytest.mark.parametrize("args", [{"hot_pct": 0}, {"target_pct": 100}, {"hot_pct": "x"}])
def test_bad_plugin_arguments_name_the_argument(args: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=next(iter(args))):
        measured_profile(**args)  # type: ignore[arg-type]


def test_whole_gpus_avoid_a_card_whose_memory_is_held_outside_the_requests() -> None:
    s = state("n1", gpu=2)
    m = LoadModel()
    m.add(
        samples(N1, 0, [30.0], used=20_000, free=20_960)
        + samples(N1, 1, [0.0], used=400, free=40_560)
    )
    snap = s.snapshot()
    snap.load = m.view(snap.table, 1.0)
    task = next(job("train", gpu=whole(1)).tasks())
    by_requests, _ = place_task(task, snap, default_profile())
    assert by_requests is not None and by_requests.shares[0].index == 0
    p, _ = place_task(task, snap, measured_profile())
    assert p is not None and p.shares[0].index == 1
    two = next(job("train2", gpu=whole(2)).tasks())
    p, status = place_task(two, snap, measured_profile())
    assert p is None and "free as measured" in status.message


def test_a_placement_that_left_comes_off_in_compute_and_its_memory_when_samples_show_it() -> None:
    s = state("n1", gpu=1)
    row = s.table.row(N1)
    p = Placement(TaskId("t"), JobId("j"), N1, 0, 0, (GpuShare(0, 500, 30_000),))
    s.assume(p)
    m = LoadModel(LoadSettings(settle_s=10, stale_after_s=1000, quantile=0.5))
    # at t=0, with the slice: 90 % busy, 20000 MiB held (it asked 30000), 20960 free
    m.add(samples(N1, 0, [90.0], used=20_000, free=20_960))
    s.forget(p.task)
    m.released(p, now_s=5.0)
    view = m.view(s.table, 6.0)
    # newest 900 - 500 that left = 400: the departure cut the window, whose aggregate (the
    # sample with the slice in it) no longer describes the card
    assert view.milli[row, 0] == pytest.approx(400.0)
    assert m.est_milli[0] == -500
    # its memory is not taken off: the sample's 20960 MiB free is all that is known free
    assert view.free_mib[row, 0] == 20_960
    m.add([CardSample(N1, 0, 20.0, 0.0, 0, 40_960)])  # shows it gone
    assert m.view(s.table, 21.0).free_mib[row, 0] == 40_960


def test_a_departure_cuts_the_window_so_a_pod_that_left_stops_counting() -> None:
    """A fine-tune kept its card 95 % busy for minutes, then left. Without the cut the p90 of
    the window (nine in ten samples at 95 %) held 950 milli on a card now idle for most of
    the next 5 minutes, and slices went to other cards."""
    s = state("n1", gpu=1)
    row = s.table.row(N1)
    p = Placement(TaskId("ft"), JobId("ft"), N1, 0, 0, (GpuShare(0, 500, 20_000),))
    s.assume(p)
    m = LoadModel(LoadSettings(window_s=300, settle_s=15, stale_after_s=1000))
    m.add(samples(N1, 0, [95.0] * 16))  # t = 0 .. 225
    s.forget(p.task)
    m.released(p, now_s=230.0)
    # between the departure and a sample: the newest sample (taken while it ran) less it
    assert m.view(s.table, 231.0).milli[row, 0] == pytest.approx(450.0)
    # a sample at the departure may still show it (the exporter's lag): taken as it is,
    # and not yet in the aggregate
    m.add([CardSample(N1, 0, 240.0, 60.0)])
    assert m.view(s.table, 241.0).milli[row, 0] == pytest.approx(600.0)
    # settle_s after the departure the samples show the card as it is: 2 %, not the p90
    m.add([CardSample(N1, 0, 255.0, 2.0), CardSample(N1, 0, 270.0, 2.0)])
    view = m.view(s.table, 271.0)
    assert view.milli[row, 0] == pytest.approx(20.0)
    assert m.readings(s.table, N1, 271.0)[0].util_pct == pytest.approx(2.0)
    # a window with no departure keeps its peak: bursts of the pods still there count
    m2 = LoadModel(LoadSettings(window_s=300, settle_s=15, stale_after_s=1000))
    m2.add(samples(N1, 0, [95.0] * 16 + [2.0, 2.0]))
    assert m2.view(s.table, 271.0).milli[row, 0] > 900.0


def test_a_slice_takes_the_card_a_busy_pod_just_left() -> None:
    """Card 0 held a fine-tune (95 % busy) that left; card 1 holds a notebook at 50 %. A new
    slice belongs on card 0: without the cut its window still read 950 milli and the slice
    went beside the notebook."""
    s = state("n1", gpu=2)
    nb = Placement(TaskId("nb"), JobId("nb"), N1, 0, 0, (GpuShare(1, 300, 4096),))
    ft = Placement(TaskId("ft"), JobId("ft"), N1, 0, 0, (GpuShare(0, 500, 4096),))
    s.assume(nb)
    s.assume(ft)
    m = LoadModel(LoadSettings(window_s=300, settle_s=15, stale_after_s=1000))
    m.add(samples(N1, 0, [95.0] * 16) + samples(N1, 1, [50.0] * 16))
    s.forget(ft.task)
    m.released(ft, now_s=230.0)
    m.add(samples(N1, 0, [1.0] * 3, start=240.0) + samples(N1, 1, [50.0] * 3, start=240.0))
    snap = s.snapshot()
    snap.load = m.view(snap.table, 271.0)
    task = next(job("inf", gpu=share(500, 4096)).tasks())
    p, _ = place_task(task, snap, measured_profile())
    assert p is not None and p.shares[0].index == 0
