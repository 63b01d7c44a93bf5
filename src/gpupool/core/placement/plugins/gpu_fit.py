from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core import said
from gpupool.core.model import WHOLE_GPU_MILLI, GpuKind, Task
from gpupool.core.placement.framework import CycleState, Mask, Rows
from gpupool.core.placement.plugins.cards import mig_room
from gpupool.core.placement.plugins.eligible import card_mask


@dataclass(frozen=True, slots=True)
class GpuFit:
    """Keeps nodes whose free cards can hold the request.

    Whole GPUs: ``count`` usable cards, each entirely free (no slice on them). A slice: on
    each of ``cards`` distinct cards, both the milli-GPU (at least one) and the MiB free, the
    memory taken of that card when it is a percentage. MIG: cards with as many free instances of
    the profile as it asks. Unhealthy cards, and cards at their split count, have nothing free.
    """

    name: ClassVar[str] = "gpu-fit"
    resolvable: ClassVar[bool] = True

    def filter(self, cs: CycleState, task: Task, rows: Rows) -> Mask:
        req = task.request
        kind = req.kind
        t = cs.table
        if kind is GpuKind.NONE:
            return np.ones(rows.size, np.bool_)
        allowed = card_mask(cs, req)
        if kind is GpuKind.WHOLE:
            if allowed is None:
                return np.asarray(t.free_whole[rows] >= req.count)
            whole = (t.free_milli[rows] == WHOLE_GPU_MILLI) & (t.used_mib[rows] == 0)
            counts = np.count_nonzero(whole & allowed[rows], axis=1)
            return np.asarray(counts >= req.count)
        if kind is GpuKind.SLICE:
            # One value a node first (the largest free compute and memory of any card); the
            # exact same-card test runs on the nodes that pass it.
            out = (t.max_free_milli[rows] >= max(req.gpu_milli, 1)) & (
                t.max_free_mib[rows] >= req.memory_mib
            )
            cand = rows[out]
            fits: Mask = t.slice_room(cand, req)
            if allowed is not None:
                fits &= allowed[cand]
            out[out] = fits.any(axis=1) if req.cards == 1 else fits.sum(axis=1) >= req.cards
            return out
        else:
            free, _ = mig_room(cs, req, rows)  # per card, the profile it would give
            if req.mig_instances > 1:  # several instances, on one card or several
                if allowed is not None:
                    free = free * allowed[rows]
                return np.asarray(free.sum(axis=1) >= req.mig_instances)
            out = np.ones(rows.size, np.bool_)
            cand = rows
            fits = np.asarray(free >= 1)
        if allowed is not None:
            fits = np.asarray(np.logical_and(fits, allowed[cand]), np.bool_)
        out[out] = fits.any(axis=1)
        return out

    def reason(self, task: Task) -> str:
        req = task.request
        kind = req.kind
        if kind is GpuKind.WHOLE:
            return f"fewer than {req.count} whole GPUs free"
        if kind is GpuKind.MIG:
            what = " or ".join(req.mig_choices)
            if req.mig_instances > 1:
                return f"fewer than {req.mig_instances} free MIG {what} instances"
            return f"no free MIG {what} instance"
        asked = [said.card_share(req.gpu_milli)] if req.gpu_milli else []
        if req.memory_percent:
            asked.append(f"{req.memory_percent}% of its memory")
        elif req.memory_mib:
            asked.append(said.mib(req.memory_mib))
        where = "no GPU" if req.cards == 1 else f"fewer than {req.cards} GPUs"
        return f"{where} with {' and '.join(asked)} free"
