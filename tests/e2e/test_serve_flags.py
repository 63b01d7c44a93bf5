"""``gpupool serve`` checks what it is given before it writes anything: a bad flag value is
one line naming the flag, the value and the rule (exit 2), and a port in use is found before
the state file or the tokens file is made. Run in-process, through ``gpupool.cli.main``."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gpupool import cli
from tests.e2e.serve_kit import TOKENS_ENV


@pytest.mark.parametrize(
    ("flag", "value", "rule"),
    [
        ("--speed", "-1", "must be > 0"),
        ("--speed", "0", "must be > 0"),
        ("--speed", "nan", "must be > 0"),
        ("--speed", "fast", "is not a number"),
        ("--interval", "0", "must be >= 0.01"),
        ("--interval", "-0.5", "must be >= 0.01"),
        ("--demo-rate", "-5", "must be > 0"),
        ("--demo-rate", "0", "must be > 0"),
        ("--port", "70000", "must be between 0 and 65535"),
        ("--max-body-bytes", "0", "must be between 1024"),
    ],
)
def test_a_bad_flag_stops_serve_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, rule: str
) -> None:
    state = tmp_path / "s" / "state.db"
    with pytest.raises(SystemExit) as stop:
        cli.main(["serve", "--state", str(state), "--port", "0", flag, value])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument {flag}: '{value}' {rule}" in err, err
    assert not (tmp_path / "s").exists()


def test_a_port_in_use_is_found_before_state_and_tokens_are_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUPOOL_TOKENS", raising=False)
    state = tmp_path / "s" / "state.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code = cli.main(["serve", "--state", str(state), "--port", str(port)])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert f"--port {port}: 127.0.0.1:{port} is in use" in err, err
    assert not (tmp_path / "s").exists()  # no state file, no tokens.yaml


def test_a_missing_spec_file_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPOOL_TOKENS", TOKENS_ENV)
    code = cli.main(
        [
            "serve",
            "--state",
            str(tmp_path / "state.db"),
            "--port",
            "0",
            "--cloud",
            str(tmp_path / "nope.yaml"),
        ]
    )
    assert code == 2
    assert f"--cloud {tmp_path / 'nope.yaml'}: no such file" in capsys.readouterr().err
    assert not (tmp_path / "state.db").exists()
