"""The simulated cloud's description: a ``kind: Cloud`` document (``docs/provisioning.md`` has
the format): a region's GPU quota, provisioning delay, queue timeout, scale-down delay,
stock-outs, node pools per GPU model with their zones, and bookings made by hand."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field

from gpupool.config.cluster import NodeGpuSpec, NodePoolSpec, TaintSpec, pool_nodes
from gpupool.config.documents import (
    NAME_RULE,
    Document,
    Duration,
    Metadata,
    Quantity,
    Strict,
    is_name,
    parse,
)
from gpupool.config.fields import Dist, DistField, dist_of
from gpupool.config.quantity import duration_s
from gpupool.core.errors import ConfigError
from gpupool.core.model import Node

CLOUD_KIND = "Cloud"
DEFAULT_QUEUE_TIMEOUT_S = 4 * 3600.0
DEFAULT_SCALE_DOWN_AFTER_S = 600.0

# -- the document's shape --------------------------------------------------------------------


def _as_list(value: object) -> object:
    return [value] if isinstance(value, str) else value


def _distinct(zones: list[str]) -> list[str]:
    if len(set(zones)) != len(zones):
        raise ValueError("is not a list of distinct zone names")
    return zones


class CloudPoolSpec(Strict):
    """One node pool of the cloud: a node shape (as a Cluster's pool writes it), its zones
    and how many nodes each zone can hold."""

    name: str
    zones: Annotated[
        list[Annotated[str, Field(min_length=1)]],
        BeforeValidator(_as_list),
        AfterValidator(_distinct),
        Field(min_length=1),
    ] = Field(default_factory=lambda: ["a"])
    max_nodes_per_zone: int = Field(ge=1)
    cpu: Quantity
    memory: Quantity
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)
    gpus: NodeGpuSpec


class StockoutSpec(Strict):
    rate_per_hour: float = Field(ge=0)  # outages per zone and hour
    duration: DistField


class ManualRequestSpec(Strict):
    name: str
    at: Duration
    pool: str
    nodes: int = Field(ge=1)


class CloudBody(Strict):
    region: str = "region-1"
    gpu_quota: int = Field(ge=1)
    provisioning_delay: DistField
    queue_timeout: Duration | None = None
    scale_down_after: Duration | None = None
    stockouts: StockoutSpec | None = None
    node_pools: list[CloudPoolSpec] = Field(min_length=1)
    requests: list[ManualRequestSpec] = Field(default_factory=list)


class CloudDocument(Strict):
    api_version: str | None = None
    kind: Literal["Cloud"]
    metadata: Metadata
    spec: CloudBody


_MISSING = {
    "metadata": "the cloud's name",
    "name": "a name",
    "gpus": "a cloud pool makes GPU nodes",
    "maxNodesPerZone": "how many nodes a zone can hold",
    "ratePerHour": "outages per zone and hour",
}
"""What a missing field is for, said when it is missing."""


# -- the spec ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CloudPool:
    """One node pool: every node is ``template`` (renamed), in one of ``zones``."""

    name: str
    template: Node
    zones: tuple[str, ...]
    max_nodes_per_zone: int

    @property
    def gpus_per_node(self) -> int:
        return sum(1 for g in self.template.gpus if g.healthy)

    @property
    def model(self) -> str:
        return self.template.gpus[0].model if self.template.gpus else ""


@dataclass(frozen=True, slots=True)
class ManualRequest:
    """A booking made by hand at ``at_s``: ``nodes`` whole nodes of ``pool``."""

    name: str
    at_s: float
    pool: str
    nodes: int


@dataclass(frozen=True, slots=True)
class CloudSpec:
    name: str
    region: str
    gpu_quota: int
    delay: Dist
    queue_timeout_s: float
    scale_down_after_s: float
    pools: tuple[CloudPool, ...]
    stockout_rate_per_h: float = 0.0
    stockout_duration: Dist | None = None
    requests: tuple[ManualRequest, ...] = ()

    def pool(self, name: str) -> CloudPool:
        return next(p for p in self.pools if p.name == name)


def parse_cloud(doc: Document) -> CloudSpec:
    """A ``kind: Cloud`` document; ConfigError naming the file, document, field, value and
    rule."""
    body = parse(CloudDocument, doc, missing=_MISSING)
    name = body.metadata.name
    if not name:
        raise doc.error("metadata.name", name, "must not be empty: the cloud's name")
    spec = body.spec
    delay = dist_of(spec.provisioning_delay, "spec.provisioningDelay", doc.error)
    timeout = _duration(doc, spec.queue_timeout, "spec.queueTimeout", DEFAULT_QUEUE_TIMEOUT_S)
    if timeout <= 0:
        raise doc.error("spec.queueTimeout", spec.queue_timeout, "must be positive")
    scale_down = _duration(
        doc, spec.scale_down_after, "spec.scaleDownAfter", DEFAULT_SCALE_DOWN_AFTER_S
    )
    rate, outage = 0.0, None
    if spec.stockouts is not None:
        rate = spec.stockouts.rate_per_hour
        outage = dist_of(spec.stockouts.duration, "spec.stockouts.duration", doc.error)
    pools = _pools(doc, spec.node_pools)
    manual: list[ManualRequest] = []
    known = [p.name for p in pools]
    for i, r in enumerate(spec.requests):
        at = f"spec.requests[{i}]"
        if r.pool not in known:
            raise doc.error(
                f"{at}.pool", r.pool, "is not a pool of this cloud; known: " + ", ".join(known)
            )
        if any(m.name == r.name for m in manual):
            raise doc.error(
                f"{at}.name", r.name, "is the name of another request; request names must be unique"
            )
        manual.append(ManualRequest(r.name, _duration(doc, r.at, f"{at}.at", 0.0), r.pool, r.nodes))
    return CloudSpec(
        name,
        spec.region,
        spec.gpu_quota,
        delay,
        timeout,
        scale_down,
        tuple(pools),
        rate,
        outage,
        tuple(manual),
    )


def _duration(doc: Document, value: object, path: str, default: float) -> float:
    if value is None:
        return default
    try:
        return duration_s(value, path)
    except ConfigError as exc:  # the shape checked it already; kept for a direct caller
        raise doc.problem(str(exc), exc) from exc


def _pools(doc: Document, specs: list[CloudPoolSpec]) -> list[CloudPool]:
    """Each pool's node template, made as a Cluster document's pool of one node is."""
    pools: list[CloudPool] = []
    for i, p in enumerate(specs):
        at = f"spec.nodePools[{i}]"
        if not is_name(p.name):
            raise doc.error(f"{at}.name", p.name, NAME_RULE)
        first = next((k for k, q in enumerate(pools) if q.name == p.name), None)
        if first is not None:
            raise doc.error(
                f"{at}.name", p.name, f"is used twice (first by spec.nodePools[{first}])"
            )
        shape = NodePoolSpec(
            name=p.name,
            count=1,
            cpu=p.cpu,
            memory=p.memory,
            labels=p.labels,
            taints=p.taints,
            gpus=p.gpus,
        )
        (template,) = pool_nodes(doc, at, shape)
        pools.append(CloudPool(p.name, template, tuple(p.zones), p.max_nodes_per_zone))
    return pools


def load_cloud(path: str) -> CloudSpec:
    """The one ``kind: Cloud`` document of a file (other documents are not allowed)."""
    from gpupool.config.loader import read_documents

    docs = read_documents(path)
    clouds = [d for d in docs if d.kind == CLOUD_KIND]
    others = [d.kind for d in docs if d.kind != CLOUD_KIND]
    if len(clouds) != 1 or others:
        raise ConfigError(
            f"{path}: expected one kind: Cloud document; found "
            f"{len(clouds)} Cloud and {others or 'no other'} documents"
        )
    return parse_cloud(clouds[0])
