"""Multi-tenant scenarios: a cluster, its queues and each tenant's submissions, replayed.

A scenario file is one multi-document YAML file. The cluster (``kind: Cluster``) and the queue
objects (``ResourceFlavor``, ``ClusterQueue``, ``Cohort``, ``LocalQueue``,
``WorkloadPriorityClass``, ``QueueSettings``) are read by :mod:`gpupool.config`, as for every
other command; one ``kind: Scenario`` document says how long to run, which window to measure
fairness over, and what each tenant submits (``docs/scenarios.md`` has the full format).

:func:`load_scenario` reads and checks the file; :func:`generate_jobs` turns the tenants'
streams into jobs for one seed (``numpy.random.default_rng``, one generator per stream, so a
stream's jobs do not change when another stream is added); :func:`simulate` drives the
queue-aware scheduler (:class:`gpupool.core.scheduler.Scheduler`) on a small event heap of its
own and records what the report needs.

The run loop, in simulated seconds:

- events (a job arrives, a run ends) are handled at their time: an arrival is submitted to
  the scheduler, the end of a run is reported with ``finished``;
- scheduling cycles run on a grid, every ``schedulingInterval``, whenever something happened
  since the last cycle or jobs are pending (admission can change with time alone: minimum
  runtimes expire, usage decays). Events at a tick's time come before its cycle;
- a bound job runs for its duration, or until its declared run limit stops it; an evicted
  job loses its run (its completion is cancelled) and waits again, to restart from scratch;
- after a cycle that evicts, the victims need ``gracePeriod`` to stop: the next cycle runs
  once it has passed, and none before. The core has already taken the victims off its books,
  so a cycle inside the grace period would bind onto cards that, in a real cluster, are still
  busy;
- every ``estimateEvery`` (default 5 minutes; 0 after every cycle) the jobs that arrived since
  the last estimate and still wait are asked about (``Scheduler.estimates``), to compare with
  their actual start later.

Nothing here reads the wall clock; one file and one seed give one result.
"""

from __future__ import annotations

import heapq
import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gpupool.config.fields import Dist, fmt_s
from gpupool.config.fields import Where as _Where
from gpupool.config.fields import dist_at as _dist
from gpupool.config.fields import duration_at as _duration
from gpupool.config.fields import int_at as _int
from gpupool.config.fields import known_fields as _known
from gpupool.config.fields import mapping_at as _mapping
from gpupool.config.fields import number_at as _number
from gpupool.config.quantity import cpu_milli, gpu_memory_mib, memory_mib
from gpupool.core.errors import ConfigError, GpupoolError
from gpupool.core.model import (
    WHOLE_GPU_MILLI,
    Alternative,
    GpuRequest,
    Job,
    JobId,
    Node,
    PodSet,
    QueueName,
)
from gpupool.core.quota import QueueConfig, Resource
from gpupool.sim.scenario_alternatives import parse_alternatives
from gpupool.sim.scenario_targets import Targets, parse_targets

if TYPE_CHECKING:
    from gpupool.cloud.region import Cloud, CloudRun
    from gpupool.cloud.spec import CloudSpec

SCENARIO_KIND = "Scenario"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
DEFAULT_INTERVAL_S = 10.0
DEFAULT_GRACE_S = 0.0
DEFAULT_ESTIMATE_EVERY_S = 300.0

# -- durations and quantities ---------------------------------------------------------------


def _quantity(fn: Callable[[object, str], int], value: object) -> int:
    try:
        return fn(value, "")
    except ConfigError as exc:
        raise ValueError(str(exc).removeprefix("=")) from None


# -- the scenario ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Shape:
    """What each job of a stream asks for, per task, and how long it runs."""

    duration: Dist
    gpus: int = 0
    gpu_milli: int = 0
    gpu_memory_mib: int = 0
    cpu_milli: int = 1000
    memory_mib: int = 4096
    tasks: int = 1
    min_member: int | None = None
    models: frozenset[str] = frozenset()
    run_limit_s: float | None = None
    priority: int = 0
    priority_name: str = ""
    user: str | None = None
    declare_duration: bool = False  # the job tells the scheduler how long it runs
    alternatives: tuple[Alternative, ...] = ()  # other accelerators it may run on

    @property
    def gpu_milli_per_task(self) -> int:
        return self.gpus * WHOLE_GPU_MILLI if self.gpus else self.gpu_milli

    def request(self) -> GpuRequest:
        if self.gpus:
            return GpuRequest(count=self.gpus, models=self.models)
        return GpuRequest(gpu_milli=self.gpu_milli, memory_mib=self.gpu_memory_mib,
                          models=self.models)


@dataclass(frozen=True, slots=True)
class ExplicitJob:
    at_s: float
    shape: Shape
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Stream:
    """One arrival process of one tenant: ``poisson``, ``every``, ``burst`` or ``jobs``."""

    name: str
    kind: str
    shape: Shape
    start_s: float = 0.0
    stop_s: float = math.inf
    rate_per_h: float = 0.0
    every_s: float = 0.0
    burst_at_s: float = 0.0
    burst_count: int = 0
    max_jobs: int | None = None
    jobs: tuple[ExplicitJob, ...] = ()


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    queue: str  # the LocalQueue as written ("ns/name" or "name")
    cluster_queue: str
    users: tuple[str, ...]
    streams: tuple[Stream, ...]


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    duration_s: float
    interval_s: float
    grace_s: float
    window: tuple[float, float]
    tenants: tuple[Tenant, ...]
    nodes: tuple[Node, ...]
    config: QueueConfig
    description: str = ""
    estimate_every_s: float = DEFAULT_ESTIMATE_EVERY_S  # 0: after every cycle
    cloud: CloudSpec | None = None  # a simulated cloud for queues with provisioning checks
    targets: Targets = field(default_factory=Targets)  # checked by the report, every seed

    @property
    def gpus(self) -> int:
        return sum(sum(1 for g in n.gpus if g.healthy) for n in self.nodes)

    def shortened(self, duration_s: float) -> Scenario:
        """The same scenario run for ``duration_s``; the fairness window is cut to fit."""
        if not duration_s > 0:
            raise ConfigError(f"--duration {duration_s:g}s: must be positive")
        start, end = self.window
        if start >= duration_s:
            raise ConfigError(
                f"--duration {fmt_s(duration_s)} ends before the saturated window of "
                f"{self.path} starts ({fmt_s(start)}); give a longer duration")
        return replace(self, duration_s=duration_s, window=(start, min(end, duration_s)))


# -- reading the file -----------------------------------------------------------------------


_SHAPE_FIELDS = ("gpus", "gpuMilli", "gpuMemory", "cpu", "memory", "tasks", "minMember",
                 "models", "duration", "runLimit", "priority", "user", "declareDuration",
                 "alternatives")


def _shape(w: _Where, path: str, body: Mapping[str, Any], base: Shape | None,
           config: QueueConfig, users: Sequence[str]) -> Shape:
    """Shape fields of ``body`` over ``base`` (a stream's shape for its explicit jobs)."""
    changes: dict[str, Any] = {}
    if "gpus" in body:
        changes["gpus"] = _int(w, f"{path}.gpus", body["gpus"])
        changes["gpu_milli"] = 0
        changes["gpu_memory_mib"] = 0
    if "gpuMilli" in body:
        milli = _int(w, f"{path}.gpuMilli", body["gpuMilli"], 1)
        if milli >= WHOLE_GPU_MILLI:
            raise w.fail(f"{path}.gpuMilli", f"{milli}: a slice is 1..999 milli of one GPU; "
                                             "ask for whole cards with gpus")
        changes["gpu_milli"] = milli
        changes["gpus"] = 0
    if "gpuMemory" in body:
        try:
            changes["gpu_memory_mib"] = _quantity(gpu_memory_mib, body["gpuMemory"])
        except ValueError as exc:
            raise w.fail(f"{path}.gpuMemory", str(exc)) from None
    if "gpus" in body and ("gpuMilli" in body or "gpuMemory" in body):
        raise w.fail(f"{path}.gpus", "give either gpus (whole cards) or gpuMilli and "
                                     "gpuMemory (a slice of one card), not both")
    if "cpu" in body:
        try:
            changes["cpu_milli"] = _quantity(cpu_milli, body["cpu"])
        except ValueError as exc:
            raise w.fail(f"{path}.cpu", str(exc)) from None
    if "memory" in body:
        try:
            changes["memory_mib"] = _quantity(memory_mib, body["memory"])
        except ValueError as exc:
            raise w.fail(f"{path}.memory", str(exc)) from None
    if "tasks" in body:
        changes["tasks"] = _int(w, f"{path}.tasks", body["tasks"], 1)
    if "minMember" in body:
        changes["min_member"] = _int(w, f"{path}.minMember", body["minMember"], 1)
    if "models" in body:
        models = body["models"]
        if isinstance(models, str):
            models = [models]
        if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
            raise w.fail(f"{path}.models", f"{models!r} is not a list of GPU model names")
        changes["models"] = frozenset(models)
    if "duration" in body:
        changes["duration"] = _dist(w, f"{path}.duration", body["duration"])
    if "runLimit" in body:
        limit = body["runLimit"]
        changes["run_limit_s"] = None if limit is None else \
            _duration(w, f"{path}.runLimit", limit)
        if changes["run_limit_s"] == 0:
            raise w.fail(f"{path}.runLimit", "must be positive")
    if "priority" in body:
        prio = body["priority"]
        if isinstance(prio, bool):
            raise w.fail(f"{path}.priority", f"{prio!r} is not a priority")
        if isinstance(prio, int):
            changes["priority"], changes["priority_name"] = prio, str(prio)
        else:
            try:
                changes["priority"] = config.priority(str(prio))
            except ConfigError as exc:
                raise w.fail(f"{path}.priority", str(exc)) from None
            changes["priority_name"] = str(prio)
    if "alternatives" in body:
        changes["alternatives"] = parse_alternatives(w, f"{path}.alternatives",
                                                     body["alternatives"])
    if "declareDuration" in body:
        flag = body["declareDuration"]
        if not isinstance(flag, bool):
            raise w.fail(f"{path}.declareDuration", f"{flag!r} is not true or false")
        changes["declare_duration"] = flag
    if "user" in body:
        user = body["user"]
        if not isinstance(user, str) or not user:
            raise w.fail(f"{path}.user", f"{user!r} is not a user name")
        if user not in users:
            raise w.fail(f"{path}.user", f"{user!r} is not one of the tenant's users "
                                         f"({', '.join(users)})")
        changes["user"] = user
    if base is None:
        if "duration" not in changes:
            raise w.fail(f"{path}.duration", "missing: how long each job runs (30m, "
                                             "{uniform: {min: 10m, max: 1h}}, ...)")
        shape = Shape(**changes)
    else:
        shape = replace(base, **changes)
    if shape.gpus == 0 and shape.gpu_milli == 0 and shape.gpu_memory_mib == 0:
        raise w.fail(path, "asks for no GPU: give gpus, or gpuMilli and gpuMemory")
    if shape.min_member is not None and shape.min_member > shape.tasks:
        raise w.fail(f"{path}.minMember", f"{shape.min_member} is more than tasks "
                                          f"({shape.tasks})")
    if shape.run_limit_s is not None and shape.duration.kind == "fixed" and \
            shape.duration.a > shape.run_limit_s:
        pass  # allowed: such jobs are stopped at their limit (counted in the summary)
    return shape


_STREAM_FIELDS = ("name", "poisson", "every", "burst", "jobs", "start", "stop", "maxJobs",
                  *_SHAPE_FIELDS)


def _stream(w: _Where, path: str, body: Mapping[str, Any], index: int, config: QueueConfig,
            users: Sequence[str], duration_s: float) -> Stream:
    _known(w, path, body, _STREAM_FIELDS)
    name = str(body.get("name", f"s{index}"))
    if not _NAME.fullmatch(name):
        raise w.fail(f"{path}.name", f"{name!r}: use letters, digits, '-', '_' and '.'")
    kinds = [k for k in ("poisson", "every", "burst", "jobs") if k in body]
    if len(kinds) != 1:
        raise w.fail(path, "give exactly one arrival process: poisson, every, burst or jobs"
                           + (f" (found {', '.join(kinds)})" if kinds else ""))
    kind = kinds[0]
    shape_body = {k: v for k, v in body.items() if k in _SHAPE_FIELDS}
    start = _duration(w, f"{path}.start", body["start"]) if "start" in body else 0.0
    stop = _duration(w, f"{path}.stop", body["stop"]) if "stop" in body else math.inf
    if stop <= start:
        raise w.fail(f"{path}.stop", f"{fmt_s(stop)} is not after start {fmt_s(start)}")
    max_jobs = _int(w, f"{path}.maxJobs", body["maxJobs"], 1) if "maxJobs" in body else None
    if kind == "jobs":
        items = body["jobs"]
        if not isinstance(items, list) or not items:
            raise w.fail(f"{path}.jobs", "expected a non-empty list of jobs, each with at")
        base: Shape | None = None
        if "duration" in shape_body or shape_body:
            base = _shape(w, path, shape_body, None, config, users) \
                if "duration" in shape_body else None
        jobs = []
        for j, item in enumerate(items):
            jp = f"{path}.jobs[{j}]"
            item = _mapping(w, jp, item)
            _known(w, jp, item, ("at", "name", *_SHAPE_FIELDS))
            if "at" not in item:
                raise w.fail(f"{jp}.at", "missing: when the job is submitted")
            jbody = {k: v for k, v in item.items() if k in _SHAPE_FIELDS}
            if base is None:
                merged = {**shape_body, **jbody}
                shape = _shape(w, jp, merged, None, config, users)
            else:
                shape = _shape(w, jp, jbody, base, config, users)
            jname = item.get("name")
            if jname is not None and not _NAME.fullmatch(str(jname)):
                raise w.fail(f"{jp}.name", f"{jname!r}: use letters, digits, '-', '_', '.'")
            jobs.append(ExplicitJob(_duration(w, f"{jp}.at", item["at"]), shape,
                                    None if jname is None else str(jname)))
        shape0 = jobs[0].shape
        return Stream(name, "jobs", shape0, start, stop, max_jobs=max_jobs, jobs=tuple(jobs))
    shape = _shape(w, path, shape_body, None, config, users)
    if kind == "poisson":
        p = _mapping(w, f"{path}.poisson", body["poisson"])
        _known(w, f"{path}.poisson", p, ("ratePerHour",))
        if "ratePerHour" not in p:
            raise w.fail(f"{path}.poisson", "needs ratePerHour")
        rate = _number(w, f"{path}.poisson.ratePerHour", p["ratePerHour"])
        return Stream(name, kind, shape, start, stop, rate_per_h=rate, max_jobs=max_jobs)
    if kind == "every":
        every = _duration(w, f"{path}.every", body["every"])
        if every <= 0:
            raise w.fail(f"{path}.every", "must be positive")
        return Stream(name, kind, shape, start, stop, every_s=every, max_jobs=max_jobs)
    b = _mapping(w, f"{path}.burst", body["burst"])
    _known(w, f"{path}.burst", b, ("at", "count"))
    if "at" not in b or "count" not in b:
        raise w.fail(f"{path}.burst", "needs at (a time) and count (jobs)")
    at = _duration(w, f"{path}.burst.at", b["at"])
    if at >= duration_s:
        raise w.fail(f"{path}.burst.at", f"{fmt_s(at)} is not before the end of the "
                                         f"scenario ({fmt_s(duration_s)})")
    count = _int(w, f"{path}.burst.count", b["count"], 1)
    return Stream(name, kind, shape, start, stop, burst_at_s=at, burst_count=count,
                  max_jobs=max_jobs)


_SPEC_FIELDS = ("duration", "schedulingInterval", "gracePeriod", "estimateEvery",
                "saturatedWindow", "tenants", "description", "targets")


def parse_scenario(doc: Mapping[str, Any], *, where: str, nodes: Sequence[Node],
                   config: QueueConfig, path: str = "") -> Scenario:
    """One ``kind: Scenario`` document, checked against the file's queues. ``where`` names
    the document in error messages."""
    w = _Where(where)
    _known(w, "", doc, ("apiVersion", "kind", "metadata", "spec"))
    meta = doc.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        raise w.fail("metadata.name", "missing: the scenario's name")
    spec = _mapping(w, "spec", doc.get("spec"))
    _known(w, "spec", spec, _SPEC_FIELDS)
    if "duration" not in spec:
        raise w.fail("spec.duration", "missing: how long to simulate (e.g. 8h)")
    duration = _duration(w, "spec.duration", spec["duration"])
    if duration <= 0:
        raise w.fail("spec.duration", "must be positive")
    interval = _duration(w, "spec.schedulingInterval", spec["schedulingInterval"]) \
        if "schedulingInterval" in spec else DEFAULT_INTERVAL_S
    if interval <= 0:
        raise w.fail("spec.schedulingInterval", "must be positive")
    grace = _duration(w, "spec.gracePeriod", spec["gracePeriod"]) \
        if "gracePeriod" in spec else DEFAULT_GRACE_S
    estimate_every = _duration(w, "spec.estimateEvery", spec["estimateEvery"]) \
        if "estimateEvery" in spec else DEFAULT_ESTIMATE_EVERY_S
    window = (0.0, duration)
    if "saturatedWindow" in spec:
        sw = _mapping(w, "spec.saturatedWindow", spec["saturatedWindow"])
        _known(w, "spec.saturatedWindow", sw, ("start", "end"))
        start = _duration(w, "spec.saturatedWindow.start", sw["start"]) \
            if "start" in sw else 0.0
        end = _duration(w, "spec.saturatedWindow.end", sw["end"]) if "end" in sw \
            else duration
        if end <= start:
            raise w.fail("spec.saturatedWindow.end",
                         f"{fmt_s(end)} is not after start {fmt_s(start)}")
        if end > duration:
            raise w.fail("spec.saturatedWindow.end",
                         f"{fmt_s(end)} is after the end of the scenario ({fmt_s(duration)})")
        window = (start, end)
    tenants_body = spec.get("tenants")
    if not isinstance(tenants_body, list) or not tenants_body:
        raise w.fail("spec.tenants", "expected a non-empty list of tenants")
    local: dict[str, str] = {}
    for lq in config.local_queues:
        local[f"{lq.namespace}/{lq.name}"] = lq.cluster_queue
        local.setdefault(lq.name, lq.cluster_queue)
    tenants = []
    seen: set[str] = set()
    for i, tb in enumerate(tenants_body):
        tp = f"spec.tenants[{i}]"
        tb = _mapping(w, tp, tb)
        _known(w, tp, tb, ("name", "queue", "users", "streams"))
        tname = tb.get("name")
        if not isinstance(tname, str) or not _NAME.fullmatch(tname):
            raise w.fail(f"{tp}.name", f"{tname!r}: a tenant needs a name of letters, digits, "
                                       "'-', '_' and '.'")
        if tname in seen:
            raise w.fail(f"{tp}.name", f"tenant {tname!r} is defined twice")
        seen.add(tname)
        queue = tb.get("queue")
        if not isinstance(queue, str) or not queue:
            raise w.fail(f"{tp}.queue", "missing: the LocalQueue the tenant submits to")
        cq = local.get(queue)
        if cq is None:
            known = sorted(local) or ["none"]
            raise w.fail(f"{tp}.queue", f"{queue!r} is not a LocalQueue of this file; "
                                        f"known: {', '.join(known)}")
        users_body = tb.get("users", [tname])
        if isinstance(users_body, str):
            users_body = [users_body]
        if not isinstance(users_body, list) or not users_body or \
                not all(isinstance(u, str) and u for u in users_body):
            raise w.fail(f"{tp}.users", f"{users_body!r} is not a list of user names")
        if len(set(users_body)) != len(users_body):
            raise w.fail(f"{tp}.users", "a user is listed twice")
        streams_body = tb.get("streams")
        if not isinstance(streams_body, list) or not streams_body:
            raise w.fail(f"{tp}.streams", "expected a non-empty list of streams")
        streams: list[Stream] = []
        for si, sb in enumerate(streams_body):
            sp = f"{tp}.streams[{si}]"
            stream = _stream(w, sp, _mapping(w, sp, sb), si, config, users_body, duration)
            if any(st.name == stream.name for st in streams):
                raise w.fail(f"{sp}.name", f"stream {stream.name!r} is defined twice")
            streams.append(stream)
        tenants.append(Tenant(tname, queue, cq, tuple(users_body), tuple(streams)))
    description = str(spec.get("description", ""))
    targets = parse_targets(w, "spec.targets", spec["targets"],
                            {q.name for q in config.cluster_queues}) \
        if "targets" in spec else Targets()
    return Scenario(name, path, duration, interval, grace, window, tuple(tenants),
                    tuple(nodes), config, description.strip(), estimate_every,
                    targets=targets)


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario file: the cluster and the queues as :mod:`gpupool.config` reads them,
    then the one ``kind: Scenario`` document. Every problem is a ConfigError naming the file,
    the document and the field."""
    from gpupool.cloud.spec import CLOUD_KIND, parse_cloud
    from gpupool.config.cluster import nodes_from_documents
    from gpupool.config.loader import KINDS, read_documents
    from gpupool.config.queues import queue_config_from_documents

    source = str(path)
    if not Path(path).is_file():
        raise ConfigError(f"{source}: no such scenario file")
    docs = read_documents(path)
    known = ", ".join((*KINDS, SCENARIO_KIND, CLOUD_KIND))
    cluster, queues, scenarios, clouds = [], [], [], []
    for d in docs:
        if d.kind == SCENARIO_KIND:
            scenarios.append(d)
        elif d.kind == CLOUD_KIND:
            clouds.append(d)
        elif d.kind == "Cluster" or (d.kind is None and "nodePools" in d.body):
            cluster.append(d)
        elif d.kind is None:
            raise d.problem(f"kind: required field is missing; known kinds: {known}")
        elif d.kind in KINDS:
            queues.append(d)
        else:
            raise d.error("kind", d.kind, f"is not a known kind; known: {known}")
    if not scenarios:
        raise ConfigError(f"{source}: no kind: {SCENARIO_KIND} document; a scenario file "
                          "holds the cluster, the queues and one Scenario")
    if len(scenarios) > 1:
        raise ConfigError(f"{source}: documents {scenarios[0].index} and "
                          f"{scenarios[1].index} are both kind: {SCENARIO_KIND}; a file holds "
                          "one scenario")
    if not cluster:
        raise ConfigError(f"{source}: no kind: Cluster document: the scenario needs nodes")
    if not queues:
        raise ConfigError(f"{source}: no queue objects (ResourceFlavor, ClusterQueue, "
                          "LocalQueue, ...): every tenant submits to a LocalQueue")
    if len(clouds) > 1:
        raise ConfigError(f"{source}: documents {clouds[0].index} and {clouds[1].index} are "
                          f"both kind: {CLOUD_KIND}; a scenario has one cloud")
    nodes = nodes_from_documents(cluster, source)
    config = queue_config_from_documents(queues)
    cloud = parse_cloud(clouds[0]) if clouds else None
    if config.admission_checks and cloud is None:
        raise ConfigError(f"{source}: ClusterQueues name admission checks "
                          f"({', '.join(c.name for c in config.admission_checks)}) but there is "
                          f"no kind: {CLOUD_KIND} document to provision capacity from")
    doc = scenarios[0]
    scenario = parse_scenario(doc.body, where=doc.where, nodes=nodes, config=config,
                              path=source)
    return replace(scenario, cloud=cloud)


# -- jobs -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobSource:
    """Where a generated job comes from."""

    tenant: str
    stream: str
    duration_s: float  # how long it really runs (it tells the scheduler only if it declares)


def _arrival_times(stream: Stream, rng: np.random.Generator,
                   duration_s: float) -> npt.NDArray[np.float64]:
    stop = min(stream.stop_s, duration_s)
    if stream.kind == "poisson":
        mean_gap = 3600.0 / stream.rate_per_h
        times: list[npt.NDArray[np.float64]] = []
        t = stream.start_s
        expected = max(16, int((stop - t) / mean_gap * 1.2) + 16)
        while t < stop:
            gaps = rng.exponential(mean_gap, expected)
            chunk = t + np.cumsum(gaps)
            times.append(chunk[chunk < stop])
            t = float(chunk[-1])
        out = np.concatenate(times) if times else np.zeros(0)
    elif stream.kind == "every":
        out = np.arange(stream.start_s, stop, stream.every_s, dtype=np.float64)
    elif stream.kind == "burst":
        out = np.full(stream.burst_count, stream.burst_at_s)
    else:
        out = np.asarray([j.at_s for j in stream.jobs], np.float64)
        out = out[out < duration_s]
    if stream.max_jobs is not None:
        out = out[: stream.max_jobs]
    return out


def generate_jobs(scenario: Scenario, seed: int) -> tuple[list[Job], dict[JobId, JobSource]]:
    """Every job of the scenario for ``seed``, in submission order.

    Each stream draws from its own generator, ``default_rng([seed, tenant, stream])``: its
    arrival times, then its durations, then its users, so the jobs of one stream do not
    depend on the others.
    """
    jobs: list[tuple[float, int, int, int, Job]] = []
    sources: dict[JobId, JobSource] = {}
    for ti, tenant in enumerate(scenario.tenants):
        for si, stream in enumerate(tenant.streams):
            rng = np.random.default_rng([seed, ti, si])
            times = _arrival_times(stream, rng, scenario.duration_s)
            n = times.size
            if stream.kind == "jobs":
                shapes = [j.shape for j in stream.jobs][:n]
                names = [j.name for j in stream.jobs][:n]
                order = np.argsort(times, kind="stable")
                times = times[order]
                shapes = [shapes[k] for k in order.tolist()]
                names = [names[k] for k in order.tolist()]
            else:
                shapes = [stream.shape] * n
                names = [None] * n
            if stream.kind == "jobs":  # one draw per job, in order
                durations = np.asarray([sh.duration.draw(rng, 1)[0] for sh in shapes],
                                       np.float64)
            else:
                durations = stream.shape.duration.draw(rng, n)
            picks = rng.integers(0, len(tenant.users), n)
            for k in range(n):
                shape = shapes[k]
                user = shape.user or tenant.users[int(picks[k])]
                jid = JobId(f"{tenant.name}-{names[k]}" if names[k] else
                            f"{tenant.name}-{stream.name}-{k:05d}")
                if jid in sources:
                    raise ConfigError(f"{scenario.path}: job name {jid} is used twice")
                actual = max(1e-3, float(durations[k]))
                job = Job(
                    id=jid,
                    pod_sets=(PodSet("main", count=shape.tasks, cpu_milli=shape.cpu_milli,
                                     memory_mib=shape.memory_mib, gpu=shape.request()),),
                    queue=QueueName(tenant.queue),
                    priority=shape.priority,
                    submit_time_s=float(times[k]),
                    duration_s=actual if shape.declare_duration else None,
                    min_member=shape.min_member,
                    user=user,
                    run_limit_s=shape.run_limit_s,
                    alternatives=shape.alternatives,
                )
                sources[jid] = JobSource(tenant.name, stream.name, actual)
                jobs.append((float(times[k]), ti, si, k, job))
    jobs.sort(key=lambda x: x[:4])
    return [j[4] for j in jobs], sources


# -- the run ----------------------------------------------------------------------------------


@dataclass(slots=True)
class JobRun:
    """What happened to one job."""

    job: Job
    tenant: str
    stream: str
    queue: str  # ClusterQueue
    gpu_milli: int  # over all tasks, as charged (a slice: compute or memory, the larger)
    submit_s: float
    duration_s: float = 0.0  # how long it really runs (declared to the scheduler or not)
    flavor: str = ""  # the flavor of its current (or last) run
    start_s: float | None = None  # first start
    end_s: float | None = None  # when its last run ended, if it did
    runs: int = 0
    evictions: int = 0
    stopped_at_limit: bool = False
    estimate_s: float | None = None  # estimated start, as first estimated
    estimate_at_s: float | None = None  # when: the first estimate after it arrived
    estimated: bool = False  # it was pending then and got a start time
    position: int | None = None
    rejected: str = ""
    revoked: int = 0  # runs cut short by the cloud taking their nodes back
    provisioned: bool = False  # it ran on nodes provisioned for it (a provisioning check)
    gpu_s: float = 0.0  # GPU-seconds held, all runs
    window_gpu_s: float = 0.0  # of which inside the saturated window

    @property
    def wait_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.submit_s


@dataclass(frozen=True, slots=True)
class Eviction:
    time_s: float
    job: str
    queue: str
    reason: str
    preemptor: str
    preemptor_queue: str
    gpu_milli: int
    queue_used_before_milli: int  # the victim queue's GPU use of the victim's flavor before it
    queue_nominal_milli: int  # the victim queue's nominal GPU quota of that flavor


@dataclass(slots=True)
class Series:
    """GPU milli allocated per queue and per user, sampled after every batch of events and
    every cycle."""

    queues: list[str]
    users: list[str] = field(default_factory=list)
    time_s: list[float] = field(default_factory=list)
    used_milli: list[list[int]] = field(default_factory=list)  # [sample][queue]
    user_milli: list[list[int]] = field(default_factory=list)  # [sample][user]
    pending: list[int] = field(default_factory=list)

    def arrays(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        t = np.asarray(self.time_s, np.float64)
        u = np.asarray(self.used_milli, np.float64).reshape(len(self.time_s), len(self.queues))
        return t, u

    def user_arrays(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        t = np.asarray(self.time_s, np.float64)
        u = np.asarray(self.user_milli, np.float64).reshape(len(self.time_s), len(self.users))
        return t, u


@dataclass
class RunResult:
    """One seed of one scenario, raw: the report turns it into figures."""

    scenario: Scenario
    seed: int
    jobs: dict[JobId, JobRun]
    series: Series
    evictions: list[Eviction]
    partial_gang_placements: int
    quota_violations: int
    quota_violation_examples: list[str]
    cycles: int
    entitled_gpu: dict[str, float]  # weighted fair share of GPUs per ClusterQueue
    nominal_milli: dict[str, int]  # nominal GPU quota per ClusterQueue, milli
    time_to_nominal_s: dict[str, float | None]
    max_preemptions_allowed: int
    wall_s: float = 0.0
    cloud: CloudRun | None = None


ProgressFn = Callable[[float], None]

_ARRIVAL, _END = 0, 1


def simulate(scenario: Scenario, seed: int, *, progress: ProgressFn | None = None,
             progress_every: int = 64,
             clock: Callable[[], float] | None = None) -> RunResult:
    """Run one seed of ``scenario`` (see the module docstring for the loop)."""
    started = clock() if clock else 0.0
    jobs, sources = generate_jobs(scenario, seed)
    run = _Run(scenario, seed, jobs, sources, progress, progress_every)
    result = run.loop()
    result.wall_s = (clock() - started) if clock else 0.0
    return result


def gpu_entitlement(tree: Any, cq: str) -> tuple[float, int]:
    """(weighted fair share, nominal) of GPUs of a ClusterQueue, summed over flavors, in
    milli-GPU. A flavor whose quota names ``gpu_milli`` and not ``gpu`` counts that."""
    entitled = tree.entitled(cq)
    nominal = tree.nominal(cq)
    flavors = {f for f, _ in entitled} | {f for f, _ in nominal}
    e_total = 0.0
    n_total = 0
    for f in sorted(flavors):
        e_total += max(float(entitled.get((f, Resource.GPU), 0)) * WHOLE_GPU_MILLI,
                       float(entitled.get((f, Resource.GPU_MILLI), 0)))
        n_total += max(int(nominal.get((f, Resource.GPU), 0)) * WHOLE_GPU_MILLI,
                       int(nominal.get((f, Resource.GPU_MILLI), 0)))
    return e_total, n_total


class _Run:
    def __init__(self, scenario: Scenario, seed: int, jobs: list[Job],
                 sources: dict[JobId, JobSource], progress: ProgressFn | None,
                 progress_every: int) -> None:
        from gpupool.core.scheduler import Scheduler

        self.s = scenario
        self.seed = seed
        self.sched = Scheduler(list(scenario.nodes), scenario.config)
        self.queues = sorted(q.name for q in scenario.config.cluster_queues)
        self.qindex = {q: i for i, q in enumerate(self.queues)}
        self.progress = progress
        self.progress_every = max(1, progress_every)
        tenant_cq = {t.name: t.cluster_queue for t in scenario.tenants}
        self.jobs: dict[JobId, JobRun] = {}
        for job in jobs:
            src = sources[job.id]
            milli = job.task_count * job.pod_sets[0].gpu.total_milli
            self.jobs[job.id] = JobRun(job, src.tenant, src.stream, tenant_cq[src.tenant],
                                       milli, job.submit_time_s, src.duration_s)
        self.heap: list[tuple[float, int, int, JobId, int]] = []
        self.seq = itertools.count()
        for job in jobs:
            heapq.heappush(self.heap, (job.submit_time_s, next(self.seq), _ARRIVAL, job.id, 0))
        self.now = 0.0
        self.running: dict[JobId, tuple[int, float]] = {}  # run number, start of the run
        self.used = [0] * len(self.queues)  # GPU milli allocated per queue
        users = sorted({j.user for j in jobs})
        self.uindex = {u: i for i, u in enumerate(users)}
        self.used_by_user = [0] * len(users)
        self.series = Series(self.queues, users)
        self.evictions: list[Eviction] = []
        self.partial = 0
        self.violations = 0
        self.violation_examples: list[str] = []
        self.cycles = 0
        self.fresh: list[JobId] = []  # submitted since the last estimate
        self.entitled: dict[str, float] = {}
        self.nominal: dict[str, int] = {}
        self.used_flavor: dict[tuple[str, str], int] = {}  # GPU milli per (queue, flavor)
        self.nominal_flavor: dict[tuple[str, str], int] = {}
        for q in self.queues:
            for (f, res), v in self.sched.tree.nominal(q).items():
                milli = v * WHOLE_GPU_MILLI if res is Resource.GPU else \
                    v if res is Resource.GPU_MILLI else 0
                self.nominal_flavor[(q, f)] = max(self.nominal_flavor.get((q, f), 0), milli)
        for q in self.queues:
            e, n = gpu_entitlement(self.sched.tree, q)
            self.entitled[q] = e
            self.nominal[q] = n
        self.first_submit: dict[str, float] = {}
        self.at_nominal: dict[str, float] = {}
        self.limits = self._quota_limits()
        self._pending = 0  # jobs the scheduler holds as pending
        self.next_estimate = 0.0  # estimates are taken at the first cycle from then on
        self.limit: dict[JobId, float | None] = {}  # run limit of each running job
        self.cloud: Cloud | None = None
        if scenario.cloud is not None:
            from gpupool.cloud.region import Cloud, SchedulerHost

            self.cloud = Cloud(scenario.cloud, SchedulerHost(self.sched), seed,
                               scenario.duration_s)

    # -- quota limits -------------------------------------------------------------------

    def _quota_limits(self) -> dict[str, dict[tuple[str, Resource], int]]:
        """nominal + borrowingLimit per (flavor, resource) a queue lists; a queue outside a
        cohort may not exceed its nominal; no limit where borrowing is unlimited."""
        out: dict[str, dict[tuple[str, Resource], int]] = {}
        for cq in self.s.config.cluster_queues:
            lim: dict[tuple[str, Resource], int] = {}
            for fq in cq.flavors:
                for res, quota in fq.resources.items():
                    if cq.non_preemptive or cq.cohort is None:
                        lim[(fq.flavor, res)] = quota.nominal
                    elif quota.borrowing_limit is not None:
                        lim[(fq.flavor, res)] = quota.nominal + quota.borrowing_limit
            out[cq.name] = lim
        return out

    # -- the loop -----------------------------------------------------------------------

    def loop(self) -> RunResult:
        end = self.s.duration_s
        iv = self.s.interval_s
        grace = self.s.grace_s
        last_cycle = -math.inf
        follow_up: float | None = None
        dirty = False
        steps = 0
        while True:
            tj = self.heap[0][0] if self.heap else math.inf
            tcloud = self.cloud.next_event_s() if self.cloud is not None else math.inf
            te = min(tj, tcloud)
            if follow_up is not None:
                tc = follow_up
            elif dirty or self.n_pending:
                tc = math.ceil(self.now / iv) * iv
                if tc <= last_cycle:
                    tc = (math.floor(last_cycle / iv) + 1) * iv
            else:
                tc = math.inf
            if min(te, tc) > end:
                break
            if te <= tc:
                self.now = te
                while self.heap and self.heap[0][0] == te:
                    _, _, kind, jid, run_no = heapq.heappop(self.heap)
                    if kind == _ARRIVAL:
                        self._arrive(jid)
                    else:
                        self._end(jid, run_no)
                if self.cloud is not None and tcloud <= te:  # after the jobs' own events
                    for jid in self.cloud.advance(te):
                        self._revoked(jid)
                dirty = True
                self._sample()
            else:
                self.now = tc
                evicted = self._cycle()
                last_cycle = tc
                follow_up = tc + grace if evicted and grace > 0 else None
                dirty = False
            steps += 1
            if self.progress is not None and steps % self.progress_every == 0:
                self.progress(self.now)
        self.now = end
        for jid in sorted(self.running):
            self._close_run(jid, end)
        self._sample()
        cloud = self.cloud.finish(end) if self.cloud is not None else None
        if self.progress is not None:
            self.progress(end)
        ttn: dict[str, float | None] = {}
        for q in self.queues:
            if q in self.first_submit and q in self.at_nominal:
                ttn[q] = self.at_nominal[q] - self.first_submit[q]
            else:
                ttn[q] = None
        return RunResult(
            self.s, self.seed, self.jobs, self.series, self.evictions, self.partial,
            self.violations, self.violation_examples, self.cycles, self.entitled,
            self.nominal, ttn, self.s.config.settings.max_preemptions_per_job, cloud=cloud)

    @property
    def n_pending(self) -> int:
        return self._pending

    # -- events -------------------------------------------------------------------------

    def _arrive(self, jid: JobId) -> None:
        rec = self.jobs[jid]
        try:
            self.sched.submit(rec.job, self.now)
        except GpupoolError as exc:
            rec.rejected = f"{type(exc).__name__}: {exc}"
            return
        self._pending += 1
        self.first_submit.setdefault(rec.queue, self.now)
        self.fresh.append(jid)

    def _end(self, jid: JobId, run_no: int) -> None:
        held = self.running.get(jid)
        if held is None or held[0] != run_no:
            return  # an evicted run
        rec = self.jobs[jid]
        self.sched.finished(jid, self.now)
        self._close_run(jid, self.now)
        rec.end_s = self.now
        duration = rec.duration_s
        limit = self.limit.pop(jid, rec.job.run_limit_s)
        if limit is not None and limit < duration:
            rec.stopped_at_limit = True

    def _revoked(self, jid: JobId) -> None:
        """The cloud took a running job's nodes back: the run is lost, the job waits again."""
        rec = self.jobs[jid]
        rec.revoked += 1
        if jid in self.running:
            self._close_run(jid, self.now)
        self.limit.pop(jid, None)
        self._pending += 1

    def _close_run(self, jid: JobId, at: float) -> None:
        _, start = self.running.pop(jid)
        rec = self.jobs[jid]
        self.used[self.qindex[rec.queue]] -= rec.gpu_milli
        self.used_flavor[(rec.queue, rec.flavor)] -= rec.gpu_milli
        self.used_by_user[self.uindex[rec.job.user]] -= rec.gpu_milli
        gpus = rec.gpu_milli / WHOLE_GPU_MILLI
        rec.gpu_s += gpus * (at - start)
        w0, w1 = self.s.window
        overlap = min(at, w1) - max(start, w0)
        if overlap > 0:
            rec.window_gpu_s += gpus * overlap

    # -- the cycle ----------------------------------------------------------------------

    def _cycle(self) -> bool:
        result = self.sched.cycle(self.now)
        self.cycles += 1
        # A queue's use as the evictions found it: before the cycle, plus what the cycle
        # admitted for it (the core may admit for a queue before it reclaims from it).
        used_before = dict(self.used_flavor)
        for bind in result.binds:
            rec = self.jobs[JobId(bind.job)]
            rec.gpu_milli = self._charged_milli(JobId(bind.job))
            rec.flavor = bind.flavor
            key = (rec.queue, rec.flavor)
            used_before[key] = used_before.get(key, 0) + rec.gpu_milli
        for ev in result.evicts:
            self._evict(ev, used_before)
        for bind in result.binds:
            self._bind(bind)
        self._pending += len(result.evicts) - len(result.binds)
        if self.fresh and self.now >= self.next_estimate:
            waiting = [j for j in self.fresh if self.jobs[j].start_s is None]
            if waiting:
                every = self.s.estimate_every_s
                self.next_estimate = (math.floor(self.now / every) + 1) * every if every \
                    else self.now
                est = self.sched.estimates(self.now)
                for jid in waiting:
                    rec = self.jobs[jid]
                    got = est.get(jid)
                    rec.estimate_at_s = self.now
                    if got is not None:
                        rec.position, rec.estimate_s = got[0], got[1]
                        rec.estimated = got[1] is not None
            self.fresh.clear()
        if self.cloud is not None:
            self.cloud.on_cycle(result, self.now)
        self._check_quota()
        self._sample()
        for q in self.queues:
            if q not in self.at_nominal and q in self.first_submit and \
                    self.nominal[q] > 0 and self.used[self.qindex[q]] >= self.nominal[q]:
                self.at_nominal[q] = self.now
        return bool(result.evicts)

    def _charged_milli(self, jid: JobId) -> int:
        """The GPUs a running job is charged, in milli-GPU: what the scheduler's quota books
        hold for it (a slice counts the larger of its compute and its memory share of the
        card), so delivery is measured as the scheduler accounts it."""
        r = self.sched.running_job(jid)
        if r is None:
            return self.jobs[jid].gpu_milli
        return sum(v for (_, res), v in r.demand.items() if res is Resource.GPU_MILLI)

    def _evict(self, ev: Any, used_before: dict[tuple[str, str], int]) -> None:
        """Record an eviction with its queue's use and nominal quota of the victim's flavor:
        borrowed capacity is borrowed per flavor, so guaranteed quota is judged per flavor."""
        jid = JobId(ev.job)
        rec = self.jobs[jid]
        key = (rec.queue, rec.flavor)
        preemptor = self.jobs.get(JobId(ev.preemptor))
        self.evictions.append(Eviction(
            self.now, jid, rec.queue, str(ev.reason), str(ev.preemptor),
            preemptor.queue if preemptor else "", rec.gpu_milli, used_before.get(key, 0),
            self.nominal_flavor.get(key, 0)))
        used_before[key] = used_before.get(key, 0) - rec.gpu_milli
        rec.evictions += 1
        if jid in self.running:
            self._close_run(jid, self.now)  # its completion event is now stale

    def _bind(self, bind: Any) -> None:
        jid = JobId(bind.job)
        rec = self.jobs[jid]
        if len(bind.placements) < rec.job.gang_size:
            self.partial += 1
        rec.runs += 1
        if rec.start_s is None:
            rec.start_s = self.now
        self.running[jid] = (rec.runs, self.now)
        self.used[self.qindex[rec.queue]] += rec.gpu_milli
        self.used_flavor[(rec.queue, rec.flavor)] = \
            self.used_flavor.get((rec.queue, rec.flavor), 0) + rec.gpu_milli
        self.used_by_user[self.uindex[rec.job.user]] += rec.gpu_milli
        duration = rec.duration_s
        limit = self.sched.run_limit_s(jid)  # a provisioning booking may cut the job's own
        self.limit[jid] = limit
        checks = self.sched.checks
        if checks is not None and checks.booking_of(jid) is not None:
            rec.provisioned = True
        if limit is not None:
            duration = min(duration, limit)
        heapq.heappush(self.heap, (self.now + duration, next(self.seq), _END, jid, rec.runs))

    def _check_quota(self) -> None:
        """Every queue within nominal + borrowingLimit, by the running jobs' demands and by
        the quota tree's own books; each (queue, sample) over it counts once."""
        sums: dict[str, dict[Any, int]] = {q: {} for q in self.queues}
        for r in self.sched.running():
            d = sums.setdefault(r.queue, {})
            for key, v in r.demand.items():
                d[key] = d.get(key, 0) + int(v)
        for q in self.queues:
            lim = self.limits.get(q, {})
            if not lim:
                continue
            tree_usage = self.sched.tree.usage(q)
            for key, cap in lim.items():
                mine = sums[q].get(key, 0)
                theirs = int(tree_usage.get(key, 0))
                if mine > cap or theirs > cap:
                    self.violations += 1
                    if len(self.violation_examples) < 10:
                        self.violation_examples.append(
                            f"t={self.now:g}s {q} {key[0]}.{key[1]}: running jobs {mine}, "
                            f"quota tree {theirs}, limit {cap}")
                    break

    def _sample(self) -> None:
        s = self.series
        if s.time_s and s.time_s[-1] == self.now:
            s.used_milli[-1] = list(self.used)
            s.user_milli[-1] = list(self.used_by_user)
            s.pending[-1] = self._pending
            return
        s.time_s.append(self.now)
        s.used_milli.append(list(self.used))
        s.user_milli.append(list(self.used_by_user))
        s.pending.append(self._pending)
