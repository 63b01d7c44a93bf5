"""Core objects <-> JSON, as the state file and the API keep them.

Nodes are written in full (every card, its MIG partitioning and NVLink peers) so that the state
file alone rebuilds the cluster; placements keep every card share so that a running job takes
exactly the same cards back after a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.core.devices import NVIDIA, DeviceClass, Division, Template
from gpupool.core.model import (
    Gpu,
    GpuRequest,
    GpuShare,
    JobId,
    MigInstance,
    Node,
    NodeName,
    Placement,
    PodSet,
    Taint,
    TaintEffect,
    TaskId,
    Toleration,
)
from gpupool.core.provisioning import Condition, ConditionType, ProvisioningRequest


def node_to_json(node: Node) -> dict[str, Any]:
    return {
        "name": node.name,
        "cpu_milli": node.cpu_milli,
        "memory_mib": node.memory_mib,
        "labels": dict(node.labels),
        "taints": [{"key": t.key, "value": t.value, "effect": str(t.effect)} for t in node.taints],
        "schedulable": node.schedulable,
        "gpus": [
            {
                "index": g.index,
                "model": g.model,
                "memory_mib": g.memory_mib,
                "uuid": g.uuid,
                "healthy": g.healthy,
                "nvlink_peers": list(g.nvlink_peers),
                "mig": [
                    {
                        "profile": m.profile,
                        "count": m.count,
                        "gpu_milli": m.gpu_milli,
                        "memory_mib": m.memory_mib,
                    }
                    for m in g.mig
                ],
                **({} if g.device == NVIDIA else {"device": device_to_json(g.device)}),
            }
            for g in node.gpus
        ],
    }


def device_to_json(d: DeviceClass) -> dict[str, Any]:
    """A card's device class (written only when it is not NVIDIA's default)."""
    return {
        "vendor": d.vendor,
        "division": str(d.division),
        "compute_steps": d.compute_steps,
        "memory_step_mib": d.memory_step_mib,
        "templates": [[t.name, t.gpu_milli, t.memory_mib] for t in d.templates],
        "fractions": list(d.fractions),
        "relative_capacity": d.relative_capacity,
        "compute_units": d.compute_units,
    }


def device_from_json(body: Mapping[str, Any] | None) -> DeviceClass:
    if body is None:
        return NVIDIA
    return DeviceClass(
        str(body["vendor"]),
        Division(body["division"]),
        int(body["compute_steps"]),
        int(body["memory_step_mib"]),
        tuple(Template(str(n), int(m), int(b)) for n, m, b in body["templates"]),
        tuple(int(f) for f in body["fractions"]),
        float(body["relative_capacity"]),
        int(body["compute_units"]),
    )


def node_from_json(body: Mapping[str, Any]) -> Node:
    gpus = tuple(
        Gpu(
            int(g["index"]),
            str(g["model"]),
            int(g["memory_mib"]),
            str(g["uuid"]),
            bool(g["healthy"]),
            tuple(
                MigInstance(
                    str(m["profile"]), int(m["count"]), int(m["gpu_milli"]), int(m["memory_mib"])
                )
                for m in g["mig"]
            ),
            tuple(int(p) for p in g["nvlink_peers"]),
            device=device_from_json(g.get("device")),
        )
        for g in body["gpus"]
    )
    taints = tuple(
        Taint(str(t["key"]), str(t["value"]), TaintEffect(t["effect"])) for t in body["taints"]
    )
    return Node(
        NodeName(str(body["name"])),
        int(body["cpu_milli"]),
        int(body["memory_mib"]),
        gpus,
        dict(body["labels"]),
        taints,
        bool(body["schedulable"]),
    )


def placement_to_json(p: Placement) -> dict[str, Any]:
    return {
        "task": p.task,
        "node": p.node,
        "cpu_milli": p.cpu_milli,
        "memory_mib": p.memory_mib,
        "gpus": [
            {
                "index": s.index,
                "gpu_milli": s.gpu_milli,
                "memory_mib": s.memory_mib,
                "mig_profile": s.mig_profile,
            }
            for s in p.shares
        ],
    }


def placement_from_json(job: str, body: Mapping[str, Any]) -> Placement:
    return Placement(
        TaskId(str(body["task"])),
        JobId(job),
        NodeName(str(body["node"])),
        int(body["cpu_milli"]),
        int(body["memory_mib"]),
        tuple(
            GpuShare(
                int(s["index"]), int(s["gpu_milli"]), int(s["memory_mib"]), s.get("mig_profile")
            )
            for s in body["gpus"]
        ),
    )


def pod_set_to_json(ps: PodSet) -> dict[str, Any]:
    g = ps.gpu
    return {
        "name": ps.name,
        "count": ps.count,
        "cpu_milli": ps.cpu_milli,
        "memory_mib": ps.memory_mib,
        "gpu": {
            "count": g.count,
            "gpu_milli": g.gpu_milli,
            "memory_mib": g.memory_mib,
            "mig_profile": g.mig_profile,
            "models": sorted(g.models),
        },
        "node_selector": dict(ps.node_selector),
        "tolerations": [
            {
                "key": t.key,
                "operator": t.operator,
                "value": t.value,
                "effect": None if t.effect is None else str(t.effect),
            }
            for t in ps.tolerations
        ],
    }


def pod_set_from_json(body: Mapping[str, Any]) -> PodSet:
    g = body["gpu"]
    gpu = GpuRequest(
        int(g["count"]),
        int(g["gpu_milli"]),
        int(g["memory_mib"]),
        g.get("mig_profile"),
        frozenset(str(m) for m in g["models"]),
    )
    tols = tuple(
        Toleration(
            str(t["key"]),
            str(t["operator"]),
            str(t["value"]),
            None if t.get("effect") is None else TaintEffect(t["effect"]),
        )
        for t in body["tolerations"]
    )
    return PodSet(
        str(body["name"]),
        int(body["count"]),
        int(body["cpu_milli"]),
        int(body["memory_mib"]),
        gpu,
        dict(body["node_selector"]),
        tols,
    )


def request_to_json(req: ProvisioningRequest) -> dict[str, Any]:
    """A ProvisioningRequest in full, status included, for the state file."""
    return {
        "name": req.name,
        "namespace": req.namespace,
        "provisioning_class_name": req.provisioning_class_name,
        "max_run_duration_s": req.max_run_duration_s,
        "job": req.job,
        "queue": req.queue,
        "created_s": req.created_s,
        "pod_sets": [pod_set_to_json(p) for p in req.pod_sets],
        "conditions": [
            {
                "type": c.type.value,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "time_s": c.time_s,
            }
            for c in req.conditions
        ],
        "nodes": list(req.nodes),
        "consumed_s": req.consumed_s,
    }


def request_from_json(body: Mapping[str, Any]) -> ProvisioningRequest:
    return ProvisioningRequest(
        str(body["name"]),
        tuple(pod_set_from_json(p) for p in body["pod_sets"]),
        str(body["namespace"]),
        str(body["provisioning_class_name"]),
        body.get("max_run_duration_s"),
        str(body["job"]),
        str(body["queue"]),
        float(body["created_s"]),
        tuple(
            Condition(
                ConditionType(c["type"]),
                bool(c["status"]),
                str(c["reason"]),
                str(c["message"]),
                float(c["time_s"]),
            )
            for c in body["conditions"]
        ),
        tuple(str(n) for n in body["nodes"]),
        body.get("consumed_s"),
    )
