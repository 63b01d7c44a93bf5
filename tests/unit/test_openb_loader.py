"""The openb loaders: both pod layouts, the node list, conversion to jobs, and every error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpupool.core import GpuKind, TraceError
from gpupool.sim.traces.openb import (
    GPU_MEMORY_MIB,
    POD_COLUMNS,
    POD_COLUMNS_SHORT,
    UNKNOWN_GPU_MEMORY_MIB,
    TracePod,
    load_nodes,
    load_pods,
    to_job,
)

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = ",".join(POD_COLUMNS)
SHORT_HEADER = ",".join(POD_COLUMNS_SHORT)


def write(tmp_path: Path, name: str, *lines: str) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_nodes_get_cards_of_their_model(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "nodes.csv",
        NODE_HEADER,
        "n0,64000,262144,2,P100",
        "n1,96000,786432,8,G2",
        "n2,32000,65536,0,",
    )
    nodes = load_nodes(path)
    assert [n.name for n in nodes] == ["n0", "n1", "n2"]
    assert nodes[0].cpu_milli == 64000 and nodes[0].memory_mib == 262144
    assert [g.index for g in nodes[0].gpus] == [0, 1]
    assert {g.model for g in nodes[0].gpus} == {"P100"}
    assert nodes[0].gpus[0].memory_mib == GPU_MEMORY_MIB["P100"] == 16384
    assert nodes[1].gpus[7].memory_mib == UNKNOWN_GPU_MEMORY_MIB
    assert nodes[2].gpus == ()
    assert nodes[0].labels == {"gpu-model": "P100"}


def test_full_layout(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "pods.csv",
        POD_HEADER,
        "p0,12000,16384,1,1000,,LS,Running,0,100,0",
        "p1,6000,12288,1,460,T4|P100,BE,Pending,5,9,",
        "p2,4000,0,0,0,,LS,Running,1,2,1",
        "p3,88000,327680,8,1000,,Burstable,Succeeded,3,4,3",
    )
    pods = load_pods(path)
    assert pods[0] == TracePod("p0", 12000, 16384, 1, 1000, frozenset(), "LS", "Running", 0, 100, 0)
    assert pods[1].gpu_spec == frozenset({"T4", "P100"})
    assert pods[1].scheduled_time is None and pods[1].is_sharing
    assert pods[3].total_gpu_milli == 8000


def test_short_layout(tmp_path: Path) -> None:
    pods = load_pods(write(tmp_path, "m.csv", SHORT_HEADER, "p0,12000,16384,2,1000"))
    assert pods == [TracePod("p0", 12000, 16384, 2, 1000)]
    assert pods[0].creation_time is None and pods[0].qos == ""


@pytest.mark.parametrize(
    ("num_gpu", "milli", "kind", "count", "slice_milli"),
    [
        (0, 0, GpuKind.NONE, 0, 0),
        (1, 1000, GpuKind.WHOLE, 1, 0),
        (4, 1000, GpuKind.WHOLE, 4, 0),
        (1, 460, GpuKind.SLICE, 0, 460),
    ],
)
def test_to_job(num_gpu: int, milli: int, kind: GpuKind, count: int, slice_milli: int) -> None:
    pod = TracePod(
        "p", 3000, 1024, num_gpu, milli, frozenset({"T4"}), creation_time=10, deletion_time=25
    )
    job = to_job(pod)
    (task,) = list(job.tasks())
    req = task.request
    assert req.kind is kind and req.count == count and req.gpu_milli == slice_milli
    assert req.memory_mib == 0
    assert req.models == (frozenset({"T4"}) if num_gpu else frozenset())
    assert task.cpu_milli == 3000 and task.memory_mib == 1024
    assert job.id == "p" and job.submit_time_s == 10 and job.duration_s == 15


BAD_PODS = [
    ("p0,12000,16384,1,abc,,LS,Running,0,1,0", "pods.csv:2: gpu_milli='abc' is not an integer"),
    ("p0,-1,16384,1,1000,,LS,Running,0,1,0", "pods.csv:2: cpu_milli='-1' is negative"),
    ("p0,1,16384,1,1200,,LS,Running,0,1,0", "pods.csv:2: gpu_milli='1200' is more than"),
    ("p0,1,16384,0,500,,LS,Running,0,1,0", "pods.csv:2: gpu_milli='500' is set on a pod"),
    ("p0,1,16384,2,0,,LS,Running,0,1,0", "pods.csv:2: gpu_milli='0' is 0 on a pod"),
    ("p0,1,16384,2,500,,LS,Running,0,1,0", "pods.csv:2: gpu_milli='500' must be 1000"),
    ("p0,1,16384,1,500,,LS,Running,9,1,0", "pods.csv:2: deletion_time='1' is before"),
    ("p0,1,16384,1,500,,LS,Running,x,1,0", "pods.csv:2: creation_time='x' is not an integer"),
    ("p0,1,16384,1,500,,LS", "pods.csv:2: 7 fields, the header has 11"),
    (",1,16384,1,500,,LS,Running,0,1,0", "pods.csv:2: name='' is empty"),
]


@pytest.mark.parametrize(("row", "message"), BAD_PODS)
def test_bad_pod_rows(tmp_path: Path, row: str, message: str) -> None:
    path = write(tmp_path, "pods.csv", POD_HEADER, row)
    with pytest.raises(TraceError, match="^" + re.escape(message)):
        load_pods(path)


def test_error_names_the_right_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "openb_pod_list_default.csv",
        SHORT_HEADER,
        "p0,1,1,0,0",
        "p1,1,1,0,0",
        "p2,1,1,1,abc",
    )
    with pytest.raises(TraceError) as err:
        load_pods(path)
    assert str(err.value) == "openb_pod_list_default.csv:4: gpu_milli='abc' is not an integer"


def test_duplicate_pod_name(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", SHORT_HEADER, "p0,1,1,0,0", "p0,1,1,0,0")
    with pytest.raises(TraceError, match=re.escape("pods.csv:3: name='p0' appears twice")):
        load_pods(path)


@pytest.mark.parametrize(
    "header",
    [
        "name,cpu_milli,memory_mib,num_gpu",
        "name,cpu,memory_mib,num_gpu,gpu_milli",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec",
    ],
)
def test_wrong_pod_header(tmp_path: Path, header: str) -> None:
    path = write(tmp_path, "pods.csv", header, "p0,1,1,0,0")
    with pytest.raises(TraceError, match=re.escape("pods.csv:1: header")):
        load_pods(path)


def test_missing_column_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", "name,cpu_milli,memory_mib,num_gpu")
    with pytest.raises(TraceError, match=re.escape("missing gpu_milli")):
        load_pods(path)


def test_empty_and_absent_files(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=re.escape("pods.csv:1: the file is empty")):
        load_pods(write(tmp_path, "pods.csv"))
    with pytest.raises(TraceError, match=re.escape("cannot be read")):
        load_pods(tmp_path / "absent.csv")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("n0,64000,262144,two,P100", "nodes.csv:2: gpu='two' is not an integer"),
        ("n0,64000,-5,2,P100", "nodes.csv:2: memory_mib='-5' is negative"),
        ("n0,64000,262144,2,", "nodes.csv:2: model='' is empty on a node with 2 GPUs"),
    ],
)
def test_bad_node_rows(tmp_path: Path, row: str, message: str) -> None:
    with pytest.raises(TraceError, match="^" + re.escape(message)):
        load_nodes(write(tmp_path, "nodes.csv", NODE_HEADER, row))


def test_node_header_uses_gpu_not_num_gpu(tmp_path: Path) -> None:
    path = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,num_gpu,model", "n0,1,1,1,T4")
    with pytest.raises(TraceError, match=re.escape("missing gpu")):
        load_nodes(path)


def test_duplicate_node(tmp_path: Path) -> None:
    path = write(tmp_path, "nodes.csv", NODE_HEADER, "n0,1,1,0,", "n0,1,1,0,")
    with pytest.raises(TraceError, match=re.escape("nodes.csv:3: sn='n0' appears twice")):
        load_nodes(path)


TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "openb"


@pytest.mark.openb
def test_real_trace_counts() -> None:
    if not (TRACES / "openb_pod_list_default.csv").exists():
        pytest.skip(f"openb traces not found in {TRACES}")
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    assert len(nodes) == 1213 and sum(n.gpu_count for n in nodes) == 6212
    pods = load_pods(TRACES / "openb_pod_list_default.csv")
    assert len(pods) == 8152 and sum(p.total_gpu_milli for p in pods) == 6_086_800
    multi = load_pods(TRACES / "openb_pod_list_multigpu50.csv")
    assert len(multi) == 9061 and sum(p.total_gpu_milli for p in multi) == 11_358_800
