from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpupool.core.model import Task
from gpupool.core.placement.framework import CycleState, Mask, Rows


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """Keeps nodes whose labels carry every key=value of the task's node selector."""

    name: ClassVar[str] = "node-selector"
    resolvable: ClassVar[bool] = False

    def filter(self, cs: CycleState, task: Task, rows: Rows) -> Mask:
        selector = task.pod_set.node_selector
        if not selector:
            return np.ones(rows.size, np.bool_)
        t = cs.table
        items = tuple(sorted(selector.items()))
        key = ("inventory", "selector", items, t.version)
        mask = cs.cache.get(key)
        if mask is None:
            mask = np.fromiter(
                (all(node.labels.get(k) == v for k, v in items) for node in t.nodes),
                np.bool_,
                count=t.n,
            )
            cs.cache[key] = mask
        result: Mask = mask[rows]
        return result

    def reason(self, task: Task) -> str:
        return mismatch(task.pod_set.node_selector)


def mismatch(selector: Mapping[str, str]) -> str:
    """The reason a node lacking ``selector``'s labels is given: ``labels do not match
    k=v,...``, keys in order."""
    sel = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    return f"labels do not match {sel}"
