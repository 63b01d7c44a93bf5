"""DotProd: Tetris-style alignment of the pod's demand with the node's free resources.

The FGD paper's configuration ("merge" dimensions, "max" norm): the node's free vector
``[cpu_free / 128000, gpu_idle / 8000]`` and the pod's ``[cpu / 128000, gpu / 8000]``, score
``floor(100 * (1 - free . demand / 2))``. The *smaller* dot product wins: a pod goes where
the resources it needs most are scarcest, which packs. Cards: ``best-fit-cards``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.model import Task
from gpupool.core.placement.framework import CycleState, Rows, Scores
from gpupool.core.placement.plugins.bestfit import MAX_SPEC_CPU_MILLI, MAX_SPEC_GPU_MILLI, gpu_idle


@dataclass(frozen=True, slots=True)
class DotProdScore:
    name: ClassVar[str] = "dotprod"

    def score(self, cs: CycleState, task: Task, rows: Rows) -> Scores:
        t = cs.table
        cpu_free = t.cpu_free[rows]
        node_cpu = cpu_free / MAX_SPEC_CPU_MILLI
        node_gpu = gpu_idle(cs, rows) / MAX_SPEC_GPU_MILLI
        pod_cpu = task.cpu_milli / MAX_SPEC_CPU_MILLI
        pod_gpu = task.request.total_milli / MAX_SPEC_GPU_MILLI
        s = np.trunc(100.0 * (1.0 - (node_cpu * pod_cpu + node_gpu * pod_gpu) / 2.0))
        return np.where(cpu_free < task.cpu_milli, 0.0, s)
