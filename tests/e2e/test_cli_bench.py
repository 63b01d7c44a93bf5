"""``gpupool bench placement`` as a user runs it."""

from __future__ import annotations

import json

import pytest

from gpupool.cli import main


def test_bench_placement_prints_the_fixed_json_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "bench",
                "placement",
                "--nodes",
                "50",
                "--gpus-per-node",
                "4",
                "--pods",
                "400",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    for key in ("nodes", "pods", "placed", "placements_per_s", "decision_us", "peak_rss_mib"):
        assert key in out
    assert out["nodes"] == 50 and out["pods"] == 400
    assert 0 < out["placed"] <= 400
    assert out["decision_us"]["p50"] <= out["decision_us"]["p99"]


def test_bench_rejects_an_unknown_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "placement", "--nodes", "5", "--pods", "5", "--policy", "nope"]) == 2
    err = capsys.readouterr().err
    assert "--policy 'nope': not a known policy; known:" in err and "binpack" in err


def test_bench_rejects_a_non_positive_count(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "placement", "--nodes", "0"])
    assert info.value.code == 2
    assert "0 must be at least 1" in capsys.readouterr().err


def test_bench_placement_offers_several_pods_per_cycle_with_one_view(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["bench", "placement", "--nodes", "20", "--gpus-per-node", "4", "--pods", "210"]
    assert main([*args, "--measured", "--cycle-pods", "7", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cycle_pods"] == 7 and out["measured"] is True
    assert 0 < out["placed"] <= 210
    assert out["view_us_p50"] > 0  # one view a cycle, timed
    assert main([*args, "--cycle-pods", "7", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["view_us_p50"] == 0  # by requests: no view
    with pytest.raises(SystemExit) as info:
        main([*args, "--cycle-pods", "0"])
    assert info.value.code == 2
    assert "0 must be at least 1" in capsys.readouterr().err


def test_bench_admission_prints_the_fixed_json_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "bench",
                "admission",
                "--queues",
                "20",
                "--cohorts",
                "4",
                "--workloads",
                "300",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    for key in ("queues", "workloads", "admitted", "admissions_per_s", "wall_s", "peak_rss_mib"):
        assert key in out
    assert out["queues"] == 20 and out["workloads"] == 300
    assert out["admitted"] == 300, "the cluster is sized to hold every workload"
