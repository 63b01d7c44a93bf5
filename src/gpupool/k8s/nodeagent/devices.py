"""Which vendor's HAMi device plugin an emulated node runs: the resource its kubelet counts,
the register annotation it writes (if any), the cards it has, and the allocation annotation
and device type its ``Allocate`` reads. NVIDIA's unless the node carries another vendor's
inventory (``k8s/vendors/protocols.py``):

- a register annotation: Hygon's ``hami.io/node-dcu-register``, Ascend's
  ``hami.io/node-register-<chip>``, Iluvatar's, Kunlunxin's; the cards are the annotation's;
- node capacity, for the vendors whose device plugin registers no annotation and whose cards
  HAMi's scheduler counts from the node's capacity: Cambricon (``cambricon.com/mlu.smlu.vcore``,
  100 a card, and ``mlu.smlu.vmemory``), Moore Threads (``mthreads.com/sgpu-core``, 16 a card,
  and ``sgpu-memory``) and Enflame's whole cards (``enflame.com/gcu``); the cards are those
  HAMi's ``GetNodeDevices`` makes of the capacity (``<node>-cambricon-mlu-<i>``, ...), each
  split 100 ways (one for Enflame's), the memory shared out evenly.

Enflame's DRS nodes (``enflame.com/gcu-drs-capacity``) count ``enflame.com/drs-gcu`` and run
Enflame's own plugin (``nodeagent/enflame.py``), which takes no lock and reads
``assigned-containers``.

Every other vendor's plugin shares HAMi's node lock and the pod's ``hami.io/vgpu-node`` and
``hami.io/bind-phase``; each reads its own ``hami.io/<x>-devices-to-allocate`` entries of its
device type (``MLU``, ``Mthreads``, ``GCU``, ...)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.k8s.hami.errors import TranslateError
from gpupool.k8s.nodeagent import hami
from gpupool.k8s.nodeagent.ledger import RegisteredCard
from gpupool.k8s.vendors.inventory import node_protocol, vendor_gpus

__all__ = ["NVIDIA_DEVICES", "AgentDevices", "agent_cards", "devices_of"]


@dataclass(frozen=True, slots=True)
class AgentDevices:
    resource: str
    register: str
    to_allocate: str
    device_type: str


NVIDIA_DEVICES = AgentDevices(
    "nvidia.com/gpu", hami.REGISTER, hami.DEVICES_TO_ALLOCATE, hami.DEVICE_TYPE
)


def devices_of(node: Mapping[str, Any]) -> AgentDevices:
    p = node_protocol(node)
    if p is None or p.vendor == "metax":
        return NVIDIA_DEVICES
    return AgentDevices(p.count, p.register, p.to_allocate, p.device_type)


def agent_cards(node: Mapping[str, Any]) -> list[RegisteredCard]:
    """The node's cards as its device plugin has them: its register annotation's, or those
    its capacity makes (empty when it cannot be read)."""
    from gpupool.k8s.nodeagent.plugin import cards_of  # the plugin imports this module

    devices = devices_of(node)
    if devices == NVIDIA_DEVICES:
        return cards_of(node, devices.register)
    try:
        return [RegisteredCard(g.uuid, g.max_holders, g.memory_mib) for g in vendor_gpus(node)]
    except TranslateError:
        return []
