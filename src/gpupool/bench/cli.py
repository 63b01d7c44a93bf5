"""``gpupool bench ...``."""

from __future__ import annotations

from typing import Any


def add_parsers(sub: Any) -> None:
    bench = sub.add_parser("bench", help="measure placement and admission speed")
    bench.add_subparsers(dest="bench_command", required=True, metavar="BENCH_COMMAND")
