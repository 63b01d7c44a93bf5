"""Eventual fill: how much of a card's free compute the pods still to come leave unused.

FGD's measure (``frag.py``) asks of each free gap only whether the *next* pod of each typical
shape fits: a gap too small for a shape is fragment, a gap it fits is not, whatever the pod
leaves behind. Two cards whose gaps fit the same typical pods therefore look alike, although
a 530-milli gap beside a 470 slice is usually filled again (by another 470) and a 190-milli
gap beside an 810 rarely (only the rare 50-160 milli slices fit it).

The eventual waste ``ew(g)`` of a gap of ``g`` milli follows FGD's draw one step further, for
as long as pods fit: the next pod is drawn from the typical pods with GPUs by popularity (its
share of one card: ``gpu_milli``, 1000 for whole cards); one that does not fit ends the gap,
which is then wasted whole; one that fits takes its share, and what it leaves is judged the
same way:

    ew(g) = sum_m p_m * (g             if gm_m > g
                         ew(g - gm_m)  otherwise)

Nothing is tuned: the table comes from the typical pods' shapes and popularities alone, and
is computed once per workload (1,001 entries).

What it decides (``gpupool_policy.py``): which card of the chosen node a slice takes, among
the cards that score in the node's best class, namely the one where the slice lowers the
eventual waste most, ``ew(g) - ew(g - s)``. It does not enter the node score: as a term of
the measure it priced breaking a fresh card for a mid-size slice nearly as cheap as filling a
partly used one (a fresh card's eventual waste already counts the 810-milli slices that would
strand 190 there), and lost 0.2 points on gpushare80 (docs/policies.md).
"""

from __future__ import annotations

from collections.abc import Hashable, MutableMapping
from typing import Any

import numpy as np

from gpupool.core.model import WHOLE_GPU_MILLI
from gpupool.core.placement.plugins.frag import F64, I64, TypicalPods


def eventual_waste(tp: TypicalPods) -> F64:
    """``ew[g]`` for g = 0..1000 milli: the expected part of a free gap of g that the typical
    pods with GPUs leave unused, drawn by popularity until one does not fit; ``ew[g] = g``
    (nothing is ever filled) when the typical pods ask for no GPU."""
    size = np.minimum(tp.gm, WHOLE_GPU_MILLI)
    weight = tp.weight.astype(np.float64)
    total = float(weight.sum())
    if not total:
        return np.arange(WHOLE_GPU_MILLI + 1, dtype=np.float64)
    p = weight / total
    ew = np.zeros(WHOLE_GPU_MILLI + 1, np.float64)
    for g in range(WHOLE_GPU_MILLI + 1):
        fits = size <= g
        ew[g] = g * float(p[~fits].sum()) + float(p[fits] @ ew[g - size[fits]])
    return ew


def waste_table(tp: TypicalPods, cache: MutableMapping[Hashable, Any]) -> F64:
    """:func:`eventual_waste` of ``tp``, computed once per typical-pod set."""
    key = ("fill-eventual-waste", tp)
    found = cache.get(key)
    if found is None:
        found = cache[key] = eventual_waste(tp)
    result: F64 = found
    return result


def fill_gain(ew: F64, free: I64, milli: int | I64) -> F64:
    """[R, W]: how much a slice of ``milli`` (per card, or one figure) lowers the eventual
    waste of each card with ``free`` milli free; meaningless where the slice does not fit."""
    g = np.clip(free, 0, WHOLE_GPU_MILLI)
    out: F64 = ew[g] - ew[np.clip(g - milli, 0, WHOLE_GPU_MILLI)]
    return out
