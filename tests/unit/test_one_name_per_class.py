"""Each class name means one thing across the package (docs/architecture.md, "One name per
class"): no two classes share a name, save the client's errors, which subclass the core's of
the same name on purpose so that ``except NotFoundError`` catches the server's too."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import gpupool

SUBCLASSED_ON_PURPOSE = {
    name: ["client/errors.py", "core/errors.py"]
    for name in ("ConfigError", "ConflictError", "InvalidJobError", "NotFoundError")
}


def _classes() -> dict[str, list[str]]:
    """Class name -> the modules defining one of that name (nested classes too)."""
    root = Path(gpupool.__file__).parent
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(rel)
    return where


def test_no_two_classes_share_a_name() -> None:
    shared = {name: mods for name, mods in _classes().items() if len(mods) > 1}
    assert shared == SUBCLASSED_ON_PURPOSE


def test_the_client_errors_named_as_the_core_ones_subclass_them() -> None:
    from gpupool.client import errors as client
    from gpupool.core import errors as core

    for name in SUBCLASSED_ON_PURPOSE:
        assert issubclass(getattr(client, name), getattr(core, name)), name
