"""Kubernetes quantities and durations become integer units once, rounding as documented."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import pytest

from gpupool.config import (
    cpu_milli,
    duration_s,
    gpu_memory_mib,
    gpu_milli,
    memory_mib,
    parse_quantity,
    whole_number,
)
from gpupool.core import ConfigError

GIB = 1024


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("500m", 500),
        ("2", 2000),
        (2, 2000),
        ("1.5", 1500),
        (1.5, 1500),
        (0, 0),
        ("0.0001", 1),  # rounds up to a whole milli-CPU
        ("100u", 1),
        ("1k", 1_000_000),
        ("2e3", 2_000_000),
        ("2E-3", 2),
        (" 4 ", 4000),
        ("+3", 3000),
        (".5", 500),
    ],
)
def test_cpu_milli(value: object, expected: int) -> None:
    assert cpu_milli(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("64Gi", 64 * GIB),
        ("1024Mi", 1024),
        ("1Ti", 1024 * GIB),
        ("1.5Gi", 1536),
        ("1G", 954),
        ("1000000000", 954),
        (1_000_000_000, 954),  # bytes, rounded up
        ("1M", 1),
        ("1Ki", 1),
        ("1", 1),
        (1, 1),
        ("0", 0),
        ("123Mi", 123),
        ("129e6", 124),
        ("1E", 953_674_316_407),
        ("2Ei", 2 << 40),
    ],
)
def test_memory_mib(value: object, expected: int) -> None:
    assert memory_mib(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0.5", 500),
        (2, 2000),
        (8, 8000),
        ("250m", 250),
        (0.25, 250),
        ("0.3333", 334),
        ("1", 1000),
        (0, 0),
    ],
)
def test_gpu_milli(value: object, expected: int) -> None:
    assert gpu_milli(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (16384, 16384),
        ("16384", 16384),
        (1.5, 2),  # bare: MiB, as HAMi's gpumem
        ("16Gi", 16 * GIB),
        ("80Gi", 80 * GIB),
        ("4864Mi", 4864),
        ("16G", 15259),
    ],  # suffixed: bytes, rounded up to MiB
)
def test_gpu_memory_mib(value: object, expected: int) -> None:
    assert gpu_memory_mib(value) == expected


@pytest.mark.parametrize(("value", "expected"), [(7, 7), ("7", 7), ("2k", 2000), (0, 0)])
def test_whole_number(value: object, expected: int) -> None:
    assert whole_number(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("7d", 604_800.0),
        ("12h", 43_200.0),
        ("30m", 1800.0),
        ("45s", 45.0),
        (3600, 3600.0),
        ("3600", 3600.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        (0.5, 0.5),
        ("1d12h", 129_600.0),
        (0, 0.0),
    ],
)
def test_duration_s(value: object, expected: float) -> None:
    assert duration_s(value) == expected


def test_parse_quantity_is_exact() -> None:
    assert parse_quantity("64Gi") == Decimal(64 << 30)
    assert parse_quantity("1.5") == Decimal("1.5")
    assert parse_quantity("-2") == Decimal(-2)  # the sign is the converters' business


Convert = Callable[..., object]


@pytest.mark.parametrize(
    ("fn", "value", "rule"),
    [
        (memory_mib, "64Gx", "is not a quantity"),
        (cpu_milli, "2 cores", "is not a quantity"),
        (cpu_milli, "", "is not a quantity"),
        (cpu_milli, "1.5.2", "is not a quantity"),
        (memory_mib, "Gi", "is not a quantity"),
        (memory_mib, "1e", "is not a quantity"),
        (cpu_milli, "-1", "must be zero or more"),
        (memory_mib, -5, "must be zero or more"),
        (gpu_milli, "-0.5", "must be zero or more"),
        (gpu_memory_mib, "-1Gi", "must be zero or more"),
        (cpu_milli, True, "not a boolean"),
        (cpu_milli, [1], "should be a quantity"),
        (cpu_milli, None, "should be a quantity"),
        (cpu_milli, float("nan"), "must be a finite number"),
        (memory_mib, float("inf"), "must be a finite number"),
        (whole_number, "1.5", "must be a whole number"),
        (duration_s, "7 days", "is not a duration"),
        (duration_s, "h", "is not a duration"),
        (duration_s, "5x", "is not a duration"),
        (duration_s, -5, "must be zero or more"),
        (duration_s, "-5", "must be zero or more"),
        (duration_s, True, "is not a duration"),
        (duration_s, "inf", "finite"),
    ],
)
def test_bad_values_name_the_value_and_the_rule(fn: Convert, value: object, rule: str) -> None:
    with pytest.raises(ConfigError) as info:
        fn(value, "spec.x")
    message = str(info.value)
    assert message.startswith("spec.x=")
    assert rule in message


def test_the_message_shows_the_value_as_written() -> None:
    with pytest.raises(ConfigError, match=r'^memory="64Gx" is not a quantity'):
        memory_mib("64Gx")
    with pytest.raises(ConfigError, match=r"^nodePools\[0\]\.cpu=-2 must be zero or more$"):
        cpu_milli(-2, "nodePools[0].cpu")
