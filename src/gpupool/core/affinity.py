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
from dataclasses import dataclass

from gpupool.core.errors import InvalidJobError

__all__ = ["OPERATORS", "NodeAffinityTerm", "NodeRequirement"]

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
            raise InvalidJobError(f"{where}.operator", op, "must be one of "
                                  + ", ".join(OPERATORS))
        if op in ("In", "NotIn") and not values:
            raise InvalidJobError(f"{where}.values", values, f"{op} needs at least one value")
        if op in ("Exists", "DoesNotExist") and values:
            raise InvalidJobError(f"{where}.values", values, f"{op} takes no values")
        if op in ("Gt", "Lt") and (len(values) != 1 or _integer(values[0]) is None):
            raise InvalidJobError(f"{where}.values", values, f"{op} needs one integer value")
        if self.field and (self.key != "metadata.name" or op not in ("In", "NotIn")):
            raise InvalidJobError("nodeAffinity matchFields", f"{self.key} {op}",
                                  "only metadata.name with In or NotIn is allowed")

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
        return bool(self.requirements) and all(r.matches(name, labels)
                                               for r in self.requirements)

    def __str__(self) -> str:
        return " and ".join(f"{r.key} {r.operator} {','.join(r.values)}".rstrip()
                            for r in self.requirements) or "(empty term)"


def _integer(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None
