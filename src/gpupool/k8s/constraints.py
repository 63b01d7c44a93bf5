"""Where a pod may go and whether it may be scheduled yet, read from its spec.

- ``spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution``: its
  ``nodeSelectorTerms`` (``matchExpressions`` with every operator, ``matchFields`` on
  ``metadata.name``) become the core's node affinity terms (``core/affinity.py``); the
  ``node-affinity`` filter plugin honours them. ``nodeSelector`` and tolerations are read
  with the request (``k8s/translate.py``) and honoured by the ``node-selector`` and
  ``taint-toleration`` plugins.
- ``spec.schedulingGates`` (Kubernetes 1.26+; Kueue's pod integration adds
  ``kueue.x-k8s.io/admission``): a gated pod is not scheduled until every gate is removed.

- required pod affinity and anti-affinity, and ``DoNotSchedule`` topology spread
  constraints (``k8s/podaffinity.py``), honoured by the ``pod-affinity``,
  ``pod-anti-affinity`` and ``pod-topology-spread`` plugins; the pod's namespace and labels
  go with it, so that other pods' rules count it once placed.

Preferred node affinity (``preferredDuringSchedulingIgnoredDuringExecution``: ``weight``
1..100 and a ``preference`` term), preferred pod (anti-)affinity and ``ScheduleAnyway``
spread are read for the ``node-affinity-preference``, ``pod-affinity-preference`` and
``pod-topology-spread-preference`` scores. Not honoured (said in ``docs/kubernetes.md``):
the parts of the required rules that :func:`ignored_constraints` names, so the pod can be
told.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.core.affinity import (
    NodeAffinityTerm,
    NodeRequirement,
    PodAffinityTerm,
    PodMeta,
    SpreadConstraint,
)
from gpupool.core.errors import InvalidJobError
from gpupool.k8s.podaffinity import (
    NamespaceLabels,
    affinity_terms,
    preferred_terms,
    spread_constraints,
    unhonoured,
)

__all__ = ["Constraints", "ignored_constraints", "pod_constraints", "scheduling_gates"]


@dataclass(frozen=True, slots=True)
class Constraints:
    """What restricts a pod's nodes beyond its request."""

    node_affinity: tuple[NodeAffinityTerm, ...] = ()
    preferred_node_affinity: tuple[tuple[int, NodeAffinityTerm], ...] = ()
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    soft_spread: tuple[SpreadConstraint, ...] = ()
    preferred_affinity: tuple[tuple[int, PodAffinityTerm], ...] = ()
    preferred_anti_affinity: tuple[tuple[int, PodAffinityTerm], ...] = ()
    namespace: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    extended: tuple[tuple[str, int], ...] = ()
    """Extended resources other than GPUs the pod asks for, (name, units) by name
    (``k8s/extended.py``)."""

    @property
    def pod(self) -> PodMeta:
        """The pod as other pods' rules count it."""
        return PodMeta(self.namespace, dict(self.labels), self.pod_anti_affinity)


def scheduling_gates(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the pod's scheduling gates (empty: it may be scheduled)."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or ()
    return tuple(str(g.get("name", "")) for g in gates if isinstance(g, Mapping))


def ignored_constraints(pod: Mapping[str, Any], namespaces_known: bool = False) -> list[str]:
    """The parts of the pod's required placement rules gpupool does not honour, by field
    (``namespaces_known``: Namespaces are watched, so a ``namespaceSelector`` is honoured)."""
    return unhonoured(pod, namespaces_known)


def _requirement(expr: Any, where: str, *, field: bool) -> NodeRequirement:
    if not isinstance(expr, Mapping):
        raise InvalidJobError(where, expr, "must be an object with key, operator, values")
    values = expr.get("values") or ()
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise InvalidJobError(f"{where}.values", values, "must be a list of strings")
    try:
        return NodeRequirement(
            key=str(expr.get("key", "")),
            operator=str(expr.get("operator", "")),
            values=tuple(values),
            field=field,
        )
    except InvalidJobError as exc:  # named by where it is in the pod, not by its key
        part = (
            exc.field.rsplit(".", 1)[-1]
            if exc.field.startswith("nodeAffinity requirement")
            else "key"
        )  # matchFields on another key than metadata.name
        raise InvalidJobError(f"{where}.{part}", exc.value, exc.rule) from exc


def pod_constraints(
    pod: Mapping[str, Any], namespaces: NamespaceLabels | None = None
) -> Constraints:
    """The pod's required node affinity, pod (anti-)affinity and topology spread;
    InvalidJobError naming the field when one cannot be read (an unknown operator, Gt
    without an integer, maxSkew 0, ...). ``namespaces`` (name -> labels) resolves a
    non-empty ``namespaceSelector`` of a pod affinity term."""
    meta = pod.get("metadata") or {}
    rules = Constraints(
        node_affinity=_node_affinity(pod),
        preferred_node_affinity=_preferred_node_affinity(pod),
        pod_affinity=affinity_terms(pod, "podAffinity", namespaces),
        pod_anti_affinity=affinity_terms(pod, "podAntiAffinity", namespaces),
        spread=spread_constraints(pod),
        soft_spread=spread_constraints(pod, "ScheduleAnyway"),
        preferred_affinity=preferred_terms(pod, "podAffinity", namespaces),
        preferred_anti_affinity=preferred_terms(pod, "podAntiAffinity", namespaces),
        namespace=str(meta.get("namespace") or "default"),
        labels=tuple(sorted((str(k), str(v)) for k, v in (meta.get("labels") or {}).items())),
    )
    return rules


def _term(term: Any, where: str) -> NodeAffinityTerm:
    """One ``NodeSelectorTerm``: its ``matchExpressions`` and ``matchFields``, ANDed."""
    if term is not None and not isinstance(term, Mapping):
        raise InvalidJobError(where, term, "must be an object with matchExpressions or matchFields")
    term = term or {}
    reqs = [
        _requirement(e, f"{where}.matchExpressions[{j}]", field=False)
        for j, e in enumerate(term.get("matchExpressions") or ())
    ]
    reqs += [
        _requirement(e, f"{where}.matchFields[{j}]", field=True)
        for j, e in enumerate(term.get("matchFields") or ())
    ]
    return NodeAffinityTerm(tuple(reqs))


def _preferred_node_affinity(pod: Mapping[str, Any]) -> tuple[tuple[int, NodeAffinityTerm], ...]:
    """(weight, term) for each preferred node affinity term; an empty ``preference``
    matches no node and is left out (Kubernetes: a no-op)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    base = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    out = []
    for i, entry in enumerate(
        affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    ):
        where = f"{base}[{i}]"
        if not isinstance(entry, Mapping):
            raise InvalidJobError(where, entry, "must be an object with weight and preference")
        weight = entry.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise InvalidJobError(f"{where}.weight", weight, "must be an integer from 1 to 100")
        term = _term(entry.get("preference"), f"{where}.preference")
        if term.requirements:
            out.append((weight, term))
    return tuple(out)


def _node_affinity(pod: Mapping[str, Any]) -> tuple[NodeAffinityTerm, ...]:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return ()
    base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    terms = []
    for i, term in enumerate(required.get("nodeSelectorTerms") or ()):
        terms.append(_term(term, f"{base}.nodeSelectorTerms[{i}]"))
    if not terms:
        raise InvalidJobError(f"{base}.nodeSelectorTerms", [], "must have at least one term")
    return tuple(terms)
