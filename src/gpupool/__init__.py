"""gpupool: a GPU scheduler for shared AI clusters on Kubernetes."""

__version__ = "0.1.0"
