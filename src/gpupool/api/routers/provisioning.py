"""Queued provisioning (docs/provisioning.md, "In serve")::

    GET    /api/v1/provisioningrequests[?namespace=]          the caller's namespaces
    GET    /api/v1/provisioningrequests/{namespace}/{name}    (404 for another namespace's)
    DELETE /api/v1/provisioningrequests/{namespace}/{name}    cancels it
    GET    /api/v1/cloud                                      the simulated cloud: pools, zones,
                                                              GPUs held against the quota,
                                                              stock-outs now, its requests

Requests are shown as ``autoscaling.x-k8s.io/v1`` objects with gpupool's extras (the job and
ClusterQueue they were made for, when the booking expires, when the run limit reclaims it).
Times are RFC 3339 with their cluster seconds beside them (``control.wire``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query

from gpupool.api.auth import Principal
from gpupool.api.deps import Plane, Who, seen
from gpupool.api.models.base import Deleted
from gpupool.api.models.provisioning import (
    CloudView,
    ProvisioningRequestList,
    ProvisioningRequestView,
)
from gpupool.control.plane import ControlPlane
from gpupool.control.wire import times
from gpupool.core.errors import NotFoundError
from gpupool.core.provisioning import ProvisioningRequest

API_VERSION = "autoscaling.x-k8s.io/v1"
router = APIRouter(prefix="/api/v1", tags=["provisioning"])


def request_view(req: ProvisioningRequest, wall_of: Callable[[float], float]) -> dict[str, Any]:
    d = req.to_dict()
    phase = next((c["type"] for c in reversed(d["conditions"]) if c["status"] == "True"), "Pending")
    conditions = [
        {
            **{k: v for k, v in c.items() if k != "lastTransitionTime"},
            **times("lastTransitionTime", c["lastTransitionTime"], wall_of),
        }
        for c in d["conditions"]
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ProvisioningRequest",
        "metadata": {"name": req.name, "namespace": req.namespace},
        "spec": {
            "provisioningClassName": req.provisioning_class_name,
            "podSets": d["podSets"],
            "parameters": d["parameters"],
        },
        "status": {
            "phase": phase,
            "conditions": conditions,
            "nodes": d["nodes"],
            **times("createTime", req.created_s, wall_of),
            **times("consumeTime", req.consumed_s, wall_of),
            **times("bookingExpiryTime", req.booking_expires_s if req.booked else None, wall_of),
            **times("runEndTime", req.run_ends_s, wall_of),
        },
        "job": req.job,
        "queue": req.queue,
    }


def cloud_view(plane: ControlPlane, who: Principal) -> dict[str, Any]:
    with plane.lock:
        cloud = plane.cloud
        if cloud is None:
            raise NotFoundError("no simulated cloud: start serve with --cloud FILE")
        now = plane.clock.now()
        wall_of = plane.clock.wall_of
        snap = cloud.snapshot()
        spec = cloud.spec
        zones = {(p, z): n for p, z, n in snap["zoneNodes"]}
        alive: dict[tuple[str, str], int] = {}
        for rec in cloud.run.requests.values():
            n = sum(1 for name in rec.node_names if name in snap["nodeRequest"])
            if n:
                alive[(rec.pool, rec.zone)] = alive.get((rec.pool, rec.zone), 0) + n
        pools = [
            {
                "name": p.name,
                "model": p.model,
                "gpusPerNode": p.gpus_per_node,
                "maxNodesPerZone": p.max_nodes_per_zone,
                "zones": [
                    {
                        "name": z,
                        "nodes": alive.get((p.name, z), 0),
                        "committed": zones.get((p.name, z), 0),
                        "stockedOut": any(
                            a <= now < b for a, b in cloud.run.stockouts.get(f"{p.name}/{z}", ())
                        ),
                    }
                    for z in p.zones
                ],
            }
            for p in spec.pools
        ]
        requests = [
            {
                "key": r.key,
                "job": r.job,
                "pool": r.pool,
                "zone": r.zone,
                "nodes": r.nodes,
                "gpus": r.gpus,
                "outcome": r.outcome,
                "reason": r.reason,
                **times("createTime", r.created_s, wall_of),
                **times("provisionTime", r.provisioned_s, wall_of),
                **times("consumeTime", r.consumed_s, wall_of),
                **times("endTime", r.ended_s, wall_of),
                "idleBookingGpuSeconds": round(r.idle_booking_gpu_s, 1),
            }
            for r in cloud.run.requests.values()
            if who.sees(r.key.split("/", 1)[0])
        ]
        return {
            "name": spec.name,
            "region": spec.region,
            **times("time", now, wall_of),
            "gpuQuota": spec.gpu_quota,
            "gpusHeld": snap["gpusHeld"],
            "gpusAlive": snap["aliveGpus"],
            "nodesMade": snap["nodesMade"],
            "queued": list(snap["queue"]),
            "pools": pools,
            "requests": requests,
        }


@router.get("/provisioningrequests", response_model=ProvisioningRequestList)
def list_requests(
    who: Who, plane: Plane, namespace: Annotated[str | None, Query(max_length=63)] = None
) -> dict[str, Any]:
    return {
        "items": [
            request_view(r, plane.clock.wall_of)
            for r in plane.provisioning_requests()
            if who.sees(r.namespace) and (namespace is None or r.namespace == namespace)
        ]
    }


@router.get("/provisioningrequests/{namespace}/{name}", response_model=ProvisioningRequestView)
def get_request(namespace: str, name: str, who: Who, plane: Plane) -> dict[str, Any]:
    req = plane.provisioning_request(seen(who, "ProvisioningRequest", namespace, name))
    return request_view(req, plane.clock.wall_of)


@router.delete("/provisioningrequests/{namespace}/{name}", response_model=Deleted)
def delete_request(namespace: str, name: str, who: Who, plane: Plane) -> dict[str, Any]:
    key = seen(who, "ProvisioningRequest", namespace, name)
    plane.provisioning_request(key)
    return {"deleted": plane.delete_provisioning_request(key).key}


@router.get("/cloud", response_model=CloudView)
def get_cloud(who: Who, plane: Plane) -> dict[str, Any]:
    return cloud_view(plane, who)
