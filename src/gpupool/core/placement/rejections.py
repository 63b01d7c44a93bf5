"""What the filters of one decision removed, counted as they run and said only when asked.

A decision that finds a node never reads why the others were left out; building each
filter's clause (its text, with numbers) only for a Status that says it keeps that work off
the decisions that succeed.
"""

from __future__ import annotations

import numpy as np

from gpupool.core.model import GpuKind, Task
from gpupool.core.placement.framework import Code, FilterPlugin, Mask, Rows, Status
from gpupool.core.reasons import Reason, Step, nodes_fit
from gpupool.core.snapshot import Snapshot


class Rejections:
    """Each filter's count of the rows it was the first to reject (kube-scheduler's
    FitError), of ``total`` live rows, and the rows a reservation held."""

    __slots__ = ("counts", "held", "total")

    def __init__(self, total: int) -> None:
        self.total = total
        self.counts: list[tuple[FilterPlugin, int]] = []
        self.held: Reason | None = None

    def keep(self, f: FilterPlugin, rows: Rows, mask: Mask) -> Rows:
        """The rows ``f`` kept (``mask``), counting those it removed."""
        kept = int(np.count_nonzero(mask))
        if kept == rows.size:
            return rows
        self.counts.append((f, int(rows.size) - kept))
        return rows[mask]

    def hold(self, task: Task, snap: Snapshot, rows: Rows) -> Rows:
        """``rows`` less those held for a waiting gang that ``task`` may not use."""
        res = snap.reservation
        if not rows.size or res is None or res.admits(task.job, task.run_limit_s, snap.now_s):
            return rows
        keep = ~np.isin(rows, res.rows)
        held = int(rows.size - np.count_nonzero(keep))
        if held:
            self.held = Reason(
                str(Step.HOLD), f"held for gang {res.job} from t={res.start_s:.0f}s", held
            )
            rows = rows[keep]
        return rows

    def status(self, task: Task) -> Status:
        """Why no row is left: each filter's clause with its count, then the hold."""
        kind = task.request.kind
        gpu = "" if kind is GpuKind.NONE else kind.value
        rejected = [
            Reason(f.name, f.reason(task), n, resolvable=f.resolvable, gpu=gpu)
            for f, n in self.counts
        ]
        if self.held is not None:
            rejected.append(self.held)
        return fit_error(self.total, rejected)


def fit_error(total: int, rejected: list[Reason]) -> Status:
    """kube-scheduler's FitError: each filter's count of the nodes it was the first to reject.
    UNRESOLVABLE when only inventory filters (which freeing capacity cannot change) did."""
    code = Code.UNSCHEDULABLE if any(r.resolvable for r in rejected) else Code.UNRESOLVABLE
    return Status(code, nodes_fit(total, rejected))
