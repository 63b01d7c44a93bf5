"""The CLI imports only what the command it runs uses: the client commands load neither the
server (fastapi, uvicorn), nor the scheduler and numpy, nor an HTTP library; ``--version``
loads nothing of gpupool but its version. Checked in a fresh interpreter per command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "numpy",
    "fastapi",
    "starlette",
    "uvicorn",
    "httpx",
    "yaml",
    "prometheus_client",
    "kubernetes_asyncio",
    "gpupool.core.cycle",
    "gpupool.control",
    "gpupool.app",
    "gpupool.sim",
    "gpupool.k8s",
    "gpupool.bench",
    "rich",
    "matplotlib",
)

PROBE = """
import contextlib, io, json, sys
from gpupool import cli
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = cli.main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def loaded(*argv: str) -> tuple[int, set[str]]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60, check=True
    )
    data = json.loads(out.stdout)
    return data["code"], {
        m for m in data["modules"] if any(m == h or m.startswith(h + ".") for h in HEAVY)
    }


@pytest.mark.parametrize(
    "argv",
    [
        ("--version",),
        ("get", "jobs", "--server", "http://127.0.0.1:9"),
        ("describe", "job", "x/y", "--server", "http://127.0.0.1:9"),
        ("cancel", "job", "x/y", "--server", "http://127.0.0.1:9"),
        ("delete", "job/x/y", "--server", "http://127.0.0.1:9"),
    ],
)
def test_a_client_command_loads_no_server_and_no_scheduler(argv: tuple[str, ...]) -> None:
    code, heavy = loaded(*argv)
    assert code in (0, 1), code  # 1: nothing listens on port 9
    assert heavy == set(), sorted(heavy)


def test_serve_help_still_loads_the_server() -> None:
    code, heavy = loaded("serve", "--help")
    assert code == 0 and "gpupool.app" in heavy
