"""Contexts and completion: ``gpupool config set-context / use-context / get-contexts`` write a
config file the client commands then read (flag > environment > context > default), and
``gpupool completion bash`` prints a script bash accepts."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from gpupool.cli import main
from tests.e2e.test_cli_client import ADMIN, RESEARCH, rows, server  # noqa: F401 - fixture


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "gpupool" / "config.yaml"
    monkeypatch.setenv("GPUPOOL_CONFIG", str(path))
    for var in ("GPUPOOL_SERVER", "GPUPOOL_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    return path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_contexts_give_server_token_and_namespace(
    cfg: Path,
    server: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli(capsys, "config", "set-context", "lab", "--server", server, "--token", ADMIN)[0] == 0
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o600  # it holds tokens
    cli(
        capsys,
        "config",
        "set-context",
        "mine",
        "--server",
        server,
        "--token",
        RESEARCH,
        "--namespace",
        "research",
    )
    code, out, _ = cli(capsys, "config", "get-contexts")
    lines = out.splitlines()
    assert lines[0].split() == ["CURRENT", "NAME", "SERVER", "NAMESPACE"]
    assert lines[1].split() == ["*", "lab", server, "-"]  # the first one set is current
    assert lines[2].split() == ["mine", server, "research"]
    code, out, err = cli(capsys, "get", "nodes", "-o", "name")  # no --server, no --token
    assert code == 0 and "node/h100-0" in out, err
    assert cli(capsys, "config", "use-context", "mine")[1] == "switched to context mine\n"
    assert cli(capsys, "config", "current-context")[1] == "mine\n"
    code, out, _ = cli(capsys, "get", "localqueues")
    assert {r["NAMESPACE"] for r in rows(out)} == {"research"}
    # a flag beats the context; an unknown context is named with the known ones
    code, out, _ = cli(capsys, "get", "nodes", "-o", "name", "--context", "lab")
    assert code == 0 and out
    code, _, err = cli(capsys, "get", "nodes", "--context", "nope")
    assert code == 2 and "context 'nope' is not in" in err and "lab, mine" in err
    code, _, err = cli(capsys, "get", "nodes", "--server", "http://127.0.0.1:9")
    assert code == 1 and "127.0.0.1:9" in err
    assert cli(capsys, "config", "delete-context", "mine")[0] == 0
    assert cli(capsys, "config", "current-context")[1] == ""


def test_a_hand_written_yaml_config_is_read(
    cfg: Path,
    server: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg.parent.mkdir(parents=True)
    cfg.write_text(
        f"current-context: y\ncontexts:\n- name: y\n  server: {server}\n  token: {ADMIN}\n"
    )
    code, out, _ = cli(capsys, "get", "nodes", "-o", "name")
    assert code == 0 and "node/t4-0" in out
    cfg.write_text("contexts: [1, 2]\n")
    code, _, err = cli(capsys, "get", "nodes")
    assert code == 2 and "contexts[0]" in err


def test_completion_bash_is_a_script_bash_reads(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "completion", "bash")
    assert code == 0 and "complete -o default -F _gpupool gpupool" in out
    assert " drain " in out and " cordon " in out
    check = subprocess.run(
        ["bash", "-n"],
        input=out,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ},
    )
    assert check.returncode == 0, check.stderr
