"""``gpupool sim scenario`` as a user runs it, on a tiny scenario file written per test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpupool.cli import main
from gpupool.sim import scenario_report as report

SCENARIO = """\
# two teams of 8 GPUs each on 4 nodes x 4 GPUs
kind: Cluster
nodePools:
- name: n
  count: 4
  cpu: 64
  memory: 512Gi
  gpus: {model: A100-80GB, count: 4, memory: 80Gi}
---
kind: ResourceFlavor
metadata: {name: any}
---
kind: ClusterQueue
metadata: {name: a}
spec:
  cohort: all
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: any, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]
---
kind: ClusterQueue
metadata: {name: b}
spec:
  cohort: all
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: any, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]
---
kind: LocalQueue
metadata: {name: a}
spec: {clusterQueue: a}
---
kind: LocalQueue
metadata: {name: b}
spec: {clusterQueue: b}
---
kind: Scenario
metadata: {name: two-teams}
spec:
  description: Two teams, one submitting five times as much.
  duration: 2h
  saturatedWindow: {start: 30m, end: 2h}
  tenants:
  - name: a
    queue: a
    users: [a1, a2]
    streams:
    - name: work
      poisson: {ratePerHour: 24}
      gpus: 1
      duration: {uniform: {min: 10m, max: 30m}}
  - name: b
    queue: b
    streams:
    - name: work
      poisson: {ratePerHour: 60}
      gpus: 1
      duration: {uniform: {min: 10m, max: 30m}}
    - name: gang
      jobs: [{at: 1h}]
      tasks: 2
      gpus: 4
      duration: 20m
      runLimit: 30m
"""


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "two-teams.yaml"
    path.write_text(SCENARIO)
    return path


def sim(path: Path, out: Path, *extra: str) -> list[str]:
    return ["sim", "scenario", str(path), "--out", str(out), *extra]


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_writes_summary_report_and_plots(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(sim(scenario, out, "--seeds", "1-2", "--json")) == 0
    captured = capsys.readouterr()
    summary = json.loads((out / report.SUMMARY_FILE).read_text())
    assert json.loads(captured.out) == summary  # --json prints the same document
    assert captured.err == ""  # no progress bar off a TTY
    assert summary["scenario"] == "two-teams" and summary["seeds"] == [1, 2]
    assert summary["cluster"] == {"nodes": 4, "gpus": 16}
    assert summary["window"] == {"start_s": 1800.0, "end_s": 7200.0}
    assert set(summary["runs"]) == {"1", "2"}
    for r in summary["runs"].values():
        assert set(r["queues"]) == {"a", "b"}
        for row in r["queues"].values():
            assert {
                "gpu_seconds",
                "share",
                "entitled_share",
                "nominal_share",
                "wait_s",
                "preempted",
            } <= set(row)
            assert set(row["wait_s"]) == {"p50", "p99", "max", "n"}
        assert set(r["users"]) == {"a1", "a2", "b"}
        for key in (
            "jain_index",
            "utilization",
            "partial_gang_placements",
            "max_preemptions_per_job",
            "preemptions",
            "wait_estimate",
        ):
            assert key in r
        assert r["partial_gang_placements"] == 0
        assert r["gangs"][0]["tasks"] == 2
    agg = summary["aggregate"]
    assert agg["jain_index"]["min"] is not None
    assert agg["queues"]["a"]["entitled_share"] == 0.5
    text = (out / report.REPORT_FILE).read_text()
    assert "# Scenario two-teams" in text and "| a | 1 | 8 | 50.0 % |" in text
    for name in (report.SHARES_PLOT, report.USERS_PLOT, report.WAITS_PLOT):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _without_timing(summary: dict[str, Any]) -> dict[str, Any]:
    summary.pop("wall_s")
    for r in summary["runs"].values():
        r.pop("wall_s")
    return summary


def test_same_file_and_seed_same_summary(scenario: Path, tmp_path: Path) -> None:
    flags = ("--seeds", "3", "--quiet", "--no-plots")
    assert main(sim(scenario, tmp_path / "a", *flags)) == 0
    assert main(sim(scenario, tmp_path / "b", *flags)) == 0
    a = json.loads((tmp_path / "a" / report.SUMMARY_FILE).read_text())
    b = json.loads((tmp_path / "b" / report.SUMMARY_FILE).read_text())
    assert _without_timing(a) == _without_timing(b)
    assert not (tmp_path / "a" / report.SHARES_PLOT).exists()


def test_duration_shortens_the_run(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(sim(scenario, out, "--duration", "1h", "--quiet", "--no-plots")) == 0
    assert capsys.readouterr().out == ""  # --quiet: no table
    summary = json.loads((out / report.SUMMARY_FILE).read_text())
    assert summary["duration_s"] == 3600.0 and summary["shortened"] is True
    assert summary["window"] == {"start_s": 1800.0, "end_s": 3600.0}


def test_prints_a_table_by_default(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(sim(scenario, tmp_path / "out", "--no-plots")) == 0
    text = capsys.readouterr().out
    assert "scenario two-teams" in text and "jain_index" in text and "wrote" in text


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (("--seeds", "3-1"), "--seeds '3-1': range '3-1' runs backwards"),
        (("--seeds", "x"), "--seeds 'x'"),
        (("--duration", "soon"), "--duration 'soon'"),
        (("--duration", "0s"), "--duration '0s': must be positive"),
        (("--duration", "10m"), "ends before the saturated window"),
    ],
)
def test_bad_flags_exit_2(
    scenario: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: tuple[str, ...],
    needle: str,
) -> None:
    out = tmp_path / "out"
    assert main(sim(scenario, out, *flags)) == 2
    line = one_line_error(capsys)
    assert line.startswith("gpupool: error: ConfigError: ") and needle in line, line
    assert not out.exists()  # checked before anything is written


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        (
            "      gpus: 1\n      duration: {uniform: {min: 10m, max: 30m}}\n  - name: b",
            "      gpus: one\n      duration: {uniform: {min: 10m, max: 30m}}\n  - name: b",
            'document 7 (Scenario two-teams, line 37): spec.tenants[0].streams[0].gpus="one" '
            "should be a valid integer",
        ),
        (
            "queue: b\n",
            "queue: c\n",
            'spec.tenants[1].queue="c" is not a LocalQueue of this file; known: a, b, default/a, '
            "default/b",
        ),
        (
            "nominalQuota: 8}]}]\n---\nkind: LocalQueue\nmetadata: {name: a}",
            "nominalQuota: -8}]}]\n---\nkind: LocalQueue\nmetadata: {name: a}",
            "document 4 (ClusterQueue b, line 21): spec.resourceGroups[0].flavors[0].resources[0]."
            "nominalQuota=-8 must be zero or more",
        ),
        (
            "  duration: 2h\n",
            "  duration: 2h\n  speed: 3\n",
            "spec.speed: unknown field; known fields here: duration, schedulingInterval",
        ),
        ("kind: Scenario", "kind: Scenari0", 'kind="Scenari0" is not a known kind'),
    ],
)
def test_bad_files_exit_2_naming_file_document_and_field(
    scenario: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    old: str,
    new: str,
    needle: str,
) -> None:
    text = scenario.read_text()
    assert old in text
    scenario.write_text(text.replace(old, new, 1))
    assert main(sim(scenario, tmp_path / "out")) == 2
    line = one_line_error(capsys)
    assert line.startswith(f"gpupool: error: ConfigError: {scenario}"), line
    assert needle in line, line


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(sim(tmp_path / "nope.yaml", tmp_path / "out")) == 2
    assert "nope.yaml: no such scenario file" in one_line_error(capsys)
