"""``gpupool describe queue NAME``: a ClusterQueue as its owner reads it: where it sits (cohort,
weight, preemption), per flavor and resource what it uses of its nominal quota and what it
borrows, its LocalQueues, and its pending jobs with their reasons, first in line first.
Quantities in the units a user writes: GPUs, CPUs, GiB."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpupool.client.render import table

# resource -> (how a user names it, divisor, unit)
UNITS = {
    "gpuMilli": ("GPUs", 1000, ""),
    "gpu": ("GPUs", 1, ""),
    "cpuMilli": ("CPU", 1000, ""),
    "memoryMib": ("memory", 1024, "Gi"),
    "gpuMemoryMib": ("GPU memory", 1024, "Gi"),
}


def _amount(resource: str, value: int) -> str:
    _, div, unit = UNITS.get(resource, (resource, 1, ""))
    return f"{value / div:g}{unit}"


def describe_queue(
    queue: Mapping[str, Any],
    local_queues: Sequence[Mapping[str, Any]],
    pending: Sequence[Mapping[str, Any]],
) -> str:
    meta, spec, st = queue.get("metadata", {}), queue.get("spec", {}), queue.get("status", {})
    lines = [
        f"Name:             {meta.get('name')}",
        f"Cohort:           {spec.get('cohort') or spec.get('cohortName') or '<none>'}",
        f"Fair share:       weight {(spec.get('fairSharing') or {}).get('weight', 1)}, "
        f"share now {float(st.get('share', 0.0)):.2f}",
        f"Entitlement:      {float(st.get('entitledGpus', 0.0)):g} GPUs"
        + (f" ({st['shareBasis']})" if st.get("shareBasis") else ""),
        f"Preemption:       {spec.get('preemption') or '<default>'}",
        f"Jobs:             {st.get('pendingJobs', 0)} pending, {st.get('runningJobs', 0)} running",
        "Quota:",
    ]
    usage, nominal, borrowed = (st.get(k) or {} for k in ("usage", "nominal", "borrowed"))
    rows = []
    for flavor in sorted(set(usage) | set(nominal)):
        for res in sorted(set(usage.get(flavor, {})) | set(nominal.get(flavor, {}))):
            if res == "gpu" and "gpuMilli" in nominal.get(flavor, {}):
                continue  # the same GPUs, counted once
            name = UNITS.get(res, (res, 1, ""))[0]
            rows.append(
                [
                    flavor,
                    name,
                    _amount(res, int(usage.get(flavor, {}).get(res, 0))),
                    _amount(res, int(nominal.get(flavor, {}).get(res, 0))),
                    _amount(res, int(borrowed.get(flavor, {}).get(res, 0))),
                ]
            )
    lines += (
        [
            "  " + ln
            for ln in table(
                ("FLAVOR", "RESOURCE", "USED", "NOMINAL", "BORROWED"), rows
            ).splitlines()
        ]
        if rows
        else ["  <none>"]
    )
    lines.append("LocalQueues:")
    lines += [
        f"  {q.get('metadata', {}).get('namespace')}/{q.get('metadata', {}).get('name')}"
        for q in local_queues
    ] or ["  <none>"]
    lines.append("Pending jobs:")
    ordered = sorted(
        pending,
        key=lambda j: (
            j.get("status", {}).get("queuePosition") is None,
            j.get("status", {}).get("queuePosition") or 0,
        ),
    )
    for j in ordered:
        m, s = j.get("metadata", {}), j.get("status", {})
        pos = s.get("queuePosition")
        lines.append(
            f"  {'-' if pos is None else pos + 1:>3}  {m.get('namespace')}/"
            f"{m.get('name')}: {s.get('pendingReason') or s.get('message') or ''}"
        )
    if not ordered:
        lines.append("  <none>")
    return "\n".join(lines)
