"""The control plane: the core, its durable state and a cluster, behind one service."""

from gpupool.control.clock import Clock
from gpupool.control.plane import Backend, ControlPlane, JobRecord, TickResult

__all__ = ["Backend", "Clock", "ControlPlane", "JobRecord", "TickResult"]
