"""A pending reason as the job's owner should read it: only about the flavors the job may use,
and the cause that blocks it first.

The core explains a job that waits with ``Reason``s (``core.reasons``), one attempt per flavor
of its ClusterQueue in the queue's order, each naming the flavor it is about. Two things here
make the sentence about the job:

- A flavor whose nodes could never hold the job (an H100 flavor for a job that asks for
  A100s, a CPU flavor for a GPU job: ``core.feasibility``) is no part of why it waits, and its
  clause opening the sentence hides the one that is. Such reasons are left out; when that
  would leave nothing, they are all kept.
- The core tries a flavor by adding its node labels to the job's node selector, so the nodes
  of every *other* flavor count as "labels do not match gpupool.io/flavor=a100" in that
  flavor's clause, and, being most nodes, lead it (``0/12 nodes fit: 9 labels do not match
  gpupool.io/flavor=a100, 3 fewer than 8 whole GPUs free``). Those nodes were never the job's
  to use: they are taken out of the count, so the clause says ``0/3 nodes fit: 3 fewer than 8
  whole GPUs free`` and opens with what blocks the job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpupool.core.placement.framework import Status
from gpupool.core.placement.plugins.node_selector import NodeSelector, mismatch
from gpupool.core.quota import ResourceFlavor
from gpupool.core.reasons import Reason, sentence


def usable_only(reasons: Sequence[Reason], usable: set[str]) -> tuple[Reason, ...]:
    """``reasons`` without those about flavors not in ``usable`` (all of them when that
    would leave none)."""
    kept = tuple(r for r in reasons if r.flavor is None or r.flavor in usable)
    return kept or tuple(reasons)


def flavor_nodes_only(
    reasons: Sequence[Reason], flavors: Sequence[ResourceFlavor]
) -> tuple[Reason, ...]:
    """``reasons`` with the nodes outside a flavor taken out of that flavor's node counts:
    a ``node-selector`` reason whose selector is exactly a flavor's labels. An attempt with
    nothing else left is kept as it was."""
    outside = {mismatch(f.node_labels) for f in flavors if f.node_labels}
    out: list[Reason] = []
    i = 0
    while i < len(reasons):
        r = reasons[i]
        j = i + 1
        if r.of is not None:
            while j < len(reasons) and reasons[j].of == r.of and reasons[j].scope == r.scope:
                j += 1
        attempt = reasons[i:j]
        foreign = [x for x in attempt if x.plugin == NodeSelector.name and x.message in outside]
        left = [x for x in attempt if x not in foreign]
        total = (r.of or 0) - sum(x.nodes for x in foreign)
        if foreign and left and total > 0:
            out.extend(replace(x, of=total) for x in left)
        else:
            out.extend(attempt)
        i = j
    return tuple(out)


def owner_reasons(
    status: Status, usable: set[str], flavors: Sequence[ResourceFlavor]
) -> tuple[Reason, ...]:
    """The reasons as a job's owner reads them (both rules of the module docstring)."""
    return flavor_nodes_only(usable_only(status.reasons, usable), flavors)


def owner_reason(status: Status, usable: set[str], flavors: Sequence[ResourceFlavor]) -> str:
    """``owner_reasons`` as the one sentence users read."""
    return sentence(owner_reasons(status, usable, flavors))
