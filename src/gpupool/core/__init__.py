"""The pure scheduling core: facts in, decisions out; no I/O, no clock, no global state."""

from gpupool.core.cluster import ClusterState
from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import Bind, CycleResult, Park
from gpupool.core.errors import (
    AdapterError,
    ConfigError,
    ConflictError,
    GpupoolError,
    InvalidJobError,
    NotFoundError,
    TraceError,
)
from gpupool.core.model import (
    WHOLE_GPU_MILLI,
    Gpu,
    GpuKind,
    GpuRequest,
    GpuShare,
    Job,
    JobId,
    MigInstance,
    Node,
    NodeName,
    Placement,
    PodSet,
    QueueName,
    Taint,
    TaintEffect,
    Task,
    TaskId,
    Toleration,
)
from gpupool.core.placement.framework import Code, Profile, Registry, Status
from gpupool.core.placement.place import place_job, place_task
from gpupool.core.placement.registry import builtin_registry, default_profile
from gpupool.core.snapshot import Snapshot
from gpupool.core.validation import Validator, check_request

__all__ = [
    "WHOLE_GPU_MILLI", "AdapterError", "Bind", "ClusterState", "Code", "ConfigError",
    "ConflictError", "CycleResult", "Gpu", "GpuKind", "GpuRequest", "GpuShare", "GpupoolError",
    "InvalidJobError", "Job", "JobId", "MigInstance", "Node", "NodeName", "NotFoundError",
    "Park", "Placement", "PodSet", "Profile", "QueueName", "Registry", "Snapshot", "Status",
    "Taint", "TaintEffect", "Task", "TaskId", "Toleration", "TraceError", "Validator",
    "builtin_registry", "check_request", "default_profile", "place_job", "place_task",
    "run_cycle",
]
