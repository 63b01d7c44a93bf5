"""Nodes and their cards: ``get nodes`` and ``describe node``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpupool.client.render.text import NONE, field, indent, mib, milli, table, task_name


def used_milli(card: Mapping[str, Any]) -> int:
    """Thousandths of a card in use, as the server values it (on a MIG card, the instances
    held, each by the share its card declares: ``core.mig``)."""
    return min(1000, int(card.get("usedMilli") or 0))


def used_mib(card: Mapping[str, Any]) -> int:
    """MiB of a card's memory in use, as the server values it (on a MIG card, the memory of
    the instances held)."""
    return int(card.get("usedMib") or 0)


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
    row: list[object] = [
        node.get("name"),
        node.get("state"),
        node.get("flavor"),
        len(node.get("gpus") or []),
        _models(node),
        alloc_pct(node),
        cards(node),
    ]
    if wide:
        cpu, mem = node.get("cpuMilli", {}), node.get("memoryMib", {})
        profiles = sorted(
            {m["profile"] for g in node.get("gpus") or [] for m in g.get("mig") or []}
        )
        taints = [
            f"{t['key']}={t.get('value', '')}:{t.get('effect', '')}"
            for t in node.get("taints") or []
        ]
        row += [
            f"{milli(cpu.get('used'))}/{milli(cpu.get('total'))}",
            f"{mib(mem.get('used'))}/{mib(mem.get('total'))}",
            ",".join(profiles),
            ",".join(taints),
        ]
    return row


def nodes_table(nodes: Iterable[Mapping[str, Any]], wide: bool = False) -> str:
    return table((*NODE_HEADERS, *(NODE_WIDE if wide else ())), (node_row(n, wide) for n in nodes))


def _measured_row(card: Mapping[str, Any]) -> list[object]:
    m = card["measured"]

    def opt(value: Any, show: Any) -> object:
        return None if value is None else show(value)

    return [
        card.get("index"),
        milli(used_milli(card)),
        milli(m.get("loadMilli")) if m.get("fresh") else "by requests",
        opt(m.get("utilPct"), lambda v: f"{v:g}%"),
        opt(m.get("usedMib"), mib),
        opt(m.get("freeMib"), mib),
        opt(m.get("ageSeconds"), lambda v: f"{v:g}s"),
    ]


def describe_node(node: Mapping[str, Any]) -> str:
    labels = node.get("labels") or {}
    taints = node.get("taints") or []
    cpu, mem = node.get("cpuMilli", {}), node.get("memoryMib", {})
    out = [
        field("Name", node.get("name")),
        field("State", node.get("state")),
        field("Flavor", node.get("flavor") or NONE),
        "Labels:       "
        + ("\n              ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"),
        "Taints:       "
        + (
            "\n              ".join(
                f"{t['key']}={t.get('value', '')}:{t.get('effect', '')}" for t in taints
            )
            or "<none>"
        ),
        field("CPU", f"{milli(cpu.get('used'))} of {milli(cpu.get('total'))} used"),
        field("Memory", f"{mib(mem.get('used'))} of {mib(mem.get('total'))} used"),
    ]
    gpus = node.get("gpus") or []
    if not gpus:
        out.append("Cards:        <none>")
        return "\n".join(out)
    out.append(
        field("GPUs", f"{len(gpus)} x {_models(node)}, {alloc_pct(node)}% allocated {cards(node)}")
    )
    out.append("Cards:")
    rows = []
    for g in gpus:
        mig = ", ".join(
            f"{m['profile']} {m.get('free', 0)}/{m.get('count', 0)} free"
            for m in g.get("mig") or []
        )
        rows.append(
            [
                g.get("index"),
                g.get("model"),
                mib(g.get("memoryMib")),
                "ok" if g.get("healthy", True) else "unhealthy",
                milli(used_milli(g)),
                mib(used_mib(g)),
                len(g.get("holders") or []),
                mig,
            ]
        )
    out.append(
        indent(
            table(
                ("CARD", "MODEL", "MEMORY", "HEALTH", "GPU-USED", "MEMORY-USED", "HOLDERS", "MIG"),
                rows,
            )
        )
    )
    measured = [g for g in gpus if g.get("measured")]
    if measured:  # placement by measured use: what the cards do beside what is requested
        reason = node.get("measuredReason")
        out.append("Measured:" + (f"     {reason}" if reason else ""))
        out.append(
            indent(
                table(
                    ("CARD", "REQUESTED", "LOAD", "UTIL-P90", "FB-USED", "FB-FREE", "AGE"),
                    [_measured_row(g) for g in measured],
                )
            )
        )
    holders = [(g.get("index"), h) for g in gpus for h in g.get("holders") or []]
    if holders:
        out.append("Holders:")
        out.append(
            indent(
                table(
                    ("CARD", "JOB", "TASK", "GPU", "GPU-MEMORY", "MIG"),
                    (
                        [
                            i,
                            h.get("job"),
                            task_name(h.get("task") or ""),
                            None if h.get("migProfile") else milli(h.get("gpuMilli")),
                            None if h.get("migProfile") else mib(h.get("memoryMib")),
                            h.get("migProfile"),
                        ]
                        for i, h in holders
                    ),
                )
            )
        )
    else:
        out.append("Holders:      <none>")
    return "\n".join(out)
