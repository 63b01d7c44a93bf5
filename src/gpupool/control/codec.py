"""Core objects <-> JSON, as the state file and the API keep them.

Nodes are written in full (every card, its MIG partitioning and NVLink peers) so that the state
file alone rebuilds the cluster; placements keep every card share so that a running job takes
exactly the same cards back after a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.core.model import (
    Gpu,
    GpuShare,
    JobId,
    MigInstance,
    Node,
    NodeName,
    Placement,
    Taint,
    TaintEffect,
    TaskId,
)


def node_to_json(node: Node) -> dict[str, Any]:
    return {
        "name": node.name, "cpu_milli": node.cpu_milli, "memory_mib": node.memory_mib,
        "labels": dict(node.labels),
        "taints": [{"key": t.key, "value": t.value, "effect": str(t.effect)}
                   for t in node.taints],
        "schedulable": node.schedulable,
        "gpus": [{
            "index": g.index, "model": g.model, "memory_mib": g.memory_mib, "uuid": g.uuid,
            "healthy": g.healthy, "nvlink_peers": list(g.nvlink_peers),
            "mig": [{"profile": m.profile, "count": m.count, "gpu_milli": m.gpu_milli,
                     "memory_mib": m.memory_mib} for m in g.mig],
        } for g in node.gpus],
    }


def node_from_json(body: Mapping[str, Any]) -> Node:
    gpus = tuple(Gpu(int(g["index"]), str(g["model"]), int(g["memory_mib"]), str(g["uuid"]),
                     bool(g["healthy"]),
                     tuple(MigInstance(str(m["profile"]), int(m["count"]), int(m["gpu_milli"]),
                                       int(m["memory_mib"])) for m in g["mig"]),
                     tuple(int(p) for p in g["nvlink_peers"]))
                 for g in body["gpus"])
    taints = tuple(Taint(str(t["key"]), str(t["value"]), TaintEffect(t["effect"]))
                   for t in body["taints"])
    return Node(NodeName(str(body["name"])), int(body["cpu_milli"]), int(body["memory_mib"]),
                gpus, dict(body["labels"]), taints, bool(body["schedulable"]))


def placement_to_json(p: Placement) -> dict[str, Any]:
    return {"task": p.task, "node": p.node, "cpu_milli": p.cpu_milli,
            "memory_mib": p.memory_mib,
            "gpus": [{"index": s.index, "gpu_milli": s.gpu_milli, "memory_mib": s.memory_mib,
                      "mig_profile": s.mig_profile} for s in p.shares]}


def placement_from_json(job: str, body: Mapping[str, Any]) -> Placement:
    return Placement(TaskId(str(body["task"])), JobId(job), NodeName(str(body["node"])),
                     int(body["cpu_milli"]), int(body["memory_mib"]),
                     tuple(GpuShare(int(s["index"]), int(s["gpu_milli"]), int(s["memory_mib"]),
                                    s.get("mig_profile")) for s in body["gpus"]))
