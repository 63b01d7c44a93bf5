"""Loaders for Alibaba's openb GPU trace (cluster-trace-gpu-v2023).

Two files describe one experiment: a node list (``openb_node_list_gpu_node.csv``, header
``sn,cpu_milli,memory_mib,gpu,model``) and a pod list, either the full 11-column layout
(``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time``) or the 5-column layout of the ``multigpu*`` files
(``name,cpu_milli,memory_mib,num_gpu,gpu_milli``).

Units are converted here, once: openb already speaks milli-CPU, MiB and milli-GPU *per GPU*,
so the only conversion is that a pod asking for ``num_gpu`` whole cards becomes a
``GpuRequest(count=num_gpu)`` and a pod asking for part of one card becomes a slice of
``gpu_milli`` (see :func:`to_job`). Nothing rounds.

GPU memory per card is not in the trace. Cards of a published model get that model's memory
(:data:`GPU_MEMORY_MIB`); the undisclosed internal codes (G1, G2, G3) get
:data:`UNKNOWN_GPU_MEMORY_MIB` (0, "unknown"). No openb pod asks for GPU memory, so no filter
or score of an openb experiment depends on this value; it only matters if other workloads
with memory requests are replayed on these nodes, where 0 makes the card refuse any slice
that states a memory need, instead of inventing a size.

Every malformed row raises :class:`TraceError` naming file, line, column and value, e.g.
``openb_pod_list_default.csv:118: gpu_milli='abc' is not an integer``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpupool.core.errors import TraceError
from gpupool.core.model import (
    WHOLE_GPU_MILLI,
    Gpu,
    GpuRequest,
    Job,
    JobId,
    Node,
    NodeName,
    PodSet,
)

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
POD_COLUMNS_SHORT = POD_COLUMNS[:5]

GPU_MEMORY_MIB: Mapping[str, int] = {
    "T4": 16384,
    "P100": 16384,
    "V100M16": 16384,
    "V100M32": 32768,
    "A10": 24576,
}
"""Published memory per card of the openb models that have a public name."""

UNKNOWN_GPU_MEMORY_MIB = 0
"""Memory given to cards of undisclosed models (G1, G2, G3): unknown, so none is claimed."""

MODEL_LABEL = "gpu-model"
"""Node label carrying the node's GPU model, as the trace's simulator labels its nodes."""


@dataclass(frozen=True, slots=True)
class TracePod:
    """One row of an openb pod list, in the trace's own units (milli-GPU per GPU).

    Columns absent from the 5-column layout read as "" (``qos``, ``pod_phase``) and None
    (the times); ``scheduled_time`` is also None when the row leaves it empty (Pending pods).
    """

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: frozenset[str] = frozenset()
    qos: str = ""
    pod_phase: str = ""
    creation_time: int | None = None
    deletion_time: int | None = None
    scheduled_time: int | None = None

    @property
    def total_gpu_milli(self) -> int:
        """GPU demand of the pod in milli-GPU: ``num_gpu * gpu_milli``."""
        return self.num_gpu * self.gpu_milli

    @property
    def is_sharing(self) -> bool:
        """A slice of one card: one GPU, less than all of it."""
        return self.num_gpu == 1 and self.gpu_milli < WHOLE_GPU_MILLI


class _Rows:
    """CSV rows of one file with their line numbers, and error messages that name both."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = path.name
        self.line = 1

    def error(self, column: str, value: str, rule: str) -> TraceError:
        return TraceError(f"{self.file}:{self.line}: {column}={value!r} {rule}")

    def integer(self, row: Mapping[str, str], column: str, *, empty_ok: bool = False) -> int | None:
        text = row[column]
        if text == "" and empty_ok:
            return None
        try:
            value = int(text)
        except ValueError:
            raise self.error(column, text, "is not an integer") from None
        if value < 0:
            raise self.error(column, text, "is negative")
        return value

    def required(self, row: Mapping[str, str], column: str) -> int:
        value = self.integer(row, column)
        assert value is not None
        return value

    def read(self, layouts: tuple[tuple[str, ...], ...]) -> Iterator[dict[str, str]]:
        try:
            handle = self.path.open(newline="", encoding="utf-8")
        except OSError as exc:
            raise TraceError(f"{self.path}: cannot be read: {exc.strerror}") from exc
        with handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if not header:
                raise TraceError(
                    f"{self.file}:1: the file is empty; expected the header {','.join(layouts[0])}"
                )
            header = [h.strip() for h in header]
            columns = next((lay for lay in layouts if tuple(header) == lay), None)
            if columns is None:
                expected = " or ".join(",".join(lay) for lay in layouts)
                missing = [c for c in layouts[0] if c not in header]
                detail = f"; missing {', '.join(missing)}" if missing else ""
                raise TraceError(
                    f"{self.file}:1: header {','.join(header)!r} is not {expected}{detail}"
                )
            for fields in reader:
                self.line = reader.line_num
                if not fields:
                    continue
                if len(fields) != len(columns):
                    raise TraceError(
                        f"{self.file}:{self.line}: {len(fields)} fields, the "
                        f"header has {len(columns)}"
                    )
                yield dict(zip(columns, fields, strict=True))


def load_nodes(path: str | Path) -> list[Node]:
    """The nodes of an openb node list, in file order.

    Each node gets ``gpu`` cards of its ``model`` (indices 0..gpu-1) and the label
    :data:`MODEL_LABEL`; a node with GPUs must name its model.
    """
    rows = _Rows(Path(path))
    nodes: list[Node] = []
    seen: set[str] = set()
    for row in rows.read((NODE_COLUMNS,)):
        name = row["sn"].strip()
        if not name:
            raise rows.error("sn", row["sn"], "is empty; every node needs a name")
        if name in seen:
            raise rows.error("sn", name, "appears twice")
        seen.add(name)
        cpu = rows.required(row, "cpu_milli")
        mem = rows.required(row, "memory_mib")
        count = rows.required(row, "gpu")
        model = row["model"].strip()
        if count and not model:
            raise rows.error("model", row["model"], f"is empty on a node with {count} GPUs")
        memory = GPU_MEMORY_MIB.get(model, UNKNOWN_GPU_MEMORY_MIB)
        gpus = tuple(Gpu(index=i, model=model, memory_mib=memory) for i in range(count))
        labels = {MODEL_LABEL: model} if model else {}
        nodes.append(
            Node(name=NodeName(name), cpu_milli=cpu, memory_mib=mem, gpus=gpus, labels=labels)
        )
    return nodes


def load_pods(path: str | Path) -> list[TracePod]:
    """The pods of an openb pod list (11- or 5-column layout), in file order.

    Checks what the rest of the pipeline relies on: integers, none negative, unique names,
    ``gpu_milli`` 0 exactly when ``num_gpu`` is 0, at most 1000, and 1000 whenever a pod asks
    for more than one GPU (a share that spans cards cannot be expressed).
    """
    rows = _Rows(Path(path))
    pods: list[TracePod] = []
    seen: set[str] = set()
    for row in rows.read((POD_COLUMNS, POD_COLUMNS_SHORT)):
        name = row["name"].strip()
        if not name:
            raise rows.error("name", row["name"], "is empty; every pod needs a name")
        if name in seen:
            raise rows.error("name", name, "appears twice")
        seen.add(name)
        cpu = rows.required(row, "cpu_milli")
        mem = rows.required(row, "memory_mib")
        num_gpu = rows.required(row, "num_gpu")
        milli = rows.required(row, "gpu_milli")
        if milli > WHOLE_GPU_MILLI:
            raise rows.error(
                "gpu_milli",
                row["gpu_milli"],
                f"is more than one GPU ({WHOLE_GPU_MILLI}); it is per GPU",
            )
        if num_gpu == 0 and milli:
            raise rows.error("gpu_milli", row["gpu_milli"], "is set on a pod with num_gpu=0")
        if num_gpu and not milli:
            raise rows.error("gpu_milli", row["gpu_milli"], f"is 0 on a pod with num_gpu={num_gpu}")
        if num_gpu > 1 and milli != WHOLE_GPU_MILLI:
            raise rows.error(
                "gpu_milli",
                row["gpu_milli"],
                f"must be {WHOLE_GPU_MILLI} when num_gpu={num_gpu}; a share of "
                "a GPU cannot span cards",
            )
        spec = frozenset(p.strip() for p in row.get("gpu_spec", "").split("|") if p.strip())
        creation = deletion = scheduled = None
        if "creation_time" in row:
            creation = rows.integer(row, "creation_time")
            deletion = rows.integer(row, "deletion_time")
            scheduled = rows.integer(row, "scheduled_time", empty_ok=True)
            assert creation is not None and deletion is not None
            if deletion < creation:
                raise rows.error(
                    "deletion_time", row["deletion_time"], f"is before creation_time={creation}"
                )
        pods.append(
            TracePod(
                name=name,
                cpu_milli=cpu,
                memory_mib=mem,
                num_gpu=num_gpu,
                gpu_milli=milli,
                gpu_spec=spec,
                qos=row.get("qos", "").strip(),
                pod_phase=row.get("pod_phase", "").strip(),
                creation_time=creation,
                deletion_time=deletion,
                scheduled_time=scheduled,
            )
        )
    return pods


def gpu_request(pod: TracePod) -> GpuRequest:
    """The core request for a pod's GPUs.

    ``num_gpu`` > 1, or one GPU at 1000 milli: ``num_gpu`` whole cards. One GPU below 1000
    milli: a slice of ``gpu_milli`` of one card (no GPU memory: the trace states none).
    No GPU: an empty request. ``gpu_spec`` becomes the allowed models.
    """
    if pod.num_gpu == 0:
        return GpuRequest()
    if pod.num_gpu > 1 or pod.gpu_milli >= WHOLE_GPU_MILLI:
        return GpuRequest(count=pod.num_gpu, models=pod.gpu_spec)
    return GpuRequest(gpu_milli=pod.gpu_milli, models=pod.gpu_spec)


def to_job(pod: TracePod) -> Job:
    """A one-task core Job for a trace pod (see :func:`gpu_request` for the GPU part).

    ``submit_time_s`` is the creation time (0 when the layout has none) and ``duration_s``
    the time from creation to deletion, when both are known.
    """
    duration = None
    if pod.creation_time is not None and pod.deletion_time is not None:
        duration = float(pod.deletion_time - pod.creation_time)
    return Job(
        id=JobId(pod.name),
        pod_sets=(
            PodSet(
                name="pod",
                count=1,
                cpu_milli=pod.cpu_milli,
                memory_mib=pod.memory_mib,
                gpu=gpu_request(pod),
            ),
        ),
        submit_time_s=float(pod.creation_time or 0),
        duration_s=duration,
    )
