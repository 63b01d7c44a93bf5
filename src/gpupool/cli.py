"""Entry points: ``gpupool serve``, the client commands (``submit``, ``get``, ``describe``,
``cancel``, ``delete``, ...), ``gpupool sim ...``, ``gpupool bench ...``, ``gpupool k8s ...``,
``gpupool demo``.

Each command group lives with its adapter (``gpupool.sim.cli``, ``gpupool.bench.cli``, ...)
and adds its parsers here. Only the group of the command being run is imported: the client
commands do not load the server, the simulator or numpy, and ``--version`` loads nothing
(``gpupool get jobs`` answers in well under a second). ``gpupool --help`` loads every group.

Errors from the tree in ``gpupool.core.errors`` become one line on stderr and exit code 2
(bad input) or 1 (the outside world failed); ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gpupool import __version__
from gpupool.core.errors import AdapterError, GpupoolError

# command -> (module, function that adds its parsers), in the order --help lists them
GROUPS: dict[str, tuple[str, str]] = {
    "sim": ("gpupool.sim.cli", "add_parsers"),
    "bench": ("gpupool.bench.cli", "add_parsers"),
    "k8s": ("gpupool.k8s.cli", "add_parsers"),
    "serve": ("gpupool.app", "add_parser"),
    "client": ("gpupool.client.commands", "add_parsers"),
}
COMMANDS: dict[str, str] = {  # each command's group
    "sim": "sim",
    "demo": "sim",
    "bench": "bench",
    "k8s": "k8s",
    "serve": "serve",
    **dict.fromkeys(
        (
            "submit",
            "get",
            "describe",
            "cancel",
            "delete",
            "apply",
            "cordon",
            "uncordon",
            "drain",
            "completion",
            "config",
        ),
        "client",
    ),
}


def _command(argv: Sequence[str]) -> str | None:
    """The command word of ``argv``: its first argument that is not an option."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with the parsers of the group of ``argv``'s command only, or of every
    group when the command is not known (``--help``, a typo) or ``argv`` is None."""
    parser = argparse.ArgumentParser(
        prog="gpupool",
        description="GPU scheduler for shared AI clusters: fair queues, GPU slices, gangs and "
        "fragmentation-aware placement.",
    )
    parser.add_argument("--version", action="version", version=f"gpupool {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    command = _command(argv) if argv is not None else None
    group = COMMANDS.get(command or "")
    for name, (module, function) in GROUPS.items():
        if group is None or name == group:
            add = getattr(importlib.import_module(module), function)
            if name == "client" and group == "client":
                add(sub, only=command)  # that command's parser only
            else:
                added = add(sub)
                if name == "bench":  # a bench whose code is the simulator's
                    from gpupool.sim.heterogeneous_cli import add_bench_parser

                    add_bench_parser(added)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["--version"] or args_in == ["--debug", "--version"]:
        print(f"gpupool {__version__}")  # the one answer that needs no parser
        return 0
    parser = build_parser(args_in)
    args = parser.parse_args(args_in)
    try:
        code: int = args.func(args)
        return code
    except GpupoolError as exc:
        if args.debug:
            raise
        print(f"gpupool: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, AdapterError) else 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
