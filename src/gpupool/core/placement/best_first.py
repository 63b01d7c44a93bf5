"""Best-first evaluation: lazy plugins run only on the rows that can still win.

A decision keeps the row with the highest weighted score sum, ties to the lowest ``rank``
(then the lowest row), among the rows every filter keeps (``place.place_task``). Every score
plugin gives 0..100 per row, and a lazy one (``framework``: ``lazy``, ``bound``) never more
than its bound for the task, so a row's sum is at most what the eager scores give it plus each
lazy score's weight times its bound: the row's *upper* sum. A lazy filter only removes rows.
So: the eager filters and scores run on every row as before; the lazy filters and scores run
first on the row with the best upper sum, and then only on rows whose upper sum could still
beat (or tie with a lower rank) the best sum found, the highest upper sums first, until no
such row is left. The row kept is the one the full evaluation keeps: the same filters keep
the same rows (every plugin involved answers per row), the sums of the rows evaluated are the
same additions in the same order (floating-point addition is monotonic, so an upper sum is
never below the sum it bounds), and every row left out has an upper sum below the winner's
sum, or equal to it with a higher tie key.

Where it does not apply, :func:`choose` says so (None) and the caller evaluates every plugin
on every row: a non-lazy score that depends on the other candidates for this task (a
preference normalised over them, when the task has one), and every failure that the lazy
part decides (no row passing a lazy filter, or reservation holds met before them), whose
per-filter counts only the full evaluation gives (``place.feasible``).
"""

from __future__ import annotations

from typing import cast

import numpy as np
import numpy.typing as npt

from gpupool.core.model import Task
from gpupool.core.placement.framework import (
    BoundedScore,
    CycleState,
    Profile,
    Rows,
    Status,
    is_lazy,
    is_per_row,
)
from gpupool.core.placement.rejections import Rejections
from gpupool.core.snapshot import Snapshot

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

REACH = 0.25
"""The first round evaluates the rows whose upper sum is within this share of the lazy scores'
bound of the highest; the second, when needed, every other row that can still win. A round
costs the lazy plugins' calls whatever its rows (a numpy call costs about the same for 30 rows
as for 300), so the first is wide enough that a second is rarely needed."""


def applies(cs: CycleState, task: Task, profile: Profile) -> bool:
    """Whether every eager score answers per row for ``task`` (best-first needs it)."""
    return profile.best_first and all(is_per_row(plugin, cs, task) for plugin, _ in profile.scores)


def choose(task: Task, snap: Snapshot, profile: Profile) -> tuple[int, Status] | None:
    """The row the full evaluation would keep for ``task`` with ``Status.ok()``, or (-1, the
    full evaluation's Status) when the eager filters leave no row; None where best-first
    evaluation does not apply or a lazy part decides a failure (the caller then evaluates
    everything, for the exact counts)."""
    t = snap.table
    cs = CycleState(t, snap.cache, pods=snap.pods, load=snap.load)
    if not applies(cs, task, profile):
        return None
    rows = t.live()
    seen = Rejections(int(rows.size))
    for f, neutral in profile.eager:
        if not rows.size:
            break
        if neutral is None or not neutral(cs, task):
            rows = seen.keep(f, task, rows, f.filter(cs, task, rows))
    if not rows.size:
        if profile.filters[len(profile.filters) - len(profile.deferred) :] != profile.deferred:
            return None  # a deferred filter ran before an eager one: other counts
        return -1, seen.status(task)
    rows = seen.hold(task, snap, rows)
    if not rows.size:
        return None  # the full evaluation counts the lazy filters' rejections first
    row = _Search(cs, task, rows, profile).best()
    return None if row is None else (row, Status.ok())


class _Search:
    """One task's best-first search over its candidate rows (those the eager filters keep)."""

    __slots__ = ("bound", "cs", "deferred", "parts", "rows", "task", "upper")

    def __init__(self, cs: CycleState, task: Task, rows: Rows, profile: Profile) -> None:
        self.cs = cs
        self.task = task
        self.rows = rows
        self.deferred = profile.deferred
        # The eager scores, weighted, on every row; each lazy score's weighted bound. Plugins
        # scoring 0 everywhere are left out (adding 0 changes no sum).
        upper = np.zeros(rows.size, np.float64)
        parts: list[tuple[F64 | BoundedScore, float]] = []
        most = 0.0
        for plugin, weight, neutral in profile.score_checks:
            if neutral is not None and neutral(cs, task):
                continue
            if is_lazy(plugin):  # a BoundedScore (``Profile`` checks it)
                lazy = cast(BoundedScore, plugin)
                bound = lazy.bound(cs, task)
                if bound > 0:
                    upper += weight * bound
                    most += weight * bound
                    parts.append((lazy, weight))
                continue
            weighted = weight * plugin.score(cs, task, rows)
            upper += weighted
            parts.append((weighted, weight))
        self.parts = tuple(parts)
        self.upper = upper
        """Each row's upper sum: the most its weighted sum can be."""
        self.bound = most
        """What the lazy scores can add to a row's sum at most (weighted)."""

    def best(self) -> int | None:
        """The winning row, or None when no row passes the deferred filters."""
        upper = self.upper
        top = float(upper.max())
        # First round: the rows whose upper sum is within a share of the lazy scores' bound
        # of the highest. When the best of them reaches that floor, no row below it can win.
        floor = top - self.bound * REACH
        found = self._evaluate(np.flatnonzero(upper >= floor))
        if found is not None and found[0] >= floor:
            return found[2]
        # Second round: every other row whose upper sum reaches the best sum found.
        least = -np.inf if found is None else found[0]
        got = self._evaluate(np.flatnonzero((upper >= least) & (upper < floor)))
        if got is None or (found is not None and (got[0], -got[1]) < (found[0], -found[1])):
            return None if found is None else found[2]
        return got[2]

    def _evaluate(self, at: I64) -> tuple[float, int, int] | None:
        """(sum, tie key, row) of the best of the candidates at positions ``at`` that pass
        the deferred filters; None when none does. Ties on the sum go to the lowest rank,
        then the lowest row (``place_task``'s rule)."""
        cs, task = self.cs, self.task
        these = self.rows.take(at)
        for f in self.deferred:
            if not these.size:
                return None
            neutral = getattr(f, "neutral", None)
            if neutral is not None and neutral(cs, task):
                continue
            keep = f.filter(cs, task, these)
            if not keep.all():
                at = at.compress(keep)
                these = these.compress(keep)
        if not these.size:
            return None
        # the sums as the full evaluation adds them: each plugin in the profile's order
        total = np.zeros(at.size, np.float64)
        for part, weight in self.parts:
            if isinstance(part, np.ndarray):
                total += part.take(at)
            else:
                total += weight * part.score(cs, task, these)
        most = total.max()
        if these.size > 1:
            these = these.compress(total == most)
        rank = cs.table.rank
        row = int(these[np.argmin(rank.take(these))]) if these.size > 1 else int(these[0])
        return float(most), int(rank[row]) * (rank.size + 1) + row, row
