"""gpupool's scarcity charge: GPU models kept for the typical pods bound to them.

Item 3 of ``gpupool_policy.py``: a typical pod bound to some GPU models can only use those
cards, so placing any pod's GPU demand on a node of such a model is charged the bound pods'
popularity, each scaled by how small a share of the cluster's *free* GPU its cards hold
(docs/policies.md, "the gpu-spec axis"). A mixin of :class:`GpupoolScore`; every value is
cached in the snapshot cache, per inventory version or per change of use.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpupool.core.placement.framework import CycleState, Rows
from gpupool.core.placement.plugins.frag import F64, I64, TypicalPods, card_eligibility

SCARCITY_STEP = 1.05
"""Step of the scarcity charge's free-share factor (5 %, on a log scale)."""


class ScarcityCharge:
    """The per-model charge of item 3, read by :class:`GpupoolScore`."""

    typical_pods: TypicalPods
    constrained: npt.NDArray[np.bool_]
    """Per GPU typical pod: bound to some models."""

    def scarcity_key(self, cs: CycleState) -> tuple[int, ...]:
        """Per model-bound GPU typical pod, the cluster's free GPU milli over the free milli on
        the cards it may use, in steps of ``SCARCITY_STEP`` (log scale); () without any.

        The look-ahead of item 3: the pods still to come take the free capacity in proportion
        to their popularity, so a model whose free cards run out faster than the cluster's is
        the one its bound pods will miss. Quantised so that scores cached per row stay valid
        until a model's free share moves by a step.
        """
        if not self.constrained.any():
            return ()
        t = cs.table
        # every change of use gives its row a fresh, higher generation: the newest names the
        # state, so the key is computed once per change, not once per call
        stamp = (t.version, int(t.gen[: t.cap_rows].max()))
        key = ("gpupool-scarcity-key", self.typical_pods)
        found = cs.cache.get(key)
        if found is not None and found[0] == stamp:
            steps: tuple[int, ...] = found[1]
            return steps
        live = t.live()
        row_code = self.row_model(cs)[live]
        if (row_code >= -1).all():  # one model a node: the node's free milli is the model's
            codes, free = row_code, t.milli_free[live]
        else:
            codes = t.gpu_model[live].ravel()
            free = np.maximum(t.free_milli[live], 0).ravel()
        by_code = np.bincount(codes + 1, weights=free, minlength=len(t.models) + 1)
        allowed = self.allowed(cs)
        usable = allowed[:, self.constrained].T @ by_code[1:]
        share = float(by_code[1:].sum()) / np.maximum(usable, 1.0)
        level = np.round(np.log(np.maximum(share, 1.0)) / np.log(SCARCITY_STEP))
        steps = tuple(int(x) for x in level)
        cs.cache[key] = (stamp, steps)
        return steps

    def row_model(self, cs: CycleState) -> I64:
        """Per table row, the code of its cards' one model; -1 without cards, -2 with several
        (per inventory)."""
        t = cs.table
        key = ("inventory", "gpupool-row-model", t.version)
        found = cs.cache.get(key)
        if found is None:
            codes = t.gpu_model
            has = codes >= 0
            top = np.where(has, codes, -1).max(axis=1)
            low = np.where(has, codes, np.iinfo(np.int64).max).min(axis=1)
            found = cs.cache[key] = np.where(~has.any(axis=1), -1, np.where(top == low, top, -2))
        result: I64 = found
        return result

    def node_eligible(self, cs: CycleState) -> F64:
        """[table rows, GPU typical pods]: 1 where some card of the row may serve the pod."""
        t = cs.table
        key = ("inventory", "gpupool-node-eligible", self.typical_pods, t.version)
        found = cs.cache.get(key)
        if found is None:
            elig = card_eligibility(self.typical_pods, t, cs.cache)
            assert elig is not None
            found = cs.cache[key] = np.asarray(elig.any(axis=1), np.float64)
        result: F64 = found
        return result

    def allowed(self, cs: CycleState) -> npt.NDArray[np.float64]:
        """[model codes, GPU typical pods]: 1 where the pod may use the model (per inventory)."""
        t = cs.table
        tp = self.typical_pods
        key = ("inventory", "gpupool-allowed", tp, t.version)
        found = cs.cache.get(key)
        if found is None:
            found = cs.cache[key] = np.asarray(
                [
                    [not tp.shapes[i].models or m in tp.shapes[i].models for i in tp.gpu_index]
                    for m in t.models
                ],
                np.float64,
            ).reshape(len(t.models), tp.gpu_index.size)
        result: npt.NDArray[np.float64] = found
        return result

    def scarcity(self, cs: CycleState, rows: Rows) -> F64:
        """kept * fragment charged per GPU milli placed on each row: the typical pods that are
        bound to a model this node has, each weighted by how small a share of the cluster's
        free GPU its cards hold (:meth:`scarcity_key`; 0 without model-bound typical pods)."""
        tp = self.typical_pods
        t = cs.table
        steps = self.scarcity_key(cs)
        if not steps:
            return np.zeros(rows.size, np.float64)
        key = ("gpupool-scarcity", tp)
        found = cs.cache.get(key)
        if found is None or found[0] != (t.version, steps):
            share = np.zeros(self.constrained.size, np.float64)
            share[self.constrained] = SCARCITY_STEP ** np.asarray(steps, np.float64)
            found = cs.cache[key] = (
                (t.version, steps),
                self.node_eligible(cs) @ (tp.weight * share),
            )
        per_row: F64 = found[1]
        result: F64 = per_row[rows]
        return result
