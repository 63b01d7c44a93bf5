"""Which vendor's HAMi device plugin an emulated node runs: the resource its kubelet counts,
the register annotation it writes, and the allocation annotation and device type its
``Allocate`` reads. NVIDIA's unless the node registers another vendor's cards under a register
annotation (Hygon's ``hami.io/node-dcu-register``, Ascend's ``hami.io/node-register-<chip>``,
Iluvatar's, Kunlunxin's: ``k8s/vendors/protocols.py``); every vendor's plugin shares HAMi's
node lock and the pod's ``hami.io/vgpu-node`` and ``hami.io/bind-phase``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.k8s.nodeagent import hami
from gpupool.k8s.vendors.inventory import node_protocol

__all__ = ["NVIDIA_DEVICES", "AgentDevices", "devices_of"]


@dataclass(frozen=True, slots=True)
class AgentDevices:
    resource: str
    register: str
    to_allocate: str
    device_type: str


NVIDIA_DEVICES = AgentDevices("nvidia.com/gpu", hami.REGISTER, hami.DEVICES_TO_ALLOCATE,
                              hami.DEVICE_TYPE)


def devices_of(node: Mapping[str, Any]) -> AgentDevices:
    p = node_protocol(node)
    if p is None or not p.register or p.vendor == "metax":
        return NVIDIA_DEVICES
    return AgentDevices(p.count, p.register, p.to_allocate, p.device_type)
