"""VirtualCluster: where bound jobs "run" when there is no Kubernetes.

A bound job occupies its cards until its declared duration (or its run limit, if shorter) has
passed on the cluster clock, then ends. Nothing else happens on a virtual node: no image pull,
no failure unless one is injected through the API. The end times live in a heap, so finding
the jobs that ended is O(log n) each, whatever the number running.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from gpupool.core.model import Placement


class VirtualCluster:
    def __init__(self) -> None:
        self._ends: list[tuple[float, int, str]] = []
        self._live: dict[str, tuple[float, int]] = {}
        self._seq = 0

    def start(self, key: str, placements: Sequence[Placement], start_s: float,
              end_s: float) -> None:
        self._seq += 1
        self._live[key] = (end_s, self._seq)
        heapq.heappush(self._ends, (end_s, self._seq, key))

    def stop(self, key: str) -> None:
        self._live.pop(key, None)  # its heap entry is skipped when it comes up

    def due(self, now_s: float) -> list[str]:
        out = []
        while self._ends and self._ends[0][0] <= now_s:
            end_s, seq, key = heapq.heappop(self._ends)
            if self._live.get(key) == (end_s, seq):
                del self._live[key]
                out.append(key)
        return out

    def running(self) -> int:
        return len(self._live)

    def end_of(self, key: str) -> float | None:
        live = self._live.get(key)
        return None if live is None else live[0]
