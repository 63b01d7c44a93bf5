"""Emulated Kubernetes nodes for tests and ``gpupool k8s bench``: each node's kubelet
(admission, pod status) and HAMi's NVIDIA device plugin (the node lock, ``Allocate``),
run beside a real API server, and a ledger of what each container really got.

- ``hami``: HAMi's node-side protocol, pure (lock, which pod ``Allocate`` serves, devices);
- ``kubelet``: the kubelet's admission, pure (resources, node affinity, reasons);
- ``plugin``: HAMi's device plugin on one node, through the API server;
- ``ledger``: what happened, and the counts (swaps, rejections, cards over their limits);
- ``agent``: :class:`NodeAgent`, one node's kubelet and device plugin;
- ``fleet``: the :class:`Fleet` that runs one agent per node on shared watches.
"""

from gpupool.k8s.nodeagent.agent import GPU_RESOURCE, RUN_SECONDS, NodeAgent
from gpupool.k8s.nodeagent.fleet import Fleet
from gpupool.k8s.nodeagent.ledger import Ledger

__all__ = ["GPU_RESOURCE", "RUN_SECONDS", "Fleet", "Ledger", "NodeAgent"]
