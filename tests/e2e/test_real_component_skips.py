"""A skipped test that needs a real component fails the run under CI (tests/conftest.py), and
only then: the hook is run on a small test module in a child pytest, with and without CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

MODULE = """
import pytest

@pytest.mark.real_component("chromium")
def test_browser():
    pytest.skip("chromium is absent")

@pytest.mark.real_component("chromium")
@pytest.mark.skipif(True, reason="no chromium here")
def test_browser_skipif():
    pass

@pytest.fixture
def control_plane():
    pytest.skip("kube-apiserver is not built")

def test_api_server(control_plane):
    pass

def test_plain_skip():
    pytest.skip("nothing real needed")

def test_passes():
    pass
"""


def run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_mod.py").write_text(MODULE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rA",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("ci", ["1", "true"])
def test_a_skipped_real_component_fails_under_ci(tmp_path: Path, ci: str) -> None:
    proc = run(tmp_path, ci)
    out = proc.stdout
    assert proc.returncode == 1, out
    # a skip in the test fails it; one in set-up (skipif, a fixture) is an error
    assert "1 failed" in out and "2 errors" in out, out
    assert "1 passed" in out and "1 skipped" in out, out
    assert "test_browser needs a real component and was skipped under CI" in out, out
    assert "chromium is absent" in out and "no chromium here" in out, out
    assert "kube-apiserver is not built" in out, out


@pytest.mark.parametrize("ci", [None, "", "0", "false"])
def test_without_ci_they_skip_with_their_reason(tmp_path: Path, ci: str | None) -> None:
    proc = run(tmp_path, ci)
    out = proc.stdout
    assert proc.returncode == 0, out
    assert "1 passed" in out and "4 skipped" in out, out
    assert "chromium is absent" in out, out
