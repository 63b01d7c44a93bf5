"""Placement by measured use in ``gpupool sim`` runs: the same path as ``gpupool k8s``'s, fed by
each job's actual use instead of Prometheus (design note: docs/policies.md, "Measured use").

Nothing runs on a simulated card, so each job carries an actual-use profile
(``gpupool.usage.profile``): declared per stream of the scenario, with ``*`` for every other
stream, each field one percentage or a range drawn once per job (seeded by the run's seed
and the job's id). Before each cycle :meth:`SimMeasuredUse.sample` turns the running
placements into what every card does (``card_use``) and hands one sample per card to the
scheduler's load model, as a read of dcgm-exporter's metrics would, and one per running pod
and card it holds (``task_samples``: the pod's part of the card's busy time and memory), as
a read of HAMi's per-pod series would, so each workload learns from its own pods however
many share a card, as in ``gpupool k8s`` and ``gpupool serve``; the scheduler places
with the measured profile. Between samples it integrates what the study reports: hot-card
time (card-seconds with summed actual demand above a whole card) and the card-seconds whose
actual memory is above the card's.

A scenario names it under ``spec.measuredUse`` (:func:`parse_measured_use`)::

    measuredUse:
      placeBy: measured     # or requests: place by requests, measure all the same
      hotPct: 80            # slices keep a card at or below this share of compute
      targetPct: 80         # whole GPUs pack nodes up to this measured compute
      window: 5m            # the p90 aggregate's window (seconds or a duration)
      staleAfter: 2m        # a card without a newer sample places by requests
      actualUse:
        notebooks: {compute: [10%, 40%], memory: [30%, 90%]}
        "*": {compute: 100%}

The run loop calls ``attach`` once with its Scheduler (built with ``profile``), ``sample``
before each of its cycles, and ``sample(..., feed=False)`` wherever placements change (after
a cycle, after events), so the integrated figures follow every change.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpupool.core.errors import ConfigError
from gpupool.core.model import WHOLE_GPU_MILLI, JobId, Node, NodeName, Placement
from gpupool.core.placement.framework import Profile
from gpupool.core.placement.registry import measured_profile
from gpupool.core.usage import CardSample, LoadModel, LoadSettings
from gpupool.usage.profile import FULL, UseProfile, card_use, parse_profile, task_samples

_KEYS = ("placeBy", "hotPct", "targetPct", "window", "staleAfter", "settle", "actualUse")
PLACE_BY = ("measured", "requests")
"""``placeBy``: place by the measured use, or by requests alone while still measuring (the
same run's hot-card time, for comparison)."""
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class _Source(Protocol):
    @property
    def stream(self) -> str: ...


class _Scheduler(Protocol):
    def use_measurements(self, model: LoadModel | None) -> None: ...

    def node_list(self) -> list[Node]: ...

    def placements_on(self, node: NodeName) -> list[Placement]: ...


@dataclass(frozen=True, slots=True)
class MeasuredSpec:
    """A scenario's ``spec.measuredUse``, checked."""

    actual_use: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per stream name (``*``: every other stream), the profile document (ranges allowed)."""
    hot_pct: float = 80.0
    target_pct: float = 80.0
    settings: LoadSettings = field(default_factory=LoadSettings)
    place_by: str = "measured"
    """``measured``: the scheduler places with the measured profile; ``requests``: it places
    by requests alone and the run only measures."""

    @property
    def places_by_measured(self) -> bool:
        return self.place_by == "measured"


def _seconds(where: str, value: object) -> float:
    if isinstance(value, bool):
        raise ConfigError(
            f"{where}: {value!r} must be a number of seconds or a duration such as 5m"
        )
    if isinstance(value, int | float):
        return float(value)
    m = _DURATION.match(str(value))
    if m is None:
        raise ConfigError(
            f"{where}: {value!r} must be a number of seconds or a duration such as 5m"
        )
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def _pct(where: str, value: object) -> float:
    text = str(value).strip().removesuffix("%") if isinstance(value, str) else value
    try:
        pct = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(
            f"{where}: {value!r} must be a percentage above 0 and at most 100"
        ) from None
    if isinstance(value, bool) or not math.isfinite(pct) or not 0 < pct <= 100:
        raise ConfigError(f"{where}: {value!r} must be a percentage above 0 and at most 100")
    return pct


def parse_measured_use(doc: object, where: str = "spec.measuredUse") -> MeasuredSpec:
    """``spec.measuredUse`` of a scenario; ConfigError naming the field, the value and the
    rule."""
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: {doc!r} must be a mapping ({', '.join(_KEYS)})")
    unknown = sorted(set(map(str, doc)) - set(_KEYS))
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(_KEYS)}"
        )
    use = doc.get("actualUse", {})
    if not isinstance(use, Mapping):
        raise ConfigError(
            f'{where}.actualUse: {use!r} must map stream names (or "*") to {{compute, memory}}'
        )
    checker = random.Random(0)
    for stream, body in use.items():
        parse_profile(body, f"{where}.actualUse.{stream}", checker)  # fails on a bad field
    place_by = doc.get("placeBy", "measured")
    if place_by not in PLACE_BY:
        raise ConfigError(f"{where}.placeBy: {place_by!r} must be one of {', '.join(PLACE_BY)}")
    hot = _pct(f"{where}.hotPct", doc.get("hotPct", 80))
    target = _pct(f"{where}.targetPct", doc.get("targetPct", 80))
    if target >= 100:
        raise ConfigError(f"{where}.targetPct: {doc.get('targetPct')!r} must be below 100")
    base = LoadSettings()
    settings = LoadSettings(
        window_s=_seconds(f"{where}.window", doc.get("window", base.window_s)),
        stale_after_s=_seconds(f"{where}.staleAfter", doc.get("staleAfter", base.stale_after_s)),
        settle_s=_seconds(f"{where}.settle", doc.get("settle", base.settle_s)),
    )
    try:
        settings.validate()
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return MeasuredSpec({str(k): v for k, v in use.items()}, hot, target, settings, str(place_by))


class SimMeasuredUse:
    """One run's measured use: the jobs' profiles, the load model and what it measures."""

    def __init__(self, spec: MeasuredSpec, sources: Mapping[JobId, _Source], seed: int) -> None:
        self.spec = spec
        self.model = LoadModel(spec.settings)
        self.profile: Profile | None = (
            measured_profile(hot_pct=spec.hot_pct, target_pct=spec.target_pct)
            if spec.places_by_measured
            else None
        )
        """The scheduler's profile; None (the default, by requests) with ``placeBy:
        requests``."""
        self._sources = sources
        self._seed = seed
        self._use: dict[str, UseProfile] = {}
        self._last_s: float | None = None
        self._hot = 0
        self._over = 0
        self._busy = 0.0
        self.hot_card_gpu_s = 0.0
        """Card-seconds with summed actual compute demand above a whole card."""
        self.memory_over_card_s = 0.0
        """Card-seconds with actual memory above the card's."""
        self.busy_gpu_s = 0.0
        """GPU-seconds of compute the cards actually delivered (each card at most 1)."""
        self.samples = 0

    def attach(self, scheduler: _Scheduler) -> None:
        """Make ``scheduler`` place by this run's measured use from its next cycle on
        (nothing with ``placeBy: requests``: the run only measures)."""
        if self.spec.places_by_measured:
            scheduler.use_measurements(self.model)

    def use_of(self, job: str) -> UseProfile:
        """The job's actual-use profile: its stream's, drawn once per job."""
        got = self._use.get(job)
        if got is None:
            src = self._sources.get(JobId(job))
            stream = src.stream if src is not None else ""
            body = self.spec.actual_use.get(stream, self.spec.actual_use.get("*"))
            got = (
                FULL
                if body is None
                else parse_profile(
                    body,
                    f"spec.measuredUse.actualUse.{stream or '*'}",
                    random.Random(f"{self._seed}:{job}"),
                )
            )
            self._use[job] = got
        return got

    def sample(self, scheduler: _Scheduler, now_s: float, *, feed: bool = True) -> int:
        """One reading of every card at ``now_s``: what its running placements actually use.
        The time since the last reading is integrated with what the cards did then; with
        ``feed`` false the reading only marks a change of placements for that integration
        (the load model sees nothing). Returns how many samples the model took."""
        nodes = scheduler.node_list()
        placements = [p for n in nodes for p in scheduler.placements_on(n.name)]
        profiles: dict[str, UseProfile] = {p.job: self.use_of(p.job) for p in placements}
        use = card_use(placements, profiles)
        if self._last_s is not None and now_s > self._last_s:
            step = now_s - self._last_s
            self.hot_card_gpu_s += self._hot * step
            self.memory_over_card_s += self._over * step
            self.busy_gpu_s += self._busy * step
        self._last_s = now_s
        out = []
        hot = over = 0
        busy = 0.0
        cards = [
            (n.name, g.index, g.memory_mib)
            for n in nodes
            for g in n.gpus
            if g.healthy and not g.mig
        ]  # nodes come and go (cloud)
        for node, gpu, card_mib in cards:
            u = use.get((NodeName(node), gpu))
            util = u.util_pct if u is not None else 0.0
            busy += util / 100.0
            used = min(card_mib, round(u.memory_mib)) if u is not None else 0
            if u is not None and u.demand_milli > WHOLE_GPU_MILLI:
                hot += 1
            if u is not None and u.memory_mib > card_mib:
                over += 1
            out.append(CardSample(NodeName(node), gpu, now_s, util, used, card_mib - used))
        self._hot, self._over, self._busy = hot, over, busy
        if not feed:
            return 0
        # each running pod's own use of its cards, as HAMi's monitor reports it per pod: its
        # workload learns from it however many pods share the card
        self.model.add_tasks(
            task_samples(placements, profiles, {(NodeName(n), g): m for n, g, m in cards}, now_s)
        )
        taken = self.model.add(out, now_s=now_s)
        self.samples += taken
        return taken

    def summary(self) -> dict[str, float | str]:
        """What the run measured: hot-card time, card-seconds of memory above a card,
        GPU-seconds of compute delivered, and how many samples the model took."""
        return {
            "place_by": self.spec.place_by,
            "hot_card_gpu_s": round(self.hot_card_gpu_s, 1),
            "memory_over_card_s": round(self.memory_over_card_s, 1),
            "busy_gpu_s": round(self.busy_gpu_s, 1),
            "samples": self.samples,
        }
