"""Which cards a request may use, as a cached mask over the whole table.

Models and a per-card memory floor are properties of the inventory, not of usage, so the mask
is computed once per (request, inventory version) and shared by the filters and card choice.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpupool.core.model import GpuKind, GpuRequest
from gpupool.core.placement.framework import CycleState


def card_mask(cs: CycleState, req: GpuRequest) -> npt.NDArray[np.bool_] | None:
    """Cards of an allowed model (and, for whole GPUs, with enough memory), among the allowed
    UUIDs and none of the excluded ones; None if any card will do."""
    min_mib = req.memory_mib if req.kind is GpuKind.WHOLE else 0
    if not req.models and min_mib == 0 and not req.uuids and not req.excluded_uuids:
        return None
    t = cs.table
    key = ("inventory", "cards", req.models, min_mib, req.uuids, req.excluded_uuids, t.version)
    mask = cs.cache.get(key)
    if mask is None:
        codes = [t.model_code[m] for m in req.models if m in t.model_code]
        mask = (
            np.ones(t.gpu_model.shape, np.bool_)
            if not req.models
            else np.isin(t.gpu_model, np.asarray(codes, np.int64))
        )
        if min_mib:
            mask &= t.gpu_mem_cap >= min_mib
        if req.uuids:
            mask &= np.isin(t.gpu_uuid, _codes(t.uuid_code, req.uuids))
        if req.excluded_uuids:
            mask &= ~np.isin(t.gpu_uuid, _codes(t.uuid_code, req.excluded_uuids))
        cs.cache[key] = mask
    return mask


def _codes(known: dict[str, int], uuids: frozenset[str]) -> npt.NDArray[np.int64]:
    return np.asarray([known[u] for u in uuids if u in known], np.int64)
