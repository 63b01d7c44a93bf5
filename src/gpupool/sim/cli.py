"""``gpupool sim ...`` and ``gpupool demo``."""

from __future__ import annotations

import argparse
from typing import Any

from gpupool.sim import demo, openb_cli, openb_mix_cli, replay_cli, scenario_cli


def add_parsers(sub: Any) -> None:
    sim = sub.add_parser("sim", help="replay traces and scenarios on a simulated cluster")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True, metavar="SIM_COMMAND")
    openb_cli.add_parser(sim_sub)
    openb_mix_cli.add_parser(sim_sub)
    replay_cli.add_parser(sim_sub)
    scenario_cli.add_parser(sim_sub)
    demo.add_parser(sub)


def _unused(args: argparse.Namespace) -> int:
    return 0
