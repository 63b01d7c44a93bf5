"""The embedded virtual cluster that ``gpupool serve`` runs on by default."""

from gpupool.virtual.cluster import VirtualCluster

__all__ = ["VirtualCluster"]
