"""Configuration files in, core objects out: clusters, flavors, queues, cohorts (YAML).

``load_cluster(path)`` gives the nodes of a cluster spec, ``load_queue_config(path)`` a
validated ``QueueConfig`` from Kueue-shaped objects; both accept one file holding both kinds
of object. Quantities become the core's integer units here, once (``quantity.py``). Every
problem is a ``ConfigError`` naming the file, the document, the field and the rule.
"""

from gpupool.config.cluster import CLUSTER_API_VERSION, nodes_from_documents
from gpupool.config.documents import Document
from gpupool.config.loader import (
    KINDS,
    load_cluster,
    load_documents,
    load_queue_config,
    parse_documents,
    read_documents,
    read_queue_config,
)
from gpupool.config.quantity import (
    cpu_milli,
    duration_s,
    gpu_memory_mib,
    gpu_milli,
    memory_mib,
    parse_quantity,
    whole_number,
)
from gpupool.config.queues import (
    GPUPOOL_API_VERSION,
    KUEUE_API_VERSIONS,
    QUEUE_KINDS,
    RESOURCE_NAMES,
    Ignored,
    QueueRead,
    ResourceName,
    queue_config_from_documents,
    read_queue_documents,
    resource_name,
)

__all__ = [
    "CLUSTER_API_VERSION",
    "GPUPOOL_API_VERSION",
    "KINDS",
    "KUEUE_API_VERSIONS",
    "QUEUE_KINDS",
    "RESOURCE_NAMES",
    "Document",
    "Ignored",
    "QueueRead",
    "ResourceName",
    "cpu_milli",
    "duration_s",
    "gpu_memory_mib",
    "gpu_milli",
    "load_cluster",
    "load_documents",
    "load_queue_config",
    "memory_mib",
    "nodes_from_documents",
    "parse_documents",
    "parse_quantity",
    "queue_config_from_documents",
    "read_documents",
    "read_queue_config",
    "read_queue_documents",
    "resource_name",
    "whole_number",
]
