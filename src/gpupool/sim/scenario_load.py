"""A scenario file, read: the cluster and the queues as :mod:`gpupool.config` reads them, the
simulated cloud when there is one, and the one ``kind: Scenario`` document (its shape in
``scenario_schema.py``, its values checked in ``scenario_streams.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpupool.config.fields import Where, fmt_s
from gpupool.core.errors import ConfigError
from gpupool.core.model import Node
from gpupool.core.quota import QueueConfig
from gpupool.sim.measured import parse_measured_use
from gpupool.sim.scenario_model import (
    DEFAULT_ESTIMATE_EVERY_S,
    DEFAULT_GRACE_S,
    DEFAULT_INTERVAL_S,
    SCENARIO_KIND,
    Scenario,
    Tenant,
)
from gpupool.sim.scenario_read import Reader
from gpupool.sim.scenario_schema import ScenarioDoc, SpecDoc, WindowDoc
from gpupool.sim.scenario_streams import read_tenant
from gpupool.sim.scenario_targets import Targets, parse_targets

__all__ = ["load_scenario", "parse_scenario"]


def parse_scenario(
    doc: Mapping[str, Any],
    *,
    where: str,
    nodes: Sequence[Node],
    config: QueueConfig,
    path: str = "",
) -> Scenario:
    """One ``kind: Scenario`` document, checked against the file's queues. ``where`` names
    the document in error messages."""
    r = Reader(where, config)
    try:
        model = ScenarioDoc.model_validate(dict(doc))
    except ValidationError as exc:
        raise r.shape_error(exc) from exc
    if not model.metadata.name:
        raise r.fail("metadata.name", "should be the scenario's name", "")
    spec = model.spec
    duration = r.seconds("spec.duration", spec.duration)
    if duration <= 0:
        raise r.fail("spec.duration", "must be positive", spec.duration)
    r.duration_s = duration
    interval = _optional(r, "spec.schedulingInterval", spec.scheduling_interval, DEFAULT_INTERVAL_S)
    if interval <= 0:
        raise r.fail("spec.schedulingInterval", "must be positive", spec.scheduling_interval)
    grace = _optional(r, "spec.gracePeriod", spec.grace_period, DEFAULT_GRACE_S)
    estimate_every = _optional(
        r, "spec.estimateEvery", spec.estimate_every, DEFAULT_ESTIMATE_EVERY_S
    )
    window = _window(r, spec.saturated_window, duration)
    tenants = _tenants(r, spec, config)
    targets = (
        parse_targets(
            Where(where), "spec.targets", spec.targets, {q.name for q in config.cluster_queues}
        )
        if spec.targets is not None
        else Targets()
    )
    measured = None
    if spec.measured_use is not None:
        try:
            measured = parse_measured_use(spec.measured_use)
        except ConfigError as exc:
            raise r.placed(exc) from None
    return Scenario(
        model.metadata.name,
        path,
        duration,
        interval,
        grace,
        window,
        tenants,
        tuple(nodes),
        config,
        spec.description.strip(),
        estimate_every,
        targets=targets,
        measured=measured,
    )


def _optional(r: Reader, path: str, value: str | int | float | None, default: float) -> float:
    return default if value is None else r.seconds(path, value)


def _window(r: Reader, doc: WindowDoc | None, duration: float) -> tuple[float, float]:
    """The saturated window fairness is measured over: the whole run unless given."""
    if doc is None:
        return (0.0, duration)
    start = _optional(r, "spec.saturatedWindow.start", doc.start, 0.0)
    end = _optional(r, "spec.saturatedWindow.end", doc.end, duration)
    if end <= start:
        raise r.fail("spec.saturatedWindow.end", f"is not after start ({fmt_s(start)})", doc.end)
    if end > duration:
        raise r.fail(
            "spec.saturatedWindow.end",
            f"is after the end of the scenario ({fmt_s(duration)})",
            doc.end,
        )
    return (start, end)


def _tenants(r: Reader, spec: SpecDoc, config: QueueConfig) -> tuple[Tenant, ...]:
    local: dict[str, str] = {}
    for lq in config.local_queues:
        local[f"{lq.namespace}/{lq.name}"] = lq.cluster_queue
        local.setdefault(lq.name, lq.cluster_queue)
    tenants: list[Tenant] = []
    for i, td in enumerate(spec.tenants):
        tenant = read_tenant(r, f"spec.tenants[{i}]", td, local)
        if any(t.name == tenant.name for t in tenants):
            raise r.fail(f"spec.tenants[{i}].name", "is the name of another tenant", tenant.name)
        tenants.append(tenant)
    return tuple(tenants)


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
        raise ConfigError(
            f"{source}: no kind: {SCENARIO_KIND} document; a scenario file "
            "holds the cluster, the queues and one Scenario"
        )
    if len(scenarios) > 1:
        raise ConfigError(
            f"{source}: documents {scenarios[0].index} and "
            f"{scenarios[1].index} are both kind: {SCENARIO_KIND}; a file holds "
            "one scenario"
        )
    if not cluster:
        raise ConfigError(f"{source}: no kind: Cluster document: the scenario needs nodes")
    if not queues:
        raise ConfigError(
            f"{source}: no queue objects (ResourceFlavor, ClusterQueue, "
            "LocalQueue, ...): every tenant submits to a LocalQueue"
        )
    if len(clouds) > 1:
        raise ConfigError(
            f"{source}: documents {clouds[0].index} and {clouds[1].index} are "
            f"both kind: {CLOUD_KIND}; a scenario has one cloud"
        )
    nodes = nodes_from_documents(cluster, source)
    config = queue_config_from_documents(queues)
    cloud = parse_cloud(clouds[0]) if clouds else None
    if config.admission_checks and cloud is None:
        raise ConfigError(
            f"{source}: ClusterQueues name admission checks "
            f"({', '.join(c.name for c in config.admission_checks)}) but there is "
            f"no kind: {CLOUD_KIND} document to provision capacity from"
        )
    doc = scenarios[0]
    scenario = parse_scenario(doc.body, where=doc.where, nodes=nodes, config=config, path=source)
    return replace(scenario, cloud=cloud)
