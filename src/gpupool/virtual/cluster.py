"""VirtualCluster: where bound jobs "run" when there is no Kubernetes.

A bound job occupies its cards until its declared duration (or its run limit, if shorter) has
passed on the cluster clock, then ends. Nothing else happens on a virtual node: no image pull,
no failure unless one is injected through the API. The end times live in the simulation
kernel's event queue (:class:`gpupool.kernel.EventQueue`), so finding the jobs that ended is
O(log n) each, whatever the number running.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.core.model import Placement
from gpupool.kernel import EventId, EventQueue


class VirtualCluster:
    def __init__(self) -> None:
        self._ends: EventQueue[str] = EventQueue()
        self._live: dict[str, tuple[float, EventId]] = {}

    def start(
        self, key: str, placements: Sequence[Placement], start_s: float, end_s: float
    ) -> None:
        old = self._live.get(key)
        if old is not None:
            self._ends.cancel(old[1])
        self._live[key] = (end_s, self._ends.schedule(end_s, key))

    def stop(self, key: str) -> None:
        live = self._live.pop(key, None)
        if live is not None:
            self._ends.cancel(live[1])

    def due(self, now_s: float) -> list[str]:
        out = []
        for _, key in self._ends.pop_until(now_s):
            del self._live[key]
            out.append(key)
        return out

    def running(self) -> int:
        return len(self._live)

    def end_of(self, key: str) -> float | None:
        live = self._live.get(key)
        return None if live is None else live[0]
