"""Where a pod may go and whether it may be scheduled yet, read from its spec.

- ``spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution``: its
  ``nodeSelectorTerms`` (``matchExpressions`` with every operator, ``matchFields`` on
  ``metadata.name``) become the core's node affinity terms (``core/affinity.py``); the
  ``node-affinity`` filter plugin honours them. ``nodeSelector`` and tolerations are read
  with the request (``k8s/translate.py``) and honoured by the ``node-selector`` and
  ``taint-toleration`` plugins.
- ``spec.schedulingGates`` (Kubernetes 1.26+; Kueue's pod integration adds
  ``kueue.x-k8s.io/admission``): a gated pod is not scheduled until every gate is removed.

Not honoured (pods are placed as if absent; said in ``docs/kubernetes.md``): preferred node
affinity, pod affinity and anti-affinity, and topology spread constraints. The required ones
among them are named by :func:`ignored_constraints`, so the pod can be told.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.core.affinity import NodeAffinityTerm, NodeRequirement
from gpupool.core.errors import InvalidJobError

__all__ = ["Constraints", "ignored_constraints", "pod_constraints", "scheduling_gates"]


@dataclass(frozen=True, slots=True)
class Constraints:
    """What restricts a pod's nodes beyond its request."""

    node_affinity: tuple[NodeAffinityTerm, ...] = ()


def scheduling_gates(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the pod's scheduling gates (empty: it may be scheduled)."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or ()
    return tuple(str(g.get("name", "")) for g in gates if isinstance(g, Mapping))


def ignored_constraints(pod: Mapping[str, Any]) -> list[str]:
    """The pod's required placement rules gpupool does not honour, by field."""
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity") or {}
    out = [f"spec.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution"
           for kind in ("podAffinity", "podAntiAffinity")
           if (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution")]
    if any((c or {}).get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
           for c in spec.get("topologySpreadConstraints") or ()):
        out.append("spec.topologySpreadConstraints (DoNotSchedule)")
    return out


def _requirement(expr: Any, where: str, *, field: bool) -> NodeRequirement:
    if not isinstance(expr, Mapping):
        raise InvalidJobError(where, expr, "must be an object with key, operator, values")
    values = expr.get("values") or ()
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise InvalidJobError(f"{where}.values", values, "must be a list of strings")
    return NodeRequirement(key=str(expr.get("key", "")), operator=str(expr.get("operator", "")),
                           values=tuple(values), field=field)


def pod_constraints(pod: Mapping[str, Any]) -> Constraints:
    """The pod's required node affinity; InvalidJobError naming the field when it cannot
    be read (an unknown operator, Gt without an integer, ...)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return Constraints()
    base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    terms = []
    for i, term in enumerate(required.get("nodeSelectorTerms") or ()):
        where = f"{base}.nodeSelectorTerms[{i}]"
        term = term or {}
        reqs = [_requirement(e, f"{where}.matchExpressions[{j}]", field=False)
                for j, e in enumerate(term.get("matchExpressions") or ())]
        reqs += [_requirement(e, f"{where}.matchFields[{j}]", field=True)
                 for j, e in enumerate(term.get("matchFields") or ())]
        terms.append(NodeAffinityTerm(tuple(reqs)))
    if not terms:
        raise InvalidJobError(f"{base}.nodeSelectorTerms", [], "must have at least one term")
    return Constraints(tuple(terms))
