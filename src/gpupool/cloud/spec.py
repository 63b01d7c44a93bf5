"""The simulated cloud's description: a ``kind: Cloud`` document (``docs/provisioning.md`` has
the format): a region's GPU quota, provisioning delay, queue timeout, scale-down delay,
stock-outs, node pools per GPU model with their zones, and bookings made by hand."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.config.cluster import nodes_from_documents
from gpupool.config.documents import Document
from gpupool.config.fields import (
    Dist,
    Where,
    dist_at,
    duration_at,
    int_at,
    known_fields,
    mapping_at,
    number_at,
)
from gpupool.core.errors import ConfigError
from gpupool.core.model import Node

CLOUD_KIND = "Cloud"
_POOL_FIELDS = ("name", "zones", "maxNodesPerZone", "cpu", "memory", "labels", "taints",
                "gpus")
_SPEC_FIELDS = ("region", "gpuQuota", "provisioningDelay", "queueTimeout", "scaleDownAfter",
                "stockouts", "nodePools", "requests")


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
    """A ``kind: Cloud`` document; ConfigError naming the file, document and field."""
    w = Where(doc.where)
    body = doc.body
    known_fields(w, "", body, ("apiVersion", "kind", "metadata", "spec"))
    meta = body.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        raise w.fail("metadata.name", "missing: the cloud's name")
    spec = mapping_at(w, "spec", body.get("spec"))
    known_fields(w, "spec", spec, _SPEC_FIELDS)
    for required in ("gpuQuota", "provisioningDelay", "nodePools"):
        if required not in spec:
            raise w.fail(f"spec.{required}", "missing")
    quota = int_at(w, "spec.gpuQuota", spec["gpuQuota"], 1)
    delay = dist_at(w, "spec.provisioningDelay", spec["provisioningDelay"])
    timeout = duration_at(w, "spec.queueTimeout", spec["queueTimeout"]) \
        if "queueTimeout" in spec else 4 * 3600.0
    if timeout <= 0:
        raise w.fail("spec.queueTimeout", "must be positive")
    scale_down = duration_at(w, "spec.scaleDownAfter", spec["scaleDownAfter"]) \
        if "scaleDownAfter" in spec else 600.0
    rate, outage = 0.0, None
    if "stockouts" in spec:
        so = mapping_at(w, "spec.stockouts", spec["stockouts"])
        known_fields(w, "spec.stockouts", so, ("ratePerHour", "duration"))
        if "ratePerHour" not in so or "duration" not in so:
            raise w.fail("spec.stockouts", "needs ratePerHour (outages per zone and hour) and "
                                           "duration")
        rate = number_at(w, "spec.stockouts.ratePerHour", so["ratePerHour"], positive=False)
        if rate < 0:
            raise w.fail("spec.stockouts.ratePerHour", "must be zero or more")
        outage = dist_at(w, "spec.stockouts.duration", so["duration"])
    pools_body = spec["nodePools"]
    if not isinstance(pools_body, list) or not pools_body:
        raise w.fail("spec.nodePools", "expected a non-empty list of node pools")
    shapes: list[dict[str, Any]] = []
    extra: list[tuple[tuple[str, ...], int]] = []
    for i, pb in enumerate(pools_body):
        path = f"spec.nodePools[{i}]"
        pb = mapping_at(w, path, pb)
        known_fields(w, path, pb, _POOL_FIELDS)
        if "gpus" not in pb:
            raise w.fail(f"{path}.gpus", "missing: a cloud pool makes GPU nodes")
        zones = pb.get("zones", ["a"])
        if isinstance(zones, str):
            zones = [zones]
        if not isinstance(zones, list) or not zones or \
                not all(isinstance(z, str) and z for z in zones) or len(set(zones)) != len(zones):
            raise w.fail(f"{path}.zones", f"{zones!r} is not a list of distinct zone names")
        if "maxNodesPerZone" not in pb:
            raise w.fail(f"{path}.maxNodesPerZone", "missing: how many nodes a zone can hold")
        per_zone = int_at(w, f"{path}.maxNodesPerZone", pb["maxNodesPerZone"], 1)
        shapes.append({k: v for k, v in pb.items() if k not in ("zones", "maxNodesPerZone")}
                      | {"count": 1})
        extra.append((tuple(zones), per_zone))
    try:
        templates = nodes_from_documents([Document(doc.source, doc.index,
                                                   {"kind": "Cluster", "nodePools": shapes},
                                                   doc.line)], doc.source)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("nodePools[", "spec.nodePools[")
                          .replace("(Cluster", f"(Cloud {name}")) from None
    pools = []
    for shape, node, (zones, per_zone) in zip(shapes, templates, extra, strict=True):
        pname = str(shape["name"])
        pools.append(CloudPool(pname, node, zones, per_zone))
    manual: list[ManualRequest] = []
    for i, rb in enumerate(spec.get("requests") or []):
        path = f"spec.requests[{i}]"
        rb = mapping_at(w, path, rb)
        known_fields(w, path, rb, ("name", "at", "pool", "nodes"))
        for required in ("name", "at", "pool", "nodes"):
            if required not in rb:
                raise w.fail(f"{path}.{required}", "missing")
        pool = rb["pool"]
        if pool not in {p.name for p in pools}:
            raise w.fail(f"{path}.pool", f"{pool!r} is not a pool of this cloud; known: "
                                         + ", ".join(p.name for p in pools))
        manual.append(ManualRequest(str(rb["name"]), duration_at(w, f"{path}.at", rb["at"]),
                                    str(pool), int_at(w, f"{path}.nodes", rb["nodes"], 1)))
    if len({m.name for m in manual}) != len(manual):
        raise w.fail("spec.requests", "request names must be unique")
    return CloudSpec(name, str(spec.get("region", "region-1")), quota, delay, timeout,
                     scale_down, tuple(pools), rate, outage, tuple(manual))


def load_cloud(path: str) -> CloudSpec:
    """The one ``kind: Cloud`` document of a file (other documents are not allowed)."""
    from gpupool.config.loader import read_documents

    docs = read_documents(path)
    clouds = [d for d in docs if d.kind == CLOUD_KIND]
    others = [d.kind for d in docs if d.kind != CLOUD_KIND]
    if len(clouds) != 1 or others:
        raise ConfigError(f"{path}: expected one kind: Cloud document; found "
                          f"{len(clouds)} Cloud and {others or 'no other'} documents")
    return parse_cloud(clouds[0])
