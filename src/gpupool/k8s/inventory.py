"""What the controller reads of Nodes, read once per change that matters.

- :class:`NodeMemo`: a Node object's core node and its HAMi cards' modes, kept per node
  and reused while nothing gpupool reads of the object changed. Under HAMi's node lock
  every GPU pod writes its node twice (gpupool's lock, the device plugin's release), and
  each write comes back as a watch event whose register annotation would otherwise be
  parsed again; the lock annotation and the resourceVersion are left out of the
  comparison (nothing in the core node comes from them).
- :class:`Inventory`: what pod requests are read against (the smallest card, the models,
  the cards not in MIG mode, each vendor's models, each model's least memory, the cards'
  modes), made once after the nodes changed instead of once per pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.core.model import Node
from gpupool.k8s.hami.register import HAMI_CORE_MODE, HAMI_REGISTER, parse_hami_register
from gpupool.k8s.nodelock import LOCK_ANNOTATION
from gpupool.k8s.translate import TranslateError, card_floor, node_from_k8s
from gpupool.k8s.vendors import card_memory

__all__ = ["Inventory", "NodeMemo", "card_modes", "inventory"]

_NOT_READ = frozenset({LOCK_ANNOTATION})


def _key(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return (
        {k: v for k, v in annotations.items() if k not in _NOT_READ},
        meta.get("labels"),
        obj.get("spec"),
        obj.get("status"),
    )


def card_modes(obj: Mapping[str, Any]) -> dict[str, str]:
    """Card UUID -> HAMi's ``mode`` of each card not in ``hami-core`` mode (``mig``,
    ``mps``) from the node's register annotation; empty without one."""
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(HAMI_REGISTER)
    if not text or ("mig" not in text and "mps" not in text):
        return {}
    try:
        devices = parse_hami_register(text)
    except TranslateError:
        return {}  # node_from_k8s says why, for the same text
    return {d.id: d.mode for d in devices if d.mode != HAMI_CORE_MODE}


@dataclass
class NodeMemo:
    """Per node: the object's key, its core node, and its cards' modes."""

    entries: dict[str, tuple[tuple[Any, ...], Node, dict[str, str]]]

    def __init__(self) -> None:
        self.entries = {}

    def read(self, obj: Mapping[str, Any]) -> tuple[Node, dict[str, str], bool]:
        """The core node and the card modes of ``obj``, and whether they were read anew
        (False: the memo's, nothing read changed). TranslateError as ``node_from_k8s``."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        key = _key(obj)
        hit = self.entries.get(name)
        if hit is not None and hit[0] == key:
            return hit[1], hit[2], False
        node = node_from_k8s(obj)
        modes = card_modes(obj)
        self.entries[name] = (key, node, modes)
        return node, modes, True

    def forget(self, name: str) -> None:
        self.entries.pop(name, None)

    def modes(self) -> dict[str, str]:
        """Card UUID -> mode of every known card not in ``hami-core`` mode."""
        return {u: m for _, _, modes in self.entries.values() for u, m in modes.items()}


@dataclass(frozen=True, slots=True)
class Inventory:
    floor_mib: int
    models: frozenset[str]
    core_models: frozenset[str]
    """NVIDIA models with a card not in MIG mode."""
    vendors: Mapping[str, frozenset[str]]
    card_mib: Mapping[str, int]
    modes: Mapping[str, str]
    """Card UUID -> mode, for cards not in ``hami-core`` mode."""


def inventory(nodes: Iterable[Node], modes: Mapping[str, str]) -> Inventory:
    listed = list(nodes)
    vendors: dict[str, set[str]] = {}
    for n in listed:
        for g in n.gpus:
            vendors.setdefault(g.vendor, set()).add(g.model)
    return Inventory(
        card_floor(listed),
        frozenset(g.model for n in listed for g in n.gpus),
        frozenset(g.model for n in listed for g in n.gpus if not g.mig and g.vendor == "nvidia"),
        {v: frozenset(m) for v, m in vendors.items()},
        card_memory(listed),
        dict(modes),
    )
