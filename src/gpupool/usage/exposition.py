"""Prometheus's text exposition format (0.0.4) as the exporters gpupool imitates write it.

Both exporters a virtual cluster stands in for (NVIDIA's dcgm-exporter, HAMi's vGPU monitor)
are Go programs writing through Prometheus's Go client, so label values are escaped, and
sample values formatted, as that client does (``expfmt``).
"""

from __future__ import annotations

import math
from decimal import Decimal


def escape_label(value: str) -> str:
    """A label value escaped as the text format needs (backslash, newline, double quote)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def go_float(value: float) -> str:
    """``value`` as Go's ``strconv.FormatFloat(v, 'g', -1, 64)`` writes it, which is how
    Prometheus's Go client writes a sample: the shortest digits that read back to the value,
    in ``%e`` form where the decimal exponent is below -4 or at least 6 (``35``, ``0.5``,
    ``1.048576e+06``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    # Python's repr holds the same shortest digits as Go's; only the layout differs
    parts = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, parts.digits))
    dp = len(digits) + int(parts.exponent)  # where the decimal point falls in ``digits``
    exp = dp - 1
    if exp < -4 or exp >= 6:
        frac = f".{digits[1:]}" if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{frac}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    if dp <= 0:
        return f"{sign}0.{'0' * -dp}{digits}"
    if dp >= len(digits):
        return sign + digits + "0" * (dp - len(digits))
    return f"{sign}{digits[:dp]}.{digits[dp:]}"
