"""Required node affinity: which nodes a pod set may run on, by label or by name.

Kubernetes' ``requiredDuringSchedulingIgnoredDuringExecution`` node affinity is a list of
terms ORed together; each term's requirements are ANDed. A term with no requirements
matches no node. Operators: ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt`` and
``Lt`` (the label's value and the single given value both read as integers; a label that is
not an integer does not match). A requirement on a field (``matchFields``) reads the node's
name (``metadata.name``, the one field Kubernetes allows there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpupool.core.errors import InvalidJobError

__all__ = [
    "OPERATORS",
    "SELECTOR_OPERATORS",
    "LabelSelector",
    "NodeAffinityTerm",
    "NodeRequirement",
    "PodAffinityTerm",
    "PodMeta",
    "SpreadConstraint",
]

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


@dataclass(frozen=True, slots=True)
class NodeRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False  # matchFields: ``key`` is ``metadata.name``

    def __post_init__(self) -> None:
        where = f"nodeAffinity requirement {self.key}"
        op, values = self.operator, list(self.values)
        if op not in OPERATORS:
            raise InvalidJobError(f"{where}.operator", op, "must be one of " + ", ".join(OPERATORS))
        if op in ("In", "NotIn") and not values:
            raise InvalidJobError(f"{where}.values", values, f"{op} needs at least one value")
        if op in ("Exists", "DoesNotExist") and values:
            raise InvalidJobError(f"{where}.values", values, f"{op} takes no values")
        if op in ("Gt", "Lt") and (len(values) != 1 or _integer(values[0]) is None):
            raise InvalidJobError(f"{where}.values", values, f"{op} needs one integer value")
        if self.field and (self.key != "metadata.name" or op not in ("In", "NotIn")):
            raise InvalidJobError(
                "nodeAffinity matchFields",
                f"{self.key} {op}",
                "only metadata.name with In or NotIn is allowed",
            )

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if self.field:
            value: str | None = name
        else:
            value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        have = _integer(value) if value is not None else None
        want = _integer(self.values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want


@dataclass(frozen=True, slots=True)
class NodeAffinityTerm:
    requirements: tuple[NodeRequirement, ...] = ()

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        return bool(self.requirements) and all(r.matches(name, labels) for r in self.requirements)

    def __str__(self) -> str:
        return (
            " and ".join(
                f"{r.key} {r.operator} {','.join(r.values)}".rstrip() for r in self.requirements
            )
            or "(empty term)"
        )


def _integer(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


# -- pods: label selectors, pod (anti-)affinity terms, topology spread ----------------------

SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes label selector: ``matchLabels`` and ``matchExpressions`` ANDed.

    An empty selector matches every pod; :data:`None` in a term's place (no selector given)
    matches none, as in Kubernetes.
    """

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[NodeRequirement, ...] = ()

    def __post_init__(self) -> None:
        for e in self.expressions:
            if e.operator not in SELECTOR_OPERATORS or e.field:
                raise InvalidJobError(
                    f"labelSelector.matchExpressions {e.key}.operator",
                    e.operator,
                    "must be one of " + ", ".join(SELECTOR_OPERATORS),
                )

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            e.matches("", labels) for e in self.expressions
        )

    def __str__(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels]
        parts += [f"{e.key} {e.operator} {','.join(e.values)}".rstrip() for e in self.expressions]
        return ",".join(parts) or "(everything)"


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """One required pod (anti-)affinity term: pods matching ``selector`` in ``namespaces``
    (None: every namespace), counted per domain of ``topology_key`` (a node label)."""

    topology_key: str
    selector: LabelSelector | None
    namespaces: frozenset[str] | None

    def __post_init__(self) -> None:
        if not self.topology_key:
            raise InvalidJobError(
                "podAffinityTerm.topologyKey", self.topology_key, "must not be empty"
            )

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (
            self.selector is not None
            and (self.namespaces is None or namespace in self.namespaces)
            and self.selector.matches(labels)
        )

    def __str__(self) -> str:
        where = "any namespace" if self.namespaces is None else ",".join(sorted(self.namespaces))
        return f"pods {self.selector or '(none)'} in {where} per {self.topology_key}"


WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A topology spread constraint that must hold (``whenUnsatisfiable: DoNotSchedule``):
    pods of the pod's own namespace matching ``selector``, counted per domain of
    ``topology_key`` over the nodes the pod could run on, may differ from the emptiest
    domain by at most ``max_skew`` once the pod is placed. With ``min_domains`` set and fewer
    domains than that, the emptiest domain counts as 0."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None
    min_domains: int | None = None

    def __post_init__(self) -> None:
        if self.max_skew < 1:
            raise InvalidJobError(
                "topologySpreadConstraints.maxSkew", self.max_skew, "must be at least 1"
            )
        if not self.topology_key:
            raise InvalidJobError(
                "topologySpreadConstraints.topologyKey", self.topology_key, "must not be empty"
            )
        if self.min_domains is not None and self.min_domains < 1:
            raise InvalidJobError(
                "topologySpreadConstraints.minDomains", self.min_domains, "must be at least 1"
            )

    def __str__(self) -> str:
        return (
            f"maxSkew {self.max_skew} of pods {self.selector or '(none)'} per {self.topology_key}"
        )


@dataclass(frozen=True, slots=True)
class PodMeta:
    """What other pods' rules read of a pod: its namespace, labels, and its own required
    anti-affinity terms (which keep other pods away from it)."""

    namespace: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    anti_affinity: tuple[PodAffinityTerm, ...] = ()
    terminating: bool = False  # being deleted: topology spread no longer counts it
