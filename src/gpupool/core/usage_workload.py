"""What pods of one workload were measured to use, learned from cards they held alone.

A slice's request is a floor of what it will use, not an estimate: a slice without a core
limit (HAMi enforces ``nvidia.com/gpucores`` only where it is set) keeps its card as busy as
its work makes it. Until the first sample after it lands, the load model counts a new pod at
its estimate, and the placement plugins ask whether a card stays cool with it; with the
request as the estimate, a fine-tune asking half a card and using all of it is placed as
"cool" beside other work, and nothing moves it once the card runs hot (BENCHMARKS.md,
"Placement by measured GPU use", second round).

So the load model learns, per **workload**, what its pods use over what they request: from
every sample of a card that one slice holds alone (placed at least ``settle_s`` before the
sample, so the sample shows it), the ratio of the card's measured compute to the slice's
requested compute; and, where the pod has a series of its own on the card (HAMi's monitor:
``hami_container_device_utilization_ratio`` by pod and device), from each sample of that
series, however many pods share the card. A pod with its own series learns only from it: the
card's reading, while it holds the card alone, would count the same time twice.

A new slice of a workload with enough such readings is estimated at the
ratio's ``quantile`` (p90) times its request, never below its request and never above a
whole card. With a core limit the ratio stays at or below 1 and the request stands.

Memory is learned the same way, from the same samples: the card's framebuffer used
(``DCGM_FI_DEV_FB_USED``) where one slice holds it alone, or the pod's own
(``hami_vgpu_memory_used_bytes``), over the slice's requested memory. A new slice of a
workload with enough readings is counted at the ratio's quantile times its request until
it shows in its card's samples, never above its request: HAMi-core holds a container to its
``nvidia.com/gpumem``, so a slice asking 20 GiB that was measured holding 5 GiB is counted
at 5 GiB, not at 20 (its card's measured free memory is what ``measured-memory`` reads).
A pod's own newest memory reading is kept too (:meth:`WorkloadUse.shown_mib`): once its
card's sample may show part of the pod, the model counts only what its estimate exceeds
of that.

A workload is named by the pod's ``app.kubernetes.io/name`` label, else its ``app`` label
(in its namespace), else by what it asks: namespace, pod set and request (pods of one
Deployment, Job or scenario stream ask alike). A pod that names no namespace (``gpupool
serve``'s jobs carry none on their pods) takes its job's: the part of the job's id before
its first ``/`` (``team-a/nb-3`` is in ``team-a``), so tenants asking alike do not teach
each other.

Pure: no clock; the model passes times in.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from gpupool.core.model import WHOLE_GPU_MILLI, NodeName, Placement, Task, TaskId

__all__ = [
    "MIN_READINGS",
    "READINGS_KEPT",
    "WORKLOADS_KEPT",
    "TaskSample",
    "WorkloadUse",
    "workload_of",
]

READINGS_KEPT = 64
"""Readings kept per workload (the newest)."""
WORKLOADS_KEPT = 4096
"""Workloads with readings kept (past this, the one whose readings started first goes)."""
MIN_READINGS = 3
"""Readings a workload needs before its learned use replaces the request."""
_LABELS = ("app.kubernetes.io/name", "app")
_ASKED_KEPT = 1 << 20
"""Tasks whose workload is kept between a decision and the placement (cleared past this)."""


def workload_of(task: Task) -> str:
    """The workload ``task``'s pod belongs to (see the module docstring)."""
    ps = task.pod_set
    pod = ps.pod
    ns = pod.namespace or _job_namespace(task)
    for label in _LABELS:
        name = pod.labels.get(label)
        if name:
            return f"{ns}/{name}"
    req = ps.gpu
    return f"{ns}/{ps.name}:{req.gpu_milli}m:{req.memory_mib}Mi:{req.cards}"


def _job_namespace(task: Task) -> str:
    """The namespace of ``task``'s job as its id names it (``namespace/name``); "" when the
    id names none."""
    ns, slash, _ = str(task.job).partition("/")
    return ns if slash else ""


@dataclass(frozen=True, slots=True)
class TaskSample:
    """One task's own use of one card at ``time_s``: compute, percent of the card (HAMi's
    ``hami_container_device_utilization_ratio``, its containers summed), and framebuffer
    held, MiB (``hami_vgpu_memory_used_bytes``), each None where not read: what its
    workload learns from where a card holds several slices (``core/usage_workload.py``)."""

    node: NodeName
    gpu: int
    task: TaskId
    time_s: float
    util_pct: float | None
    used_mib: float | None = None


@dataclass(frozen=True, slots=True)
class _Holder:
    workload: str
    since_s: float
    milli: int  # requested compute on this card
    estimate: float  # what it was counted at when placed
    mib: int = 0  # requested memory on this card
    estimate_mib: float = 0.0


class _Readings:
    """Each workload's readings of one resource (measured / requested), newest kept, and
    their quantile, kept until the next reading."""

    def __init__(self, quantile: float) -> None:
        self.quantile = quantile
        self._got: dict[str, deque[float]] = {}
        self._ratio: dict[str, float] = {}

    def ratio(self, workload: str) -> float | None:
        """The quantile of the workload's readings; None with fewer than MIN_READINGS."""
        got = self._got.get(workload)
        if got is None or len(got) < MIN_READINGS:
            return None
        ratio = self._ratio.get(workload)
        if ratio is None:  # until its next reading: a decision asks once or twice per slice
            ratio = self._ratio[workload] = _quantile(sorted(got), self.quantile)
        return ratio

    def add(self, workload: str, ratio: float) -> None:
        got = self._got.get(workload)
        if got is None:
            if len(self._got) >= WORKLOADS_KEPT:  # the least recently started goes
                oldest = next(iter(self._got))
                del self._got[oldest]
                self._ratio.pop(oldest, None)
            got = self._got[workload] = deque(maxlen=READINGS_KEPT)
        got.append(ratio)
        self._ratio.pop(workload, None)


class WorkloadUse:
    """The slices holding each card, and each workload's readings (measured / requested)."""

    def __init__(self, quantile: float, settle_s: float) -> None:
        self.quantile = quantile
        self.settle_s = settle_s
        self._holders: dict[tuple[NodeName, int], dict[TaskId, _Holder]] = {}
        self._compute = _Readings(quantile)
        self._memory = _Readings(quantile)
        self._workload: dict[TaskId, str] = {}
        self._own: dict[TaskId, float] = {}  # holders with series of their own: newest read
        self._own_mib: dict[TaskId, tuple[float, float]] = {}  # newest (time, MiB) of each

    def expected(self, workload: str, milli: int) -> float:
        """Compute a new slice of ``workload`` asking ``milli`` is expected to use."""
        ratio = self._compute.ratio(workload) if milli > 0 else None
        if ratio is None:
            return float(milli)
        return float(min(WHOLE_GPU_MILLI, max(milli, ratio * milli)))

    def expected_mib(self, workload: str, mib: int) -> float:
        """Memory a new slice of ``workload`` asking ``mib`` is expected to hold: what its
        workload's slices were measured holding per MiB asked (the quantile), never above
        the request (HAMi-core's limit); the request until enough readings."""
        ratio = self._memory.ratio(workload) if mib > 0 else None
        if ratio is None:
            return float(mib)
        return float(min(mib, max(0.0, ratio * mib)))

    def shown_mib(self, task: TaskId, until_s: float) -> float:
        """Memory the pod's own series read of it at or before ``until_s`` (its newest
        reading; 0 without one): what a card sample taken then already holds of the pod."""
        got = self._own_mib.get(task)
        return got[1] if got is not None and got[0] <= until_s else 0.0

    def expected_of(self, task: Task) -> float:
        """:meth:`expected` of ``task``'s slice; the task's workload is kept for its
        placement (a placement names its task, not its pod set)."""
        key = workload_of(task)
        if len(self._workload) >= _ASKED_KEPT:
            self._workload.clear()
        self._workload[task.id] = key
        return self.expected(key, task.request.gpu_milli)

    def placed(self, p: Placement, now_s: float) -> list[tuple[float, float]]:
        """A placement bound at ``now_s``; returns what each share is counted at until it
        shows in samples, (compute milli, memory MiB): its workload's expected use for a
        slice, else its request."""
        # A task no decision asked about (placed while the cycle read no measured load) has
        # no workload known here: it still holds its card (so no one else is read as alone
        # there), and teaches nothing.
        key = self._workload.get(p.task, "")
        self._workload[p.task] = key
        out = []
        for s in p.shares:
            is_slice = s.mig_profile is None and 0 < s.gpu_milli < WHOLE_GPU_MILLI
            est = self.expected(key, s.gpu_milli) if is_slice else float(s.gpu_milli)
            mib = self.expected_mib(key, s.memory_mib) if is_slice else float(s.memory_mib)
            out.append((est, mib))
            if is_slice:
                self._holders.setdefault((p.node, s.index), {})[p.task] = _Holder(
                    key, now_s, s.gpu_milli, est, s.memory_mib, mib
                )
        return out

    def released(self, p: Placement) -> list[tuple[float, float]]:
        """A placement that left; returns what each share was counted at when placed."""
        out = []
        for s in p.shares:
            cell = self._holders.get((p.node, s.index))
            h = cell.pop(p.task, None) if cell is not None else None
            if cell is not None and not cell:
                del self._holders[(p.node, s.index)]
            out.append(
                (h.estimate, h.estimate_mib)
                if h is not None
                else (float(s.gpu_milli), float(s.memory_mib))
            )
        self._workload.pop(p.task, None)
        self._own.pop(p.task, None)
        self._own_mib.pop(p.task, None)
        return out

    def read(
        self,
        node: NodeName,
        gpu: int,
        time_s: float,
        util_pct: float | None,
        used_mib: float | None = None,
    ) -> None:
        """A sample of one card: a reading for the workload of the one slice holding it
        (compute and framebuffer used, each where read)."""
        cell = self._holders.get((node, gpu))
        if cell is None or len(cell) != 1:
            return
        task, h = next(iter(cell.items()))
        if task not in self._own:
            self._learn(h, time_s, util_pct, used_mib)

    def read_task(self, s: TaskSample) -> None:
        """A sample of one pod's own use of one card (compute, percent of the card; memory,
        MiB; each where read): a reading for its workload, whoever else holds the card. A
        sample no newer than the pod's newest is a repeat (each read reaches back over
        several intervals) and is ignored."""
        cell = self._holders.get((s.node, s.gpu))
        h = cell.get(s.task) if cell is not None else None
        if h is None or s.time_s <= self._own.get(s.task, -math.inf):
            return
        self._own[s.task] = s.time_s
        if s.used_mib is not None:
            self._own_mib[s.task] = (s.time_s, s.used_mib)
        self._learn(h, s.time_s, s.util_pct, s.used_mib)

    def _learn(
        self, h: _Holder, time_s: float, util_pct: float | None, used_mib: float | None
    ) -> None:
        if not h.workload or time_s < h.since_s + self.settle_s:
            return
        if util_pct is not None:
            self._compute.add(h.workload, util_pct * 10.0 / h.milli)
        if used_mib is not None and h.mib > 0:
            self._memory.add(h.workload, used_mib / h.mib)


def _quantile(values: list[float], q: float) -> float:
    pos = q * (len(values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)
