"""Entry points: ``gpupool serve``, the client commands (``submit``, ``get``, ``describe``,
``cancel``), ``gpupool sim ...``, ``gpupool bench ...``, ``gpupool demo``.

Each command group lives with its adapter (``gpupool.sim.cli``, ``gpupool.bench.cli``) and
adds its parsers here. Errors from the tree in ``gpupool.core.errors`` become one line on
stderr and exit code 2 (bad input) or 1 (the outside world failed); ``--debug`` shows the
traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gpupool import __version__, app
from gpupool.bench import cli as bench_cli
from gpupool.client import commands as client_cli
from gpupool.core.errors import AdapterError, GpupoolError
from gpupool.k8s import cli as k8s_cli
from gpupool.sim import cli as sim_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpupool",
        description="GPU scheduler for shared AI clusters: fair queues, GPU slices, gangs and "
                    "fragmentation-aware placement.",
    )
    parser.add_argument("--version", action="version", version=f"gpupool {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sim_cli.add_parsers(sub)
    bench_cli.add_parsers(sub)
    k8s_cli.add_parsers(sub)
    app.add_parser(sub)
    client_cli.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
