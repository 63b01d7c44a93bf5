"""What a slice takes of each card under the card's division rule (``core/devices.py``).

While every card is divided as NVIDIA's are (``NodeTable.plain``), slices are tested on the
request as asked; otherwise each card is tested on the shape its rule gives the slice (rounded
up to its steps, the smallest template or fraction holding it, none on a whole-only card), and
``shaped`` turns the chosen cards' shares into those shapes. ``NodeTable`` answers these
questions through its methods of the same names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gpupool.core.model import WHOLE_GPU_MILLI, GpuRequest, GpuShare

if TYPE_CHECKING:
    from gpupool.core.table import I64, Bool, NodeTable

NO_SHAPE = 1 << 40
"""What a slice needs of a card whose rule cannot give it: more than any card has."""


def slice_room(table: NodeTable, rows: npt.NDArray[np.int64], req: GpuRequest) -> Bool:
    """[len(rows), width]: cards of ``rows`` with room for one slice of ``req`` (its
    compute, at least one milli-GPU free, and its memory on that very card), each card
    judged on the shape its division rule gives the slice."""
    if not table.plain:
        milli, mib = slice_need(table, rows, req)
        shaped: Bool = (table.free_milli[rows] >= np.maximum(milli, 1)) & (
            table.free_mib[rows] >= mib
        )
        return shaped
    fits: Bool = table.free_milli[rows] >= max(req.gpu_milli, 1)
    if req.memory_percent:
        need = np.maximum(req.memory_mib, table.gpu_mem_cap[rows] * req.memory_percent // 100)
        fits &= table.free_mib[rows] >= need
    else:
        fits &= table.free_mib[rows] >= req.memory_mib
    return fits


def slice_need(table: NodeTable, rows: npt.NDArray[np.int64], req: GpuRequest) -> tuple[I64, I64]:
    """[len(rows), width] each: the milli and MiB one slice of ``req`` takes of each card
    of ``rows`` under the card's division rule (``NO_SHAPE`` where it cannot be given)."""
    cap = table.gpu_mem_cap[rows]
    mib: I64 = (
        np.maximum(req.memory_mib, cap * req.memory_percent // 100)
        if req.memory_percent
        else np.full(cap.shape, req.memory_mib, np.int64)
    )
    milli: I64 = np.full(cap.shape, req.gpu_milli, np.int64)
    codes = table.gpu_device[rows]
    for code in np.unique(codes).tolist():
        dev = table.devices[code]
        if dev.is_plain:
            continue
        on = codes == code
        for card_mib, want_mib in {
            (int(c), int(w)) for c, w in zip(cap[on].tolist(), mib[on].tolist(), strict=True)
        }:
            cell = on & (cap == card_mib) & (mib == want_mib)
            shape = dev.slice_shape(req.gpu_milli, want_mib, card_mib)
            milli[cell], mib[cell] = shape if shape is not None else (NO_SHAPE, NO_SHAPE)
    return milli, mib


def shaped(table: NodeTable, row: int, shares: tuple[GpuShare, ...]) -> tuple[GpuShare, ...]:
    """``shares`` with each slice turned into the shape its card's rule gives it (the
    same shares while every card divides as NVIDIA's)."""
    if table.plain:
        return shares
    out = []
    for s in shares:
        dev = table.devices[int(table.gpu_device[row, s.index])]
        if s.mig_profile is None and s.gpu_milli < WHOLE_GPU_MILLI and not dev.is_plain:
            shape = dev.slice_shape(s.gpu_milli, s.memory_mib, int(table.gpu_mem_cap[row, s.index]))
            if shape is not None:
                s = GpuShare(s.index, shape[0], shape[1])
        out.append(s)
    return tuple(out)
