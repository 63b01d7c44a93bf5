"""A scenario job's alternatives: other accelerators it may run on (``core/alternatives.py``).

::

    - name: train
      poisson: {ratePerHour: 30}
      gpus: 1
      models: [H100-80GB]
      duration: 30m
      alternatives:
      - {name: ascend, gpus: 2, models: [Ascend910B3], image: train:cann8}
      - {name: dcu, gpus: 2, models: [K100], env: {HIP_VISIBLE_DEVICES: auto}}

Each alternative gives whole cards (``gpus``) or a slice (``gpuMilli`` and/or ``gpuMemory``),
the models it runs on, and optionally the container image and environment of that form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpupool.config.quantity import gpu_memory_mib
from gpupool.core.model import WHOLE_GPU_MILLI, Alternative, GpuRequest
from gpupool.sim.scenario_schema import AlternativeDoc

if TYPE_CHECKING:
    from gpupool.sim.scenario_read import Reader

__all__ = ["read_alternatives"]


def read_alternatives(r: Reader, path: str, docs: list[AlternativeDoc]) -> tuple[Alternative, ...]:
    out: list[Alternative] = []
    for i, doc in enumerate(docs):
        out.append(_alternative(r, f"{path}[{i}]", doc, {a.name for a in out}))
    return tuple(out)


def _alternative(r: Reader, at: str, doc: AlternativeDoc, taken: set[str]) -> Alternative:
    if not doc.name:
        raise r.fail(f"{at}.name", "should be a name: each alternative needs one", doc.name)
    if doc.name in taken:
        raise r.fail(f"{at}.name", "is the name of another alternative", doc.name)
    models = frozenset(doc.models)
    if doc.gpus is not None:
        if doc.gpu_milli is not None or doc.gpu_memory is not None:
            raise r.fail(
                f"{at}.gpus",
                "cannot go with gpuMilli or gpuMemory: give either "
                "gpus (whole cards) or gpuMilli and gpuMemory (a slice "
                "of one card), not both",
                doc.gpus,
            )
        if doc.gpus < 1:
            raise r.fail(f"{at}.gpus", "must be 1 or more", doc.gpus)
        gpu = GpuRequest(count=doc.gpus, models=models)
    else:
        milli = doc.gpu_milli or 0
        if doc.gpu_milli is not None and not 1 <= milli < WHOLE_GPU_MILLI:
            raise r.fail(
                f"{at}.gpuMilli",
                "is not a slice: a slice is 1..999 milli of one GPU; ask for whole cards with gpus",
                milli,
            )
        mib = (
            0
            if doc.gpu_memory is None
            else r.quantity(f"{at}.gpuMemory", doc.gpu_memory, gpu_memory_mib)
        )
        if not milli and not mib:
            raise r.fail(at, "asks for no GPU: give gpus, or gpuMilli and gpuMemory")
        gpu = GpuRequest(gpu_milli=milli, memory_mib=mib, models=models)
    return Alternative(doc.name, gpu, doc.image, dict(doc.env))
