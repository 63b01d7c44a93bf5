"""The kubelet's admission of a pod bound to its node, pure (Kubernetes ``pkg/kubelet/
lifecycle/predicate.go`` and the scheduler's ``AdmissionCheck`` it calls).

A pod is checked against the node's ``status.allocatable`` minus the requests of the pods
already admitted there and not finished, whoever scheduled them:

1. resources, in the kubelet's order: pod count (``OutOfpods``), ``cpu`` (``OutOfcpu``),
   ``memory`` (``OutOfmemory``), then extended resources the node advertises
   (``OutOf<name>``, e.g. ``OutOfnvidia.com/gpu``); extended resources the node does not
   advertise are dropped first (``removeMissingExtendedResources``), so HAMi's
   ``nvidia.com/gpumem`` and ``nvidia.com/gpucores`` are never counted;
2. required node affinity and ``nodeSelector`` (``NodeAffinity``).

Only the first failure is reported, as the kubelet does: the pod goes ``Failed`` with that
reason and the message ``Pod was rejected: <message>``, where a resource message is
``Node didn't have enough resource: cpu, requested: 1000, used: 9000, capacity: 10000``
(CPU in milli, memory in bytes) and an affinity message ``Predicate NodeAffinity failed:
node(s) didn't match Node selector``.

A pod's request of a resource is the larger of the sum over its containers and the largest
of its init containers (requests, defaulting to limits as the API server does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING
from typing import Any

from gpupool.config.quantity import parse_quantity

__all__ = [
    "Rejection",
    "Requests",
    "admit",
    "node_affinity_matches",
    "pod_requests",
    "rejected_status",
    "unexpected",
]

OUT_OF = "OutOf"
NODE_AFFINITY = "NodeAffinity"
AFFINITY_REASON = "node(s) didn't match Node selector"
UNEXPECTED = "UnexpectedAdmissionError"
_NATIVE = ("cpu", "memory", "ephemeral-storage", "pods")


@dataclass(frozen=True, slots=True)
class Requests:
    """What a pod takes of a node: milli-CPU, memory bytes, and extended resources."""

    cpu_milli: int = 0
    memory: int = 0
    scalars: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Rejection:
    """A kubelet admission failure: the pod's ``status.reason`` and the message."""

    reason: str
    message: str


def _value(raw: object, milli: bool) -> int:
    amount = parse_quantity(raw, "resources")
    if milli:
        amount *= 1000
    return int(amount.to_integral_value(rounding=ROUND_CEILING))


def _container(c: Mapping[str, Any]) -> dict[str, int]:
    res = c.get("resources") or {}
    limits: Mapping[str, Any] = res.get("limits") or {}
    requests: Mapping[str, Any] = res.get("requests") or {}
    out: dict[str, int] = {}
    for name in {*limits, *requests}:
        raw = requests.get(name, limits.get(name))
        if raw is not None:
            out[name] = _value(raw, name == "cpu")
    return out


def pod_requests(pod: Mapping[str, Any]) -> Requests:
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for name, v in _container(c).items():
            total[name] = total.get(name, 0) + v
    for c in spec.get("initContainers") or []:
        for name, v in _container(c).items():
            total[name] = max(total.get(name, 0), v)
    scalars = {k: v for k, v in total.items() if k not in _NATIVE}
    return Requests(total.get("cpu", 0), total.get("memory", 0), scalars)


def _allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return {k: _value(v, k == "cpu") for k, v in alloc.items()}


def _match_expression(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = str(expr.get("key", ""))
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no node (Kubernetes' NodeSelectorTerm rule)
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    if not all(_match_expression(e, labels) for e in exprs):
        return False
    node_fields = {"metadata.name": str(meta.get("name", ""))}
    return all(_match_expression(f, node_fields) for f in fields)


def node_affinity_matches(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """``nodeSelector`` (every pair) and required node affinity (any term) both hold."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    terms = required.get("nodeSelectorTerms") or []
    return any(_term_matches(t, node) for t in terms)


def _short(name: str, requested: int, used: int, capacity: int) -> Rejection:
    return Rejection(
        f"{OUT_OF}{name}",
        f"Node didn't have enough resource: {name}, requested: {requested}, "
        f"used: {used}, capacity: {capacity}",
    )


def admit(
    pod: Mapping[str, Any], node: Mapping[str, Any], others: Iterable[Requests]
) -> Rejection | None:
    """None when the kubelet admits ``pod`` beside ``others`` (the pods admitted on the node
    and not finished); else the first failure, as the kubelet reports it."""
    alloc = _allocatable(node)
    mine = pod_requests(pod)
    others = list(others)
    pods_cap = alloc.get("pods")
    if pods_cap is not None and len(others) + 1 > pods_cap:
        return _short("pods", 1, len(others), pods_cap)
    used_cpu = sum(o.cpu_milli for o in others)
    cap_cpu = alloc.get("cpu", 0)
    if mine.cpu_milli > 0 and mine.cpu_milli > cap_cpu - used_cpu:
        return _short("cpu", mine.cpu_milli, used_cpu, cap_cpu)
    used_mem = sum(o.memory for o in others)
    cap_mem = alloc.get("memory", 0)
    if mine.memory > 0 and mine.memory > cap_mem - used_mem:
        return _short("memory", mine.memory, used_mem, cap_mem)
    for name in sorted(mine.scalars):
        if name not in alloc or mine.scalars[name] == 0:
            continue  # removeMissingExtendedResources
        used = sum(o.scalars.get(name, 0) for o in others)
        if mine.scalars[name] > alloc[name] - used:
            return _short(name, mine.scalars[name], used, alloc[name])
    if not node_affinity_matches(pod, node):
        return Rejection(NODE_AFFINITY, f"Predicate {NODE_AFFINITY} failed: {AFFINITY_REASON}")
    return None


def unexpected(error: str) -> Rejection:
    """A device allocation failure (the device manager's admit handler)."""
    return Rejection(UNEXPECTED, f"Allocate failed due to {error}, which is unexpected")


def rejected_status(rejection: Rejection) -> dict[str, Any]:
    """The status the kubelet writes for a pod it rejects (``rejectPod``)."""
    return {
        "phase": "Failed",
        "reason": rejection.reason,
        "message": f"Pod was rejected: {rejection.message}",
    }
