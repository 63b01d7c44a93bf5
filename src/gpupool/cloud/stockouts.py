"""Stock-outs: windows in which a zone of a pool makes no node. Seeded per pool and zone, a
Poisson process of outages (``stockouts.ratePerHour``), each lasting a drawn
``stockouts.duration``; drawn once for a run, so they follow from the seed alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gpupool.cloud.spec import CloudSpec


def outage_windows(
    spec: CloudSpec, seed: int, pi: int, zi: int, duration_s: float
) -> list[tuple[float, float]]:
    """The outages of zone ``zi`` of pool ``pi`` within ``duration_s`` seconds from 0."""
    if spec.stockout_rate_per_h <= 0 or spec.stockout_duration is None:
        return []
    rng = np.random.default_rng([seed, 0x5C10D, pi, zi])
    out: list[tuple[float, float]] = []
    t = 0.0
    while True:
        t += float(rng.exponential(3600.0 / spec.stockout_rate_per_h))
        if t >= duration_s:
            return out
        length = float(spec.stockout_duration.draw(rng, 1)[0])
        out.append((t, t + length))


def is_stocked_out(
    stockouts: Mapping[str, Sequence[tuple[float, float]]], pool: str, zone: str, t: float
) -> bool:
    """Whether ``zone`` of ``pool`` is in an outage at ``t`` (windows keyed ``pool/zone``)."""
    return any(a <= t < b for a, b in stockouts.get(f"{pool}/{zone}", ()))
