"""Which of the cloud's node pools holds a ProvisioningRequest, how many of its nodes that
takes (or why the region refuses it at once), and the nodes a pool makes: its template, named
and labelled for the request's zone and tainted for the request, so only the pods pinned to
them run there."""

from __future__ import annotations

import math
from dataclasses import replace

from gpupool.cloud.spec import CloudPool, CloudSpec
from gpupool.core.model import GpuKind, GpuRequest, Node, NodeName, PodSet, Taint
from gpupool.core.provisioning import REQUEST_LABEL, ProvisioningRequest

ZONE_LABEL = "topology.kubernetes.io/zone"


def match_pod_set(spec: CloudSpec, ps: PodSet) -> tuple[CloudPool | None, int, str]:
    """The first pool whose nodes hold the pod set's pods, and how many nodes it takes."""
    g = ps.gpu
    why = []
    for pool in spec.pools:
        t = pool.template
        sel = {k: v for k, v in ps.node_selector.items() if k != REQUEST_LABEL}
        if any(t.labels.get(k) != v for k, v in sel.items()):
            why.append(f"{pool.name}: labels")
            continue
        if g.models and pool.model not in g.models:
            why.append(f"{pool.name}: model {pool.model}")
            continue
        per_gpu = g.count if g.kind is GpuKind.WHOLE else (1 if g.kind is not GpuKind.NONE else 0)
        fits = [
            pool.gpus_per_node // per_gpu if per_gpu else 10**9,
            t.cpu_milli // ps.cpu_milli if ps.cpu_milli else 10**9,
            t.memory_mib // ps.memory_mib if ps.memory_mib else 10**9,
        ]
        per_node = min(fits)
        card_mib = t.gpus[0].memory_mib if t.gpus else 0
        if per_node < 1 or g.memory_mib > card_mib:
            why.append(f"{pool.name}: a node holds no pod")
            continue
        return pool, math.ceil(ps.count / per_node), ""
    return None, 0, "; ".join(why)


def match_request(spec: CloudSpec, req: ProvisioningRequest) -> tuple[CloudPool | None, int, str]:
    """One pool for every pod set of the request (all its nodes come from one pool, in
    one zone), and the nodes they take together."""
    pool, n, why = match_pod_set(spec, req.pod_sets[0])
    for ps in req.pod_sets[1:]:
        if pool is None:
            break
        other, more, why = match_pod_set(spec, ps)
        if other is not pool:
            return None, 0, why or f"pod set {ps.name}: not in pool {pool.name}"
        n += more
    return pool, n, why


def refusal(
    spec: CloudSpec, pool: CloudPool | None, nodes: int, gpus: int, why: str
) -> tuple[str, str] | None:
    """Why the region fails a request at once, as (reason, message): no pool holds its pods
    (``why``: each pool's answer), it needs more nodes than a zone holds, or more GPUs than
    the regional quota. None: it is accepted and queued."""
    if pool is None:
        return "NoMatchingPool", f"no node pool of region {spec.region} holds its pods ({why})"
    if nodes > pool.max_nodes_per_zone:
        return (
            "TooLarge",
            f"needs {nodes} nodes in one zone; pool {pool.name} holds "
            f"{pool.max_nodes_per_zone} per zone",
        )
    if gpus > spec.gpu_quota:
        return "QuotaExceeded", f"needs {gpus} GPUs; the regional quota is {spec.gpu_quota}"
    return None


def reserving_pod_set(pool: CloudPool, nodes: int) -> PodSet:
    """A request made by hand: one pod per node of the pool, half a node's CPU and memory and
    all its GPUs each, pinned to the pool."""
    t = pool.template
    selector = {k: v for k, v in t.labels.items() if k == "gpupool.io/node-pool"}
    return PodSet(
        "reserve",
        nodes,
        t.cpu_milli // 2,
        t.memory_mib // 2,
        GpuRequest(count=pool.gpus_per_node, models=frozenset({pool.model})),
        node_selector=selector,
    )


def pool_node(pool: CloudPool, serial: int, zone: str, label: str) -> Node:
    """Node ``serial`` of the pool, made in ``zone`` for the request whose ``REQUEST_LABEL``
    value is ``label``."""
    name = NodeName(f"{pool.name}-{zone}-{serial:05d}")
    t = pool.template
    return replace(
        t,
        name=name,
        labels={
            **t.labels,
            "kubernetes.io/hostname": name,
            ZONE_LABEL: zone,
            REQUEST_LABEL: label,
        },
        taints=(*t.taints, Taint(REQUEST_LABEL, label)),
        gpus=tuple(replace(g, uuid=f"GPU-{name}-{g.index}") for g in t.gpus),
    )
