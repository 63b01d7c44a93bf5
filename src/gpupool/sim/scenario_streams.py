"""A tenant's streams of jobs, read from their documents (``scenario_schema.py``) into values
(``scenario_model.py``): what each job asks for and when the stream submits it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pydantic import BaseModel

from gpupool.config.fields import fmt_s
from gpupool.config.quantity import cpu_milli, gpu_memory_mib, memory_mib
from gpupool.core.errors import ConfigError
from gpupool.core.model import WHOLE_GPU_MILLI
from gpupool.sim.scenario_alternatives import read_alternatives
from gpupool.sim.scenario_model import ExplicitJob, Shape, Stream, Tenant
from gpupool.sim.scenario_read import Reader
from gpupool.sim.scenario_schema import ShapeDoc, StreamDoc, TenantDoc

__all__ = ["read_shape", "read_stream", "read_tenant"]

_SHAPE_FIELDS = frozenset(ShapeDoc.model_fields)
_ALIAS = {name: f.alias or name for name, f in ShapeDoc.model_fields.items()}
_ARRIVALS = ("poisson", "every", "burst", "jobs")
_NULLABLE = frozenset({"run_limit"})  # runLimit: null says "no limit"


def shape_fields(doc: BaseModel, path: str, r: Reader) -> dict[str, Any]:
    """The shape fields ``doc`` writes (by their Python names), nulls refused where a null
    means nothing."""
    out: dict[str, Any] = {}
    for key in sorted(doc.model_fields_set & _SHAPE_FIELDS):
        value = getattr(doc, key)
        if value is None and key not in _NULLABLE:
            raise r.fail(f"{path}.{_ALIAS[key]}", "should not be null", None)
        out[key] = value
    return out


def read_shape(
    r: Reader, path: str, given: Mapping[str, Any], base: Shape | None, users: Sequence[str]
) -> Shape:
    """The shape ``given`` writes over ``base`` (a stream's shape, for its explicit jobs)."""
    changes = _resources(r, path, given)
    changes.update(_scheduling(r, path, given, users))
    if base is None:
        if "duration" not in changes:
            raise r.fail(
                f"{path}.duration",
                "required field is missing: how long each job "
                "runs (30m, {uniform: {min: 10m, max: 1h}}, ...)",
            )
        shape = Shape(**changes)
    else:
        shape = replace(base, **changes)
    if shape.gpus == 0 and shape.gpu_milli == 0 and shape.gpu_memory_mib == 0:
        raise r.fail(path, "asks for no GPU: give gpus, or gpuMilli and gpuMemory")
    if shape.min_member is not None and shape.min_member > shape.tasks:
        raise r.fail(f"{path}.minMember", f"is more than tasks ({shape.tasks})", shape.min_member)
    return shape


def _resources(r: Reader, path: str, given: Mapping[str, Any]) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if "gpu_milli" in given:
        milli = given["gpu_milli"]
        if milli >= WHOLE_GPU_MILLI:
            raise r.fail(
                f"{path}.gpuMilli",
                "is not a slice: a slice is 1..999 milli of one GPU; ask for whole cards with gpus",
                milli,
            )
        changes.update(gpu_milli=milli, gpus=0)
    if "gpus" in given:
        if "gpu_milli" in given or "gpu_memory" in given:
            raise r.fail(
                f"{path}.gpus",
                "cannot go with gpuMilli or gpuMemory: give either "
                "gpus (whole cards) or gpuMilli and gpuMemory (a "
                "slice of one card), not both",
                given["gpus"],
            )
        changes.update(gpus=given["gpus"], gpu_milli=0, gpu_memory_mib=0)
    if "gpu_memory" in given:
        changes["gpu_memory_mib"] = r.quantity(
            f"{path}.gpuMemory", given["gpu_memory"], gpu_memory_mib
        )
    if "cpu" in given:
        changes["cpu_milli"] = r.quantity(f"{path}.cpu", given["cpu"], cpu_milli)
    if "memory" in given:
        changes["memory_mib"] = r.quantity(f"{path}.memory", given["memory"], memory_mib)
    if "tasks" in given:
        changes["tasks"] = given["tasks"]
    if "min_member" in given:
        changes["min_member"] = given["min_member"]
    if "models" in given:
        changes["models"] = frozenset(given["models"])
    if "alternatives" in given:
        changes["alternatives"] = read_alternatives(
            r, f"{path}.alternatives", given["alternatives"]
        )
    return changes


def _scheduling(
    r: Reader, path: str, given: Mapping[str, Any], users: Sequence[str]
) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if "duration" in given:
        changes["duration"] = r.dist(f"{path}.duration", given["duration"])
    if "run_limit" in given:
        limit = given["run_limit"]
        changes["run_limit_s"] = None if limit is None else r.seconds(f"{path}.runLimit", limit)
        if changes["run_limit_s"] == 0:
            raise r.fail(f"{path}.runLimit", "must be positive", limit)
    if "priority" in given:
        prio = given["priority"]
        if isinstance(prio, int):
            changes["priority"], changes["priority_name"] = prio, str(prio)
        else:
            try:
                changes["priority"] = r.config.priority(prio)
            except ConfigError as exc:
                raise r.fail(
                    f"{path}.priority", f"is not a priority class of this file ({exc})", prio
                ) from None
            changes["priority_name"] = prio
    if "declare_duration" in given:
        changes["declare_duration"] = given["declare_duration"]
    if "user" in given:
        user = given["user"]
        if user not in users:
            raise r.fail(
                f"{path}.user", f"is not one of the tenant's users ({', '.join(users)})", user
            )
        changes["user"] = user
    return changes


def read_stream(r: Reader, path: str, doc: StreamDoc, index: int, users: Sequence[str]) -> Stream:
    """One arrival process of a tenant, ``index`` its place in the tenant's list."""
    name = r.name(f"{path}.name", doc.name) if doc.name is not None else f"s{index}"
    kinds = [k for k in _ARRIVALS if k in doc.model_fields_set]
    if len(kinds) != 1:
        raise r.fail(
            path,
            "give exactly one arrival process: poisson, every, burst or jobs"
            + (f" (found {', '.join(kinds)})" if kinds else ""),
        )
    kind = kinds[0]
    given = shape_fields(doc, path, r)
    start = r.seconds(f"{path}.start", doc.start) if doc.start is not None else 0.0
    stop = r.seconds(f"{path}.stop", doc.stop) if doc.stop is not None else math.inf
    if stop <= start:
        raise r.fail(f"{path}.stop", f"is not after start ({fmt_s(start)})", doc.stop)
    common: dict[str, Any] = {"start_s": start, "stop_s": stop, "max_jobs": doc.max_jobs}
    if doc.jobs is not None:
        jobs = _explicit_jobs(r, path, doc, given, users)
        return Stream(name, "jobs", jobs[0].shape, jobs=tuple(jobs), **common)
    shape = read_shape(r, path, given, None, users)
    if doc.poisson is not None:
        return Stream(name, kind, shape, rate_per_h=float(doc.poisson.rate_per_hour), **common)
    if doc.every is not None:
        every = r.seconds(f"{path}.every", doc.every)
        if every <= 0:
            raise r.fail(f"{path}.every", "must be positive", doc.every)
        return Stream(name, kind, shape, every_s=every, **common)
    if doc.burst is None:
        raise r.fail(f"{path}.{kind}", "should not be null", None)
    at = r.seconds(f"{path}.burst.at", doc.burst.at)
    if at >= r.duration_s:
        raise r.fail(
            f"{path}.burst.at",
            f"is not before the end of the scenario ({fmt_s(r.duration_s)})",
            doc.burst.at,
        )
    return Stream(name, kind, shape, burst_at_s=at, burst_count=doc.burst.count, **common)


def _explicit_jobs(
    r: Reader, path: str, doc: StreamDoc, given: dict[str, Any], users: Sequence[str]
) -> list[ExplicitJob]:
    """A ``jobs`` stream: its own shape fields are each job's defaults (a whole shape when
    they give a duration)."""
    items = doc.jobs or []
    if not items:
        raise r.fail(f"{path}.jobs", "should be a non-empty list of jobs, each with at", [])
    base = read_shape(r, path, given, None, users) if "duration" in given else None
    jobs = []
    for j, item in enumerate(items):
        jp = f"{path}.jobs[{j}]"
        mine = shape_fields(item, jp, r)
        shape = (
            read_shape(r, jp, {**given, **mine}, None, users)
            if base is None
            else read_shape(r, jp, mine, base, users)
        )
        jname = None if item.name is None else r.name(f"{jp}.name", item.name)
        jobs.append(ExplicitJob(r.seconds(f"{jp}.at", item.at), shape, jname))
    return jobs


def read_tenant(r: Reader, path: str, doc: TenantDoc, local: Mapping[str, str]) -> Tenant:
    """A tenant: ``local`` maps each LocalQueue of the file (``ns/name`` and ``name``) to its
    ClusterQueue."""
    name = r.name(f"{path}.name", doc.name)
    cq = local.get(doc.queue)
    if cq is None:
        known = sorted(local) or ["none"]
        raise r.fail(
            f"{path}.queue",
            f"is not a LocalQueue of this file; known: {', '.join(known)}",
            doc.queue,
        )
    users = [name] if doc.users is None else doc.users
    if not users or not all(users):
        raise r.fail(f"{path}.users", "should be a non-empty list of user names", users)
    if len(set(users)) != len(users):
        raise r.fail(f"{path}.users", "lists a user twice", users)
    streams: list[Stream] = []
    for i, sd in enumerate(doc.streams):
        stream = read_stream(r, f"{path}.streams[{i}]", sd, i, users)
        if any(s.name == stream.name for s in streams):
            raise r.fail(
                f"{path}.streams[{i}].name",
                "is the name of another stream of this tenant",
                stream.name,
            )
        streams.append(stream)
    return Tenant(name, doc.queue, cq, tuple(users), tuple(streams))
