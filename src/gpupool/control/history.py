"""What the dashboard reads over time: the queues' usage sampled once a second, and wait
estimates refreshed at most once a second (seconds of the plane's ``Clock.monotonic``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpupool.control.records import ESTIMATE_EVERY_S
from gpupool.core.model import JobId

if TYPE_CHECKING:
    from gpupool.control.plane import ControlPlane


def sample(plane: ControlPlane, now: float) -> None:
    """One point of the queues' usage over time, for the dashboard."""
    plane._sampled_at = plane.clock.monotonic()
    sched = plane.scheduler
    queues = {}
    for q in plane.config.cluster_queues:
        usage = sched.usage(q.name)
        milli = sum(v for (_, res), v in usage.items() if res == "gpu_milli")
        queues[q.name] = {"gpu_milli": int(milli), "share": round(sched.share(q.name), 4)}
    totals = sched.totals()
    plane.history.append(
        {
            "time_s": round(now, 3),
            "queues": queues,
            "allocated_pct": round(
                100 * totals["gpu_milli_used"] / max(1, totals["gpu_milli_total"]), 2
            ),
            "pending": sched.pending_count(),
        }
    )


def estimates(plane: ControlPlane) -> dict[JobId, tuple[int, float | None]]:
    """Queue position and estimated start of pending jobs, refreshed at most once a
    second (a shadow run of the queues)."""
    with plane.lock:
        wall = plane.clock.monotonic()
        if wall - plane._estimated_at >= ESTIMATE_EVERY_S:
            plane._estimates = plane.scheduler.estimates(plane.clock.now())
            plane._estimated_at = wall
        return plane._estimates
