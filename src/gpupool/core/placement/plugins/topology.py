"""Topology domains: the nodes that share a value of one label, and pod counts per domain."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpupool.core.placement.framework import CycleState

__all__ = ["domain_sums", "domains"]

I64 = npt.NDArray[np.int64]


def domains(cs: CycleState, key: str) -> I64:
    """Per table row, the domain of label ``key`` (ids 0..k-1), -1 where the node lacks it."""
    t = cs.table
    cache_key = ("inventory", "topology", key, t.version)
    dom: I64 | None = cs.cache.get(cache_key)
    if dom is None:
        ids: dict[str, int] = {}
        dom = np.fromiter(
            (
                -1 if (v := node.labels.get(key)) is None else ids.setdefault(v, len(ids))
                for node in t.nodes
            ),
            np.int64,
            count=t.n,
        )
        cs.cache[cache_key] = dom
    return dom


def domain_sums(dom: I64, counts: I64, rows: I64) -> I64:
    """Per domain id, the sum of ``counts`` over ``rows`` (rows without the label skipped)."""
    size = int(dom.max()) + 1 if dom.size else 0
    rows = rows[dom[rows] >= 0]
    out: I64 = np.bincount(dom[rows], weights=counts[rows], minlength=size).astype(np.int64)
    return out
