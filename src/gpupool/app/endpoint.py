"""Where ``serve`` listens and who may call it: the socket, bound before anything is written,
and the bearer tokens (given, or generated beside the state file).
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
from pathlib import Path

import yaml

from gpupool.api.auth import ENV, Tokens, generate
from gpupool.core.errors import ConfigError


def load_tokens(args: argparse.Namespace, state: Path, namespaces: list[str]) -> tuple[Tokens, str]:
    """The tokens to use, and the admin token to print when they were generated here."""
    if args.tokens or os.environ.get(ENV):
        return Tokens.load(args.tokens), ""
    path = state.parent / "tokens.yaml"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(generate(namespaces), f, sort_keys=False)
    data = yaml.safe_load(path.read_text())
    admin = next((t["token"] for t in data["tokens"] if t.get("role") == "admin"), "")
    return Tokens.from_file(path), admin


def listen(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound before anything is written, so that a port in use
    stops ``serve`` with the state file and tokens untouched."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound: {exc.strerror}"
        raise ConfigError(f"--port {port}: {host}:{port} {why}; give another --port") from None
    sock.set_inheritable(True)
    return sock
