"""``gpupool submit``, ``get``, ``describe``, ``cancel`` and ``delete``: the client of
``gpupool serve``.

In kubectl's habits::

    gpupool submit -f job.yaml [-f more.json] [-f -]      several documents per file; stdin
    gpupool get jobs|nodes|queues|clusterqueues|localqueues|flavors|cohorts|events [NAME]
    gpupool describe job|node NAME
    gpupool cancel job NAME [NAME ...]                    or job/NAMESPACE/NAME (-o name)
    gpupool delete job NAME [NAME ...]

Every command takes ``--server`` (env ``GPUPOOL_SERVER``, default http://127.0.0.1:8080),
``--token`` (env ``GPUPOOL_TOKEN``), ``-n/--namespace`` and ``-o``. A job NAME may be written
``namespace/name``; without a namespace it is looked up among the jobs the token can see.
Refusals from the server are raised as :mod:`gpupool.client.errors` and printed by
``gpupool.cli`` as one line (exit code 2 for a 4xx, 1 when the server cannot be reached or
fails).

The connection options and the running of a command are in ``session.py``, how jobs are named
in ``naming.py``, the files of ``-f`` in ``files.py``; ``get`` is in ``listing.py``, the
node and queue-object commands in ``admin.py``, ``config`` and ``completion`` in
``config_cli.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from gpupool.client import render
from gpupool.client.errors import RequestError
from gpupool.client.files import read_documents, with_namespace
from gpupool.client.http import Client
from gpupool.client.naming import job_targets, locate_job
from gpupool.client.session import (
    Out,
    cluster_now,
    connection_options,
    dump,
    print_line,
    run_command,
)

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Cancelled")
TERMINAL = ("Succeeded", "Failed", "Cancelled")
ACTIVE = ("Pending", "Running")

# What `get` accepts, kubectl's way: singular, plural and short names.
KINDS: dict[str, str] = {}
for _canonical, _names in {
    "jobs": ("job", "jobs"),
    "nodes": ("node", "nodes", "no"),
    "clusterqueues": ("queue", "queues", "clusterqueue", "clusterqueues", "cq"),
    "localqueues": ("localqueue", "localqueues", "lq"),
    "flavors": ("flavor", "flavors", "resourceflavor", "resourceflavors", "rf"),
    "cohorts": ("cohort", "cohorts"),
    "events": ("event", "events", "ev"),
}.items():
    for _name in _names:
        KINDS[_name] = _canonical


# -- parsers ---------------------------------------------------------------------------------


def _phases(text: str) -> list[str]:
    out = []
    for part in text.split(","):
        match = next((p for p in PHASES if p.lower() == part.strip().lower()), None)
        if match is None:
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r} is not a phase; phases: {', '.join(PHASES)}"
            )
        out.append(match)
    return out


def add_parsers(sub: Any, only: str | None = None) -> None:
    """Add the client commands to the ``gpupool`` parser: ``only`` that one when given (the
    command being run: building the others' parsers would cost more than the call)."""
    from gpupool.client import admin, config_cli  # cordon, drain, apply; config, completion

    def want(*names: str) -> bool:
        return only is None or only in names

    if want(*admin.COMMANDS):
        admin.add_parsers(sub)
    if want(*config_cli.OWN):
        config_cli.add_parsers(sub)
    if want("submit"):
        _submit_parser(sub)
    if want("get"):
        _get_parser(sub)
    if want("describe"):
        _describe_parser(sub)
    if want("cancel", "delete"):
        _cancel_parsers(sub)


def _submit_parser(sub: Any) -> None:
    p = sub.add_parser(
        "submit",
        parents=[connection_options(("json", "yaml", "name"))],
        help="submit jobs to a gpupool server",
        description="Submit Job documents (YAML or JSON; several per file, "
        "separated by ---) to a gpupool server.",
    )
    p.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="a file of Job documents, - for stdin (repeatable)",
    )
    p.set_defaults(func=lambda a: run_command(a, _submit))


def _get_parser(sub: Any) -> None:
    p = sub.add_parser(
        "get",
        parents=[
            connection_options(("json", "yaml", "wide", "name", "jsonpath", "custom-columns"))
        ],
        help="list jobs, nodes, queues, flavors, cohorts or events",
        description="Show objects of a gpupool server as a table.",
    )
    p.add_argument(
        "kind",
        metavar="KIND",
        type=_kind,
        help="jobs, nodes, queues (= clusterqueues), localqueues, flavors, cohorts or events",
    )
    p.add_argument(
        "name",
        nargs="?",
        metavar="NAME",
        help="one object (a job as NAME or NAMESPACE/NAME; for events, the events of that object)",
    )
    p.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="every namespace the token can see (the default without -n)",
    )
    p.add_argument(
        "--phase",
        type=_phases,
        metavar="PHASE[,PHASE]",
        help=f"jobs in these phases ({', '.join(PHASES)}); without it, and "
        "without --show-all, pending and running jobs only",
    )
    p.add_argument(
        "-a",
        "--show-all",
        action="store_true",
        help="jobs: ended ones too (Succeeded, Failed, Cancelled)",
    )
    p.add_argument(
        "-l",
        "--selector",
        metavar="SELECTOR",
        help="only objects whose labels match (a=b,c!=d,e,!f,g in (x,y))",
    )
    p.add_argument(
        "--sort-by",
        metavar="JSONPATH",
        help="order by this field of the objects as -o json prints them "
        "(e.g. .status.submitTime, {.metadata.name})",
    )
    p.add_argument(
        "--no-headers",
        action="store_true",
        help="tables and custom-columns without their header line",
    )
    p.add_argument(
        "--queue",
        metavar="QUEUE",
        help="jobs of this LocalQueue (name or namespace/name) or ClusterQueue",
    )
    p.add_argument(
        "--limit", type=int, default=200, metavar="N", help="events: the last N (default 200)"
    )
    p.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="jobs: keep watching, printing a job again when it changes",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="how often --watch asks (default 2)",
    )
    p.set_defaults(func=lambda a: run_command(a, _get))


def _get(client: Client, args: argparse.Namespace, out: Out) -> int:
    from gpupool.client.listing import get  # the get command's own module

    return get(client, args, out)


def _describe_parser(sub: Any) -> None:
    p = sub.add_parser(
        "describe",
        parents=[connection_options(None)],
        help="show everything about a job or a node",
        description="A job: its spec, status, pending reason, placements card "
        "by card and events. A node: its cards and who holds "
        "them.",
    )
    p.add_argument(
        "kind",
        metavar="KIND",
        choices=(
            "job",
            "jobs",
            "node",
            "nodes",
            "no",
            "queue",
            "queues",
            "clusterqueue",
            "clusterqueues",
            "cq",
        ),
        help="job, node or queue (a ClusterQueue)",
    )
    p.add_argument(
        "name", metavar="NAME", help="a job (NAME or NAMESPACE/NAME), a node or a ClusterQueue"
    )
    p.set_defaults(func=lambda a: run_command(a, _describe))


def _cancel_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "cancel",
        parents=[connection_options(("json", "name"))],
        help="cancel jobs (their records stay; `delete` removes them)",
        description="Cancel pending or running jobs; their cards are free at "
        "once. A job that has ended already is left as it is "
        "(cancelling twice is not an error). Jobs are named as "
        "`job NAME ...` or as `-o name` prints them (job/NS/NAME).",
    )
    p.add_argument(
        "targets",
        nargs="+",
        metavar="job NAME | job/NAME",
        help="job NAME [NAME ...] (NAME or NAMESPACE/NAME), or job/NAMESPACE/NAME",
    )
    p.set_defaults(func=lambda a: run_command(a, _cancel))

    p = sub.add_parser(
        "delete",
        parents=[connection_options(("json", "name"))],
        help="delete jobs (cancelled first if they have not ended)",
        description="Delete jobs: a pending or running job is cancelled "
        "first (its cards are free at once), then its record is "
        "removed and its name may be used again. Jobs are named "
        "as `job NAME ...` or as `-o name` prints them.",
    )
    p.add_argument(
        "targets",
        nargs="+",
        metavar="job NAME | job/NAME",
        help="job NAME [NAME ...] (NAME or NAMESPACE/NAME), or job/NAMESPACE/NAME",
    )
    p.set_defaults(func=lambda a: run_command(a, _delete))


def _kind(text: str) -> str:
    kind = KINDS.get(text.lower())
    if kind is None:
        raise argparse.ArgumentTypeError(
            f"{text!r}: one of jobs, nodes, queues, clusterqueues, localqueues, flavors, "
            "cohorts, events"
        )
    return kind


def _submit(client: Client, args: argparse.Namespace, out: Out) -> int:
    docs = [(w, with_namespace(d, args.namespace, w)) for w, d in read_documents(args.filename)]
    accepted: list[dict[str, Any]] = []
    failed = 0
    for where, doc in docs:
        try:
            job = client.submit(doc)
        except RequestError as exc:
            if len(docs) == 1:
                raise
            failed += 1
            meta = doc.get("metadata")
            what = render.key({"metadata": meta}) if isinstance(meta, Mapping) else "?"
            print(f"gpupool: error: {type(exc).__name__}: {where} ({what}): {exc}", file=sys.stderr)
            continue
        accepted.append(job)
        if args.output in (None, "name"):
            print_line(_submitted(job) if args.output is None else f"job/{render.key(job)}", out)
    if args.output in ("json", "yaml"):
        dump(
            accepted[0] if len(docs) == 1 and accepted else {"kind": "List", "items": accepted},
            args.output,
            out,
        )
    return 2 if failed else 0


def _submitted(job: Mapping[str, Any]) -> str:
    status = job.get("status", {})
    return (
        f"job {render.key(job)} submitted ({status.get('phase')}, queue {render.local_queue(job)})"
    )


# -- describe --------------------------------------------------------------------------------


def _describe(client: Client, args: argparse.Namespace, out: Out) -> int:
    if args.kind in ("node", "nodes", "no"):
        print_line(render.describe_node(client.node(args.name)), out)
        return 0
    if KINDS.get(args.kind) == "clusterqueues":
        queue = client.queue_object("clusterqueues", args.name)
        locals_ = [
            q
            for q in client.queue_objects("localqueues")
            if q.get("spec", {}).get("clusterQueue") == args.name
        ]
        waiting = client.jobs(queue=args.name, phases=["Pending"])
        from gpupool.client.describe import describe_queue

        print_line(describe_queue(queue, locals_, waiting), out)
        return 0
    ns, short = locate_job(client, args.name, args.namespace)
    job = client.job(ns, short)
    key = f"{ns}/{short}"
    events = [e for e in client.events(namespace=ns, limit=5000) if e.get("object") == key]
    print_line(render.describe_job(job, events, cluster_now(client)), out)
    return 0


# -- cancel ----------------------------------------------------------------------------------


def _cancel(client: Client, args: argparse.Namespace, out: Out) -> int:
    done: list[dict[str, Any]] = []
    for name in job_targets(args.targets):
        ns, short = locate_job(client, name, args.namespace)
        before = client.job(ns, short).get("status", {}).get("phase")
        job = client.cancel(ns, short)
        done.append(job)
        if args.output == "name":
            print_line(f"job/{ns}/{short}", out)
        elif args.output is None:
            if before in TERMINAL:
                print_line(f"job {ns}/{short} had ended already ({before}): left as it is", out)
            else:
                print_line(f"job {ns}/{short} cancelled (was {before})", out)
    if args.output == "json":
        dump(done[0] if len(done) == 1 else {"kind": "List", "items": done}, "json", out)
    return 0


def _delete(client: Client, args: argparse.Namespace, out: Out) -> int:
    done: list[dict[str, Any]] = []
    for name in job_targets(args.targets):
        ns, short = locate_job(client, name, args.namespace)
        job = client.delete(ns, short)
        done.append(job)
        if args.output == "name":
            print_line(f"job/{ns}/{short}", out)
        elif args.output is None:
            print_line(f"job {ns}/{short} deleted (was {job.get('status', {}).get('phase')})", out)
    if args.output == "json":
        dump(done[0] if len(done) == 1 else {"kind": "List", "items": done}, "json", out)
    return 0
