"""The demo drawn in the terminal: the cluster, the workload, the cards at three moments, the
waits and their reasons, allocation over time as a sparkline."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from gpupool.core.model import (
    WHOLE_GPU_MILLI,
    JobId,
)
from gpupool.sim.demo import (
    A100,
    KIND_COLOR,
    KIND_LABEL,
    KINDS,
    MIG_PROFILE,
    T4,
    CardView,
    DemoRun,
    Moment,
    NodeMoment,
    describe_request,
    kind_of,
    summary,
)
from gpupool.sim.replay_report import fmt_duration


def clock(seconds: float) -> str:
    m = round(seconds) // 60
    return f"{m // 60:d}:{m % 60:02d}"


def render(run: DemoRun, console: Any) -> None:
    from rich.panel import Panel
    from rich.rule import Rule
    from rich.table import Table
    from rich.text import Text

    s = summary(run)
    jobs = {j.id: j for j in run.jobs}
    width = max(60, min(int(console.width), 120))

    def table(title: str | None = None) -> Table:
        return Table(
            title=title,
            title_justify="left",
            title_style="bold",
            box=None,
            padding=(0, 2),
            show_edge=False,
            header_style="dim",
        )

    console.print(
        Panel.fit(
            Text.from_markup(
                "[bold]gpupool demo[/]: a small simulated cluster, a seeded stream of jobs, and "
                "the gpupool core placing them\n"
                f"[dim]seed {run.seed} · {len(run.jobs)} jobs · the clock is simulated, so hours "
                "of cluster time take a moment[/]"
            ),
            border_style="dodger_blue1",
        )
    )

    t = table("The cluster")
    for col in ("nodes", "each", "GPUs", "for"):
        t.add_column(col, style="bold" if col == "nodes" else "")
    t.add_row(
        "a100-0..3",
        "128 CPU, 1 TiB",
        f"8 × {A100}",
        "training gangs (NVLink mesh), notebook slices",
    )
    t.add_row("t4-0..3", "48 CPU, 192 GiB", f"4 × {T4}", "inference and notebook slices")
    t.add_row("mig-0", "64 CPU, 512 GiB", f"2 × {A100}", f"MIG, 7 × {MIG_PROFILE} per card")
    t.add_row("cpu-0..1", "64 CPU, 256 GiB", "none", "CPU-only jobs (GPU nodes are tainted)")
    console.print(t)
    console.print()

    w = table("The workload")
    w.add_column("kind")
    w.add_column("jobs", justify="right")
    w.add_column("each asks for, e.g.")
    for kind in KINDS:
        ks = [j for j in run.jobs if kind_of(j.id) == kind]
        if ks:
            examples = list(dict.fromkeys(describe_request(j) for j in ks))[:3]
            w.add_row(
                Text(KIND_LABEL[kind], style=KIND_COLOR[kind]), str(len(ks)), " | ".join(examples)
            )
    console.print(w)
    last = max(j.submit_time_s for j in run.jobs)
    console.print(
        Text(
            f"  Jobs arrive over {fmt_duration(last)}. A gang starts with all its "
            "tasks or waits; jobs that do not fit wait in arrival order.",
            style="dim",
        )
    )

    console.print()
    legend = (
        Text("  cards: ", style="dim")
        + Text("███", style="grey70")
        + Text(" held ", style="dim")
        + Text("░░░", style="grey35")
        + Text(
            " free, one group of three per card (MIG: share of instances in use)\n  colours: ",
            style="dim",
        )
    )
    legend += Text("  ").join(Text(KIND_LABEL[k], style=KIND_COLOR[k]) for k in KINDS)
    legend += Text(
        "\n  holding: #0-3 cards 0 to 3 whole · #6 25% a quarter of card 6's "
        "compute · #0 1g a MIG instance on card 0 · 8c CPUs of a job without "
        "GPUs",
        style="dim",
    )
    console.print(legend)
    console.print()
    for m in run.moments:
        console.print(
            Rule(
                Text.assemble(
                    (f"t = {clock(m.time_s)}", "bold"),
                    (f" · {m.label}" if m.label else "", "bold"),
                    f" · GPU {100 * m.gpu_used_milli / max(1, m.gpu_total_milli):.0f} "
                    "% allocated · "
                    f"{m.running} running · {len(m.pending)} waiting ",
                ),
                align="left",
                style="grey50",
            )
        )
        console.print(_cards_table(m))
        if m.pending:
            p = table()
            p.add_column("waiting", no_wrap=True)
            p.add_column("asks for", no_wrap=True, style="dim")
            p.add_column("why, as the scheduler says it")
            for job_id, why in m.pending[:4]:
                p.add_row(
                    Text(job_id, style=KIND_COLOR[kind_of(job_id)]),
                    describe_request(jobs[JobId(job_id)]),
                    why,
                )
            if len(m.pending) > 4:
                p.add_row(Text(f"+{len(m.pending) - 4} more", style="dim"), "", "")
            console.print(p)
        console.print()

    console.print()
    console.print(Rule(Text("Over the whole run", style="bold"), align="left", style="grey50"))
    series = run.result.series
    gpu = series.gpu_fraction() * 100.0
    tt = np.asarray(series.time_s)
    pend = np.asarray(series.pending, np.float64)
    spark = max(20, width - 46)
    u = s["utilisation_pct"]
    console.print(
        Text.assemble(
            ("  GPU allocated  ", "bold"),
            (_sparkline(tt, gpu, 0, 100, spark), "dodger_blue1"),
            f"  mean {u['mean']:.0f} %, peak {u['peak']:.0f} %",
        )
    )
    console.print(
        Text.assemble(
            ("  jobs waiting   ", "bold"),
            (_sparkline(tt, pend, 0, max(1.0, float(pend.max(initial=0))), spark), "red"),
            f"  peak {int(pend.max(initial=0))}",
        )
    )
    end = clock(run.result.end_s)
    console.print(Text(f"{'':17}0:00{end:>{spark - 4}}", style="dim"))

    console.print()
    r = table("Results")
    for col in ("kind", "jobs", "finished", "waited", "mean wait", "p90 wait", "max wait"):
        r.add_column(col, justify="left" if col == "kind" else "right")
    for kind in KINDS:
        k = s["by_kind"][kind]
        if k["jobs"]:
            r.add_row(
                Text(KIND_LABEL[kind], style=KIND_COLOR[kind]),
                str(k["jobs"]),
                str(k["completed"]),
                str(k["waited"]),
                fmt_duration(k["wait_s"]["mean"]),
                fmt_duration(k["wait_s"]["p90"]),
                fmt_duration(k["wait_s"]["max"]),
            )
    ws = s["wait_s"]
    r.add_row(
        Text("all", style="bold"),
        str(s["jobs"]),
        str(s["completed"]),
        str(s["waited"]),
        fmt_duration(ws["mean"]),
        fmt_duration(ws["p90"]),
        fmt_duration(ws["max"]),
    )
    console.print(r)
    console.print(
        Text(
            f"  {s['completed']} of {s['jobs']} jobs finished in {fmt_duration(s['span_s'])} of "
            f"cluster time · wait p50 {fmt_duration(ws['p50'])}, p90 {fmt_duration(ws['p90'])}, "
            f"p99 {fmt_duration(ws['p99'])} · {s['gpu_hours']:.0f} GPU-hours used · "
            f"{s['cycles']} scheduling cycles"
        )
    )

    reasons = s["wait_reasons"]
    if reasons:
        console.print()
        y = table(f"Why {s['waited']} jobs waited")
        y.add_column("jobs", justify="right")
        y.add_column("each node that had the right GPUs was short of")
        for why, n in reasons.items():
            y.add_row(str(n), why)
        console.print(y)
        console.print()
        longest = sorted(
            (x for x in run.result.records.values() if x.wait_s),
            key=lambda x: (-(x.wait_s or 0), x.id),
        )[:5]
        lw = table("Longest waits")
        lw.add_column("job", no_wrap=True)
        lw.add_column("waited", justify="right", no_wrap=True)
        lw.add_column("asks for", no_wrap=True, style="dim")
        lw.add_column("reason when it was first parked")
        for x in longest:
            lw.add_row(
                Text(x.id, style=KIND_COLOR[kind_of(x.id)]),
                fmt_duration(x.wait_s or 0),
                describe_request(jobs[x.id]),
                x.first_reason,
            )
        console.print(lw)
        note = _observation(s)
        if note:
            console.print(Text("  " + note, style="italic"))
    console.print()
    console.print(
        Text(
            "Next: gpupool demo --seed 3 (another day) · gpupool demo --json · "
            "gpupool sim replay (a real trace; docs/sim-replay.md)",
            style="dim",
        )
    )


def _observation(s: dict[str, Any]) -> str:
    by = s["by_kind"]
    kinds = [k for k in KINDS if by[k]["waited"]]
    if not kinds:
        return ""
    worst = max(kinds, key=lambda k: by[k]["wait_s"]["mean"])
    if worst == "training":
        return (
            "Training gangs wait longest: a gang needs all its cards free at the same "
            "time, while slices and small jobs fit into the gaps as cards free up."
        )
    return f"{KIND_LABEL[worst]} jobs waited longest on average."


def _cards_table(m: Moment) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(
        box=None,
        padding=(0, 1),
        show_header=True,
        header_style="dim",
        show_edge=False,
        pad_edge=True,
    )
    table.add_column("node", style="bold", no_wrap=True)
    table.add_column("CPU", justify="right", no_wrap=True)
    table.add_column("cards", no_wrap=True)
    table.add_column("holding")
    for n in m.nodes:
        cards = Text()
        for c in n.cards:
            cards.append_text(_card_cells(c))
            cards.append(" ")
        if not n.cards:
            cards.append("no GPUs", style="dim")
        holding = Text()
        for job_id, cpu_milli in n.jobs:
            if holding:
                holding.append("  ")
            holding.append(job_id, style=KIND_COLOR[kind_of(job_id)])
            holding.append(_holding_detail(n, job_id) or f" {cpu_milli // 1000}c", style="dim")
        cpu = f"{n.cpu_used_milli // 1000}/{n.cpu_milli // 1000}"
        table.add_row(n.name, cpu, cards, holding)
    return table


def _card_cells(c: CardView) -> Any:
    from rich.text import Text

    width = 3
    if not c.holders:
        return Text("░" * width, style="grey35")
    main = max(c.holders, key=lambda h: h.milli if not c.mig_slots else 1)
    color = KIND_COLOR[kind_of(main.job)]
    full = min(width, max(1, round(width * c.used_milli / WHOLE_GPU_MILLI)))
    return Text("█" * full, style=color) + Text("░" * (width - full), style="grey35")


def _holding_detail(n: NodeMoment, job_id: str) -> str:
    """Which cards a job holds on this node and how much: ``#0-3`` four whole cards,
    ``#6 25%`` a quarter of card 6, ``#0 1g`` a MIG instance on card 0; "" without GPUs."""
    shares = [(c, h) for c in n.cards for h in c.holders if h.job == job_id]
    if not shares:
        return ""
    c, first = shares[0]
    if first.mig_profile:
        return f" #{c.index} {first.mig_profile.split('.')[0]}"
    if all(h.milli == WHOLE_GPU_MILLI for _, h in shares):
        idx = sorted(card.index for card, _ in shares)
        if len(idx) > 1 and idx == list(range(idx[0], idx[-1] + 1)):
            return f" #{idx[0]}-{idx[-1]}"
        return " #" + ",".join(map(str, idx))
    return " " + " ".join(f"#{card.index} {h.milli / 10:.0f}%" for card, h in shares)


_BARS = " ▁▂▃▄▅▆▇█"


def _sparkline(t: np.ndarray, y: np.ndarray, lo: float, hi: float, width: int) -> str:
    """Time-weighted means of a step series over ``width`` equal slices of time."""
    if t.size == 0:
        return " " * width
    edges = np.linspace(float(t[0]), float(t[-1]), width + 1)
    out = []
    for a, b in itertools.pairwise(edges):
        i0 = max(0, int(np.searchsorted(t, a, side="right")) - 1)
        i1 = max(i0 + 1, int(np.searchsorted(t, b, side="left")))
        seg = y[i0:i1]
        v = float(seg.mean()) if seg.size else float(y[i0])
        frac = 0.0 if hi <= lo else (v - lo) / (hi - lo)
        out.append(_BARS[min(8, max(0, round(frac * 8)))] if v > lo else " ")
    return "".join(out)
