"""Bearer tokens: who is calling, and what they may see.

Two roles. ``admin`` may do everything, including cluster and queue objects. ``tenant`` is
scoped to its namespaces: it submits, lists, reads and cancels jobs there only, and another
tenant's jobs do not exist for it (404, not 403, so names do not leak); it may read the
cluster, nodes (holders outside its namespaces are hidden) and queues.

Tokens come from a YAML file::

    tokens:
    - {name: admin, role: admin, token: "..."}
    - {name: research, role: tenant, namespaces: [research], token: "..."}

or from the ``GPUPOOL_TOKENS`` environment variable, entries separated by ``;``, each
``token,name,role[,namespace namespace ...]`` (the order of Kubernetes' token file). Tokens are
compared in constant time, by their SHA-256.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpupool.core.errors import ConfigError

ROLES = ("admin", "tenant")
ENV = "GPUPOOL_TOKENS"


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: str
    namespaces: frozenset[str] = field(default_factory=frozenset)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def sees(self, namespace: str) -> bool:
        return self.is_admin or namespace in self.namespaces

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "namespaces": sorted(self.namespaces) if not self.is_admin else None,
        }


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Tokens:
    def __init__(self, entries: Iterable[tuple[str, Principal]] = ()) -> None:
        self._by_digest: dict[bytes, Principal] = {}
        for token, principal in entries:
            self.add(token, principal)

    def add(self, token: str, principal: Principal) -> None:
        if len(token) < 16:
            raise ConfigError(f"token of {principal.name}: at least 16 characters are needed")
        if principal.role not in ROLES:
            raise ConfigError(
                f"token of {principal.name}: role={principal.role!r} must be admin or tenant"
            )
        if principal.role == "tenant" and not principal.namespaces:
            raise ConfigError(f"token of {principal.name}: a tenant token needs namespaces")
        self._by_digest[_digest(token)] = principal

    def __len__(self) -> int:
        return len(self._by_digest)

    def principal(self, token: str) -> Principal | None:
        d = _digest(token)
        for known, principal in self._by_digest.items():
            if hmac.compare_digest(known, d):
                return principal
        return None

    # -- sources -----------------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | Path) -> Tokens:
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: cannot read tokens: {exc}") from exc
        items = data.get("tokens") if isinstance(data, Mapping) else None
        if not isinstance(items, list):
            raise ConfigError(f"{path}: expected a mapping with a 'tokens' list")
        out = cls()
        for i, item in enumerate(items):
            if not isinstance(item, Mapping) or not isinstance(item.get("token"), str):
                raise ConfigError(f"{path}: tokens[{i}].token is required (a string)")
            ns = item.get("namespaces") or []
            if not isinstance(ns, list) or not all(isinstance(n, str) for n in ns):
                raise ConfigError(f"{path}: tokens[{i}].namespaces must be a list of names")
            out.add(
                item["token"],
                Principal(
                    str(item.get("name", f"token-{i}")),
                    str(item.get("role", "tenant")),
                    frozenset(ns),
                ),
            )
        return out

    @classmethod
    def from_env(cls, value: str) -> Tokens:
        out = cls()
        for i, entry in enumerate(e.strip() for e in value.split(";")):
            if not entry:
                continue
            parts = [p.strip() for p in entry.split(",")]
            if len(parts) < 3:
                raise ConfigError(f"{ENV} entry {i + 1}: expected token,name,role[,namespaces]")
            ns = frozenset(parts[3].split()) if len(parts) > 3 else frozenset()
            out.add(parts[0], Principal(parts[1], parts[2], ns))
        return out

    @classmethod
    def load(cls, path: str | Path | None) -> Tokens:
        """From ``path`` if given, else from the environment; may be empty."""
        if path is not None:
            return cls.from_file(path)
        env = os.environ.get(ENV)
        return cls.from_env(env) if env else cls()


def generate(namespaces: Iterable[str]) -> dict[str, Any]:
    """A tokens document: one admin token and one tenant token per namespace."""
    tokens: list[dict[str, Any]] = [
        {"name": "admin", "role": "admin", "token": secrets.token_urlsafe(24)}
    ]
    for ns in sorted(set(namespaces)):
        tokens.append(
            {"name": ns, "role": "tenant", "namespaces": [ns], "token": secrets.token_urlsafe(24)}
        )
    return {"tokens": tokens}
