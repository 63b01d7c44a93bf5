"""HAMi's NVIDIA protocol, pure: what its device plugin registers on a node
(:mod:`.register`), how it reads a pod's GPU requests (:mod:`.requests`), and the pod
annotations its device plugin allocates from (:mod:`.devices`)."""

from gpupool.k8s.hami.devices import card_usage, hami_annotations, hami_labels
from gpupool.k8s.hami.errors import TranslateError
from gpupool.k8s.hami.register import (
    HamiDevice,
    HamiMigProfile,
    card_refusals,
    cordoned_uuids,
    hami_gpus,
    node_refusal,
    parse_hami_register,
)
from gpupool.k8s.hami.requests import (
    ContainerGpu,
    HamiDefaults,
    PodRequest,
    ResourceNames,
    gpu_request,
    pod_request,
)

__all__ = [
    "ContainerGpu",
    "HamiDefaults",
    "HamiDevice",
    "HamiMigProfile",
    "PodRequest",
    "ResourceNames",
    "TranslateError",
    "card_refusals",
    "card_usage",
    "cordoned_uuids",
    "gpu_request",
    "hami_annotations",
    "hami_gpus",
    "hami_labels",
    "node_refusal",
    "parse_hami_register",
    "pod_request",
]
