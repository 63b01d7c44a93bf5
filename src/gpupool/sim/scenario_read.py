"""Reading the values of a Scenario document (durations, distributions, quantities, names)
with errors in the document's own terms.

Every problem is one :class:`~gpupool.core.errors.ConfigError` whose message names the file,
the document and the field, with the value and the rule (``path=value rule``), and whose
``field``, ``value`` and ``rule`` say the same for callers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from pydantic import ValidationError

from gpupool.config.documents import field_text, known_fields, path_of
from gpupool.config.fields import Dist, fmt_s
from gpupool.config.quantity import duration_s
from gpupool.core.errors import ConfigError
from gpupool.core.quota import QueueConfig
from gpupool.sim.scenario_schema import (
    DIST_TAGS,
    DistDoc,
    ScenarioDoc,
    ShapeDoc,
)

__all__ = ["NAME_RULE", "Reader"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
NAME_RULE = "must be letters, digits, '-', '_' and '.', starting with a letter or digit"
_SHAPE_FIELDS = tuple(ShapeDoc.model_fields)
_ARRIVALS = ("poisson", "every", "burst", "jobs")
_UNSET = object()


class Reader:
    """Checks one Scenario document against its file's queues; ``where`` names the
    document in every error."""

    def __init__(self, where: str, config: QueueConfig) -> None:
        self.where = where
        self.config = config
        self.duration_s = math.inf  # the scenario's length, once read (bursts must fit)

    # -- errors -----------------------------------------------------------------------------

    def fail(self, path: str, rule: str, value: object = _UNSET) -> ConfigError:
        """``path=value rule``, or ``path: rule`` for a problem of a whole object."""
        text = f"{path}: {rule}" if value is _UNSET else field_text(path, value, rule)
        return ConfigError(
            f"{self.where}: {text}",
            field=path,
            value=None if value is _UNSET else value,
            rule=rule,
            where=self.where,
        )

    def placed(self, exc: ConfigError) -> ConfigError:
        """A field error from a parser that knew the path but not the document."""
        return ConfigError(
            f"{self.where}: {exc}",
            field=exc.field,
            value=exc.value,
            rule=exc.rule,
            where=self.where,
        )

    def shape_error(self, exc: ValidationError) -> ConfigError:
        """pydantic's first problem (an unknown key first), in the document's own terms."""
        errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        first = errors[0]
        loc = _without_tags(tuple(first["loc"]))
        path, kind, value = path_of(loc), first["type"], first.get("input")
        if kind == "extra_forbidden":
            known = _known_keys(loc[:-1])
            return self.fail(
                path,
                "unknown field" + (f"; known fields here: {', '.join(known)}" if known else ""),
            )
        if kind == "missing":
            return self.fail(path, "required field is missing")
        msg = str(first["msg"]).removeprefix("Value error, ").replace(" after validation", "")
        msg = re.sub(r"^(Input|List|String|Dictionary|Object) should", "should", msg)
        return self.fail(path, msg[:1].lower() + msg[1:], value)

    # -- values -----------------------------------------------------------------------------

    def seconds(self, path: str, value: object) -> float:
        try:
            return duration_s(value, path)
        except ConfigError as exc:
            raise self.placed(exc) from None

    def dist(self, path: str, value: str | int | float | DistDoc) -> Dist:
        if not isinstance(value, DistDoc):
            return Dist("fixed", self.seconds(path, value))
        given = sorted(value.model_fields_set)
        if len(given) != 1:
            raise self.fail(path, "give one of fixed, uniform, exponential (or a duration)", given)
        at = f"{path}.{given[0]}"
        if value.fixed is not None:
            return Dist("fixed", self.seconds(at, value.fixed))
        if value.uniform is not None:
            lo = self.seconds(f"{at}.min", value.uniform.min)
            hi = self.seconds(f"{at}.max", value.uniform.max)
            self._ordered(f"{at}.max", lo, hi, value.uniform.max)
            return Dist("uniform", lo, hi)
        exp = value.exponential
        if exp is None:
            raise self.fail(at, "must not be null", None)
        mean = self.seconds(f"{at}.mean", exp.mean)
        lo = 0.0 if exp.min is None else self.seconds(f"{at}.min", exp.min)
        hi = math.inf if exp.max is None else self.seconds(f"{at}.max", exp.max)
        self._ordered(f"{at}.max", lo, hi, exp.max)
        return Dist("exponential", mean, hi, lo)

    def _ordered(self, path: str, lo: float, hi: float, raw: object) -> None:
        if hi < lo:
            raise self.fail(path, f"is below min ({fmt_s(lo)})", raw)

    def quantity(self, path: str, value: object, parse: Callable[[object, str], int]) -> int:
        try:
            return parse(value, path)
        except ConfigError as exc:
            raise self.placed(exc) from None

    def name(self, path: str, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise self.fail(path, NAME_RULE, value)
        return value


def _without_tags(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """Drop the tag pydantic puts after ``duration`` to say which of its forms it tried."""
    out: list[int | str] = []
    for part in loc:
        if out and out[-1] == "duration" and part in DIST_TAGS:
            continue
        out.append(part)
    return tuple(out)


def _known_keys(loc: tuple[int | str, ...]) -> list[str]:
    if "duration" in loc:  # inside a distribution: its own model
        rest = loc[loc.index("duration") + 1 :]
        return known_fields(DistDoc, rest)
    return known_fields(ScenarioDoc, loc)
