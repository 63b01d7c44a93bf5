"""``python -m gpupool.k8s run|bench ...``: the ``gpupool k8s`` commands on their own."""

from __future__ import annotations

import argparse
import sys

from gpupool.core.errors import AdapterError, GpupoolError
from gpupool.k8s.cli import add_parsers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpupool.k8s")
    parser.add_argument("--debug", action="store_true")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["k8s", *(sys.argv[1:] if argv is None else argv)])
    try:
        code: int = args.func(args)
        return code
    except GpupoolError as exc:
        if args.debug:
            raise
        print(f"gpupool: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, AdapterError) else 2


if __name__ == "__main__":
    sys.exit(main())
