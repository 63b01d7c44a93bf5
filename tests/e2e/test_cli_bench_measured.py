"""``gpupool bench measured-use`` as a user runs it."""

from __future__ import annotations

import json

import pytest

from gpupool.cli import main


def test_measured_use_prints_both_runs_and_measured_keeps_cards_cooler(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["bench", "measured-use", "--nodes", "4", "--hours", "1.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for run in ("request_only", "measured"):
        for key in ("hot_card_gpu_s", "memory_oversubscriptions", "allocation", "utilisation"):
            assert key in out[run], (run, key)
    req, meas = out["request_only"], out["measured"]
    # the scenario's fine-tuning slices make cards hot when packed by request
    assert req["hot_card_gpu_s"] > 0
    assert meas["hot_card_gpu_s"] < req["hot_card_gpu_s"]
    assert meas["memory_oversubscriptions"] == 0
    assert 0 < meas["allocation"] <= 100 and 0 < meas["utilisation"] <= 100


def test_measured_use_rejects_a_hot_share_above_a_card(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "measured-use", "--hot-pct", "120"]) == 2
    assert "--hot-pct 120: must be at most 100" in capsys.readouterr().err
