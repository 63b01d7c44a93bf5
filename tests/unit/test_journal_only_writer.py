"""The journal is the only writer to the state file: no other module of the package opens a
store transaction, so every write goes through one place (one transaction per step, stamped
with the cluster time)."""

from __future__ import annotations

import ast
from pathlib import Path

import gpupool

WRITERS = {"control/journal.py", "store/sqlite.py"}


def test_only_the_journal_opens_store_transactions() -> None:
    root = Path(gpupool.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in WRITERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "transaction":
                found.append(f"{rel}:{node.lineno}")
    assert found == [], f"store written outside the journal: {found}"
