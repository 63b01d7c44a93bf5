"""Configuration documents: where each came from, and errors that say where.

Every error of the configuration layer is one line that names the file, the document (its
number, counted from 1 among the file's non-empty documents, its kind and name, and the line
it starts on), the field path and the rule::

    queues.yaml: document 3 (ClusterQueue team-a, line 41):
        spec.resourceGroups[0].flavors[0].resources[0].lendingLimit=10 is above nominalQuota=8

(shown on two lines here; it is one). Pydantic checks the shape of each document; its
``ValidationError`` is translated here, at the boundary, into that same form.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError
from pydantic.alias_generators import to_camel

from gpupool.config.quantity import duration_s, parse_quantity
from gpupool.core.errors import ConfigError
from gpupool.core.errors import field_text as field_text
from gpupool.core.errors import show as show

NAME_RULE = (
    "must be a lowercase RFC 1123 name (a-z, 0-9, '-' and '.', starting and ending "
    "with a letter or digit, at most 253 characters)"
)
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def field_error(path: str, value: object, rule: str) -> ConfigError:
    """A structured ConfigError whose message is ``path=value rule``."""
    return ConfigError(path, value, rule)


def is_name(name: str) -> bool:
    return len(name) <= 253 and bool(_NAME.match(name))


@dataclass(frozen=True, slots=True)
class Document:
    """One YAML document: its body and where it came from.

    ``index`` counts from 1 among the non-empty documents of ``source``; ``line`` is the line
    the document starts on (None when the document did not come from a file).
    """

    source: str
    index: int
    body: Mapping[str, Any]
    line: int | None = None

    @property
    def kind(self) -> str | None:
        kind = self.body.get("kind")
        return kind if isinstance(kind, str) else None

    @property
    def name(self) -> str | None:
        meta = self.body.get("metadata")
        if isinstance(meta, Mapping):
            name = meta.get("name")
            if isinstance(name, str) and name:
                namespace = meta.get("namespace")
                if self.kind == "LocalQueue" and isinstance(namespace, str) and namespace:
                    return f"{namespace}/{name}"
                return name
        return None

    @property
    def where(self) -> str:
        """``file: document N (Kind name, line L)``."""
        label = " ".join(p for p in (self.kind, self.name) if p)
        if self.line is not None:
            label = f"{label}, line {self.line}" if label else f"line {self.line}"
        return f"{self.source}: document {self.index}" + (f" ({label})" if label else "")

    @property
    def identity(self) -> tuple[str, str] | None:
        """(kind, name) when the document names both."""
        return (self.kind, self.name) if self.kind and self.name else None

    def error(self, path: str, value: object, rule: str) -> ConfigError:
        """A ConfigError for ``path=value rule`` in this document."""
        return ConfigError(path, value, rule, where=self.where, document=self.identity)

    def problem(self, text: str, cause: ConfigError | None = None) -> ConfigError:
        """A ConfigError for a problem already worded (``text`` names the field); the
        structure of ``cause``, when given, is kept."""
        if cause is not None and cause.field is not None:
            return ConfigError(
                f"{self.where}: {text}",
                field=cause.field,
                value=cause.value,
                rule=cause.rule,
                where=self.where,
                document=self.identity,
            )
        return ConfigError(f"{self.where}: {text}", where=self.where, document=self.identity)


def check_api_version(doc: Document, allowed: tuple[str, ...]) -> None:
    """A document's apiVersion must be one its kind is read under; a missing one is fine."""
    version = doc.body.get("apiVersion")
    if version is not None and version not in allowed:
        raise doc.error(
            "apiVersion",
            version,
            f"is not one {doc.kind or 'Cluster'} is read under; use " + " or ".join(allowed),
        )


# -- pydantic: the shape of documents ---------------------------------------------------------


class Strict(BaseModel):
    """Base of every document model: camelCase keys, unknown keys are errors, no coercion."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, strict=True, frozen=True)


def _quantity_shape(value: object) -> object:
    """A quantity as written, its syntax checked by the one parser (``config.quantity``)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(
            "should be a quantity: a number, or a string such as 500m, 2, 1.5, 64Gi or 1G"
        )
    try:
        parse_quantity(value)
    except ConfigError as exc:
        raise ValueError(exc.rule) from None
    return value


def _duration_shape(value: object) -> object:
    """A duration as written, its syntax checked by ``config.quantity.duration_s``."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(
            "should be a duration: seconds, or a string such as 7d, 12h, 30m, 45s or 1h30m"
        )
    try:
        duration_s(value)
    except ConfigError as exc:
        raise ValueError(exc.rule) from None
    return value


Quantity = Annotated[int | float | str, PlainValidator(_quantity_shape)]
"""A Kubernetes quantity as written (converted later, by the unit its field needs)."""

Duration = Annotated[int | float | str, PlainValidator(_duration_shape)]
"""A duration as written: seconds, or ``7d``, ``12h``, ``30m``, ``45s``, ``1h30m``."""


class Metadata(Strict):
    """Kubernetes object metadata. Fields the API server fills in are accepted and ignored,
    so that ``kubectl get -o yaml`` output loads."""

    name: str
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: Any = None
    resource_version: Any = None
    generation: Any = None
    creation_timestamp: Any = None
    managed_fields: Any = None
    finalizers: Any = None
    owner_references: Any = None
    generate_name: Any = None
    self_link: Any = None
    deletion_timestamp: Any = None
    deletion_grace_period_seconds: Any = None


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], doc: Document, missing: Mapping[str, str] | None = None) -> M:
    """Validate ``doc`` against ``model``; a failure is one ConfigError naming the field.
    ``missing`` words a missing field as ``path: missing: <hint>`` (hints by field name)."""
    try:
        return model.model_validate(dict(doc.body))
    except ValidationError as exc:
        path, value, rule, text = problem(exc, model, missing)
        raise ConfigError(
            f"{doc.where}: {text}",
            field=path,
            value=value,
            rule=rule,
            where=doc.where,
            document=doc.identity,
        ) from exc


def first_problem(exc: ValidationError, model: type[BaseModel]) -> tuple[str, object, str]:
    """The first problem of a ValidationError as (path, value, rule)."""
    path, value, rule, _ = problem(exc, model)
    return path, value, rule


def describe(exc: ValidationError, model: type[BaseModel]) -> str:
    """The first problem of a ValidationError as ``path=value rule`` (unknown fields first:
    a misspelt key also reads as a missing one, and the misspelling is the real problem)."""
    return problem(exc, model)[3]


def problem(
    exc: ValidationError, model: type[BaseModel], missing: Mapping[str, str] | None = None
) -> tuple[str, object, str, str]:
    """The first problem of a ValidationError as (path, value, rule, one line of text);
    unknown fields first, and the text says how many more problems there are."""
    errors = exc.errors()
    errors.sort(key=lambda e: e["type"] != "extra_forbidden")
    first = errors[0]
    loc = tuple(first["loc"])
    path = path_of(loc)
    kind = first["type"]
    value = first.get("input")
    if kind == "extra_forbidden":
        known = known_fields(model, loc[:-1])
        rule = "unknown field" + (f"; known fields here: {', '.join(known)}" if known else "")
        text = f"{path}: {rule}"
    elif kind == "missing":
        value = None
        hint = None if missing is None or not loc else missing.get(str(loc[-1]))
        rule = (
            "required field is missing"
            if missing is None
            else "missing" + (f": {hint}" if hint else "")
        )
        text = f"{path}: {rule}"
    else:
        rule = str(first["msg"]).removeprefix("Value error, ").replace(" after validation", "")
        rule = re.sub(r"^(Input|List|String|Dictionary|Object) should", "should", rule)
        rule = rule[:1].lower() + rule[1:]
        text = field_text(path, value, rule)
    more = len(errors) - 1
    if more:
        text += f" (and {more} more problem{'s' if more > 1 else ''})"
    return path, value, rule, text


def path_of(loc: tuple[int | str, ...]) -> str:
    """``('spec', 'resourceGroups', 0, 'flavors')`` -> ``spec.resourceGroups[0].flavors``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(document)"


def known_fields(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys the model accepts at ``loc`` (best effort; [] when it cannot tell)."""
    tp: Any = model
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(part, int):
            args = typing.get_args(tp)
            if typing.get_origin(tp) is not list or not args:
                return []
            tp = args[0]
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            field = next(
                (f for name, f in tp.model_fields.items() if (f.alias or name) == part), None
            )
            if field is None:
                return []
            tp = field.annotation
        else:
            return []
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [f.alias or name for name, f in tp.model_fields.items()]
    return []


def _unwrap(tp: Any) -> Any:
    """Strip ``Annotated`` and ``| None``."""
    while True:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp
