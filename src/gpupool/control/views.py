"""What the API shows: the cluster, nodes down to each card and who holds it, jobs with their
status, queues with their usage. Plain JSON-ready dicts, built under the plane's lock, in the
wire's conventions (``control.wire``): camelCase names, RFC 3339 times with their cluster
seconds beside them.

``visible(namespace)`` hides other tenants: their jobs do not appear and the cards they hold
show how much is held, not by whom.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpupool.control.codec import node_from_json
from gpupool.control.plane import ACTIVE, ControlPlane, JobRecord
from gpupool.control.records import JobPhase
from gpupool.control.wire import camel, rfc3339, times
from gpupool.core import mig
from gpupool.core.admission import ENTITLEMENT_BASIS
from gpupool.core.elastic import TASK_PREFIX
from gpupool.core.errors import NotFoundError
from gpupool.core.model import JobId, Node, NodeName, Placement
from gpupool.core.provisioning import REQUEST_LABEL
from gpupool.core.quota import Resource
from gpupool.store import EventRow

Visible = Callable[[str], bool]
HIDDEN = "(another tenant)"


def everyone(_: str) -> bool:
    return True


def flavor_of(plane: ControlPlane, node: Node) -> str:
    for f in plane.config.flavors:
        if all(node.labels.get(k) == v for k, v in f.node_labels.items()):
            return f.name
    return ""


def _node_state(body: Mapping[str, Any]) -> str:
    if body.get("failed"):
        return "failed"
    return "ready" if body["node"]["schedulable"] else "cordoned"


def cluster_view(plane: ControlPlane) -> dict[str, Any]:
    with plane.lock:
        sched = plane.scheduler
        totals = sched.totals()
        free_total, fragmented = sched.fragmentation()
        states = Counter(_node_state(b) for b in plane.node_status.values())
        phases = Counter(r.phase for r in plane.jobs.values())
        milli_used = totals["gpu_milli_used"]
        flavors: dict[str, dict[str, int]] = defaultdict(
            lambda: {"nodes": 0, "gpus": 0, "gpuMilliUsed": 0}
        )
        partitioned = 0
        for use in sched.nodes_use():
            f = flavors[flavor_of(plane, use.node) or "(none)"]
            f["nodes"] += 1
            f["gpus"] += len(use.node.gpus)
            f["gpuMilliUsed"] += use.gpu_milli_used
            partitioned += sum(1 for g in use.node.gpus if g.is_mig)
        all_gpus = sum(f["gpus"] for f in flavors.values())
        all_used = sum(f["gpuMilliUsed"] for f in flavors.values())
        last = plane.last_tick
        wall_of = plane.clock.wall_of
        return {
            **times("time", plane.clock.now(), wall_of),
            "speed": plane.clock.speed,
            "nodes": {
                "total": len(plane.node_status),
                **{s: states.get(s, 0) for s in ("ready", "cordoned", "failed")},
            },
            # every card, MIG-partitioned ones too (as the flavors' figures count them); the
            # cards' compute in gpuMilli below leaves the partitioned ones out
            "gpus": {
                "total": all_gpus,
                "migPartitioned": partitioned,
                "allocated": round(all_used / 1000, 3),
                "allocatedPct": round(100 * all_used / max(1, all_gpus * 1000), 2),
            },
            "gpuMilli": {"total": totals["gpu_milli_total"], "used": milli_used},
            "cpuMilli": {"total": totals["cpu_milli_total"], "used": totals["cpu_milli_used"]},
            "memoryMib": {"total": totals["memory_mib_total"], "used": totals["memory_mib_used"]},
            "fragmentation": {
                "freeGpuMilli": free_total,
                "fragmentedGpuMilli": fragmented,
                "ratio": round(fragmented / free_total, 4) if free_total else 0.0,
                "rule": "free compute on partly used cards, or on nodes with no CPU or "
                "memory left, over all free compute",
            },
            "jobs": {p: phases.get(p, 0) for p in JobPhase},
            "flavors": [{"name": k, **v} for k, v in sorted(flavors.items())],
            "cycles": plane.cycles,
            "lastCycle": None
            if last is None
            else {
                **times("time", last.time_s, wall_of),
                "bound": last.bound,
                "finished": last.finished,
                "evicted": last.evicted,
                "parked": last.parked,
                "decisionMs": round(last.decision_s * 1000, 3),
            },
        }


def history_view(plane: ControlPlane) -> dict[str, Any]:
    """The queues' usage and shares over time (one sample every few seconds)."""
    with plane.lock:
        wall_of = plane.clock.wall_of
        return {
            "samples": [
                {
                    **times("time", s["time_s"], wall_of),
                    "queues": {
                        q: {"gpuMilli": v["gpu_milli"], "share": v["share"]}
                        for q, v in s["queues"].items()
                    },
                    "allocatedPct": s["allocated_pct"],
                    "pending": s["pending"],
                }
                for s in plane.history
            ]
        }


def node_names(plane: ControlPlane) -> list[str]:
    with plane.lock:
        return list(plane.node_status)


def nodes_view(plane: ControlPlane, visible: Visible = everyone) -> list[dict[str, Any]]:
    """Every node, read in one hold of the lock (a node deleted meanwhile is not half-seen)."""
    with plane.lock:
        return [node_view(plane, name, visible) for name in plane.node_status]


def node_view(plane: ControlPlane, name: str, visible: Visible = everyone) -> dict[str, Any]:
    with plane.lock:
        body = plane.node_status.get(name)
        if body is None:  # deleted since the caller looked
            raise NotFoundError(f"node {name} not found")
        node = node_from_json(body["node"])
        sched = plane.scheduler
        use = sched.node_use(NodeName(name)) if not body.get("failed") else None
        holders: dict[int, list[dict[str, Any]]] = defaultdict(list)
        if use is not None:
            for p in sched.placements_on(NodeName(name)):
                ns = p.job.split("/", 1)[0]
                if p.job.startswith(TASK_PREFIX):  # an ElasticGPU's: elasticgpu/<claim key>
                    ns = (
                        p.job[len(TASK_PREFIX) :].split("/", 1)[0] if p.job.count("/") > 1 else ""
                    )  # elasticgpu/static: made by an operator, no claim yet
                shown = visible(ns) or not ns
                for s in p.shares:
                    card = node.gpus[s.index]
                    holders[s.index].append(
                        {
                            "job": p.job if shown else HIDDEN,
                            "namespace": ns if shown else "",
                            "task": p.task if shown else "",
                            "gpuMilli": mig.share_milli(s, card),
                            "memoryMib": mig.share_mib(s, card),
                            "migProfile": s.mig_profile,
                        }
                    )
        usage = sched.measured_use  # measured use, when placement reads it
        now = plane.clock.now()
        readings = (
            {r.gpu: r for r in usage.readings(sched.node_table(), NodeName(name), now)}
            if usage is not None and use is not None
            else {}
        )
        cards = []
        for g in node.gpus:
            card_use = use.cards[g.index] if use is not None else None
            free = dict(card_use.mig_free) if card_use is not None else {}
            instances = [
                {
                    "profile": m.profile,
                    "count": m.count,
                    "free": free.get(m.profile, m.count),
                    "gpuMilli": m.gpu_milli,
                    "memoryMib": m.memory_mib,
                }
                for m in g.mig
            ]
            cards.append(
                {
                    "index": g.index,
                    "model": g.model,
                    "memoryMib": g.memory_mib,
                    "vendor": g.vendor,
                    "division": str(g.device.division),
                    "relativeCapacity": g.device.relative_capacity,
                    "uuid": g.uuid,
                    "healthy": g.healthy,
                    "nvlinkPeers": list(g.nvlink_peers),
                    "mig": instances,
                    "usedMilli": card_use.used_milli if card_use else 0,
                    "usedMib": card_use.used_mib if card_use else 0,
                    "holders": holders[g.index],
                }
            )
            r = readings.get(g.index)
            if r is not None:  # measured beside requested
                cards[-1]["measured"] = {
                    "fresh": r.measured,
                    "loadMilli": r.load_milli,
                    "utilPct": r.util_pct,
                    "usedMib": r.used_mib,
                    "freeMib": r.free_mib,
                    "ageSeconds": r.age_s,
                    "estimateMilli": r.estimate_milli,
                }
        extra: dict[str, Any] = {}
        if usage is not None and use is not None:
            why = usage.view(sched.node_table(), now).reasons.get(NodeName(name), "")
            extra["measuredReason"] = why
        return {
            **extra,
            "name": name,
            "state": _node_state(body),
            "unschedulable": not node.schedulable,
            "failed": bool(body.get("failed")),
            "flavor": flavor_of(plane, node),
            "labels": {k: _owned(k, v, visible) for k, v in node.labels.items()},
            "taints": [
                {"key": x.key, "value": _owned(x.key, x.value, visible), "effect": str(x.effect)}
                for x in node.taints
            ],
            "cpuMilli": {"total": node.cpu_milli, "used": use.cpu_used_milli if use else 0},
            "memoryMib": {"total": node.memory_mib, "used": use.memory_used_mib if use else 0},
            "gpus": cards,
        }


ANOTHER_TENANTS = "another-tenant"


def _owned(key: str, value: str, visible: Visible) -> str:
    """A node label's or taint's value as a reader sees it: a provisioned node's request
    label names its namespace and request (``research.research-train-1``, made from the job's
    name), which a reader who cannot see that namespace does not learn."""
    if key == REQUEST_LABEL and value:
        namespace = value.split(".", 1)[0]
        if not visible(namespace):
            return ANOTHER_TENANTS
    return value


def placement_view(p: Placement) -> dict[str, Any]:
    """One task's placement: its node, CPU and memory, and its share of each card."""
    return {
        "task": p.task,
        "node": p.node,
        "cpuMilli": p.cpu_milli,
        "memoryMib": p.memory_mib,
        "gpus": [
            {
                "index": s.index,
                "gpuMilli": s.gpu_milli,
                "memoryMib": s.memory_mib,
                "migProfile": s.mig_profile,
            }
            for s in p.shares
        ],
    }


def _status(
    plane: ControlPlane, rec: JobRecord, estimates: Mapping[JobId, tuple[int, float | None]]
) -> dict[str, Any]:
    now = plane.clock.now()
    wall_of = plane.clock.wall_of
    pending = rec.phase == JobPhase.PENDING
    pos, start = estimates.get(JobId(rec.key), (None, None)) if pending else (None, None)
    if pending:
        wait: float | None = now - rec.submitted_s
    else:
        wait = None if rec.started_s is None else rec.started_s - rec.submitted_s
    end = (
        getattr(plane.backend, "end_of", lambda _: None)(rec.key)
        if rec.phase == JobPhase.RUNNING
        else None
    )
    return {
        "phase": rec.phase,
        "clusterQueue": rec.cluster_queue,
        "flavor": rec.flavor,
        **times("submitTime", rec.submitted_s, wall_of),
        **times("startTime", rec.started_s, wall_of),
        **times("finishTime", rec.finished_s, wall_of),
        "preemptions": rec.preemptions,
        "message": rec.message,
        "alternative": rec.alternative,
        "waitSeconds": None if wait is None else round(wait, 3),
        "pendingReason": (rec.message or "waiting for the next scheduling cycle")
        if pending
        else None,
        "queuePosition": pos,
        **times("estimatedStartTime", start, wall_of),
        "estimatedStartInSeconds": None if start is None else round(max(0.0, start - now), 3),
        **times("expectedEndTime", end, wall_of),
        "placements": [placement_view(p) for p in rec.placements],
    }


def job_view(
    plane: ControlPlane,
    rec: JobRecord,
    estimates: Mapping[JobId, tuple[int, float | None]] | None = None,
) -> dict[str, Any]:
    with plane.lock:
        est = (
            estimates
            if estimates is not None
            else (plane.estimates() if rec.phase == JobPhase.PENDING else {})
        )
        doc = rec.request.document
        meta = dict(doc.get("metadata", {}))
        meta["uid"] = rec.uid
        return {
            "apiVersion": doc.get("apiVersion"),
            "kind": "Job",
            "metadata": meta,
            "spec": doc.get("spec", {}),
            "status": _status(plane, rec, est),
        }


def event_view(e: EventRow) -> dict[str, Any]:
    """One event: when it was written (RFC 3339, the wall clock) and the cluster's seconds
    then."""
    return {
        "seq": e.seq,
        "time": rfc3339(e.wall),
        "timeSeconds": round(e.time_s, 3),
        "type": e.type,
        "reason": e.reason,
        "kind": e.kind,
        "object": e.object,
        "namespace": e.namespace,
        "message": e.message,
    }


def jobs_view(plane: ControlPlane, records: Iterable[JobRecord]) -> list[dict[str, Any]]:
    with plane.lock:
        recs = list(records)
        est = plane.estimates() if any(r.phase == JobPhase.PENDING for r in recs) else {}
        return [job_view(plane, r, est) for r in recs]


def _vec(v: Mapping[tuple[str, Resource], int]) -> dict[str, dict[str, int]]:
    """Per flavor, per resource (``gpu``, ``gpuMilli``, ``gpuMemoryMib``, ``cpuMilli``,
    ``memoryMib``): the amount in the resource's unit."""
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for (flavor, res), amount in sorted(v.items()):
        out[flavor][camel(str(res))] = int(amount)
    return dict(out)


def cluster_queue_status(plane: ControlPlane, name: str) -> dict[str, Any]:
    with plane.lock:
        sched = plane.scheduler
        pending = sum(
            1
            for r in plane.jobs.values()
            if r.phase == JobPhase.PENDING and r.cluster_queue == name
        )
        running = sum(
            1
            for r in plane.jobs.values()
            if r.phase == JobPhase.RUNNING and r.cluster_queue == name
        )
        return {
            "usage": _vec(sched.usage(name)),
            "nominal": _vec(sched.nominal(name)),
            "borrowed": _vec(sched.borrowed(name)),
            "share": round(sched.share(name), 4),
            "entitledGpus": round(sched.entitled_gpus(name), 3),
            "shareBasis": ENTITLEMENT_BASIS,
            "pendingJobs": pending,
            "runningJobs": running,
        }


def local_queue_status(plane: ControlPlane, key: str) -> dict[str, Any]:
    with plane.lock:
        phases = Counter(
            r.phase for r in plane.jobs.values() if r.request.queue == key and r.phase in ACTIVE
        )
        return {
            "pendingJobs": phases.get(JobPhase.PENDING, 0),
            "runningJobs": phases.get(JobPhase.RUNNING, 0),
        }


def flavor_status(plane: ControlPlane, name: str) -> dict[str, Any]:
    with plane.lock:
        nodes = gpus = 0
        for node in plane.scheduler.node_list():
            if flavor_of(plane, node) == name:
                nodes += 1
                gpus += len(node.gpus)
        return {"nodes": nodes, "gpus": gpus}


def cohort_status(plane: ControlPlane, name: str) -> dict[str, Any]:
    with plane.lock:
        members = [q.name for q in plane.config.cluster_queues if q.cohort == name]
        children = [c.name for c in plane.config.cohorts if c.parent == name]
        return {"clusterQueues": members, "cohorts": children}
