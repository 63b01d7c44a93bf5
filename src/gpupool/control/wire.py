"""The API's wire conventions, in one place: camelCase field names, and times as RFC 3339
strings beside the cluster seconds they come from.

The core counts time in cluster seconds (``submit_time_s``); the virtual cluster's clock runs
``--speed`` times faster than the wall clock. A time on the wire is the wall-clock instant at
which the cluster clock read that many seconds (``Clock.wall_of``), in UTC with milliseconds
(``2026-11-24T19:39:16.123Z``: at ``--speed 60`` a wall second is a cluster minute), and its
cluster seconds go beside it under the same name plus ``Seconds`` (``submitTime``,
``submitTimeSeconds``): the simulator and replays read those. Durations are plain seconds
named ``...Seconds`` (``waitSeconds``).

A time still to come (an estimated start) maps the same way, at the speed the server runs now.
After a restart at another ``--speed`` the earlier times keep their cluster seconds; their
wall-clock instants are read at the new speed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any


def camel(name: str) -> str:
    """``gpu_memory_mib`` -> ``gpuMemoryMib``."""
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def rfc3339(wall: float) -> str:
    """A wall-clock instant (seconds since the epoch) as RFC 3339, UTC, milliseconds."""
    stamp = datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def times(name: str, time_s: float | None, wall_of: Callable[[float], float]) -> dict[str, Any]:
    """``{name: RFC 3339, name + "Seconds": cluster seconds}``, both None for no time."""
    if time_s is None:
        return {name: None, f"{name}Seconds": None}
    return {name: rfc3339(wall_of(time_s)), f"{name}Seconds": round(time_s, 3)}
