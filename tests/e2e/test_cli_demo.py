"""``gpupool demo`` and ``gpupool sim replay`` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpupool.cli import main
from gpupool.sim.demo import demo_cluster, demo_jobs, run_demo, summary

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)


# -- demo ----------------------------------------------------------------------------------


def test_demo_json_reports_a_whole_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--json", "--seed", "1", "--jobs", "60"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["seed"] == 1 and s["jobs"] == 60
    assert s["completed"] == 60 and s["rejected"] == 0
    assert s["nodes"] == 11 and s["gpus"] == 50
    assert sum(k["jobs"] for k in s["by_kind"].values()) == 60
    assert 0 < s["utilisation_pct"]["mean"] <= s["utilisation_pct"]["peak"] <= 100
    assert set(s["wait_s"]) >= {"p50", "p90", "p99"}
    assert len(s["moments"]) >= 2
    for moment in s["moments"]:
        for view in moment["nodes"].values():
            for card in view["cards"]:
                assert 0 <= card["used_milli"] <= 1000


def test_demo_is_the_same_for_the_same_seed(capsys: pytest.CaptureFixture[str]) -> None:
    main(["demo", "--json", "--seed", "5", "--jobs", "50"])
    first = capsys.readouterr().out
    main(["demo", "--json", "--seed", "5", "--jobs", "50"])
    assert capsys.readouterr().out == first
    main(["demo", "--json", "--seed", "6", "--jobs", "50"])
    assert capsys.readouterr().out != first


def test_demo_default_stream_is_busy_enough_to_show_waiting() -> None:
    run = run_demo()
    s = summary(run)
    assert s["completed"] == s["jobs"] == 150
    assert s["waited"] > 0 and s["wait_reasons"]
    assert any(m["pending"] for m in s["moments"])
    kinds = {j.id.split("-")[0] for j in run.jobs}
    assert kinds == {"train", "nb", "inf", "mig", "cpu"}
    assert any(j.pod_sets[0].count > 1 for j in run.jobs)  # gangs of several tasks


def test_demo_cluster_and_stream_shape() -> None:
    nodes = demo_cluster()
    assert sum(n.gpu_count for n in nodes) == 50
    assert any(g.mig for n in nodes for g in n.gpus)
    assert any(g.nvlink_peers for n in nodes for g in n.gpus)
    jobs = demo_jobs(seed=2, count=30)
    assert len(jobs) == 30 and len({j.id for j in jobs}) == 30
    assert [j.submit_time_s for j in jobs] == sorted(j.submit_time_s for j in jobs)


def test_demo_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--jobs", "80", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    for phrase in (
        "gpupool demo",
        "The cluster",
        "The workload",
        "a100-0",
        "mig-0",
        "Results",
        "GPU allocated",
        "scheduling cycles",
    ):
        assert phrase in out, phrase


def test_demo_bad_job_count_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--jobs", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpupool: error: ConfigError: --jobs 0")


def test_demo_runs_as_a_program() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpupool.cli", "demo", "--jobs", "40"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Results" in proc.stdout


# -- sim replay ----------------------------------------------------------------------------


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(f"{NODE_HEADER}\nn0,16000,65536,2,T4\nn1,32000,131072,4,V100M32\n")
    pods = tmp_path / "openb_pod_list_tiny.csv"
    rows = [
        f"p{i},2000,4096,{1 + i % 2},1000,,LS,Running,{10 * i},{10 * i + 300},{10 * i}"
        for i in range(12)
    ]
    pods.write_text("\n".join([POD_HEADER, *rows]) + "\n")
    return nodes, pods


def test_replay_cli_writes_outputs_and_json(
    trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = trace
    out = tmp_path / "out"
    code = main(
        [
            "sim",
            "replay",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--out",
            str(out),
            "--policy",
            "spread",
            "--json",
        ]
    )
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((out / "summary.json").read_text())
    assert printed["jobs"] == 12 and printed["completed"] == 12 and printed["policy"] == "spread"
    assert printed["waited"] > 0  # 18 GPUs of demand on 6 cards
    assert (out / "report.md").exists() and (out / "utilisation.png").exists()


def test_replay_cli_human_output(
    trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = trace
    code = main(
        [
            "sim",
            "replay",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--out",
            str(tmp_path / "o"),
            "--limit",
            "5",
            "--time-scale",
            "2",
            "--no-plot",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "replay of openb_pod_list_tiny.csv" in out and "5 submitted" in out
    assert not (tmp_path / "o" / "utilisation.png").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--time-scale", "-1"], "ConfigError: --time-scale"),
        (["--policy", "nope"], "ConfigError: --policy: unknown policy 'nope'"),
        (["--limit", "0"], "ConfigError: --limit 0"),
    ],
)
def test_replay_cli_bad_flags_exit_2(
    trace: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    nodes, pods = trace
    code = main(
        [
            "sim",
            "replay",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--out",
            str(tmp_path / "o"),
            *extra,
        ]
    )
    assert code == 2
    assert message in capsys.readouterr().err


def test_replay_cli_bad_files_exit_2(
    trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, _ = trace
    short = tmp_path / "openb_pod_list_multigpu50.csv"
    short.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,1000\n")
    args = ["sim", "replay", "--nodes", str(nodes), "--out", str(tmp_path / "o")]
    assert main([*args, "--pods", str(short)]) == 2
    err = capsys.readouterr().err
    assert "TraceError" in err and "no creation or deletion times" in err
    assert main([*args, "--pods", str(tmp_path / "missing.csv")]) == 2
    assert "cannot be read" in capsys.readouterr().err
    broken = tmp_path / "broken.csv"
    broken.write_text(f"{POD_HEADER}\np0,abc,1024,1,1000,,LS,Running,0,10,0\n")
    assert main([*args, "--pods", str(broken)]) == 2
    assert "broken.csv:2: cpu_milli='abc' is not an integer" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
