"""Plain-text pieces every listing uses: the table, cells, ages and quantities."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

NONE = "-"
BLANK = " "  # an empty cell that is not "-" (a placement's further cards)
REASON_WIDTH = 72


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns padded to their widest cell, three spaces apart; the last is not padded."""
    cells = [[str(h) for h in headers]] + [[cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.ljust(widths[i]) for i, c in enumerate(r[:-1])] + [r[-1]]
        lines.append("   ".join(parts).rstrip())
    return "\n".join(lines)


def cell(value: object) -> str:
    if value is None or value == "":
        return NONE
    return " ".join(str(value).split())


def age(seconds: float | None) -> str:
    """A duration as kubectl shows ages: 45s, 3m20s, 12m, 5h10m, 20h, 3d4h, 12d."""
    if seconds is None:
        return NONE
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    h = m // 60
    if h < 3:
        return f"{m}m"
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    d = h // 24
    if d < 2:
        return f"{h}h"
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    return f"{d}d"


def mib(amount: float | None) -> str:
    """MiB as a Kubernetes quantity: 4864Mi, 80Gi, 2Ti."""
    if amount is None:
        return NONE
    n = int(amount)
    if n == 0:
        return "0"
    for unit, size in (("Ti", 1 << 20), ("Gi", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    if n >= 10 << 10:
        return f"{n / 1024:.1f}Gi"
    return f"{n}Mi"


def milli(amount: float | None) -> str:
    """Thousandths of a GPU or CPU as a count: 1000 -> 1, 2500 -> 2.5, 142 -> 0.142."""
    if amount is None:
        return NONE
    return f"{amount / 1000:g}"


def short(text: str, width: int = REASON_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata", {})
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def task_name(task: str) -> str:
    return task.rsplit("/", 1)[-1]


def field(name: str, value: object, width: int = 14) -> str:
    return f"{name + ':':<{width}}{cell(value)}"


def indent(text: str, by: str = "  ") -> str:
    return "\n".join(by + line for line in text.splitlines())
