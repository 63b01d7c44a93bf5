"""Accelerators other than NVIDIA's, as HAMi's device packages (``pkg/device/<vendor>/``)
speak for them: resource names (:mod:`.protocols`), the node inventory each registers
(:mod:`.inventory`), the requests a container makes (:mod:`.requests`) and the allocation
annotations its device plugin reads (:mod:`.allocation`). NVIDIA's protocol is
``gpupool.k8s.hami``. ``BIND_ORDER_STAMP``: the annotation a device plugin picks pods by
the order of (Enflame's DRS ``enflame.com/gcu-assigned-time``), written at the bind itself.
"""

from gpupool.k8s.vendors.allocation import vendor_annotations
from gpupool.k8s.vendors.drs import ASSIGNED_TIME as BIND_ORDER_STAMP
from gpupool.k8s.vendors.inventory import vendor_gpus
from gpupool.k8s.vendors.protocols import PROTOCOLS, VendorProtocol, protocol_for
from gpupool.k8s.vendors.requests import card_memory, vendor_pod_request

__all__ = [
    "BIND_ORDER_STAMP",
    "PROTOCOLS",
    "VendorProtocol",
    "card_memory",
    "protocol_for",
    "vendor_annotations",
    "vendor_gpus",
    "vendor_pod_request",
]
