"""Durations (``90s``, ``30m``, ``1h30m``) and duration distributions (``Dist``: fixed,
uniform, exponential) as scenario and cloud files write them: ``DistSpec``, the pydantic shape
of a distribution, and ``dist_of``, which makes it a ``Dist``. ``Where`` and the ``*_at``
readers are the hand-written form of the same checks, kept while the scenario document still
reads its fields with them."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import numpy.typing as npt
from pydantic import BeforeValidator, model_validator

from gpupool.config.documents import Duration, Strict
from gpupool.config.quantity import duration_s
from gpupool.core.errors import ConfigError


def parse_duration_s(value: object) -> float:
    """``90s``, ``30m``, ``8h``, ``1d``, ``1h30m``, or a number of seconds (not negative)."""
    from gpupool.core.errors import show

    try:
        seconds = duration_s(value, "duration")
    except ConfigError as exc:
        raise ValueError(f"{show(exc.value)} {exc.rule}") from None
    if seconds < 0:
        raise ValueError(f"{value!r} must not be negative")
    return seconds


@dataclass(frozen=True, slots=True)
class Dist:
    """A duration distribution, in seconds: ``fixed`` (a), ``uniform`` (a..b) or
    ``exponential`` (mean a, then clipped to lo..b)."""

    kind: str
    a: float
    b: float = math.inf
    lo: float = 0.0

    def draw(self, rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
        if self.kind == "fixed":
            return np.full(n, self.a)
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b, n)
        return np.clip(rng.exponential(self.a, n), self.lo, self.b)

    @property
    def mean_s(self) -> float:
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        return self.a


def fmt_s(seconds: float) -> str:
    """A duration as the scenario format writes it: ``90s``, ``30m``, ``2h30m``."""
    if seconds == math.inf:
        return "never"
    s = round(seconds)
    if s % 3600 == 0 and s:
        return f"{s // 3600}h"
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60}m" + (f"{s % 60}s" if s % 60 else "")
    if s % 60 == 0 and s:
        return f"{s // 60}m"
    return f"{seconds:g}s"


class UniformSpec(Strict):
    min: Duration
    max: Duration


class ExponentialSpec(Strict):
    mean: Duration
    min: Duration | None = None
    max: Duration | None = None


class DistSpec(Strict):
    """A duration distribution as written: one of ``fixed``, ``uniform`` (min, max),
    ``exponential`` (mean, and min, max: the cap), or a bare duration (fixed)."""

    fixed: Duration | None = None
    uniform: UniformSpec | None = None
    exponential: ExponentialSpec | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> DistSpec:
        given = [k for k in ("fixed", "uniform", "exponential") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("expected one of fixed, uniform, exponential (or a duration)")
        return self


def _as_dist(value: object) -> object:
    return value if isinstance(value, Mapping) else {"fixed": value}


DistField = Annotated[DistSpec, BeforeValidator(_as_dist)]
"""A field that holds a duration distribution (or a bare duration)."""


def dist_of(spec: DistSpec, path: str, fail: Callable[[str, object, str], Exception]) -> Dist:
    """``spec`` as a Dist; ``fail(path, value, rule)`` makes the error for a cap below its
    floor (the one rule the shape cannot say)."""
    if spec.fixed is not None:
        return Dist("fixed", duration_s(spec.fixed, f"{path}.fixed"))
    if spec.uniform is not None:
        u, at = spec.uniform, f"{path}.uniform"
        lo, hi = duration_s(u.min, f"{at}.min"), duration_s(u.max, f"{at}.max")
        if hi < lo:
            raise fail(f"{at}.max", u.max, f"is below min {fmt_s(lo)}")
        return Dist("uniform", lo, hi)
    e, at = spec.exponential, f"{path}.exponential"
    assert e is not None  # one of the three, by _one_kind
    mean = duration_s(e.mean, f"{at}.mean")
    lo = 0.0 if e.min is None else duration_s(e.min, f"{at}.min")
    hi = math.inf if e.max is None else duration_s(e.max, f"{at}.max")
    if hi < lo:
        raise fail(f"{at}.max", e.max, f"is below min {fmt_s(lo)}")
    return Dist("exponential", mean, hi, lo)


class Where:
    """Names a place in the file for error messages: file, document, field path."""

    def __init__(self, where: str) -> None:
        self.where = where  # "file: document N (Scenario name, line L)"

    def fail(self, field_path: str, message: str) -> ConfigError:
        return ConfigError(
            f"{self.where}: {field_path}: {message}",
            field=field_path,
            rule=message,
            where=self.where,
        )


def mapping_at(w: Where, path: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise w.fail(path, f"expected a mapping, found {type(value).__name__} {value!r}")
    return value


def known_fields(w: Where, path: str, value: Mapping[str, Any], allowed: Sequence[str]) -> None:
    for key in value:
        if key not in allowed:
            raise w.fail(
                f"{path}.{key}" if path else str(key),
                f"unknown field; expected one of {', '.join(allowed)}",
            )


def duration_at(w: Where, path: str, value: object) -> float:
    try:
        return parse_duration_s(value)
    except ValueError as exc:
        raise w.fail(path, str(exc)) from None


def int_at(w: Where, path: str, value: object, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise w.fail(path, f"{value!r} is not a whole number")
    if value < minimum:
        raise w.fail(path, f"{value} must be {minimum} or more")
    return value


def number_at(w: Where, path: str, value: object, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise w.fail(path, f"{value!r} is not a number")
    if positive and not value > 0:
        raise w.fail(path, f"{value} must be positive")
    return float(value)


def dist_at(w: Where, path: str, value: object) -> Dist:
    if not isinstance(value, Mapping):
        return Dist("fixed", duration_at(w, path, value))
    if len(value) != 1:
        raise w.fail(path, "expected one of fixed, uniform, exponential (or a duration)")
    kind, body = next(iter(value.items()))
    sub = f"{path}.{kind}"
    if kind == "fixed":
        return Dist("fixed", duration_at(w, sub, body))
    if kind == "uniform":
        b = mapping_at(w, sub, body)
        known_fields(w, sub, b, ("min", "max"))
        if "min" not in b or "max" not in b:
            raise w.fail(sub, "needs min and max")
        lo, hi = duration_at(w, f"{sub}.min", b["min"]), duration_at(w, f"{sub}.max", b["max"])
        if hi < lo:
            raise w.fail(f"{sub}.max", f"{fmt_s(hi)} is below min {fmt_s(lo)}")
        return Dist("uniform", lo, hi)
    if kind == "exponential":
        b = mapping_at(w, sub, body)
        known_fields(w, sub, b, ("mean", "min", "max"))
        if "mean" not in b:
            raise w.fail(sub, "needs mean (and may have min, max: the cap)")
        mean = duration_at(w, f"{sub}.mean", b["mean"])
        lo = duration_at(w, f"{sub}.min", b["min"]) if "min" in b else 0.0
        hi = duration_at(w, f"{sub}.max", b["max"]) if "max" in b else math.inf
        if hi < lo:
            raise w.fail(f"{sub}.max", f"{fmt_s(hi)} is below min {fmt_s(lo)}")
        return Dist("exponential", mean, hi, lo)
    raise w.fail(path, f"unknown distribution {kind!r}; expected fixed, uniform or exponential")
