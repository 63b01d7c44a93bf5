"""``gpupool get``: objects of a gpupool server as tables, or as the API's objects, chosen and
shaped in kubectl's ways (``gpupool.client.output``); ``get jobs -w`` watches them."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

from gpupool.client import output, render
from gpupool.client.commands import ACTIVE
from gpupool.client.http import Client
from gpupool.client.naming import locate_job, split_key
from gpupool.client.session import Out, cluster_now, dump, print_line
from gpupool.core.errors import ConfigError


def get(client: Client, args: argparse.Namespace, out: Out) -> int:
    kind, name, fmt = args.kind, args.name, args.output
    if args.watch:
        if kind != "jobs":
            raise ConfigError(f"--watch is for jobs, not {kind}")
        return _watch_jobs(client, args, out)
    if kind == "jobs":
        return _get_jobs(client, args, out)
    if kind == "events":
        return _get_events(client, args, out)
    items: list[dict[str, Any]]
    if kind == "nodes":
        items = [client.node(name)] if name else client.nodes()
    else:
        if name and kind == "localqueues":
            ns, short = split_key(name, args.namespace)
            if ns is None:
                raise ConfigError(f"LocalQueue {name}: give NAMESPACE/NAME or -n NAMESPACE")
            name = f"{ns}/{short}"
        items = [client.queue_object(kind, name)] if name else client.queue_objects(kind)
        if kind == "localqueues" and args.namespace and not name:
            items = [q for q in items if q.get("metadata", {}).get("namespace") == args.namespace]
    items = _shape(items, args)
    if _templated(items, bool(name), args, out):
        return 0
    if fmt in ("json", "yaml"):
        dump(items[0] if name else {"items": items}, fmt, out)
        return 0
    if fmt == "name":
        singular = {
            "nodes": "node",
            "clusterqueues": "clusterqueue",
            "localqueues": "localqueue",
            "flavors": "flavor",
            "cohorts": "cohort",
        }
        for item in items:
            key = str(item.get("name")) if kind == "nodes" else render.key(item)
            print_line(f"{singular[kind]}/{key}", out)
        return 0
    wide = fmt == "wide"
    if not items:
        print(f"No {kind} found.", file=sys.stderr)
        return 0
    text = {
        "nodes": lambda: render.nodes_table(items, wide),
        "clusterqueues": lambda: render.cluster_queues_table(items, wide),
        "localqueues": lambda: render.local_queues_table(items),
        "flavors": lambda: render.flavors_table(items),
        "cohorts": lambda: render.cohorts_table(items),
    }[kind]()
    print_line(_headless(text, args), out)
    return 0


def _shape(items: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """``items`` filtered by ``-l`` and ordered by ``--sort-by``."""
    if getattr(args, "selector", None):
        match = output.selector(args.selector)
        items = [i for i in items if match(output.labels_of(i))]
    if getattr(args, "sort_by", None):
        items = output.sort_by(items, args.sort_by)
    return items


def _templated(
    items: list[dict[str, Any]], single: bool, args: argparse.Namespace, out: Out
) -> bool:
    """Prints ``-o jsonpath=`` or ``-o custom-columns=``; False for the other formats."""
    fmt = args.output or ""
    if fmt.startswith("jsonpath="):
        obj = items[0] if single and items else {"kind": "List", "items": items}
        text = output.template(obj, fmt.split("=", 1)[1])
        out.write(text if text.endswith("\n") or not text else text + "\n")
        return True
    if fmt.startswith("custom-columns="):
        columns = output.custom_columns(fmt.split("=", 1)[1])
        rows = output.column_rows(items, columns)
        headers = [h for h, _ in columns]
        print_line(_headless(render.table(headers, rows), args), out)
        return True
    return False


def _headless(text: str, args: argparse.Namespace) -> str:
    """A table without its header line under ``--no-headers``."""
    if getattr(args, "no_headers", False):
        return "\n".join(text.splitlines()[1:])
    return text


def _fetch_jobs(client: Client, args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.all_namespaces and not args.name:
        args.namespace = None
    if args.name:
        ns, short = locate_job(client, args.name, args.namespace)
        return [client.job(ns, short)]
    phases = args.phase or (None if args.show_all else list(ACTIVE))
    return client.jobs(namespace=args.namespace, queue=args.queue, phases=phases)


def _get_jobs(client: Client, args: argparse.Namespace, out: Out) -> int:
    jobs = _shape(_fetch_jobs(client, args), args)
    if _templated(jobs, bool(args.name), args, out):
        return 0
    if args.output in ("json", "yaml"):
        dump(jobs[0] if args.name else {"items": jobs}, args.output, out)
        return 0
    if args.output == "name":
        for j in jobs:
            print_line(f"job/{render.key(j)}", out)
        return 0
    if not jobs:
        where = f" in namespace {args.namespace}" if args.namespace else ""
        hint = (
            ""
            if args.phase or args.show_all
            else " (pending or running; --show-all for ended ones too)"
        )
        print(f"No jobs found{where}{hint}.", file=sys.stderr)
        return 0
    now = client.time_s if client.time_s is not None and not args.name else cluster_now(client)
    print_line(_headless(render.jobs_table(jobs, now, args.output == "wide"), args), out)
    return 0


def _watch_jobs(client: Client, args: argparse.Namespace, out: Out) -> int:
    """Print the table, then every job again whenever its phase, position, estimate or
    reason changes, until interrupted."""
    wide = args.output == "wide"
    seen: dict[str, tuple[object, ...]] = {}
    widths: list[int] | None = None
    every = argparse.Namespace(**{**vars(args), "show_all": True})
    for jobs in _polls(client, every):
        now = cluster_now(client)
        changed = []
        for j in jobs:
            st = j.get("status", {})
            if not (
                args.show_all or args.phase or st.get("phase") in ACTIVE or render.key(j) in seen
            ):
                continue  # an ended job is shown only when it ends while watched
            sig = (
                st.get("phase"),
                st.get("queuePosition"),
                st.get("pendingReason"),
                st.get("estimatedStartTimeSeconds"),
                st.get("message"),
            )
            k = render.key(j)
            if seen.get(k) != sig:
                seen[k] = sig
                changed.append(j)
        if args.output in ("json", "yaml", "name"):
            for j in changed:
                line = f"job/{render.key(j)}" if args.output == "name" else json.dumps(j)
                print_line(line, out)
            continue
        headers = (*render.JOB_HEADERS, *(render.JOB_WIDE if wide else ()), "REASON")
        rows = [[render.cell(c) for c in render.job_row(j, now, wide)] for j in changed]
        if widths is None:
            widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
            rows.insert(0, list(headers))
        for r in rows:
            print_line(
                "   ".join([c.ljust(widths[i]) for i, c in enumerate(r[:-1])] + [r[-1]]).rstrip(),
                out,
            )
    return 0


def _polls(client: Client, args: argparse.Namespace) -> Iterator[list[dict[str, Any]]]:
    while True:
        yield _fetch_jobs(client, args)
        time.sleep(max(0.1, args.interval))


def _get_events(client: Client, args: argparse.Namespace, out: Out) -> int:
    limit = max(1, min(5000, args.limit))
    events = client.events(namespace=args.namespace, limit=5000 if args.name else limit)
    if args.name:
        name = args.name
        events = [
            e
            for e in events
            if e.get("object") == name or str(e.get("object", "")).rsplit("/", 1)[-1] == name
        ][-limit:]
    if args.output in ("json", "yaml"):
        dump({"items": events}, args.output, out)
        return 0
    if args.output == "name":
        for e in events:
            print_line(f"event/{e.get('seq')}", out)
        return 0
    if not events:
        print("No events found.", file=sys.stderr)
        return 0
    print_line(render.events_table(events, cluster_now(client)), out)
    return 0
