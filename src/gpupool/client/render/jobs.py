"""Jobs: their rows in ``get jobs`` and ``describe job``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpupool.client.render.events import events_section
from gpupool.client.render.text import (
    BLANK,
    NONE,
    age,
    field,
    indent,
    mib,
    milli,
    table,
    task_name,
)


def job_gpus(spec: Mapping[str, Any]) -> str:
    """What a job asks for in GPUs, all its replicas together: ``16`` whole cards, ``0.5``
    of a card's compute, ``2x1g.5gb`` MIG instances; ``-`` for none."""
    compute = 0.0
    mig: dict[str, int] = {}
    for ps in spec.get("podSets", []):
        gpu = ps.get("gpu") or {}
        count = int(ps.get("count", 1))
        if gpu.get("mig"):
            mig[gpu["mig"]] = mig.get(gpu["mig"], 0) + count
        elif gpu.get("count"):
            compute += count * int(gpu["count"])
        elif gpu.get("milli"):
            compute += count * int(gpu["milli"]) / 1000
    parts = [f"{compute:g}"] if compute else []
    parts += [f"{n}x{p}" for p, n in sorted(mig.items())]
    return "+".join(parts) or NONE


def local_queue(job: Mapping[str, Any]) -> str:
    spec, labels = job.get("spec", {}), job.get("metadata", {}).get("labels") or {}
    q = (
        spec.get("queue")
        or labels.get("gpupool.io/queue")
        or labels.get("kueue.x-k8s.io/queue-name")
        or job.get("status", {}).get("clusterQueue")
    )
    return str(q or NONE)


def _reason(status: Mapping[str, Any]) -> str:
    if status.get("phase") == "Pending":
        return str(status.get("pendingReason") or "")
    if status.get("phase") == "Running":
        return ""
    return str(status.get("message") or "")


def _position(status: Mapping[str, Any]) -> object:
    pos = status.get("queuePosition")
    return None if pos is None else int(pos) + 1


def _est_start(status: Mapping[str, Any]) -> str:
    if status.get("phase") != "Pending":
        return NONE
    est = status.get("estimatedStartInSeconds")
    if est is None:
        return "unknown"
    return "now" if est <= 0 else f"in {age(est)}"


def job_row(job: Mapping[str, Any], now_s: float, wide: bool = False) -> list[object]:
    meta, status = job.get("metadata", {}), job.get("status", {})
    submitted = status.get("submitTimeSeconds")
    row: list[object] = [
        meta.get("namespace"),
        meta.get("name"),
        local_queue(job),
        status.get("phase"),
        job_gpus(job.get("spec", {})),
        age(None if submitted is None else now_s - submitted),
        age(status.get("waitSeconds")),
        _position(status),
        _est_start(status),
    ]
    if wide:
        spec = job.get("spec", {})
        nodes = sorted({p["node"] for p in status.get("placements", [])})
        row += [
            status.get("flavor"),
            ",".join(nodes),
            spec.get("user"),
            spec.get("priorityClassName") or spec.get("priority"),
        ]
    # whole: the last column is not padded, and a reason cut short loses its cause
    row.append(" ".join(_reason(status).split()))
    return row


JOB_HEADERS = (
    "NAMESPACE",
    "NAME",
    "QUEUE",
    "PHASE",
    "GPUS",
    "AGE",
    "WAIT",
    "POSITION",
    "EST.START",
)
JOB_WIDE = ("FLAVOR", "NODES", "USER", "PRIORITY")


def jobs_table(jobs: Iterable[Mapping[str, Any]], now_s: float, wide: bool = False) -> str:
    headers = (*JOB_HEADERS, *(JOB_WIDE if wide else ()), "REASON")
    return table(headers, (job_row(j, now_s, wide) for j in jobs))


def describe_job(job: Mapping[str, Any], events: Sequence[Mapping[str, Any]], now_s: float) -> str:
    meta, spec, status = job.get("metadata", {}), job.get("spec", {}), job.get("status", {})
    phase = status.get("phase")
    labels = meta.get("labels") or {}
    out = [
        field("Name", meta.get("name")),
        field("Namespace", meta.get("namespace")),
        field("UID", meta.get("uid")),
        field("Labels", ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"),
        field("Queue", f"{local_queue(job)} (ClusterQueue {status.get('clusterQueue') or '-'})"),
        field("Priority", spec.get("priorityClassName") or spec.get("priority") or 0),
        field("User", spec.get("user") or NONE),
        field("Duration", spec.get("duration")),
    ]
    if spec.get("runLimit") is not None:
        out.append(field("Run limit", spec["runLimit"]))
    replicas = sum(int(ps.get("count", 1)) for ps in spec.get("podSets", []))
    gang = int(spec.get("minMember") or replicas)
    if replicas == 1:
        together = "1 replica"
    elif gang == 1:
        together = f"none: each of {replicas} replicas starts on its own"
    else:
        together = f"{gang} of {replicas} replicas start together"
    out.append(field("Gang", together))
    out.append("Pod sets:")
    out.append(
        indent(
            table(
                ("NAME", "COUNT", "CPU", "MEMORY", "GPU"),
                (
                    (
                        ps.get("name", "main"),
                        ps.get("count", 1),
                        ps.get("cpu", 0),
                        ps.get("memory", 0),
                        _gpu_request(ps.get("gpu")),
                    )
                    for ps in spec.get("podSets", [])
                ),
            )
        )
    )
    for ps in spec.get("podSets", []):
        extra = []
        if ps.get("nodeSelector"):
            extra.append(
                "node selector "
                + ", ".join(f"{k}={v}" for k, v in sorted(ps["nodeSelector"].items()))
            )
        if ps.get("tolerations"):
            extra.append(f"{len(ps['tolerations'])} toleration(s)")
        if extra:
            out.append(f"  {ps.get('name', 'main')}: {'; '.join(extra)}")
    out.append("Status:")
    rows: list[tuple[str, object]] = [("Phase", phase)]
    rows.append(("Submitted", _when(status, "submitTime", now_s)))
    if phase == "Pending":
        rows += [
            ("Waiting", age(status.get("waitSeconds"))),
            ("Queue position", _position(status) or "unknown"),
            ("Estimated start", _est_start(status)),
            ("Pending reason", status.get("pendingReason")),
        ]
    else:
        rows += [
            ("Started", _when(status, "startTime", now_s)),
            ("Waited", age(status.get("waitSeconds"))),
        ]
        if status.get("expectedEndTimeSeconds") is not None:
            rows.append(("Expected end", _when(status, "expectedEndTime", now_s)))
        if status.get("finishTimeSeconds") is not None:
            rows.append(("Finished", _when(status, "finishTime", now_s)))
        rows.append(("Flavor", status.get("flavor") or NONE))
        if status.get("message"):
            rows.append(("Message", status["message"]))
    rows.append(("Preemptions", status.get("preemptions", 0)))
    out += ["  " + field(k, v, 18) for k, v in rows]
    placements = status.get("placements") or []
    if placements:
        out.append("Placements:")
        cells: list[list[object]] = []
        for p in placements:
            gpus = p.get("gpus") or []
            first: list[object] = [
                task_name(p["task"]),
                p["node"],
                milli(p.get("cpuMilli")),
                mib(p.get("memoryMib")),
            ]
            if not gpus:
                cells.append([*first, None, None, None, None])
            for i, g in enumerate(gpus):
                lead = first if i == 0 else [BLANK] * 4
                mig = g.get("migProfile")
                cells.append(
                    [
                        *lead,
                        g.get("index"),
                        None if mig else milli(g.get("gpuMilli")),
                        None if mig else mib(g.get("memoryMib")),
                        mig,
                    ]
                )
        out.append(
            indent(
                table(("TASK", "NODE", "CPU", "MEMORY", "CARD", "GPU", "GPU-MEMORY", "MIG"), cells)
            )
        )
    else:
        out.append("Placements:   <none>")
    out.append(events_section(events, now_s))
    return "\n".join(out)


def _gpu_request(gpu: Mapping[str, Any] | None) -> str:
    if not gpu:
        return NONE
    models = "|".join(gpu.get("models") or [])
    if gpu.get("mig"):
        return f"MIG {gpu['mig']}" + (f" of {models}" if models else "")
    card = f"{models} card" if models else "card"
    if gpu.get("count"):
        mem = f", {gpu['memory']} each" if gpu.get("memory") else ""
        return f"{gpu['count']} whole {card}(s){mem}"
    mem = f" + {gpu['memory']}" if gpu.get("memory") else ""
    return f"{gpu.get('milli', 0)}m{mem} of one {card}"


def _when(status: Mapping[str, Any], name: str, now_s: float) -> str:
    """A time of the status as an age in cluster time, then the instant (RFC 3339) and the
    cluster seconds: ``3m ago (2026-11-24T19:39:16.000Z, t=120s)``."""
    time_s = status.get(f"{name}Seconds")
    if time_s is None:
        return NONE
    delta = now_s - time_s
    rel = f"{age(delta)} ago" if delta >= 0 else f"in {age(-delta)}"
    stamp = status.get(name)
    return f"{rel} ({stamp}, t={time_s:g}s)" if stamp else f"{rel} (t={time_s:g}s)"
