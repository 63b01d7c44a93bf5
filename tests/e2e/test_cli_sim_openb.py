"""``gpupool sim openb`` as a user runs it, on a tiny openb-format trace written per test."""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpupool.cli import main
from gpupool.core.errors import ConfigError, GpupoolError, InvalidJobError, TraceError
from gpupool.sim import openb_cli, report
from gpupool.sim.progress import experiment_bar

experiment = pytest.importorskip("gpupool.sim.openb")

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
NODES = [  # 4 nodes, 16 GPUs
    ("openb-node-0000", 96000, 786432, 8, "G2"),
    ("openb-node-0001", 32000, 131072, 4, "V100M16"),
    ("openb-node-0002", 64000, 262144, 2, "T4"),
    ("openb-node-0003", 64000, 262144, 2, "P100"),
]
PODS = [  # (cpu_milli, memory_mib, num_gpu, gpu_milli): 12.5 GPUs of demand over 20 pods
    (4000, 8192, 0, 0),
    (2000, 4096, 0, 0),
    (3150, 8192, 1, 810),
    (3150, 8192, 1, 810),
    (6000, 12288, 1, 460),
    (6000, 12288, 1, 460),
    (4000, 8192, 1, 220),
    (4000, 8192, 1, 350),
    (8000, 16384, 1, 550),
    (2000, 4096, 1, 50),
    (11300, 32768, 1, 1000),
    (11300, 32768, 1, 1000),
    (11400, 32768, 1, 1000),
    (11400, 32768, 1, 1000),
    (12000, 16384, 1, 1000),
    (12000, 16384, 1, 1000),
    (16000, 65536, 2, 1000),
    (16000, 65536, 2, 1000),
    (4000, 8192, 1, 440),
    (4000, 8192, 1, 650),
]


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes = tmp_path / "openb_node_list_gpu_node.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(",".join(map(str, n)) + "\n" for n in NODES)
    )
    pods = tmp_path / "openb_pod_list_tiny.csv"
    pods.write_text(
        POD_HEADER
        + "\n"
        + "".join(
            f"openb-pod-{i:04d},{c},{m},{g},{milli},,LS,Running,{i},{i + 100},{i}\n"
            for i, (c, m, g, milli) in enumerate(PODS)
        )
    )
    return nodes, pods


def sim(trace: tuple[Path, Path], out: Path, *extra: str) -> list[str]:
    nodes, pods = trace
    return ["sim", "openb", "--nodes", str(nodes), "--pods", str(pods), "--out", str(out), *extra]


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# --- the happy path -----------------------------------------------------------------------


def test_writes_summary_report_and_plots(
    trace: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    code = main(sim(trace, out, "--policy", "fgd,bestfit", "--seeds", "42-43", "--json"))
    assert code == 0
    captured = capsys.readouterr()
    summary = json.loads((out / report.SUMMARY_FILE).read_text())
    assert json.loads(captured.out) == summary  # --json prints the same document
    assert "wrote" in captured.err and "━" not in captured.err  # no bar off a TTY
    assert summary["trace"] == "tiny"
    assert (summary["nodes"], summary["gpus"], summary["seeds"]) == (4, 16, [42, 43])
    assert list(summary["policies"]) == ["fgd", "bestfit"]
    for p in summary["policies"].values():
        assert set(p["unallocated_gpu_pct"]) == {"100", "130"}
        assert set(p["frag_pct"]) == {"50", "80", "90"}
        for stat in [*p["unallocated_gpu_pct"].values(), *p["frag_pct"].values()]:
            assert {"mean", "sd"} <= set(stat)
        assert p["wall_s"] > 0
        assert p["decisions"] > len(PODS)  # tuned up to 1.3x capacity, both seeds
        assert set(p["decision_us"]) >= {"p50", "p99"}
        assert "published" not in p  # figures exist for the default trace only
    for name in (
        report.REPORT_FILE,
        report.CURVES_FILE,
        report.PLOT_UNALLOCATED,
        report.PLOT_BARS,
        report.PLOT_FRAG,
    ):
        assert (out / name).stat().st_size > 0


def _without_timing(summary: dict[str, object]) -> dict[str, object]:
    timing = {"wall_s", "wall_s_max", "decision_us", "decisions_per_s"}
    policies = summary["policies"]
    assert isinstance(policies, dict)
    for p in policies.values():
        for key in timing:
            p.pop(key)
        p["per_seed"].pop("wall_s")
    return summary


def test_same_inputs_same_outputs_with_or_without_workers(
    trace: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    flags = ("--policy", "random,gpupool", "--seeds", "7,9", "--quiet", "--no-plots")
    assert main(sim(trace, tmp_path / "a", *flags)) == 0
    # A real process, as users run it: the spawned workers import gpupool afresh.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpupool.cli",
            *sim(trace, tmp_path / "b", *flags),
            "--workers",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(openb_cli.__file__).parents[2])},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and proc.stdout == ""  # --quiet and no TTY: silent
    a = json.loads((tmp_path / "a" / report.SUMMARY_FILE).read_text())
    b = json.loads((tmp_path / "b" / report.SUMMARY_FILE).read_text())
    assert _without_timing(a) == _without_timing(b)
    for name in (report.CURVES_FILE,):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_default_trace_is_compared_with_published_figures(
    trace: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    code = main(
        sim(
            trace,
            out,
            "--policy",
            "fgd,gpupool",
            "--seeds",
            "1",
            "--trace",
            "default",
            "--quiet",
            "--no-plots",
        )
    )
    assert code == 0
    summary = json.loads((out / report.SUMMARY_FILE).read_text())
    fgd = summary["policies"]["fgd"]
    assert fgd["published"]["unallocated_gpu_pct"]["100"] == experiment.PUBLISHED_DEFAULT["fgd"]
    assert fgd["unallocated_gpu_pct"]["100"]["sd"] == 0  # one seed
    assert "published" not in summary["policies"]["gpupool"]
    assert "| fgd | 4.77 |" in (out / report.REPORT_FILE).read_text()


# --- flags --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seeds"),
    [
        ("42-51", list(range(42, 52))),
        ("42,43,50", [42, 43, 50]),
        ("42", [42]),
        ("50, 42-44", [42, 43, 44, 50]),
        ("0", [0]),
    ],
)
def test_seeds(text: str, seeds: list[int]) -> None:
    assert openb_cli.parse_seeds(text) == seeds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected a range"),
        ("42,", "expected a range"),
        ("x", "'x' is not a seed"),
        ("-3", "'-3' is not a seed"),
        ("51-42", "runs backwards"),
        ("42-44,43", "seed 43 is given twice"),
    ],
)
def test_bad_seeds(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        openb_cli.parse_seeds(text)


def test_policies_keep_their_order_and_all_means_every_policy() -> None:
    assert openb_cli.parse_policies("fgd,random", experiment.POLICIES) == ["fgd", "random"]
    assert openb_cli.parse_policies("all", experiment.POLICIES) == list(experiment.POLICIES)
    with pytest.raises(ConfigError, match="'fgd' is given twice"):
        openb_cli.parse_policies("fgd,fgd", experiment.POLICIES)


def test_trace_name_from_the_pods_file() -> None:
    assert openb_cli.trace_name("/x/openb_pod_list_gpushare40.csv") == "gpushare40"
    assert openb_cli.trace_name("mine.csv") == "mine"


def test_unknown_policy_is_refused_before_any_work(
    trace: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    assert main(sim(trace, out, "--policy", "fgd,tetris")) == 2
    line = one_line_error(capsys)
    assert "unknown policy 'tetris'" in line
    assert ", ".join(experiment.POLICIES) in line
    assert not out.exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--seeds", "9-1"), "--seeds '9-1': range '9-1' runs backwards"),
        (("--workers", "0"), "--workers '0': expected a whole number"),
        (("--workers", "two"), "--workers 'two'"),
        (("--tune", "0"), "--tune '0': expected a positive number"),
        (("--tune", "abc"), "--tune 'abc'"),
    ],
)
def test_bad_flags_exit_2_with_one_line(
    trace: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: tuple[str, ...],
    message: str,
) -> None:
    out = tmp_path / "out"
    assert main(sim(trace, out, "--policy", "fgd", *flags)) == 2
    line = one_line_error(capsys)
    assert line.startswith("gpupool: error: ConfigError: ") and message in line
    assert not out.exists()


def test_missing_and_unreadable_files(
    trace: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    nodes, pods = trace
    out = tmp_path / "out"
    base = ["sim", "openb", "--policy", "fgd", "--out", str(out)]
    assert main([*base, "--nodes", str(tmp_path / "no.csv"), "--pods", str(pods)]) == 2
    assert f"--nodes {tmp_path / 'no.csv'}: no such file" in one_line_error(capsys)
    assert main([*base, "--nodes", str(nodes), "--pods", str(tmp_path)]) == 2
    assert "--pods" in one_line_error(capsys)
    # A pod list given as the node list: the loader names the file and the header.
    assert main([*base, "--nodes", str(pods), "--pods", str(pods)]) == 2
    line = one_line_error(capsys)
    assert "TraceError" in line and "openb_pod_list_tiny.csv:1" in line
    assert not out.exists()


def test_out_must_be_a_folder(
    trace: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    assert main(sim(trace, afile, "--policy", "fgd")) == 2
    assert "--out" in one_line_error(capsys)


def test_progress_bar_ticks_once_per_experiment(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with experiment_bar(True, 2, "openb experiments", openb_cli._label) as tick:
        tick(SimpleNamespace(policy="fgd", seed=42))  # type: ignore[arg-type]
        tick(SimpleNamespace(policy="fgd", seed=43))  # type: ignore[arg-type]
    text = err.getvalue()
    assert "2/2" in text and "last: fgd seed 43" in text
    with experiment_bar(False, 2, "openb experiments", openb_cli._label) as tick:
        tick(SimpleNamespace(policy="fgd", seed=42))  # type: ignore[arg-type]
    assert err.getvalue() == text


def test_worker_errors_survive_the_trip_to_the_parent() -> None:
    plain = TraceError("pods.csv:3: cpu_milli='x' is not an integer")
    assert openb_cli._portable(plain) is plain
    odd = openb_cli._portable(InvalidJobError("gpu.gpu_milli", 1500, "at most 1000", job="j"))
    back = pickle.loads(pickle.dumps(odd))
    assert type(back) is GpupoolError
    assert str(back) == "InvalidJobError: job j: gpu.gpu_milli=1500: at most 1000"
