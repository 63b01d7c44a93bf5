"""Nodes: added, cordoned, failed, drained and removed through the API, made and taken back
by the simulated cloud; a node's jobs go back to their queues whole."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpupool.config.cluster import nodes_from_documents
from gpupool.config.documents import Document
from gpupool.control.codec import node_from_json, node_to_json
from gpupool.control.journal import Changes
from gpupool.control.records import MAX_NODE_GPUS, MAX_POOL_NODES, EventReason, JobPhase
from gpupool.core.errors import ConfigError, ConflictError, NotFoundError
from gpupool.core.model import JobId, Node, NodeName

if TYPE_CHECKING:
    from gpupool.control.plane import ControlPlane


def add_node(plane: ControlPlane, node: Node, now_s: float) -> None:
    """A node the cloud made joins (the cloud's Host; called inside ``tick``)."""
    body = {"node": node_to_json(node), "failed": False, "cloud": True}
    plane.node_status[node.name] = body
    plane.scheduler.add_node(node)
    changes = plane._tick_changes or Changes()
    changes.objects[("Node", node.name)] = body
    changes.event(
        now_s,
        EventReason.NODE_PROVISIONED,
        "Node",
        node.name,
        f"made by the cloud: {node.gpu_count} GPU(s) "
        f"{node.gpus[0].model if node.gpus else ''}".strip(),
    )
    if plane._tick_changes is None:
        plane.journal.commit(changes)


def remove_node(plane: ControlPlane, name: NodeName, now_s: float) -> list[JobId]:
    """The cloud took a node back: its jobs go back to their queues whole."""
    changes = plane._tick_changes or Changes()
    hit: list[JobId] = []
    if name in plane.node_status:
        if not plane.node_status[name].get("failed"):
            hit = plane.scheduler.remove_node(name, now_s)
            for w in plane.watchers:
                w.node_failed(name)
        requeue(
            plane,
            hit,
            f"node {name} was taken back by the cloud",
            now_s,
            changes,
            EventReason.NODE_LOST,
        )
        del plane.node_status[name]
    changes.objects[("Node", name)] = None
    changes.event(
        now_s,
        EventReason.NODE_DEPROVISIONED,
        "Node",
        name,
        f"taken back by the cloud; {len(hit)} job(s) requeued",
    )
    if plane._tick_changes is None:
        plane.journal.commit(changes)
    return hit


def requeue(  # noqa: PLR0913
    plane: ControlPlane,
    hit: Sequence[JobId],
    why: str,
    now_s: float,
    changes: Changes,
    reason: EventReason,
) -> None:
    """Jobs whose node went: back in their queues, whole, with ``why``."""
    for jid in hit:
        rec = plane.jobs[jid]
        plane.backend.stop(rec.key)
        rec.phase, rec.placements, rec.started_s, rec.flavor = JobPhase.PENDING, (), None, ""
        rec.alternative = ""
        rec.message = f"{why}; back in its queue"
        changes.job(
            rec.key,
            phase=JobPhase.PENDING,
            placements=[],
            started_s=None,
            flavor="",
            alternative="",
            message=rec.message,
        )
        changes.event(
            now_s, reason, "Job", rec.key, rec.message, rec.request.namespace, warning=True
        )


def add_nodes(plane: ControlPlane, pool: Mapping[str, Any]) -> list[Node]:
    """Nodes from one node-pool spec (the shape of cluster.yaml's ``nodePools`` items)."""
    gpus = pool.get("gpus")
    for path, value, limit in (
        ("count", pool.get("count"), MAX_POOL_NODES),
        ("gpus.count", gpus.get("count") if isinstance(gpus, Mapping) else None, MAX_NODE_GPUS),
    ):
        if isinstance(value, int) and value > limit:  # refused before anything is built
            raise ConfigError(f"request: {path}={value} is more than {limit:,}")
    with plane.lock:
        doc = Document(
            "request",
            1,
            {
                "apiVersion": "gpupool.io/v1alpha1",
                "kind": "Cluster",
                "metadata": {"name": "api"},
                "nodePools": [dict(pool)],
            },
        )
        nodes = nodes_from_documents([doc], source="request")
        clash = [n.name for n in nodes if n.name in plane.node_status]
        if clash:
            raise ConflictError(f"node {clash[0]} already exists")
        now = plane.clock.now()
        changes = Changes()
        for n in nodes:
            changes.objects[("Node", n.name)] = {"node": node_to_json(n), "failed": False}
            changes.event(
                now,
                EventReason.NODE_ADDED,
                "Node",
                n.name,
                f"{n.gpu_count} GPU(s) {n.gpus[0].model if n.gpus else ''}".strip(),
            )
        plane.journal.commit(changes)
        for n in nodes:
            plane.node_status[n.name] = {"node": node_to_json(n), "failed": False}
            plane.scheduler.add_node(n)
        return nodes


def set_node(
    plane: ControlPlane, name: str, *, unschedulable: bool | None = None, failed: bool | None = None
) -> dict[str, Any]:
    """Cordon/uncordon, fail/recover a node. A failed node's jobs go back to their queues
    whole (gangs included)."""
    with plane.lock:
        body = plane.node_status.get(name)
        if body is None:
            raise NotFoundError(f"node {name} not found")
        body = {"node": dict(body["node"]), "failed": bool(body.get("failed"))}
        changes = Changes()
        now = plane.clock.now()
        if unschedulable is not None and body["node"]["schedulable"] == unschedulable:
            body["node"]["schedulable"] = not unschedulable
            if not body["failed"]:
                plane.scheduler.update_node(node_from_json(body["node"]))
            reason = EventReason.CORDONED if unschedulable else EventReason.UNCORDONED
            changes.event(
                now,
                reason,
                "Node",
                name,
                "marked unschedulable" if unschedulable else "schedulable again",
            )
        if failed is not None and failed != body["failed"]:
            body["failed"] = failed
            if failed:
                hit = plane.scheduler.remove_node(NodeName(name), now)
                for w in plane.watchers:
                    w.node_failed(name)
                requeue(plane, hit, f"node {name} failed", now, changes, EventReason.NODE_FAILED)
                changes.event(
                    now,
                    EventReason.NODE_FAILED,
                    "Node",
                    name,
                    f"node failed; {len(hit)} job(s) requeued",
                    warning=True,
                )
            else:
                plane.scheduler.add_node(node_from_json(body["node"]))
                changes.event(now, EventReason.NODE_RECOVERED, "Node", name, "node is back")
        changes.objects[("Node", name)] = body
        plane.journal.commit(changes)
        plane.node_status[name] = body
        return body


def drain_node(plane: ControlPlane, name: str) -> list[str]:
    """Cordon a node and send its jobs back to their queues, whole (kubectl's drain:
    its pods are evicted and scheduled again elsewhere). ElasticGPUs bound on it stay,
    as volumes stay with a drained node. Returns the jobs requeued."""
    with plane.lock:
        body = plane.set_node(name, unschedulable=True)
        if body["failed"]:
            return []
        now = plane.clock.now()
        hit = sorted(
            {
                p.job
                for p in plane.scheduler.placements_on(NodeName(name))
                if p.job in plane.jobs and plane.jobs[p.job].phase == JobPhase.RUNNING
            }
        )
        for job in hit:
            plane.scheduler.requeue(job, now)
        changes = Changes()
        requeue(plane, hit, f"node {name} was drained", now, changes, EventReason.DRAINED)
        changes.event(
            now,
            EventReason.DRAINED,
            "Node",
            name,
            f"drained: {len(hit)} job(s) back in their queues",
        )
        plane.journal.commit(changes)
        return [str(j) for j in hit]


def delete_node(plane: ControlPlane, name: str) -> None:
    with plane.lock:
        body = plane.node_status.get(name)
        if body is None:
            raise NotFoundError(f"node {name} not found")
        if not body.get("failed"):
            plane.set_node(name, failed=True)
        gone = Changes()
        gone.objects[("Node", name)] = None
        gone.event(plane.clock.now(), EventReason.NODE_REMOVED, "Node", name, "node removed")
        plane.journal.commit(gone)
        del plane.node_status[name]
