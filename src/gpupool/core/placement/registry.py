"""The built-in plugins and the default profile."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.core.placement.framework import Profile, Registry
from gpupool.core.placement.plugins.binpack import BinPack, Spread
from gpupool.core.placement.plugins.cards import BestFitCards
from gpupool.core.placement.plugins.gpu_fit import GpuFit
from gpupool.core.placement.plugins.gpu_model import GpuModel
from gpupool.core.placement.plugins.node_selector import NodeSelector
from gpupool.core.placement.plugins.resources import NodeResources
from gpupool.core.placement.plugins.schedulable import NodeSchedulable
from gpupool.core.placement.plugins.taints import TaintToleration

DEFAULT_FILTERS = (
    "node-schedulable", "node-selector", "taint-toleration", "gpu-model", "node-resources",
    "gpu-fit",
)
"""Inventory filters first (their rejections are unresolvable), usage filters last."""


def builtin_registry() -> Registry:
    return Registry([
        NodeSchedulable, NodeSelector, TaintToleration, GpuModel, NodeResources, GpuFit,
        BinPack, Spread, BestFitCards,
    ])


def default_profile(
    registry: Registry | None = None,
    scores: Mapping[str, float] | None = None,
    cards: str = "best-fit-cards",
    args: Mapping[str, Mapping[str, Any]] | None = None,
) -> Profile:
    return Profile.build(
        registry or builtin_registry(),
        filters=DEFAULT_FILTERS,
        scores=scores if scores is not None else {"binpack": 1.0},
        cards=cards,
        args=args,
    )
