"""Why jobs of a time-based replay waited, in words: each pending ``Reason`` sorted into a kind
(what was short) from the plugin that gave it, never by reading its sentence back."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from gpupool.core.reasons import Reason
from gpupool.sim.engine import JobOutcome

_PLUGIN_KINDS = {
    "node-resources": "CPU or memory",
    "node-schedulable": "cordoned",
    "taint-toleration": "taints",
    "node-selector": "node selector",
    "gpu-model": "GPU model",
}
_GPU_FIT_KINDS = {"whole": "whole GPUs", "mig": "MIG instance"}
_KIND_ORDER = (
    "room on one GPU",
    "CPU or memory",
    "whole GPUs",
    "MIG instance",
    "cordoned",
    "taints",
    "node selector",
    "GPU model",
)


def reason_kind(reason: Reason) -> str:
    """What one reason says was short, in words: from the plugin that gave it (and, for
    ``gpu-fit``, the kind of GPU request it could not serve); any other plugin by its name."""
    if reason.plugin == "gpu-fit":
        return _GPU_FIT_KINDS.get(reason.gpu, "room on one GPU")
    return _PLUGIN_KINDS.get(reason.plugin, reason.plugin)


def reason_kinds(reasons: Sequence[Reason]) -> list[str]:
    """What was short, in words, each once, in the order of the reasons (most nodes first
    within a clause); a gang's reasons are its failing task's."""
    return list(dict.fromkeys(reason_kind(r) for r in reasons))


def category_rank(kind: str) -> tuple[int, str]:
    return (_KIND_ORDER.index(kind) if kind in _KIND_ORDER else len(_KIND_ORDER)), kind


INVENTORY_KINDS = frozenset({"GPU model", "node selector", "taints"})
"""Reasons that are facts of the nodes, not of their use: no waiting changes them."""


def wait_reasons(records: Sequence[JobOutcome]) -> Counter[str]:
    """Jobs that waited, counted by what was short when they were first parked.

    Nodes ruled out by inventory (another GPU model, labels, taints) are left out of the
    label when some nodes were ruled out by usage: those are the ones the job waited for.
    """
    counts: Counter[str] = Counter()
    for r in records:
        if r.parks and r.first_reasons:
            kinds = reason_kinds(r.first_reasons)
            kinds = [k for k in kinds if k not in INVENTORY_KINDS] or kinds
            counts[" + ".join(sorted(kinds, key=category_rank))] += 1
    return counts
