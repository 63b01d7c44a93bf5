"""``gpupool sim ...`` and ``gpupool demo``."""

from __future__ import annotations

import argparse
from typing import Any


def add_parsers(sub: Any) -> None:
    sim = sub.add_parser("sim", help="replay traces and scenarios on a simulated cluster")
    sim.add_subparsers(dest="sim_command", required=True, metavar="SIM_COMMAND")


def _unused(args: argparse.Namespace) -> int:
    return 0
