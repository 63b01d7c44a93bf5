"""The shape of a ``kind: Scenario`` document, as pydantic models (``docs/scenarios.md``).

The models check shape only: which keys exist (a misspelt key is an error), and the type of
each value (no coercion: ``tasks: "2"`` is an error). What a value must be beyond its type
(a slice below a whole card, a stop after its start, a LocalQueue this file declares) is
checked where the document becomes a :class:`~gpupool.sim.scenario_model.Scenario`
(``scenario_read.py``), with errors in the same ``path=value rule`` form.

A job's duration is either a duration (``30m``) or a distribution (``{uniform: {min: 10m,
max: 1h}}``); the two are told apart by their type, so an error names the one that was meant.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Field, PlainValidator, Tag

from gpupool.config.documents import Duration, Metadata, Quantity, Strict

__all__ = [
    "DIST_TAGS",
    "AlternativeDoc",
    "DistDoc",
    "ExplicitJobDoc",
    "ScenarioDoc",
    "ShapeDoc",
    "SpecDoc",
    "StreamDoc",
    "TenantDoc",
]


def _names(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ValueError("should be a name or a list of names")


def _priority(value: object) -> int | str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError("should be a number or the name of a priority class")
    return value


Names = Annotated[list[str], PlainValidator(_names)]
"""One name, or a list of them (``models: H100`` is ``models: [H100]``)."""

Priority = Annotated[int | str, PlainValidator(_priority)]
"""A priority: a number, or the name of a WorkloadPriorityClass or PriorityClass."""


class UniformDoc(Strict):
    min: Duration
    max: Duration


class ExponentialDoc(Strict):
    mean: Duration
    min: Duration | None = None
    max: Duration | None = None


class DistDoc(Strict):
    """One of ``fixed``, ``uniform``, ``exponential``."""

    fixed: Duration | None = None
    uniform: UniformDoc | None = None
    exponential: ExponentialDoc | None = None


def _dist_tag(value: object) -> str:
    return "distribution" if isinstance(value, dict | DistDoc) else "duration"


DIST_TAGS = ("duration", "distribution")
"""The tags of a duration's two forms: they show in pydantic's error locations, not in ours."""

DurationOrDist = Annotated[
    Annotated[Duration, Tag("duration")] | Annotated[DistDoc, Tag("distribution")],
    Discriminator(_dist_tag),
]


class AlternativeDoc(Strict):
    """Another accelerator a job may run on (``scenario_alternatives.py``)."""

    name: str
    gpus: int | None = None
    gpu_milli: int | None = None
    gpu_memory: Quantity | None = None
    models: Names = Field(default_factory=list)
    image: str = ""
    env: dict[str, str] = Field(default_factory=dict)


class ShapeDoc(Strict):
    """What each job asks for, per task, and how long it runs."""

    gpus: Annotated[int, Field(ge=0)] | None = None
    gpu_milli: Annotated[int, Field(ge=1)] | None = None
    gpu_memory: Quantity | None = None
    cpu: Quantity | None = None
    memory: Quantity | None = None
    tasks: Annotated[int, Field(ge=1)] | None = None
    min_member: Annotated[int, Field(ge=1)] | None = None
    models: Names | None = None
    duration: DurationOrDist | None = None
    run_limit: Duration | None = None
    priority: Priority | None = None
    user: str | None = None
    declare_duration: bool | None = None
    alternatives: list[AlternativeDoc] | None = None


class ExplicitJobDoc(ShapeDoc):
    """One job of a ``jobs`` stream: when it is submitted, and what of the stream's shape it
    changes."""

    at: Duration
    name: str | None = None


class PoissonDoc(Strict):
    rate_per_hour: Annotated[int | float, Field(gt=0)]


class BurstDoc(Strict):
    at: Duration
    count: Annotated[int, Field(ge=1)]


class StreamDoc(ShapeDoc):
    """One arrival process: exactly one of ``poisson``, ``every``, ``burst``, ``jobs``."""

    name: str | None = None
    poisson: PoissonDoc | None = None
    every: Duration | None = None
    burst: BurstDoc | None = None
    jobs: list[ExplicitJobDoc] | None = None
    start: Duration | None = None
    stop: Duration | None = None
    max_jobs: Annotated[int, Field(ge=1)] | None = None


class TenantDoc(Strict):
    name: str
    queue: str
    users: Names | None = None
    streams: list[StreamDoc] = Field(min_length=1)


class WindowDoc(Strict):
    start: Duration | None = None
    end: Duration | None = None


class SpecDoc(Strict):
    duration: Duration
    scheduling_interval: Duration | None = None
    grace_period: Duration | None = None
    estimate_every: Duration | None = None
    saturated_window: WindowDoc | None = None
    tenants: list[TenantDoc] = Field(min_length=1)
    description: str = ""
    targets: dict[str, Any] | None = None
    """Read by ``scenario_targets.parse_targets``, which knows its fields."""
    measured_use: dict[str, Any] | None = None
    """Read by ``measured.parse_measured_use``, which knows its fields."""


class ScenarioDoc(Strict):
    api_version: str | None = None
    kind: str
    metadata: Metadata
    spec: SpecDoc


SHAPE_KEYS = tuple(f.alias or name for name, f in ShapeDoc.model_fields.items())
"""The camelCase keys of a job's shape, as written."""
