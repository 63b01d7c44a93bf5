"""How the client shows what the API answers: kubectl-like tables and ``describe`` text.

Plain text only, the same on a terminal and in a pipe: columns are left-aligned and
separated by three spaces, headers in capitals, ``-`` for nothing, so ``awk`` and tests can
split the lines on whitespace (only the last column, REASON or MESSAGE, holds spaces).
Times are cluster seconds, shown as kubectl shows ages (``45s``, ``3m20s``, ``5h``, ``2d``).

Per-card usage of a node (the CARDS column) is one character per card::

    .  idle        1-9  tenths of the card in use (rounded up)        #  full
    x  unhealthy

On a MIG card, the share in use is the share of its instances that are taken.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

NONE = "-"
BLANK = " "  # an empty cell that is not "-" (a placement's further cards)
REASON_WIDTH = 72


# -- primitives ------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns padded to their widest cell, three spaces apart; the last is not padded."""
    cells = [[str(h) for h in headers]] + [[_cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.ljust(widths[i]) for i, c in enumerate(r[:-1])] + [r[-1]]
        lines.append("   ".join(parts).rstrip())
    return "\n".join(lines)


def _cell(value: object) -> str:
    if value is None or value == "":
        return NONE
    return " ".join(str(value).split())


def age(seconds: float | None) -> str:
    """A duration as kubectl shows ages: 45s, 3m20s, 12m, 5h10m, 20h, 3d4h, 12d."""
    if seconds is None:
        return NONE
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    h = m // 60
    if h < 3:
        return f"{m}m"
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    d = h // 24
    if d < 2:
        return f"{h}h"
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    return f"{d}d"


def mib(amount: float | None) -> str:
    """MiB as a Kubernetes quantity: 4864Mi, 80Gi, 2Ti."""
    if amount is None:
        return NONE
    n = int(amount)
    if n == 0:
        return "0"
    for unit, size in (("Ti", 1 << 20), ("Gi", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    if n >= 10 << 10:
        return f"{n / 1024:.1f}Gi"
    return f"{n}Mi"


def milli(amount: float | None) -> str:
    """Thousandths of a GPU or CPU as a count: 1000 -> 1, 2500 -> 2.5, 142 -> 0.142."""
    if amount is None:
        return NONE
    return f"{amount / 1000:g}"


def short(text: str, width: int = REASON_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata", {})
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def _task(task: str) -> str:
    return task.rsplit("/", 1)[-1]


# -- jobs ------------------------------------------------------------------------------------


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
    q = spec.get("queue") or labels.get("gpupool.io/queue") or \
        labels.get("kueue.x-k8s.io/queue-name") or job.get("status", {}).get("clusterQueue")
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
        meta.get("namespace"), meta.get("name"), local_queue(job), status.get("phase"),
        job_gpus(job.get("spec", {})), age(None if submitted is None else now_s - submitted),
        age(status.get("waitSeconds")), _position(status), _est_start(status)]
    if wide:
        spec = job.get("spec", {})
        nodes = sorted({p["node"] for p in status.get("placements", [])})
        row += [status.get("flavor"), ",".join(nodes), spec.get("user"),
                spec.get("priorityClassName") or spec.get("priority")]
    # whole: the last column is not padded, and a reason cut short loses its cause
    row.append(" ".join(_reason(status).split()))
    return row


JOB_HEADERS = ("NAMESPACE", "NAME", "QUEUE", "PHASE", "GPUS", "AGE", "WAIT", "POSITION",
               "EST.START")
JOB_WIDE = ("FLAVOR", "NODES", "USER", "PRIORITY")


def jobs_table(jobs: Iterable[Mapping[str, Any]], now_s: float, wide: bool = False) -> str:
    headers = (*JOB_HEADERS, *(JOB_WIDE if wide else ()), "REASON")
    return table(headers, (job_row(j, now_s, wide) for j in jobs))


def describe_job(job: Mapping[str, Any], events: Sequence[Mapping[str, Any]],
                 now_s: float) -> str:
    meta, spec, status = job.get("metadata", {}), job.get("spec", {}), job.get("status", {})
    phase = status.get("phase")
    labels = meta.get("labels") or {}
    out = [
        _field("Name", meta.get("name")),
        _field("Namespace", meta.get("namespace")),
        _field("UID", meta.get("uid")),
        _field("Labels", ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"),
        _field("Queue", f"{local_queue(job)} (ClusterQueue {status.get('clusterQueue') or '-'})"),
        _field("Priority", spec.get("priorityClassName") or spec.get("priority") or 0),
        _field("User", spec.get("user") or NONE),
        _field("Duration", spec.get("duration")),
    ]
    if spec.get("runLimit") is not None:
        out.append(_field("Run limit", spec["runLimit"]))
    replicas = sum(int(ps.get("count", 1)) for ps in spec.get("podSets", []))
    gang = int(spec.get("minMember") or replicas)
    if replicas == 1:
        together = "1 replica"
    elif gang == 1:
        together = f"none: each of {replicas} replicas starts on its own"
    else:
        together = f"{gang} of {replicas} replicas start together"
    out.append(_field("Gang", together))
    out.append("Pod sets:")
    out.append(_indent(table(("NAME", "COUNT", "CPU", "MEMORY", "GPU"), (
        (ps.get("name", "main"), ps.get("count", 1), ps.get("cpu", 0), ps.get("memory", 0),
         _gpu_request(ps.get("gpu"))) for ps in spec.get("podSets", [])))))
    for ps in spec.get("podSets", []):
        extra = []
        if ps.get("nodeSelector"):
            extra.append("node selector " + ", ".join(
                f"{k}={v}" for k, v in sorted(ps["nodeSelector"].items())))
        if ps.get("tolerations"):
            extra.append(f"{len(ps['tolerations'])} toleration(s)")
        if extra:
            out.append(f"  {ps.get('name', 'main')}: {'; '.join(extra)}")
    out.append("Status:")
    rows: list[tuple[str, object]] = [("Phase", phase)]
    rows.append(("Submitted", _when(status, "submitTime", now_s)))
    if phase == "Pending":
        rows += [("Waiting", age(status.get("waitSeconds"))),
                 ("Queue position", _position(status) or "unknown"),
                 ("Estimated start", _est_start(status)),
                 ("Pending reason", status.get("pendingReason"))]
    else:
        rows += [("Started", _when(status, "startTime", now_s)),
                 ("Waited", age(status.get("waitSeconds")))]
        if status.get("expectedEndTimeSeconds") is not None:
            rows.append(("Expected end", _when(status, "expectedEndTime", now_s)))
        if status.get("finishTimeSeconds") is not None:
            rows.append(("Finished", _when(status, "finishTime", now_s)))
        rows.append(("Flavor", status.get("flavor") or NONE))
        if status.get("message"):
            rows.append(("Message", status["message"]))
    rows.append(("Preemptions", status.get("preemptions", 0)))
    out += ["  " + _field(k, v, 18) for k, v in rows]
    placements = status.get("placements") or []
    if placements:
        out.append("Placements:")
        cells: list[list[object]] = []
        for p in placements:
            gpus = p.get("gpus") or []
            first: list[object] = [_task(p["task"]), p["node"], milli(p.get("cpuMilli")),
                                   mib(p.get("memoryMib"))]
            if not gpus:
                cells.append([*first, None, None, None, None])
            for i, g in enumerate(gpus):
                lead = first if i == 0 else [BLANK] * 4
                mig = g.get("migProfile")
                cells.append([*lead, g.get("index"), None if mig else milli(g.get("gpuMilli")),
                              None if mig else mib(g.get("memoryMib")), mig])
        out.append(_indent(table(("TASK", "NODE", "CPU", "MEMORY", "CARD", "GPU",
                                  "GPU-MEMORY", "MIG"), cells)))
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


def _field(name: str, value: object, width: int = 14) -> str:
    return f"{name + ':':<{width}}{_cell(value)}"


def _indent(text: str, by: str = "  ") -> str:
    return "\n".join(by + line for line in text.splitlines())


# -- events ----------------------------------------------------------------------------------


EVENT_HEADERS = ("AGE", "TYPE", "REASON", "OBJECT", "MESSAGE")


def event_row(e: Mapping[str, Any], now_s: float) -> list[object]:
    return [age(now_s - float(e.get("timeSeconds", now_s))), e.get("type"), e.get("reason"),
            e.get("object"), e.get("message")]


def events_table(events: Iterable[Mapping[str, Any]], now_s: float) -> str:
    return table(EVENT_HEADERS, (event_row(e, now_s) for e in events))


def events_section(events: Sequence[Mapping[str, Any]], now_s: float) -> str:
    if not events:
        return "Events:       <none>"
    rows = ([age(now_s - float(e.get("timeSeconds", now_s))), e.get("type"), e.get("reason"),
             e.get("message")] for e in events)
    return "Events:\n" + _indent(table(("AGE", "TYPE", "REASON", "MESSAGE"), rows))


# -- nodes -----------------------------------------------------------------------------------


def used_milli(card: Mapping[str, Any]) -> int:
    """Thousandths of a card in use; on a MIG card, the share of its instances taken."""
    used = int(card.get("usedMilli") or 0)
    mig = card.get("mig") or []
    total = sum(int(m.get("count", 0)) for m in mig)
    if total:
        taken = sum(int(m.get("count", 0)) - int(m.get("free", 0)) for m in mig)
        used = max(used, 1000 if taken >= total else 1000 * taken // total)
    return min(1000, used)


def used_mib(card: Mapping[str, Any]) -> int:
    """MiB of a card's memory in use; on a MIG card, that of the instances taken."""
    taken = sum((int(m.get("count", 0)) - int(m.get("free", 0))) * int(m.get("memoryMib", 0))
                for m in card.get("mig") or [])
    return max(int(card.get("usedMib") or 0), taken)


def card_mark(card: Mapping[str, Any]) -> str:
    """One character for one card's use (see the module docstring)."""
    if not card.get("healthy", True):
        return "x"
    used = used_milli(card)
    if used >= 1000:
        return "#"
    if used <= 0:
        return "."
    return str(min(9, -(-used // 100)))


def cards(node: Mapping[str, Any]) -> str:
    gpus = node.get("gpus") or []
    return "[" + "".join(card_mark(g) for g in gpus) + "]" if gpus else NONE


def alloc_pct(node: Mapping[str, Any]) -> str:
    usable = [g for g in node.get("gpus") or [] if g.get("healthy", True)]
    if not usable:
        return NONE
    used = sum(used_milli(g) for g in usable)
    return f"{100 * used / (1000 * len(usable)):.1f}"


def _models(node: Mapping[str, Any]) -> str:
    models = sorted({str(g.get("model")) for g in node.get("gpus") or []})
    return ",".join(models) or NONE


NODE_HEADERS = ("NAME", "STATE", "FLAVOR", "GPUS", "MODEL", "ALLOC%", "CARDS")
NODE_WIDE = ("CPU", "MEMORY", "MIG", "TAINTS")


def node_row(node: Mapping[str, Any], wide: bool = False) -> list[object]:
    row: list[object] = [node.get("name"), node.get("state"), node.get("flavor"),
                         len(node.get("gpus") or []), _models(node), alloc_pct(node),
                         cards(node)]
    if wide:
        cpu, mem = node.get("cpuMilli", {}), node.get("memoryMib", {})
        profiles = sorted({m["profile"] for g in node.get("gpus") or []
                           for m in g.get("mig") or []})
        taints = [f"{t['key']}={t.get('value', '')}:{t.get('effect', '')}"
                  for t in node.get("taints") or []]
        row += [f"{milli(cpu.get('used'))}/{milli(cpu.get('total'))}",
                f"{mib(mem.get('used'))}/{mib(mem.get('total'))}",
                ",".join(profiles), ",".join(taints)]
    return row


def nodes_table(nodes: Iterable[Mapping[str, Any]], wide: bool = False) -> str:
    return table((*NODE_HEADERS, *(NODE_WIDE if wide else ())),
                 (node_row(n, wide) for n in nodes))


def _measured_row(card: Mapping[str, Any]) -> list[object]:
    m = card["measured"]

    def opt(value: Any, show: Any) -> object:
        return None if value is None else show(value)

    return [card.get("index"), milli(used_milli(card)),
            milli(m.get("loadMilli")) if m.get("fresh") else "by requests",
            opt(m.get("utilPct"), lambda v: f"{v:g}%"), opt(m.get("usedMib"), mib),
            opt(m.get("freeMib"), mib), opt(m.get("ageSeconds"), lambda v: f"{v:g}s")]


def describe_node(node: Mapping[str, Any]) -> str:
    labels = node.get("labels") or {}
    taints = node.get("taints") or []
    cpu, mem = node.get("cpuMilli", {}), node.get("memoryMib", {})
    out = [
        _field("Name", node.get("name")),
        _field("State", node.get("state")),
        _field("Flavor", node.get("flavor") or NONE),
        "Labels:       " + ("\n              ".join(
            f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"),
        "Taints:       " + ("\n              ".join(
            f"{t['key']}={t.get('value', '')}:{t.get('effect', '')}" for t in taints)
            or "<none>"),
        _field("CPU", f"{milli(cpu.get('used'))} of {milli(cpu.get('total'))} used"),
        _field("Memory", f"{mib(mem.get('used'))} of {mib(mem.get('total'))} used"),
    ]
    gpus = node.get("gpus") or []
    if not gpus:
        out.append("Cards:        <none>")
        return "\n".join(out)
    out.append(_field("GPUs", f"{len(gpus)} x {_models(node)}, {alloc_pct(node)}% "
                              f"allocated {cards(node)}"))
    out.append("Cards:")
    rows = []
    for g in gpus:
        mig = ", ".join(f"{m['profile']} {m.get('free', 0)}/{m.get('count', 0)} free"
                        for m in g.get("mig") or [])
        rows.append([g.get("index"), g.get("model"), mib(g.get("memoryMib")),
                     "ok" if g.get("healthy", True) else "unhealthy",
                     milli(used_milli(g)), mib(used_mib(g)),
                     len(g.get("holders") or []), mig])
    out.append(_indent(table(("CARD", "MODEL", "MEMORY", "HEALTH", "GPU-USED",
                              "MEMORY-USED", "HOLDERS", "MIG"), rows)))
    measured = [g for g in gpus if g.get("measured")]
    if measured:  # placement by measured use: what the cards do beside what is requested
        reason = node.get("measuredReason")
        out.append("Measured:" + (f"     {reason}" if reason else ""))
        out.append(_indent(table(
            ("CARD", "REQUESTED", "LOAD", "UTIL-P90", "FB-USED", "FB-FREE", "AGE"),
            [_measured_row(g) for g in measured])))
    holders = [(g.get("index"), h) for g in gpus for h in g.get("holders") or []]
    if holders:
        out.append("Holders:")
        out.append(_indent(table(("CARD", "JOB", "TASK", "GPU", "GPU-MEMORY", "MIG"), (
            [i, h.get("job"), _task(h.get("task") or ""),
             None if h.get("migProfile") else milli(h.get("gpuMilli")),
             None if h.get("migProfile") else mib(h.get("memoryMib")), h.get("migProfile")]
            for i, h in holders))))
    else:
        out.append("Holders:      <none>")
    return "\n".join(out)


# -- queue objects ---------------------------------------------------------------------------


def _gpu_total(vec: Mapping[str, Mapping[str, int]] | None) -> float:
    return sum(int(r.get("gpuMilli", 0)) for r in (vec or {}).values()) / 1000


def cluster_queue_row(cq: Mapping[str, Any], wide: bool = False) -> list[object]:
    spec, st = cq.get("spec", {}), cq.get("status", {})
    used, nominal = _gpu_total(st.get("usage")), _gpu_total(st.get("nominal"))
    row: list[object] = [
        cq.get("metadata", {}).get("name"), spec.get("cohort") or spec.get("cohortName"),
        st.get("pendingJobs", 0), st.get("runningJobs", 0), f"{used:g}/{nominal:g}",
        f"{_gpu_total(st.get('borrowed')):g}", f"{float(st.get('share', 0.0)):.2f}",
        "-" if st.get("entitledGpus") is None else f"{float(st['entitledGpus']):g}"]
    if wide:
        usage, nom = st.get("usage") or {}, st.get("nominal") or {}
        per = []
        for f in sorted(set(usage) | set(nom)):
            u = int(usage.get(f, {}).get("gpuMilli", 0)) / 1000
            n = int(nom.get(f, {}).get("gpuMilli", 0)) / 1000
            if u or n:
                per.append(f"{f}:{u:g}/{n:g}")
        row.append(" ".join(per))
    return row


def cluster_queues_table(items: Iterable[Mapping[str, Any]], wide: bool = False) -> str:
    """SHARE is usage over the entitlement the scheduler acts on; ENTITLED is that
    entitlement in GPUs (nominal quota first, then a cohort's own quota by weight)."""
    headers = ("NAME", "COHORT", "PENDING", "RUNNING", "GPUS(USED/NOMINAL)", "BORROWED",
               "SHARE", "ENTITLED", *(("FLAVORS",) if wide else ()))
    return table(headers, (cluster_queue_row(q, wide) for q in items))


def local_queues_table(items: Iterable[Mapping[str, Any]]) -> str:
    return table(("NAMESPACE", "NAME", "CLUSTERQUEUE", "PENDING", "RUNNING"), (
        [q.get("metadata", {}).get("namespace"), q.get("metadata", {}).get("name"),
         q.get("spec", {}).get("clusterQueue"), q.get("status", {}).get("pendingJobs", 0),
         q.get("status", {}).get("runningJobs", 0)] for q in items))


def flavors_table(items: Iterable[Mapping[str, Any]]) -> str:
    return table(("NAME", "NODES", "GPUS", "NODE-LABELS"), (
        [f.get("metadata", {}).get("name"), f.get("status", {}).get("nodes", 0),
         f.get("status", {}).get("gpus", 0),
         ",".join(f"{k}={v}" for k, v in sorted(
             (f.get("spec", {}).get("nodeLabels") or {}).items()))] for f in items))


def cohorts_table(items: Iterable[Mapping[str, Any]]) -> str:
    return table(("NAME", "PARENT", "CLUSTERQUEUES", "COHORTS"), (
        [c.get("metadata", {}).get("name"),
         c.get("spec", {}).get("parent") or c.get("spec", {}).get("parentName"),
         ",".join(c.get("status", {}).get("clusterQueues") or []),
         ",".join(c.get("status", {}).get("cohorts") or [])] for c in items))
