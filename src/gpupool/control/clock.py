"""Cluster time for ``gpupool serve``: wall-clock seconds scaled by ``--speed``.

The core counts time as a plain number of seconds; on the virtual cluster that number runs
``speed`` times faster than the wall clock, so a 30-minute job ends after 30 s at ``--speed
60``. The state file keeps the last cluster time and the wall time it was read at; after a
restart the clock goes on from there, counting the time the service was down, so that jobs
that would have ended meanwhile end at once and the others carry on.

The service's throttles (how often the dashboard's history is sampled, wait estimates are
refreshed, pending Elastic GPU claims are tried again) count wall seconds that never go back,
read from ``Clock.monotonic``: not cluster time, so ``--speed`` does not make them run more
often. Both sources are injected, so a test moves cluster time and the throttles by hand.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Clock:
    def __init__(
        self,
        speed: float = 1.0,
        start_s: float = 0.0,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not speed > 0:
            raise ValueError(f"speed={speed!r} must be more than zero")
        self.speed = float(speed)
        self._wall = wall
        self._monotonic = monotonic
        self._origin_wall = wall()
        self._origin_s = float(start_s)

    def now(self) -> float:
        return self._origin_s + (self._wall() - self._origin_wall) * self.speed

    def wall(self) -> float:
        return self._wall()

    def monotonic(self) -> float:
        """Wall seconds from a source that never goes back, for throttles (any origin: only
        differences mean something)."""
        return self._monotonic()

    def resume(self, last_s: float, last_wall: float) -> None:
        """Go on from a time recorded at ``last_wall``, counting the time since."""
        self._origin_s = last_s + max(0.0, self._wall() - last_wall) * self.speed
        self._origin_wall = self._wall()

    def wall_of(self, time_s: float) -> float:
        """The wall-clock time at which the cluster clock reads ``time_s``."""
        return self._origin_wall + (time_s - self._origin_s) / self.speed
