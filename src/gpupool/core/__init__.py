"""The pure scheduling core: facts in, decisions out; no I/O, no clock, no global state.

Names are loaded on first use (PEP 562), so that a program that needs only a small part of the
core (the CLI's client commands need ``gpupool.core.errors``) does not pay for numpy and the
scheduler at start-up; ``from gpupool.core import X`` works as before.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpupool.core.cluster import ClusterState
    from gpupool.core.cycle import run_cycle
    from gpupool.core.decisions import Bind, CycleResult, Evict, Hold, Park, Preemption
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
        ClusterQueueName,
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
    from gpupool.core.reasons import Reason, Step
    from gpupool.core.scheduler import Scheduler
    from gpupool.core.snapshot import Snapshot
    from gpupool.core.validation import Validator, check_request

_WHERE: dict[str, str] = {
    "ClusterState": "gpupool.core.cluster",
    "run_cycle": "gpupool.core.cycle",
    "Bind": "gpupool.core.decisions",
    "CycleResult": "gpupool.core.decisions",
    "Park": "gpupool.core.decisions",
    "Evict": "gpupool.core.decisions",
    "Hold": "gpupool.core.decisions",
    "Preemption": "gpupool.core.decisions",
    "ClusterQueueName": "gpupool.core.model",
    "Reason": "gpupool.core.reasons",
    "Step": "gpupool.core.reasons",
    "Scheduler": "gpupool.core.scheduler",
    "AdapterError": "gpupool.core.errors",
    "ConfigError": "gpupool.core.errors",
    "ConflictError": "gpupool.core.errors",
    "GpupoolError": "gpupool.core.errors",
    "InvalidJobError": "gpupool.core.errors",
    "NotFoundError": "gpupool.core.errors",
    "TraceError": "gpupool.core.errors",
    "WHOLE_GPU_MILLI": "gpupool.core.model",
    "Gpu": "gpupool.core.model",
    "GpuKind": "gpupool.core.model",
    "GpuRequest": "gpupool.core.model",
    "GpuShare": "gpupool.core.model",
    "Job": "gpupool.core.model",
    "JobId": "gpupool.core.model",
    "MigInstance": "gpupool.core.model",
    "Node": "gpupool.core.model",
    "NodeName": "gpupool.core.model",
    "Placement": "gpupool.core.model",
    "PodSet": "gpupool.core.model",
    "QueueName": "gpupool.core.model",
    "Taint": "gpupool.core.model",
    "TaintEffect": "gpupool.core.model",
    "Task": "gpupool.core.model",
    "TaskId": "gpupool.core.model",
    "Toleration": "gpupool.core.model",
    "Code": "gpupool.core.placement.framework",
    "Profile": "gpupool.core.placement.framework",
    "Registry": "gpupool.core.placement.framework",
    "Status": "gpupool.core.placement.framework",
    "place_job": "gpupool.core.placement.place",
    "place_task": "gpupool.core.placement.place",
    "builtin_registry": "gpupool.core.placement.registry",
    "default_profile": "gpupool.core.placement.registry",
    "Snapshot": "gpupool.core.snapshot",
    "Validator": "gpupool.core.validation",
    "check_request": "gpupool.core.validation",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "WHOLE_GPU_MILLI",
    "AdapterError",
    "Bind",
    "ClusterQueueName",
    "ClusterState",
    "Code",
    "ConfigError",
    "ConflictError",
    "CycleResult",
    "Evict",
    "Gpu",
    "GpuKind",
    "GpuRequest",
    "GpuShare",
    "GpupoolError",
    "Hold",
    "InvalidJobError",
    "Job",
    "JobId",
    "MigInstance",
    "Node",
    "NodeName",
    "NotFoundError",
    "Park",
    "Placement",
    "PodSet",
    "Preemption",
    "Profile",
    "QueueName",
    "Reason",
    "Registry",
    "Scheduler",
    "Snapshot",
    "Status",
    "Step",
    "Taint",
    "TaintEffect",
    "Task",
    "TaskId",
    "Toleration",
    "TraceError",
    "Validator",
    "builtin_registry",
    "check_request",
    "default_profile",
    "place_job",
    "place_task",
    "run_cycle",
]
