"""Every pod on a node counted: what other schedulers' pods and DaemonSets take.

gpupool watches every pod, not only its own: a node's CPU, memory and extended resources
are shared with DaemonSets, static pods and other schedulers' pods, and the kubelet
refuses a pod (``OutOfcpu``, ``OutOfmemory``) when the sum of the requests of the pods it
runs exceeds allocatable. Pods gpupool does not schedule are kept **reduced** (:func:`reduce`)
to what is needed: name, namespace, UID, labels, node, phase, deletion, required pod
anti-affinity (pod affinity and topology spread count these pods), the MIG instances they
hold (``hami.io/vgpu-mig-allocations``), and their requests
summed as the kubelet sums them (the larger of the containers' sum and the largest init
container, plus ``spec.overhead``). :class:`NodeUsage` keeps, per node, the requests of
the pods that hold capacity there outside the core (bound, not ended, not a pod whose
cards the core holds);
the controller tells the core (``Scheduler.set_outside``), which takes it off the node's
free CPU and memory but not off its capacity (a request larger than what is free now is
not "larger than any node"). A pod that ends (Succeeded, Failed, deleted) frees it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupool.config.quantity import cpu_milli, memory_mib
from gpupool.core.errors import ConfigError
from gpupool.k8s.hami.mig import MIG_ALLOCATIONS

__all__ = ["NodeUsage", "PodUsage", "pod_usage", "reduce"]

log = logging.getLogger("gpupool.k8s")

ANTI = "requiredDuringSchedulingIgnoredDuringExecution"

REQUESTS = "gpupool.io/requests"
"""Where a reduced pod keeps its summed requests (a key of the reduced dict, not of a
Kubernetes object)."""


@dataclass(frozen=True, slots=True)
class PodUsage:
    cpu_milli: int = 0
    memory_mib: int = 0
    extended: Mapping[str, int] = field(default_factory=dict)  # other resources, whole units


def _requests(c: Mapping[str, Any]) -> Mapping[str, Any]:
    res = c.get("resources") or {}
    # the API server defaults requests from limits; a reduced copy may be read before that
    return {**(res.get("limits") or {}), **(res.get("requests") or {})}


def _amount(name: str, value: object, where: str) -> int:
    try:
        if name == "cpu":
            return cpu_milli(value, where)
        if name == "memory":
            return memory_mib(value, where)
        return cpu_milli(value, where) // 1000 if value is not None else 0
    except ConfigError:
        log.warning("%s=%r cannot be read; counted as 0", where, value)
        return 0


def _sum(containers: list[Mapping[str, Any]], where: str) -> dict[str, int]:
    total: dict[str, int] = {}
    for c in containers:
        for name, value in _requests(c).items():
            if name in ("ephemeral-storage", "pods") or name.startswith("hugepages-"):
                continue
            total[name] = total.get(name, 0) + _amount(name, value, f"{where}[{name}]")
    return total


def pod_usage(pod: Mapping[str, Any]) -> PodUsage:
    """The pod's requests as the kubelet's admission sums them."""
    reduced = pod.get(REQUESTS)
    if isinstance(reduced, PodUsage):
        return reduced
    spec = pod.get("spec") or {}
    key = f"pod {(pod.get('metadata') or {}).get('name')}"
    mains = _sum(list(spec.get("containers") or ()), key)
    total = dict(mains)
    for c in spec.get("initContainers") or ():
        for name, value in _sum([c], key).items():
            total[name] = max(total.get(name, 0), value)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + _amount(name, value, f"{key}.spec.overhead[{name}]")
    cpu = total.pop("cpu", 0)
    mem = total.pop("memory", 0)
    return PodUsage(cpu, mem, {k: v for k, v in total.items() if v})


def reduce(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod of another scheduler, cut down to what counting it needs."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    small_meta = {
        k: meta[k]
        for k in ("name", "namespace", "uid", "resourceVersion", "labels", "deletionTimestamp")
        if k in meta
    }
    mig = (meta.get("annotations") or {}).get(MIG_ALLOCATIONS)
    if mig:  # the MIG instances HAMi's scheduler placed it on
        small_meta["annotations"] = {MIG_ALLOCATIONS: mig}
    small_spec = {k: spec[k] for k in ("nodeName", "schedulerName") if k in spec}
    anti = ((spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(ANTI)
    if anti:  # it keeps other pods away from its domain
        small_spec["affinity"] = {"podAntiAffinity": {ANTI: anti}}
    return {
        "kind": "Pod",
        "metadata": small_meta,
        "spec": small_spec,
        "status": {"phase": (pod.get("status") or {}).get("phase", "")},
        REQUESTS: pod_usage(pod),
    }


class NodeUsage:
    """Per node, the requests of the pods counted there (pod key -> node and usage)."""

    def __init__(self) -> None:
        self._pods: dict[str, tuple[str, PodUsage]] = {}
        self._nodes: dict[str, dict[str, int]] = {}
        self.changed: set[str] = set()  # nodes whose sums changed since last taken

    def put(self, key: str, node: str, usage: PodUsage) -> None:
        old = self._pods.get(key)
        if old == (node, usage):
            return
        self.drop(key)
        self._pods[key] = (node, usage)
        self._add(node, usage, 1)

    def drop(self, key: str) -> None:
        old = self._pods.pop(key, None)
        if old is not None:
            self._add(old[0], old[1], -1)

    def _add(self, node: str, usage: PodUsage, sign: int) -> None:
        sums = self._nodes.setdefault(node, {})
        for name, value in (
            ("cpu", usage.cpu_milli),
            ("memory", usage.memory_mib),
            *usage.extended.items(),
        ):
            sums[name] = sums.get(name, 0) + sign * value
        if not any(sums.values()):
            del self._nodes[node]
        self.changed.add(node)

    def of(self, node: str) -> Mapping[str, int]:
        return self._nodes.get(node, {})

    def take_changed(self) -> set[str]:
        out, self.changed = self.changed, set()
        return out

    def __contains__(self, key: str) -> bool:
        return key in self._pods
