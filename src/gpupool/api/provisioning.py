"""REST endpoints of queued provisioning (docs/provisioning.md, "In serve")::

    GET    /api/v1/provisioningrequests[?namespace=]          the caller's namespaces
    GET    /api/v1/provisioningrequests/{namespace}/{name}    (404 for another namespace's)
    DELETE /api/v1/provisioningrequests/{namespace}/{name}    cancels it
    GET    /api/v1/cloud                                      the simulated cloud: pools, zones,
                                                              GPUs held against the quota,
                                                              stock-outs now, its requests

Requests are shown as ``autoscaling.x-k8s.io/v1`` objects with gpupool's extras (the job and
ClusterQueue they were made for, when the booking expires, when the run limit reclaims it).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import FastAPI, Query

from gpupool.api.app import Who
from gpupool.api.auth import Principal
from gpupool.control.plane import ControlPlane
from gpupool.core.errors import NotFoundError
from gpupool.core.provisioning import ProvisioningRequest

API_VERSION = "autoscaling.x-k8s.io/v1"


def request_view(req: ProvisioningRequest) -> dict[str, Any]:
    d = req.to_dict()
    phase = next((c["type"] for c in reversed(d["conditions"]) if c["status"] == "True"),
                 "Pending")
    return {
        "apiVersion": API_VERSION, "kind": "ProvisioningRequest",
        "metadata": {"name": req.name, "namespace": req.namespace},
        "spec": {"provisioningClassName": req.provisioning_class_name,
                 "podSets": d["podSets"], "parameters": d["parameters"]},
        "status": {"phase": phase, "conditions": d["conditions"], "nodes": d["nodes"],
                   "createdAt": req.created_s, "consumedAt": req.consumed_s,
                   "bookingExpiresAt": req.booking_expires_s if req.booked else None,
                   "runEndsAt": req.run_ends_s},
        "job": req.job, "queue": req.queue,
    }


def cloud_view(plane: ControlPlane, who: Principal) -> dict[str, Any]:
    with plane.lock:
        cloud = plane.cloud
        if cloud is None:
            raise NotFoundError("no simulated cloud: start serve with --cloud FILE")
        now = plane.clock.now()
        snap = cloud.snapshot()
        spec = cloud.spec
        zones = {(p, z): n for p, z, n in snap["zoneNodes"]}
        alive: dict[tuple[str, str], int] = {}
        for rec in cloud.run.requests.values():
            n = sum(1 for name in rec.node_names if name in snap["nodeRequest"])
            if n:
                alive[(rec.pool, rec.zone)] = alive.get((rec.pool, rec.zone), 0) + n
        pools = [{
            "name": p.name, "model": p.model, "gpusPerNode": p.gpus_per_node,
            "maxNodesPerZone": p.max_nodes_per_zone,
            "zones": [{"name": z, "nodes": alive.get((p.name, z), 0),
                       "committed": zones.get((p.name, z), 0),
                       "stockedOut": any(a <= now < b for a, b in
                                         cloud.run.stockouts.get(f"{p.name}/{z}", ()))}
                      for z in p.zones]} for p in spec.pools]
        requests = [{
            "key": r.key, "job": r.job, "pool": r.pool, "zone": r.zone, "nodes": r.nodes,
            "gpus": r.gpus, "outcome": r.outcome, "reason": r.reason,
            "createdAt": r.created_s, "provisionedAt": r.provisioned_s,
            "consumedAt": r.consumed_s, "endedAt": r.ended_s,
            "idleBookingGpuSeconds": round(r.idle_booking_gpu_s, 1)}
            for r in cloud.run.requests.values() if who.sees(r.key.split("/", 1)[0])]
        return {"name": spec.name, "region": spec.region, "time_s": now,
                "gpuQuota": spec.gpu_quota, "gpusHeld": snap["gpusHeld"],
                "gpusAlive": snap["aliveGpus"], "nodesMade": snap["nodesMade"],
                "queued": list(snap["queue"]), "pools": pools, "requests": requests}


def install_provisioning_routes(app: FastAPI, plane: ControlPlane) -> None:
    tags: list[Any] = ["provisioning"]
    base = "/api/v1/provisioningrequests"

    def visible(who: Principal, namespace: str, name: str) -> ProvisioningRequest:
        key = f"{namespace}/{name}"
        if not who.sees(namespace):
            raise NotFoundError(f"ProvisioningRequest {key} not found")
        return plane.provisioning_request(key)

    @app.get(base, tags=tags)
    def list_requests(who: Who, namespace: Annotated[str | None, Query(max_length=63)] = None
                      ) -> dict[str, Any]:
        return {"items": [request_view(r) for r in plane.provisioning_requests()
                          if who.sees(r.namespace)
                          and (namespace is None or r.namespace == namespace)]}

    @app.get(base + "/{namespace}/{name}", tags=tags)
    def get_request(namespace: str, name: str, who: Who) -> dict[str, Any]:
        return request_view(visible(who, namespace, name))

    @app.delete(base + "/{namespace}/{name}", tags=tags)
    def delete_request(namespace: str, name: str, who: Who) -> dict[str, Any]:
        visible(who, namespace, name)
        req = plane.delete_provisioning_request(f"{namespace}/{name}")
        return {"deleted": req.key}

    @app.get("/api/v1/cloud", tags=tags)
    def get_cloud(who: Who) -> dict[str, Any]:
        return cloud_view(plane, who)
