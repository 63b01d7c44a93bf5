"""Time-based replay on tiny openb-format traces written per test."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from gpupool.core import ConfigError, JobId, TraceError
from gpupool.core.cluster import ClusterState
from gpupool.core.cycle import run_cycle
from gpupool.core.model import GpuRequest, Node
from gpupool.core.placement.place import place_job
from gpupool.core.placement.registry import default_profile
from gpupool.core.reasons import Reason
from gpupool.sim.engine import JobOutcome
from gpupool.sim.replay import policy_names, run_replay, trace_jobs
from gpupool.sim.replay_reasons import reason_kinds, wait_reasons
from gpupool.sim.replay_report import PLOT_FILE, REPORT_FILE, SUMMARY_FILE, write_outputs
from gpupool.sim.traces.openb import load_pods
from tests.builders import job, mig, mig_node, node, share, whole

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
SHORT_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "openb"

# One node, two GPUs. p0 holds both from 1000 to 1100; p1 (one GPU, 20 s) arrives at 1010 and
# waits until 1100; p2 (CPU only) and p3 (a slice, never scheduled in the real cluster) fit.
NODES = ["n0,16000,65536,2,T4"]
PODS = [
    "p0,4000,8192,2,1000,,LS,Succeeded,1000,1100,1000",
    "p1,2000,4096,1,1000,,BE,Succeeded,1010,1030,1012",
    "p2,1000,1024,0,0,,BE,Succeeded,1020,1025,1020",
    "p3,1000,1024,1,500,,LS,Pending,1200,1260,",
]


def write(tmp_path: Path, name: str, header: str, rows: Sequence[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    return (
        write(tmp_path, "nodes.csv", NODE_HEADER, NODES),
        write(tmp_path, "openb_pod_list_tiny.csv", POD_HEADER, PODS),
    )


def test_pods_arrive_run_their_life_and_wait_when_full(trace: tuple[Path, Path]) -> None:
    nodes, pods = trace
    out = run_replay(nodes, pods)
    recs = out.result.records
    assert recs[JobId("p0")].start_s == 0.0 and recs[JobId("p0")].end_s == 100.0
    assert recs[JobId("p1")].submit_s == 10.0
    assert recs[JobId("p1")].start_s == 100.0  # waited for p0 to leave
    assert recs[JobId("p1")].end_s == 120.0  # and still ran its 20 s
    assert recs[JobId("p2")].wait_s == 0.0
    assert recs[JobId("p3")].start_s == 200.0  # empty scheduled_time: it arrives all the same
    s = out.summary
    assert s["jobs"] == 4 and s["completed"] == 4 and s["rejected"] == 0
    assert s["waited"] == 1
    assert s["wait_s"]["max"] == 90.0 and s["wait_s"]["p50"] == 0.0
    assert s["nodes"] == 1 and s["gpus"] == 2
    assert s["utilisation_pct"]["peak"] == 100.0
    # GPU-seconds: p0 2 x 100, p1 1 x 20, p3 0.5 x 60
    assert s["gpu_hours"] == pytest.approx((200 + 20 + 30) / 3600, abs=1e-3)
    assert s["span_s"] == 260.0
    assert s["trace"] == "openb_pod_list_tiny.csv" and s["policy"] == "binpack"


def test_time_scale_moves_arrivals_not_durations(trace: tuple[Path, Path]) -> None:
    nodes, pods = trace
    out = run_replay(nodes, pods, time_scale=0.5)
    recs = out.result.records
    assert recs[JobId("p1")].submit_s == 5.0
    assert recs[JobId("p3")].submit_s == 100.0
    assert recs[JobId("p0")].end_s == 100.0
    assert out.summary["time_scale"] == 0.5


def test_limit_keeps_the_earliest_arrivals(tmp_path: Path) -> None:
    rows = [
        "late,1000,1024,0,0,,BE,Running,500,600,500",
        "early,1000,1024,0,0,,BE,Running,100,200,100",
        "mid,1000,1024,0,0,,BE,Running,300,400,300",
    ]
    jobs = trace_jobs(load_pods(write(tmp_path, "p.csv", POD_HEADER, rows)), limit=2)
    assert [j.id for j in jobs] == ["early", "mid"]
    assert [j.submit_time_s for j in jobs] == [0.0, 200.0]
    assert [j.duration_s for j in jobs] == [100.0, 100.0]


def test_the_five_column_layout_is_refused_with_a_reason(tmp_path: Path) -> None:
    nodes = write(tmp_path, "nodes.csv", NODE_HEADER, NODES)
    pods = write(tmp_path, "openb_pod_list_multigpu50.csv", SHORT_HEADER, ["p0,4000,8192,1,1000"])
    with pytest.raises(TraceError, match=r"5-column layout .* no creation or deletion times"):
        run_replay(nodes, pods)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"time_scale": 0.0}, "--time-scale"),
        ({"time_scale": float("nan")}, "--time-scale"),
        ({"limit": 0}, "--limit"),
        ({"policy": "gpu-fit"}, r"unknown policy .gpu-fit.; known: .*binpack"),
        ({"policy": "nope"}, "unknown policy"),
    ],
)
def test_bad_options(trace: tuple[Path, Path], kwargs: dict[str, object], match: str) -> None:
    nodes, pods = trace
    with pytest.raises(ConfigError, match=match):
        run_replay(nodes, pods, **kwargs)  # type: ignore[arg-type]


def test_empty_pod_list_is_a_trace_error(tmp_path: Path) -> None:
    nodes = write(tmp_path, "nodes.csv", NODE_HEADER, NODES)
    pods = write(tmp_path, "pods.csv", POD_HEADER, [])
    with pytest.raises(TraceError, match="no pods"):
        run_replay(nodes, pods)


def test_every_policy_replays(trace: tuple[Path, Path]) -> None:
    nodes, pods = trace
    names = policy_names()
    assert {"binpack", "spread"} <= set(names)
    assert not {"gpu-fit", "best-fit-cards", "node-resources"} & set(names)
    for name in names:
        out = run_replay(nodes, pods, policy=name)
        assert out.summary["completed"] == 4, name


def test_a_pod_no_node_can_hold_is_rejected(tmp_path: Path) -> None:
    nodes = write(tmp_path, "nodes.csv", NODE_HEADER, NODES)
    pods = write(
        tmp_path,
        "pods.csv",
        POD_HEADER,
        [*PODS, "huge,4000,8192,8,1000,,LS,Running,1050,1060,1050"],
    )
    out = run_replay(nodes, pods)
    assert out.summary["rejected"] == 1 and out.summary["completed"] == 4
    assert "more GPUs than any node has" in out.result.records[JobId("huge")].rejected


def test_outputs_are_written(trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = trace
    out = run_replay(nodes, pods)
    paths = write_outputs(tmp_path / "out", out.summary, out.result)
    assert [p.name for p in paths] == [SUMMARY_FILE, REPORT_FILE, PLOT_FILE]
    summary = json.loads((tmp_path / "out" / SUMMARY_FILE).read_text())
    assert summary == json.loads(json.dumps(out.summary))
    for key in ("jobs", "completed", "wait_s", "utilisation_pct", "gpu_hours"):
        assert key in summary
    assert set(summary["wait_s"]) >= {"p50", "p90", "p99"}
    report = (tmp_path / "out" / REPORT_FILE).read_text()
    assert "# Time-based replay: openb_pod_list_tiny.csv" in report
    assert "| whole GPUs | 1 |" in report  # why p1 waited
    assert f"]({PLOT_FILE})" in report
    assert (tmp_path / "out" / PLOT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _why(nodes: list[Node], gpu: GpuRequest, busy: bool = False) -> tuple[Reason, ...]:
    """The reasons the default profile gives for one task of ``gpu`` on ``nodes`` (with
    ``busy``, after as many such tasks as there are nodes took their place)."""
    state = ClusterState(nodes)
    if busy:
        run_cycle(state, [job(f"b{i}", gpu=gpu) for i in range(len(nodes))], default_profile())
    placements, status = place_job(job("j", gpu=gpu), state.snapshot(), default_profile())
    assert not placements
    return status.reasons


def test_reason_kinds_name_what_was_short() -> None:
    cordoned = replace(node("c", gpu=4), schedulable=False)
    small = node("s", gpu=4, cpu=500)
    busy = node("b", gpu=2)
    kinds = reason_kinds(_why([node("a", gpu=2), busy, small, cordoned], whole(4)))
    assert kinds == ["whole GPUs", "cordoned", "CPU or memory"]  # most nodes first
    assert reason_kinds(
        _why(
            [node("a", gpu=1, gpu_mem=10000), node("h", model="H100")], share(500, 20000, ["A100"])
        )
    ) == ["GPU model", "room on one GPU"]
    assert reason_kinds(
        _why(
            [
                mig_node("m", "1g.10gb", per_card=1, cards=1),
                mig_node("n", "1g.10gb", per_card=1, cards=1),
            ],
            mig("1g.10gb"),
            busy=True,
        )
    ) == ["MIG instance"]
    # a slice with memory only is short of room on one card, not of a GPU model
    assert reason_kinds(_why([node("a", gpu=1, gpu_mem=10000)], share(0, 20000))) == [
        "room on one GPU"
    ]
    assert reason_kinds([Reason("quota", "queue a at quota (6/6 GPUs)")]) == ["quota"]
    assert reason_kinds(()) == []


def test_a_gangs_kinds_are_its_failing_tasks() -> None:
    state = ClusterState([node("a", gpu=2), node("b", gpu=2, model="H100")])
    placements, status = place_job(
        job("g", tasks=2, gpu=whole(2, models=["A100"])), state.snapshot(), default_profile()
    )
    assert not placements and status.message.startswith("gang g: 1/2 tasks fit")
    assert reason_kinds(status.reasons) == ["GPU model", "whole GPUs"]


def test_wait_reasons_group_by_usage_not_inventory() -> None:
    def rec(name: str, *reasons: Reason) -> JobOutcome:
        return JobOutcome(JobId(name), 0.0, 1, 1000, parks=1, first_reasons=reasons)

    model = Reason("gpu-model", "no A100 GPU", 2, 3, resolvable=False)
    records = [
        rec("a", model, Reason("gpu-fit", "fewer than 1 whole GPUs free", 1, 3, gpu="whole")),
        rec("b", Reason("gpu-fit", "fewer than 2 whole GPUs free", 1, 3, gpu="whole"), model),
        rec("c", replace(model, nodes=3)),
        JobOutcome(JobId("d"), 0.0, 1, 0),  # never parked
    ]
    assert wait_reasons(records) == {"whole GPUs": 2, "GPU model": 1}


@pytest.mark.openb
def test_default_trace_replays_whole() -> None:
    nodes = SHARED / "openb_node_list_gpu_node.csv"
    pods = SHARED / "openb_pod_list_default.csv"
    if not pods.exists():
        pytest.skip(f"openb trace not found at {SHARED}")
    out = run_replay(nodes, pods)
    s = out.summary
    assert s["jobs"] == 8152 and s["completed"] == 8152 and s["nodes"] == 1213
    assert s["gpus"] == 6212
    assert 0 < s["utilisation_pct"]["peak"] < 100
