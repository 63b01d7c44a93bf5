"""A pending reason as the job's owner should read it: only about the flavors the job may use.

The core explains a job that waits with one clause per flavor of its ClusterQueue, in the
queue's order (``queue llm at quota for h100 GPUs (...); queue llm at quota for a100 GPUs
(...)``). A flavor whose nodes could never hold the job (an H100 flavor for a job that asks
for A100s, a CPU flavor for a GPU job: ``core.feasibility``) is no part of why it waits, and
its clause opening the sentence hides the one that is. Such clauses are left out; when that
would leave nothing, the sentence is kept whole.
"""

from __future__ import annotations

from collections.abc import Iterable


def _flavor_of(clause: str, flavors: Iterable[str]) -> str | None:
    for f in flavors:
        if f" for {f} " in clause or clause.startswith(f"{f}: "):
            return f
    return None


def usable_only(message: str, usable: set[str], flavors: Iterable[str]) -> str:
    """``message`` without its clauses about flavors (of ``flavors``) not in ``usable``."""
    names = sorted(flavors, key=len, reverse=True)  # a100-mig before a100
    clauses = message.split("; ")
    kept = [c for c in clauses if (f := _flavor_of(c, names)) is None or f in usable]
    return "; ".join(kept) if kept else message
