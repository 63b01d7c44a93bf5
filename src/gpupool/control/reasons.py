"""A pending reason as the job's owner should read it: only about the flavors the job may use,
and the cause that blocks it first.

The core explains a job that waits with one clause per flavor of its ClusterQueue, in the
queue's order (``queue llm at quota for h100 GPUs (...); a100: 0/12 nodes fit: ...``), each in
the user's units (``core.said``). Two things here make that sentence about the job:

- A flavor whose nodes could never hold the job (an H100 flavor for a job that asks for
  A100s, a CPU flavor for a GPU job: ``core.feasibility``) is no part of why it waits, and its
  clause opening the sentence hides the one that is. Such clauses are left out; when that
  would leave nothing, the sentence is kept whole.
- The core tries a flavor by adding its node labels to the job's node selector, so the nodes
  of every *other* flavor count as "labels do not match gpupool.io/flavor=a100" in that
  flavor's clause, and, being most nodes, lead it (``0/12 nodes fit: 9 labels do not match
  gpupool.io/flavor=a100, 3 fewer than 8 whole GPUs free``). Those nodes were never the job's
  to use: they are taken out of the count, so the clause says ``0/3 nodes fit: 3 fewer than 8
  whole GPUs free`` and opens with what blocks the job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from gpupool.core.quota import ResourceFlavor

_FIT = re.compile(r"0/(?P<total>\d+) nodes fit: (?P<parts>[^;]*)")
_PART = re.compile(r"(?P<n>\d+) (?P<why>.*)")


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


def flavor_nodes_only(message: str, flavors: Sequence[ResourceFlavor]) -> str:
    """``message`` with the nodes outside a flavor taken out of that flavor's node counts:
    a ``labels do not match <selector>`` part whose selector is exactly a flavor's labels."""
    selectors = {",".join(f"{k}={v}" for k, v in sorted(f.node_labels.items()))
                 for f in flavors if f.node_labels}

    def narrowed(m: re.Match[str]) -> str:
        total = int(m["total"])
        parts = []
        for part in m["parts"].split(", "):
            p = _PART.fullmatch(part)
            if p and p["why"].startswith("labels do not match ") and \
                    p["why"][len("labels do not match "):] in selectors:
                total -= int(p["n"])
                continue
            parts.append(part)
        if not parts or total <= 0:
            return m[0]
        return f"0/{total} nodes fit: {', '.join(parts)}"

    return _FIT.sub(narrowed, message)


def owner_reason(message: str, usable: set[str], flavors: Sequence[ResourceFlavor]) -> str:
    """The reason as a job's owner reads it (both rules of the module docstring)."""
    return flavor_nodes_only(usable_only(message, usable, (f.name for f in flavors)), flavors)
