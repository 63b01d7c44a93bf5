"""Events: the table of ``get events`` and the section of ``describe``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpupool.client.render.text import age, indent, table

EVENT_HEADERS = ("AGE", "TYPE", "REASON", "OBJECT", "MESSAGE")


def event_row(e: Mapping[str, Any], now_s: float) -> list[object]:
    return [
        age(now_s - float(e.get("timeSeconds", now_s))),
        e.get("type"),
        e.get("reason"),
        e.get("object"),
        e.get("message"),
    ]


def events_table(events: Iterable[Mapping[str, Any]], now_s: float) -> str:
    return table(EVENT_HEADERS, (event_row(e, now_s) for e in events))


def events_section(events: Sequence[Mapping[str, Any]], now_s: float) -> str:
    if not events:
        return "Events:       <none>"
    rows = (
        [
            age(now_s - float(e.get("timeSeconds", now_s))),
            e.get("type"),
            e.get("reason"),
            e.get("message"),
        ]
        for e in events
    )
    return "Events:\n" + indent(table(("AGE", "TYPE", "REASON", "MESSAGE"), rows))
