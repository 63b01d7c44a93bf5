"""Contexts, as kubectl's kubeconfig has them: named (server, token, namespace) triples in a
file, one of them current, so that a user with several servers or tokens does not export
variables by hand.

The file is ``$GPUPOOL_CONFIG``, else ``~/.config/gpupool/config.yaml``; gpupool writes it as
JSON (which YAML reads too) with mode 0600, as it holds tokens; a hand-written YAML file is
read as well::

    current-context: lab
    contexts:
    - {name: lab, server: http://10.0.0.5:8080, token: "...", namespace: research}

What a command uses, first found: its flag (``--server``, ``--token``, ``-n``), the
environment (``GPUPOOL_SERVER``, ``GPUPOOL_TOKEN``), the context (``--context NAME``, else the
current one), the default server.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpupool.core.errors import ConfigError

ENV = "GPUPOOL_CONFIG"
FIELDS = ("server", "token", "namespace")


def path() -> Path:
    return Path(os.environ.get(ENV) or Path.home() / ".config" / "gpupool" / "config.yaml")


def load(where: Path | None = None) -> dict[str, Any]:
    """The file's contents (``{"contexts": []}`` when there is none)."""
    where = where or path()
    try:
        text = where.read_text()
    except FileNotFoundError:
        return {"contexts": []}
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it: {exc.strerror}") from exc
    try:
        data = json.loads(text)
    except ValueError:
        import yaml  # only for a hand-written file

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{where}: not valid YAML: {' '.join(str(exc).split())}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict) or not isinstance(data.get("contexts", []), list):
        raise ConfigError(f"{where}: expected a mapping with a list of contexts")
    data.setdefault("contexts", [])
    for i, ctx in enumerate(data["contexts"]):
        if not isinstance(ctx, dict) or not isinstance(ctx.get("name"), str):
            raise ConfigError(f"{where}: contexts[{i}]: a mapping with a name is needed")
    return data


def save(data: dict[str, Any], where: Path | None = None) -> Path:
    where = where or path()
    where.parent.mkdir(parents=True, exist_ok=True)
    tmp = where.with_name(where.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, where)
    return where


def context(name: str | None, where: Path | None = None) -> dict[str, Any]:
    """The named context, or the current one, or ``{}`` (no file, no current context)."""
    data = load(where)
    wanted = name or data.get("current-context")
    if not wanted:
        return {}
    for ctx in data["contexts"]:
        if ctx["name"] == wanted:
            return dict(ctx)
    known = ", ".join(c["name"] for c in data["contexts"]) or "none"
    raise ConfigError(f"context {wanted!r} is not in {where or path()} (contexts: {known})")
