"""The parked jobs of the event kernel, indexed by what they ask for, so that an event offers
again only the jobs whose request could fit where capacity was freed (kube-scheduler's queueing
hints)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpupool.core.model import (
    GpuKind,
    Job,
    JobId,
)
from gpupool.core.table import NodeTable

_NONE, _WHOLE, _SLICE, _ALWAYS = 0, 1, 2, 3
NO_SLOTS = np.zeros(0, np.int64)


def fifo(job: Job) -> tuple[float, str]:
    return job.submit_time_s, job.id


class ParkedIndex:
    """Parked one-task jobs as numpy columns, to find in one pass which could fit a change.

    The hint is a necessary condition checked against the rows that gained capacity:
    schedulable, with the CPU and memory free, and enough fully free cards (whole GPUs) or one
    card with the milli-GPU and MiB free (a slice). It ignores models, labels and taints, so it
    may offer a job that still does not fit (the cycle then parks it again), never the reverse.
    MIG requests always pass.
    """

    _COLUMNS = ("cpu", "mem", "kind", "count", "milli", "mib")

    def __init__(self, capacity: int = 256) -> None:
        self._slot: dict[JobId, int] = {}
        self._ids: list[JobId | None] = []
        self._keys: list[tuple[float, str]] = []
        self._free: list[int] = []
        self.submit: npt.NDArray[np.float64] = np.zeros(0, np.float64)
        self.active: npt.NDArray[np.bool_] = np.zeros(0, np.bool_)
        self.cpu: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self.mem: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self.kind: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self.count: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self.milli: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self.mib: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self._grow(capacity)

    def _grow(self, capacity: int) -> None:
        n = self.active.size
        for name in (*self._COLUMNS, "submit", "active"):
            old = getattr(self, name)
            new = np.zeros(capacity, old.dtype)
            new[:n] = old
            setattr(self, name, new)

    def __len__(self) -> int:
        return len(self._slot)

    def ids(self) -> set[JobId]:
        return set(self._slot)

    def job_at(self, slot: int) -> JobId:
        job_id = self._ids[slot]
        assert job_id is not None
        return job_id

    def add(self, job: Job) -> None:
        if job.id in self._slot:
            return
        if self._free:
            i = self._free.pop()
        else:
            i = len(self._ids)
            self._ids.append(None)
            self._keys.append((0.0, ""))
            if i >= self.active.size:
                self._grow(self.active.size * 2)
        ps = job.pod_sets[0]
        req = ps.gpu
        kind = {GpuKind.NONE: _NONE, GpuKind.WHOLE: _WHOLE, GpuKind.SLICE: _SLICE}.get(
            req.kind, _ALWAYS
        )
        self.cpu[i], self.mem[i], self.kind[i] = ps.cpu_milli, ps.memory_mib, kind
        self.count[i], self.milli[i], self.mib[i] = req.count, req.gpu_milli, req.memory_mib
        self.submit[i] = job.submit_time_s
        self.active[i] = True
        self._ids[i] = job.id
        self._keys[i] = fifo(job)
        self._slot[job.id] = i

    def discard(self, job_id: JobId) -> None:
        i = self._slot.pop(job_id, None)
        if i is not None:
            self.active[i] = False
            self._ids[i] = None
            self._free.append(i)

    def candidates(self, t: NodeTable, rows: npt.NDArray[np.int64] | None) -> npt.NDArray[np.int64]:
        """Slots of the parked jobs that pass the hint on ``rows`` (all of them when None),
        in FIFO order."""
        if not self._slot:
            return NO_SLOTS
        slots = np.flatnonzero(self.active[: len(self._ids)])
        if rows is not None:
            slots = slots[self.could_fit(t, rows, slots)]
        if slots.size <= 1:
            return slots
        slots = slots[np.argsort(self.submit[slots], kind="stable")]
        same = np.flatnonzero(np.diff(self.submit[slots]) == 0)
        if same.size:  # equal submit times: order those runs by id
            keys = self._keys
            out = slots.tolist()
            start = 0
            while start < len(out) - 1:
                end = start
                while end + 1 < len(out) and keys[out[end + 1]][0] == keys[out[start]][0]:
                    end += 1
                if end > start:
                    out[start : end + 1] = sorted(out[start : end + 1], key=keys.__getitem__)
                start = end + 1
            slots = np.asarray(out, np.int64)
        return slots

    def could_fit(
        self, t: NodeTable, rows: npt.NDArray[np.int64], slots: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_]:
        """For each slot: might its job fit on one of ``rows``?"""
        rows = rows[rows < t.n]
        rows = rows[t.alive[rows] & t.schedulable[rows]]
        if rows.size == 0 or slots.size == 0:
            return np.zeros(slots.size, np.bool_)
        kind = self.kind[slots]
        ok = (self.cpu[slots, None] <= t.cpu_free[rows][None, :]) & (
            self.mem[slots, None] <= t.mem_free[rows][None, :]
        )
        whole = kind == _WHOLE
        if whole.any():
            ok[whole] &= self.count[slots[whole], None] <= t.free_whole[rows][None, :]
        piece = kind == _SLICE
        if piece.any():
            s = slots[piece]
            card = (t.free_milli[rows][None, :, :] >= self.milli[s, None, None]) & (
                t.free_mib[rows][None, :, :] >= self.mib[s, None, None]
            )
            ok[piece] &= card.any(axis=2)
        return np.asarray(ok.any(axis=1) | (kind == _ALWAYS), np.bool_)
