"""A pod's pod affinity, anti-affinity and topology spread, read from its spec.

- ``spec.affinity.podAffinity`` / ``podAntiAffinity``
  ``.requiredDuringSchedulingIgnoredDuringExecution``: each term's ``labelSelector``
  (``matchLabels`` and ``matchExpressions`` with In, NotIn, Exists, DoesNotExist; no
  selector matches no pod), ``topologyKey`` and namespaces: the ``namespaces`` listed, every
  namespace when ``namespaceSelector`` is ``{}``, else the pod's own namespace.
- ``spec.topologySpreadConstraints`` with ``whenUnsatisfiable: DoNotSchedule``: ``maxSkew``,
  ``topologyKey``, ``labelSelector``, ``minDomains``; the default inclusion policies
  (``nodeAffinityPolicy: Honor``, ``nodeTaintsPolicy: Ignore``).

What is read but not honoured is named by :func:`unhonoured`, so the pod can be told: a
non-empty ``namespaceSelector`` when Namespaces cannot be watched, ``matchLabelKeys`` and
``mismatchLabelKeys``, inclusion policies other than the defaults. Preferred pod
(anti-)affinity terms (``preferredDuringSchedulingIgnoredDuringExecution``: ``weight`` and
``podAffinityTerm``) are read for the ``pod-affinity-preference`` score, ``ScheduleAnyway``
spread constraints for the ``pod-topology-spread-preference`` score.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.core.affinity import (
    SELECTOR_OPERATORS,
    LabelSelector,
    NodeRequirement,
    PodAffinityTerm,
    PodMeta,
    SpreadConstraint,
)
from gpupool.core.errors import InvalidJobError

__all__ = [
    "NamespaceLabels",
    "affinity_terms",
    "has_namespace_selector",
    "pod_meta",
    "preferred_terms",
    "spread_constraints",
    "unhonoured",
]

NamespaceLabels = Mapping[str, Mapping[str, str]]
"""Namespace name -> its labels, every Namespace the API server has."""

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
DEFAULT_POLICIES = {"nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Ignore"}


def _namespace(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("namespace") or "default")


def label_selector(raw: Any, where: str) -> LabelSelector | None:
    """A ``labelSelector`` (None when absent: it matches no pod)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise InvalidJobError(where, raw, "must be an object with matchLabels, matchExpressions")
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
        raise InvalidJobError(f"{where}.matchLabels", labels, "must map keys to strings")
    exprs = []
    for j, e in enumerate(raw.get("matchExpressions") or ()):
        at = f"{where}.matchExpressions[{j}]"
        if not isinstance(e, Mapping):
            raise InvalidJobError(at, e, "must be an object with key, operator, values")
        op = str(e.get("operator", ""))
        if op not in SELECTOR_OPERATORS:
            raise InvalidJobError(
                f"{at}.operator", op, "must be one of " + ", ".join(SELECTOR_OPERATORS)
            )
        values = e.get("values") or ()
        if isinstance(values, str) or not all(isinstance(v, str) for v in values):
            raise InvalidJobError(f"{at}.values", values, "must be a list of strings")
        if op in ("In", "NotIn") and not values:
            raise InvalidJobError(f"{at}.values", list(values), f"{op} needs at least one value")
        if op in ("Exists", "DoesNotExist") and values:
            raise InvalidJobError(f"{at}.values", list(values), f"{op} takes no values")
        exprs.append(NodeRequirement(str(e.get("key", "")), op, tuple(values)))
    return LabelSelector(tuple(sorted((str(k), v) for k, v in labels.items())), tuple(exprs))


def affinity_terms(
    pod: Mapping[str, Any], kind: str, namespaces: NamespaceLabels | None = None
) -> tuple[PodAffinityTerm, ...]:
    """The required terms of ``spec.affinity.<kind>`` (podAffinity or podAntiAffinity);
    ``namespaces`` resolves a non-empty ``namespaceSelector`` (None: not resolved, the term
    then counts the namespaces listed, else the pod's own)."""
    spec = pod.get("spec") or {}
    raw = ((spec.get("affinity") or {}).get(kind) or {}).get(REQUIRED) or ()
    own = _namespace(pod)
    return tuple(
        _term(term, f"spec.affinity.{kind}.{REQUIRED}[{i}]", own, namespaces)
        for i, term in enumerate(raw)
    )


def has_namespace_selector(pod: Mapping[str, Any]) -> bool:
    """Whether a pod (anti-)affinity term of the pod, required or preferred, has a non-empty
    ``namespaceSelector`` (its namespaces change with the Namespaces' labels)."""
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        rules = affinity.get(kind) or {}
        terms = list(rules.get(REQUIRED) or ()) + [
            (t or {}).get("podAffinityTerm")
            for t in rules.get(PREFERRED) or ()
            if isinstance(t, Mapping)
        ]
        if any(isinstance(t, Mapping) and t.get("namespaceSelector") for t in terms):
            return True
    return False


def preferred_terms(
    pod: Mapping[str, Any], kind: str, namespaces: NamespaceLabels | None = None
) -> tuple[tuple[int, PodAffinityTerm], ...]:
    """The preferred terms of ``spec.affinity.<kind>``, each with its weight (1..100)."""
    spec = pod.get("spec") or {}
    raw = ((spec.get("affinity") or {}).get(kind) or {}).get(PREFERRED) or ()
    own = _namespace(pod)
    out = []
    for i, item in enumerate(raw):
        where = f"spec.affinity.{kind}.{PREFERRED}[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidJobError(where, item, "must have weight and podAffinityTerm")
        weight = item.get("weight")
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            raise InvalidJobError(f"{where}.weight", weight, "must be an integer in 1..100")
        out.append(
            (
                weight,
                _term(item.get("podAffinityTerm"), f"{where}.podAffinityTerm", own, namespaces),
            )
        )
    return tuple(out)


def _term(term: Any, where: str, own: str, known: NamespaceLabels | None = None) -> PodAffinityTerm:
    """One pod affinity term at ``where``; namespaces defaulted as Kubernetes does
    (kube-scheduler's ``newAffinityTerm``: the own namespace only when neither
    ``namespaces`` nor ``namespaceSelector`` is given)."""
    if not isinstance(term, Mapping):
        raise InvalidJobError(where, term, "must be a pod affinity term")
    key = term.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise InvalidJobError(f"{where}.topologyKey", key, "must be a non-empty label key")
    listed = term.get("namespaces") or ()
    if isinstance(listed, str) or not all(isinstance(n, str) for n in listed):
        raise InvalidJobError(f"{where}.namespaces", listed, "must be a list of strings")
    ns_selector = term.get("namespaceSelector")
    namespaces: frozenset[str] | None
    if ns_selector is not None and not ns_selector:
        namespaces = None  # {}: every namespace (with those listed: still every one)
    elif ns_selector is not None and known is not None:
        chosen = label_selector(ns_selector, f"{where}.namespaceSelector")
        assert chosen is not None
        namespaces = frozenset(listed) | frozenset(
            name for name, labels in known.items() if chosen.matches(labels)
        )
    else:
        namespaces = frozenset(listed) or frozenset({own})
    return PodAffinityTerm(
        key, label_selector(term.get("labelSelector"), f"{where}.labelSelector"), namespaces
    )


def spread_constraints(
    pod: Mapping[str, Any], when: str = "DoNotSchedule"
) -> tuple[SpreadConstraint, ...]:
    """The pod's topology spread constraints of ``whenUnsatisfiable: <when>``."""
    out = []
    for i, c in enumerate((pod.get("spec") or {}).get("topologySpreadConstraints") or ()):
        where = f"spec.topologySpreadConstraints[{i}]"
        if not isinstance(c, Mapping):
            raise InvalidJobError(where, c, "must be a topology spread constraint")
        given = c.get("whenUnsatisfiable", "DoNotSchedule")
        if given not in ("DoNotSchedule", "ScheduleAnyway"):
            raise InvalidJobError(
                f"{where}.whenUnsatisfiable", given, "must be DoNotSchedule or ScheduleAnyway"
            )
        if c.get("whenUnsatisfiable", "DoNotSchedule") != when:
            continue
        skew = c.get("maxSkew")
        if not isinstance(skew, int) or isinstance(skew, bool) or skew < 1:
            raise InvalidJobError(f"{where}.maxSkew", skew, "must be an integer of at least 1")
        key = c.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise InvalidJobError(f"{where}.topologyKey", key, "must be a non-empty label key")
        min_domains = c.get("minDomains")
        if min_domains is not None and (
            not isinstance(min_domains, int) or isinstance(min_domains, bool) or min_domains < 1
        ):
            raise InvalidJobError(
                f"{where}.minDomains", min_domains, "must be an integer of at least 1"
            )
        out.append(
            SpreadConstraint(
                skew,
                key,
                label_selector(c.get("labelSelector"), f"{where}.labelSelector"),
                min_domains,
            )
        )
    return tuple(out)


def pod_meta(pod: Mapping[str, Any], namespaces: NamespaceLabels | None = None) -> PodMeta:
    """The pod as other pods' rules see it (a pod whose spec cannot be read keeps no
    anti-affinity rather than failing the count)."""
    meta = pod.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    try:
        anti = affinity_terms(pod, "podAntiAffinity", namespaces)
    except InvalidJobError:
        anti = ()
    return PodMeta(_namespace(pod), labels, anti, terminating=bool(meta.get("deletionTimestamp")))


def unhonoured(pod: Mapping[str, Any], namespaces_known: bool = False) -> list[str]:
    """The fields of the pod's required pod rules that placement does not honour
    (``namespaces_known``: the Namespaces' labels are watched, so selectors are)."""
    spec = pod.get("spec") or {}
    out = []
    for kind in ("podAffinity", "podAntiAffinity"):
        raw = ((spec.get("affinity") or {}).get(kind) or {}).get(REQUIRED) or ()
        for i, term in enumerate(raw):
            if not isinstance(term, Mapping):
                continue
            where = f"spec.affinity.{kind}.{REQUIRED}[{i}]"
            if term.get("namespaceSelector") and not namespaces_known:
                out.append(f"{where}.namespaceSelector")
            for f in ("matchLabelKeys", "mismatchLabelKeys"):
                if term.get(f):
                    out.append(f"{where}.{f}")
    for i, c in enumerate(spec.get("topologySpreadConstraints") or ()):
        if (
            not isinstance(c, Mapping)
            or c.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule"
        ):
            continue
        where = f"spec.topologySpreadConstraints[{i}]"
        if c.get("matchLabelKeys"):
            out.append(f"{where}.matchLabelKeys")
        for f, default in DEFAULT_POLICIES.items():
            if c.get(f, default) != default:
                out.append(f"{where}.{f}={c.get(f)}")
    return out
