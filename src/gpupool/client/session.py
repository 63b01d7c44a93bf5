"""Running a client command against a server: the connection options every command takes
(``--server``, ``--token``, ``--context``, ``--timeout``, ``-n``, ``-o``), the server, token
and namespace chosen from flag, environment and the config file's context, the hints added to
a refusal, and writing the answer out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from gpupool.client import config, output
from gpupool.client.errors import Unauthorized, Unreachable
from gpupool.client.http import DEFAULT_SERVER, Client

SERVER_ENV = "GPUPOOL_SERVER"
TOKEN_ENV = "GPUPOOL_TOKEN"

Out = TextIO


def connection_options(outputs: Sequence[str] | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("connection")
    g.add_argument(
        "--server",
        default=None,
        metavar="URL",
        help=f"the gpupool server (env {SERVER_ENV}; default {DEFAULT_SERVER})",
    )
    g.add_argument("--token", default=None, help=f"bearer token (env {TOKEN_ENV})")
    g.add_argument(
        "--context",
        default=None,
        metavar="NAME",
        help="server, token and namespace from this context of the config file "
        "(gpupool config; default: its current context)",
    )
    g.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for an answer (default 30)",
    )
    p.add_argument(
        "-n",
        "--namespace",
        default=None,
        help="namespace of the jobs (default: every one the token can see)",
    )
    if outputs:
        shown = ", ".join(f"{o}=..." if o in output.TEMPLATES else o for o in outputs)
        p.add_argument(
            "-o",
            "--output",
            type=output.output_format(outputs),
            default=None,
            metavar="FORMAT",
            help=f"{shown}: json and yaml print the API's objects, for scripts; "
            "wide adds columns; name prints kind/name; jsonpath=TEMPLATE "
            "and custom-columns=HEADER:JSONPATH,... as kubectl's",
        )
    return p


def run_command(
    args: argparse.Namespace,
    command: Callable[[Client, argparse.Namespace, Out], int],
    out: Out | None = None,
) -> int:
    ctx: dict[str, Any] = {}
    if getattr(args, "context", None) or config.path().exists():
        ctx = config.context(getattr(args, "context", None))
    server = args.server or os.environ.get(SERVER_ENV) or ctx.get("server") or DEFAULT_SERVER
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or ctx.get("token")
    if getattr(args, "namespace", None) is None and not getattr(args, "all_namespaces", False):
        args.namespace = ctx.get("namespace")
    client = Client(server, token, timeout_s=args.timeout)
    try:
        return command(client, args, out or sys.stdout)
    except Unauthorized as exc:
        how = (
            "give a token with --token or GPUPOOL_TOKEN"
            if not token
            else "check --token or GPUPOOL_TOKEN"
        )
        exc.args = (f"{exc.message} (server {client.server}; {how})",)
        raise
    except Unreachable as exc:
        exc.args = (f"{exc} (is `gpupool serve` running there? set --server or {SERVER_ENV})",)
        raise
    except BrokenPipeError:  # the reader went away (`gpupool get jobs | head`)
        if out is None:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        client.close()


def cluster_now(client: Client) -> float:
    """The cluster's clock (the times in job status are cluster seconds)."""
    return float(client.cluster().get("timeSeconds", 0.0))


def dump(obj: object, fmt: str, out: Out) -> None:
    if fmt == "yaml":
        import yaml  # only here: the other commands start without it

        out.write(yaml.safe_dump(obj, sort_keys=False, default_flow_style=False))
    else:
        out.write(json.dumps(obj, indent=2) + "\n")


def print_line(text: str, out: Out) -> None:
    out.write(text + "\n")
    out.flush()
