"""``gpupool cordon``, ``uncordon``, ``drain`` and ``apply``: what a platform engineer does to
nodes and queue objects, in kubectl's words (admin token).

::

    gpupool cordon NODE [NODE ...]        no new job lands there; its jobs run on
    gpupool uncordon NODE [NODE ...]
    gpupool drain NODE [NODE ...]         cordon, and its jobs go back to their queues, whole
    gpupool apply -f queues.yaml          create or replace ResourceFlavors, Cohorts,
                                          ClusterQueues and LocalQueues (Kueue YAML)
"""

from __future__ import annotations

import argparse
from typing import Any

from gpupool.client import files, session
from gpupool.client.http import Client
from gpupool.core.errors import ConfigError

COMMANDS = ("cordon", "uncordon", "drain", "apply")
APPLY_KINDS = {
    "ResourceFlavor": "flavors",
    "ClusterQueue": "clusterqueues",
    "Cohort": "cohorts",
    "LocalQueue": "localqueues",
}


def add_parsers(sub: Any) -> None:
    for name, verb, text in (
        ("cordon", "cordon", "mark nodes unschedulable: no new job lands there"),
        ("uncordon", "uncordon", "mark nodes schedulable again"),
        (
            "drain",
            "drain",
            "cordon nodes and send their jobs back to their queues, "
            "whole (ElasticGPUs bound there stay)",
        ),
    ):
        p = sub.add_parser(
            name,
            parents=[session.connection_options(("name",))],
            help=text,
            description=text[0].upper() + text[1:] + ".",
        )
        p.add_argument("nodes", nargs="+", metavar="NODE", help="node name (or node/NAME)")
        p.set_defaults(
            func=lambda a, v=verb: session.run_command(a, lambda c, x, o: _node(c, x, o, v))
        )
    p = sub.add_parser(
        "apply",
        parents=[session.connection_options(("name",))],
        help="create or replace queue objects from files",
        description="Create or replace ResourceFlavors, Cohorts, "
        "ClusterQueues and LocalQueues (Kueue YAML or JSON; "
        "several documents per file). Each is checked with the "
        "whole configuration; the first refused stops the run.",
    )
    p.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="a file of queue documents, - for stdin (repeatable)",
    )
    p.set_defaults(func=lambda a: session.run_command(a, _apply))


def _node(client: Client, args: argparse.Namespace, out: Any, verb: str) -> int:
    for word in args.nodes:
        kind, slash, rest = word.partition("/")
        name = rest if slash and kind in ("node", "nodes", "no") else word
        if verb == "drain":
            requeued = client.drain_node(name).get("requeued", [])
            text = f"node/{name} drained ({len(requeued)} job(s) back in their queues)"
        else:
            client.patch_node(name, unschedulable=verb == "cordon")
            text = f"node/{name} {verb}ed"
        session.print_line(f"node/{name}" if args.output == "name" else text, out)
    return 0


def _apply(client: Client, args: argparse.Namespace, out: Any) -> int:
    docs = files.read_documents(args.filename)
    for where, doc in docs:  # all checked before any is sent
        if doc.get("kind") not in APPLY_KINDS:
            raise ConfigError(
                f"{where}: kind={doc.get('kind')!r}: apply takes "
                f"{', '.join(APPLY_KINDS)} (submit jobs with `gpupool submit`)"
            )
    for _, doc in docs:
        kind = str(doc["kind"])
        what, obj = client.apply_queue_object(APPLY_KINDS[kind], doc)
        meta = obj.get("metadata", {}) if isinstance(obj, dict) else {}
        name = (
            f"{meta['namespace']}/{meta.get('name')}"
            if meta.get("namespace")
            else str(meta.get("name"))
        )
        singular = kind.lower()
        session.print_line(
            f"{singular}/{name}" if args.output == "name" else f"{singular}/{name} {what}", out
        )
    return 0
