"""Elastic GPU objects: ElasticGPU, ElasticGPUClaim, ElasticGPUClass and the binder."""

from gpupool.core.elastic.binder import Binder, Release
from gpupool.core.elastic.classes import ElasticGPUClass
from gpupool.core.elastic.objects import (
    CLASS_PARAMETERS,
    BindingMode,
    Capacity,
    ClaimPhase,
    ClaimRef,
    ClaimRequests,
    ElasticGPU,
    ElasticGPUClaim,
    GpuPhase,
    Provisioner,
    ReclaimPolicy,
    RequestKind,
    ServingModel,
    Source,
)
from gpupool.core.elastic.recovery import Recovered, recover
from gpupool.core.elastic.resolution import TASK_PREFIX
from gpupool.core.elastic.tflops import (
    PEAK_TFLOPS,
    PRECISION,
    TflopsShare,
    canonical_model,
    convert,
    peak_tflops,
)

__all__ = [
    "CLASS_PARAMETERS",
    "PEAK_TFLOPS",
    "PRECISION",
    "TASK_PREFIX",
    "Binder",
    "BindingMode",
    "Capacity",
    "ClaimPhase",
    "ClaimRef",
    "ClaimRequests",
    "ElasticGPU",
    "ElasticGPUClaim",
    "ElasticGPUClass",
    "GpuPhase",
    "Provisioner",
    "ReclaimPolicy",
    "Recovered",
    "Release",
    "RequestKind",
    "ServingModel",
    "Source",
    "TflopsShare",
    "canonical_model",
    "convert",
    "peak_tflops",
    "recover",
]
