"""Trace loaders: foreign trace files in, core values (nodes, jobs) out."""

from gpupool.sim.traces.openb import TracePod, gpu_request, load_nodes, load_pods, to_job

__all__ = ["TracePod", "gpu_request", "load_nodes", "load_pods", "to_job"]
