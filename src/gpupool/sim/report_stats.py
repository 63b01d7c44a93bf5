"""The numbers of the openb report: a point statistic over seeds, a curve's median and band,
experiments grouped by policy (see ``report``'s docstring for the definitions)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    pass


BINS = 131
"""Arrived-load bins: index = arrived GPU demand in % of cluster capacity, 0..130."""

_DIGITS = 4


class ExperimentLike(Protocol):
    """What this module reads from one experiment (``gpupool.sim.openb.ExperimentResult``)."""

    @property
    def trace(self) -> str: ...
    @property
    def policy(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def nodes(self) -> int: ...
    @property
    def gpus(self) -> int: ...
    @property
    def unallocated_pct(self) -> np.ndarray: ...
    @property
    def frag_pct(self) -> np.ndarray: ...
    @property
    def wall_s(self) -> float: ...
    @property
    def decisions(self) -> int: ...
    @property
    def decision_us(self) -> np.ndarray: ...
    @property
    def placed(self) -> int: ...
    @property
    def failed(self) -> int: ...


def _num(x: float) -> float | None:
    """A JSON-safe rounded float: NaN and infinities become ``None`` (``null``)."""
    x = float(x)
    if not math.isfinite(x):
        return None
    return round(x, _DIGITS) + 0.0  # + 0.0 turns -0.0 into 0.0


def point_stat(values: Sequence[float] | np.ndarray) -> dict[str, Any]:
    """Mean, sample sd (ddof=1, 0 for one value) and count of the finite values.

    NaN marks a seed without data in the bin; it is left out. With no finite value at all,
    mean and sd are ``None``.
    """
    arr = np.asarray(values, dtype=np.float64)
    finite = arr[np.isfinite(arr)]
    n = int(finite.size)
    if n == 0:
        return {"mean": None, "sd": None, "n": 0}
    sd = float(np.std(finite, ddof=1)) if n > 1 else 0.0
    return {"mean": _num(float(np.mean(finite))), "sd": _num(sd), "n": n}


def curve_matrix(results: Sequence[ExperimentLike], metric: str) -> np.ndarray:
    """Stack one metric's curves, one row per result, as float64 ``(len(results), BINS)``."""
    rows = []
    for r in results:
        row = np.asarray(getattr(r, metric), dtype=np.float64)
        if row.shape != (BINS,):
            raise ValueError(
                f"{r.policy} seed {r.seed}: {metric} has shape {row.shape}, expected ({BINS},)"
            )
        rows.append(row)
    if not rows:
        return np.full((0, BINS), np.nan)
    return np.vstack(rows)


def curve_band(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Median, 25th and 75th percentile per bin over the rows, ignoring NaN.

    A bin where no row has data stays NaN (and the plot shows a gap there).
    """
    if matrix.shape[0] == 0:
        nan = np.full(matrix.shape[1], np.nan)
        return nan, nan.copy(), nan.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN bins: NaN is the answer
        q = np.nanpercentile(matrix, [50.0, 25.0, 75.0], axis=0)
    return q[0], q[1], q[2]


def _percentile(samples: np.ndarray, q: float) -> float | None:
    if samples.size == 0:
        return None
    return _num(float(np.percentile(samples, q)))


def group_by_policy(
    results: Sequence[ExperimentLike],
    policies: Sequence[str] | None = None,
) -> dict[str, list[ExperimentLike]]:
    """Results per policy, policies in the given order (else first appearance), seeds sorted."""
    order = list(policies) if policies is not None else []
    for r in results:
        if r.policy not in order:
            order.append(r.policy)
    groups: dict[str, list[ExperimentLike]] = {p: [] for p in order}
    for r in results:
        groups[r.policy].append(r)
    for rs in groups.values():
        rs.sort(key=lambda r: r.seed)
    return {p: rs for p, rs in groups.items() if rs}


def _seed_text(seeds: Sequence[int]) -> str:
    if not seeds:
        return "none"
    s = sorted(seeds)
    if len(s) > 2 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}–{s[-1]} ({len(s)} seeds)"
    return ", ".join(str(x) for x in s) + (f" ({len(s)} seeds)" if len(s) > 1 else " (1 seed)")
