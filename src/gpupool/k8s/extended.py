"""Extended resources other than GPUs (``rdma/hca``, ``example.com/foo``, ...), counted as the
kubelet admits a pod: a node's ``status.allocatable`` minus the requests of every pod bound
there and not ended, whoever scheduled it.

The kubelet (``pkg/kubelet/lifecycle/predicate.go``) first drops the extended resources the
node does not advertise (``removeMissingExtendedResources``), then refuses a pod asking more
of one than is left (``OutOf<name>``). kube-scheduler's ``NodeResourcesFit`` refuses a node
lacking the resource altogether ("Insufficient <name>"); gpupool does both the same way.
Resources gpupool itself places by card (HAMi's NVIDIA names, the other vendors' names) are
not counted here: the cards are.

:class:`ExtendedLedger` keeps what gpupool's own pods take of each node (from the moment
their bind is sent, so two pods decided in one cycle see each other); other schedulers' pods
and DaemonSets come from :class:`~gpupool.k8s.podview.NodeUsage`. The core does not count
these resources: the ``extended-resources`` filter (:class:`ExtendedResourcesFit`, added to
the core's profile by the controller) keeps a pod off nodes without enough free at the start
of a cycle, and the controller checks again before each bind (a pod that no longer fits
because another of the same cycle took the room backs off and is placed again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from gpupool.config.quantity import cpu_milli
from gpupool.core.errors import ConfigError
from gpupool.core.model import Task
from gpupool.core.placement.framework import CycleState, Mask, Profile, Rows
from gpupool.k8s.podview import NodeUsage

__all__ = [
    "NATIVE",
    "ExtendedLedger",
    "ExtendedResourcesFit",
    "extended_allocatable",
    "with_extended_filter",
]

NATIVE = frozenset({"cpu", "memory", "ephemeral-storage", "pods", "storage"})
"""Resources the kubelet counts natively (and hugepages-*), not as extended resources."""


def _extended(name: str, managed: frozenset[str]) -> bool:
    return name not in NATIVE and not name.startswith("hugepages-") and name not in managed


def extended_allocatable(node: Mapping[str, Any], managed: frozenset[str]) -> dict[str, int]:
    """The node's allocatable extended resources (whole units), those in ``managed`` (placed
    by card) left out; a value that cannot be read counts as 0."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    out = {}
    for name, raw in alloc.items():
        if _extended(str(name), managed):
            try:
                out[str(name)] = cpu_milli(raw, f"allocatable[{name}]") // 1000
            except ConfigError:
                out[str(name)] = 0
    return out


@dataclass
class ExtendedLedger:
    """Per node, the allocatable extended resources and what gpupool's own pods take; other
    pods' share comes from ``outside`` (``NodeUsage``)."""

    outside: NodeUsage
    managed: frozenset[str] = frozenset()
    allocatable: dict[str, dict[str, int]] = field(default_factory=dict)
    own: dict[str, tuple[str, Mapping[str, int]]] = field(default_factory=dict)
    version: int = 0

    def asked(self, extended: Mapping[str, int]) -> dict[str, int]:
        """The part of a pod's extended requests counted here (GPU names left out)."""
        return {k: v for k, v in extended.items() if v > 0 and _extended(k, self.managed)}

    def set_node(self, name: str, node: Mapping[str, Any] | None) -> None:
        now = None if node is None else extended_allocatable(node, self.managed)
        if now == self.allocatable.get(name):
            return  # a node event that changed nothing here (a node-lock write): caches hold
        if now is None:
            self.allocatable.pop(name, None)
        else:
            self.allocatable[name] = now
        self.version += 1

    def take(self, key: str, node: str, asked: Mapping[str, int]) -> None:
        """Gpupool's pod ``key`` holds ``asked`` on ``node`` (its bind was sent, or it runs)."""
        if not asked:
            self.drop(key)
        elif self.own.get(key) != (node, asked):
            self.own[key] = (node, dict(asked))
            self.version += 1

    def drop(self, key: str) -> None:
        if self.own.pop(key, None) is not None:
            self.version += 1

    def used(self, node: str, name: str) -> int:
        mine = sum(a.get(name, 0) for n, a in self.own.values() if n == node)
        return mine + self.outside.of(node).get(name, 0)

    def shortfall(self, node: str, asked: Mapping[str, int], *, skip: str = "") -> str | None:
        """Why ``node`` cannot take ``asked`` now (None when it can); ``skip``: a pod key whose
        own share is not counted (the pod being checked)."""
        alloc = self.allocatable.get(node, {})
        for name in sorted(asked):
            if name not in alloc:
                return f"node {node} has no {name}"
            used = self.used(node, name)
            if skip in self.own and self.own[skip][0] == node:
                used -= self.own[skip][1].get(name, 0)
            if asked[name] > alloc[name] - used:
                return (
                    f"node {node} has {max(0, alloc[name] - used)} {name} free of "
                    f"{alloc[name]}; the pod asks {asked[name]}"
                )
        return None


@dataclass(eq=False)
class ExtendedResourcesFit:
    """Keeps nodes with enough of each extended resource the task's pod asks for free
    (allocatable minus every pod's requests there), as the kubelet admits pods."""

    name: ClassVar[str] = "extended-resources"
    resolvable: ClassVar[bool] = False  # preemption frees cards, not these

    ledger: ExtendedLedger

    def filter(self, cs: CycleState, task: Task, rows: Rows) -> Mask:
        asked = dict(task.pod_set.extended)
        if not asked:
            return np.ones(rows.size, np.bool_)
        nodes = cs.table.nodes
        return np.fromiter(
            (self.ledger.shortfall(str(nodes[r].name), asked) is None for r in rows),
            np.bool_,
            count=rows.size,
        )

    def reason(self, task: Task) -> str:
        asked = dict(task.pod_set.extended)
        return "not enough " + ", ".join(f"{v} {k}" for k, v in sorted(asked.items())) + " free"


def with_extended_filter(profile: Profile, plugin: ExtendedResourcesFit) -> Profile:
    """``profile`` with the ``extended-resources`` filter added after the inventory and CPU
    and memory filters."""
    return replace(profile, filters=(*profile.filters, plugin))
