"""Kueue's objects (``kueue.x-k8s.io``) as gpupool's queues on Kubernetes.

``objects.py`` builds the configuration from the objects, one bad object at a time (pure);
``workloads.py`` says which LocalQueue and priority a pod has, as Kueue does (pure);
``source.py`` watches the objects, applies changes in place and marks bad objects;
``pods.py`` is the scheduler controller that reads pods that way.
"""

from gpupool.k8s.kueue.objects import QueueObjects
from gpupool.k8s.kueue.pods import KueueController
from gpupool.k8s.kueue.source import KueueSource, served_version

__all__ = ["KueueController", "KueueSource", "QueueObjects", "served_version"]
