"""The virtual cluster's run ends, on the simulation kernel's queue."""

from __future__ import annotations

from gpupool.virtual import VirtualCluster


def test_runs_end_in_time_order_and_a_stopped_or_restarted_run_ends_once() -> None:
    vc = VirtualCluster()
    vc.start("a", (), 0.0, 30.0)
    vc.start("b", (), 0.0, 10.0)
    vc.start("c", (), 0.0, 10.0)
    vc.start("d", (), 0.0, 20.0)
    vc.stop("d")  # cancelled: never due
    vc.start("a", (), 5.0, 15.0)  # restarted: only its new end counts
    assert vc.running() == 3 and vc.end_of("a") == 15.0 and vc.end_of("d") is None
    assert vc.due(9.0) == []
    assert vc.due(15.0) == ["b", "c", "a"]  # by time, then the order they were started
    assert vc.due(100.0) == [] and vc.running() == 0 and vc.end_of("a") is None
    vc.stop("zzz")  # not running: nothing
