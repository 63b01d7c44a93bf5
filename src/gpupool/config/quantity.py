"""Kubernetes quantities and durations -> gpupool's integer units, once, at the edge.

A quantity is a number with an optional suffix, as Kubernetes writes resources: a binary
suffix ``Ki Mi Gi Ti Pi Ei`` (powers of 1024), a decimal one ``n u m k M G T P E`` (powers of
1000; ``m`` is a thousandth), or an exponent (``1e3``). YAML numbers (``2``, ``1.5``) are
quantities too. Every conversion is exact (decimal arithmetic) until its single rounding
step, which each function's docstring names. Negative values, booleans, NaN and infinities
are refused.

| function | input | unit out | rounds |
|---|---|---|---|
| :func:`cpu_milli` | CPUs (``2``, ``1.5``, ``"500m"``) | milli-CPU | up, to 1 m |
| :func:`memory_mib` | bytes (``"64Gi"``, ``"1G"``, ``1000000000``) | MiB | up, to 1 MiB |
| :func:`gpu_milli` | GPUs (``8``, ``"0.5"``, ``"250m"``) | milli-GPU | up, to 1 milli |
| :func:`gpu_memory_mib` | MiB when bare (``16384``), bytes with a suffix (``"16Gi"``) | MiB | up |
| :func:`whole_number` | a count (``7``, ``"2k"``) | itself | never: a fraction is refused |
| :func:`duration_s` | seconds, or ``"7d" "12h" "30m" "45s" "1h30m"`` | seconds | never |

Bad values raise a structured ConfigError (``field``, ``value``, ``rule``) whose message is
``field=value rule``, e.g. ``memory="64Gx" is not a quantity: ...``; callers pass ``field`` as
the path of the value. This is the one parser of quantities: the document models
(``gpupool.config.documents``: ``Quantity``, ``Duration``) check a value's syntax with it as
they read a document, and each edge (documents, jobs, Kubernetes objects, the simulator's
files) converts with the function for the unit it needs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import ROUND_CEILING, Decimal, DecimalException

from gpupool.core.errors import ConfigError

MIB = 1 << 20

Converter = Callable[[object, str], int]
"""A function of this module that makes a value of one unit: ``cpu_milli``, ``memory_mib``..."""

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(1 << 10),
    "Mi": Decimal(1 << 20),
    "Gi": Decimal(1 << 30),
    "Ti": Decimal(1 << 40),
    "Pi": Decimal(1 << 50),
    "Ei": Decimal(1 << 60),
}
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>[KMGTPE]i|[numkMGTPE]))?$"
)
QUANTITY_RULE = (
    "is not a quantity: expected a number with an optional suffix (m, k, M, G, T, "
    "P, E, Ki, Mi, Gi, Ti, Pi, Ei) or exponent, such as 500m, 2, 1.5, 64Gi, 1G"
)

_DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?[dhms])+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
DURATION_RULE = (
    "is not a duration: expected seconds, or a number with a unit d, h, m or s, "
    "such as 7d, 12h, 30m, 45s or 1h30m"
)


def field_error(path: str, value: object, rule: str) -> ConfigError:
    return ConfigError(path, value, rule)


def parse_quantity(value: object, field: str = "quantity") -> Decimal:
    """The exact value of a quantity (``"64Gi"`` -> 68719476736); no rounding."""
    amount, _ = _parse(value, field)
    return amount


def _parse(value: object, field: str) -> tuple[Decimal, bool]:
    """(exact value, whether it was written with a suffix or exponent)."""
    if isinstance(value, bool):
        raise field_error(field, value, "should be a quantity, not a boolean")
    if isinstance(value, int):
        return Decimal(value), False
    if isinstance(value, float):
        if not math.isfinite(value):
            raise field_error(field, value, "must be a finite number")
        return Decimal(repr(value)), False
    if not isinstance(value, str):
        raise field_error(
            field,
            value,
            "should be a quantity: a number or a string such as 500m, 2, 1.5, 64Gi or 1G",
        )
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise field_error(field, value, QUANTITY_RULE)
    try:
        number = Decimal(match["number"])
        if match["exp"]:
            number = number.scaleb(int(match["exp"][1:]))
    except (DecimalException, ValueError) as exc:
        raise field_error(field, value, QUANTITY_RULE) from exc
    suffix = match["suffix"] or ""
    return number * _SUFFIXES[suffix], bool(suffix or match["exp"])


def _non_negative(amount: Decimal, value: object, field: str) -> Decimal:
    if amount < 0:
        raise field_error(field, value, "must be zero or more")
    return amount


def _ceil(amount: Decimal) -> int:
    return int(amount.to_integral_value(rounding=ROUND_CEILING))


def cpu_milli(value: object, field: str = "cpu") -> int:
    """CPUs -> milli-CPU: ``"500m"`` -> 500, ``2`` -> 2000, ``"1.5"`` -> 1500.

    Rounds up to a whole milli-CPU, as Kubernetes does (``"0.0001"`` -> 1).
    """
    amount, _ = _parse(value, field)
    return _ceil(_non_negative(amount, value, field) * 1000)


def memory_mib(value: object, field: str = "memory") -> int:
    """Bytes -> MiB: ``"64Gi"`` -> 65536, ``"1024Mi"`` -> 1024, ``"1G"`` -> 954,
    ``1000000000`` -> 954 (a bare number is bytes, as in Kubernetes).

    Rounds up to a whole MiB, so a memory size is never understated.
    """
    amount, _ = _parse(value, field)
    return _ceil(_non_negative(amount, value, field) / MIB)


def gpu_milli(value: object, field: str = "gpu") -> int:
    """GPUs -> milli-GPU (1000 is one whole GPU): ``2`` -> 2000, ``"0.5"`` -> 500,
    ``"250m"`` -> 250.

    Rounds up to a whole milli-GPU (``"0.3333"`` -> 334).
    """
    amount, _ = _parse(value, field)
    return _ceil(_non_negative(amount, value, field) * 1000)


def gpu_memory_mib(value: object, field: str = "gpu memory") -> int:
    """GPU memory -> MiB. A bare number is MiB, as nvidia-smi, GPU feature discovery and
    HAMi's ``nvidia.com/gpumem`` count it (``16384`` -> 16384); with a suffix it is a byte
    quantity (``"16Gi"`` -> 16384, ``"16G"`` -> 15259).

    Rounds up to a whole MiB.
    """
    amount, suffixed = _parse(value, field)
    amount = _non_negative(amount, value, field)
    return _ceil(amount / MIB if suffixed else amount)


def whole_number(value: object, field: str = "count") -> int:
    """A count that must be whole: ``7`` -> 7, ``"2k"`` -> 2000; ``"1.5"`` is refused."""
    amount, _ = _parse(value, field)
    amount = _non_negative(amount, value, field)
    if amount != amount.to_integral_value():
        raise field_error(field, value, "must be a whole number")
    return int(amount)


def number(value: object, field: str = "value") -> float:
    """A plain number written as a quantity (``2``, ``"0.5"``, ``"500m"``) -> float; for
    fair-sharing weights, which Kueue writes as quantities."""
    amount, _ = _parse(value, field)
    return float(_non_negative(amount, value, field))


def duration_s(value: object, field: str = "duration") -> float:
    """A duration -> seconds: a number is seconds (``3600``, ``"3600"``, ``0.5``); a string
    may join parts with units ``d`` (86400 s), ``h``, ``m`` (minutes) and ``s``: ``"7d"``,
    ``"12h"``, ``"1h30m"``, ``"45s"``, ``"1.5h"``. Exact; never rounds.
    """
    if isinstance(value, bool):
        raise field_error(field, value, DURATION_RULE)
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            if not _DURATION.match(text):
                raise field_error(field, value, DURATION_RULE) from None
            seconds = float(
                sum(Decimal(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))
            )
    else:
        raise field_error(field, value, DURATION_RULE)
    if not math.isfinite(seconds):
        raise field_error(field, value, "must be a finite number of seconds")
    if seconds < 0:
        raise field_error(field, value, "must be zero or more")
    return seconds
