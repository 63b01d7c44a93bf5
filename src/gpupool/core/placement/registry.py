"""The built-in plugins and the default profile."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.core.errors import ConfigError
from gpupool.core.placement.framework import Profile, Registry
from gpupool.core.placement.plugins.bestfit import BestFitScore
from gpupool.core.placement.plugins.bind_queue import BindQueue
from gpupool.core.placement.plugins.binpack import BinPack, Spread
from gpupool.core.placement.plugins.cards import BestFitCards
from gpupool.core.placement.plugins.dotprod import DotProdScore
from gpupool.core.placement.plugins.fgd import FgdScore
from gpupool.core.placement.plugins.frag import TypicalPods
from gpupool.core.placement.plugins.gpu_fit import GpuFit
from gpupool.core.placement.plugins.gpu_model import GpuModel
from gpupool.core.placement.plugins.gpuclustering import GpuClusteringScore
from gpupool.core.placement.plugins.gpupacking import GpuPackingScore
from gpupool.core.placement.plugins.gpupool_policy import GpupoolScore
from gpupool.core.placement.plugins.measured import (
    HotCardSpread,
    MeasuredCards,
    MeasuredMemory,
    TargetLoadPacking,
)
from gpupool.core.placement.plugins.node_affinity import NodeAffinity, NodeAffinityPreference
from gpupool.core.placement.plugins.node_selector import NodeSelector
from gpupool.core.placement.plugins.pod_affinity import PodAffinity
from gpupool.core.placement.plugins.pod_affinity_score import PodAffinityPreference
from gpupool.core.placement.plugins.pod_anti_affinity import PodAntiAffinity
from gpupool.core.placement.plugins.random_fit import RandomFit
from gpupool.core.placement.plugins.resources import NodeResources
from gpupool.core.placement.plugins.schedulable import NodeSchedulable
from gpupool.core.placement.plugins.taints import TaintToleration
from gpupool.core.placement.plugins.topology_spread import PodTopologySpread
from gpupool.core.placement.plugins.topology_spread_score import PodTopologySpreadPreference

DEFAULT_FILTERS = (
    "node-schedulable",
    "node-selector",
    "node-affinity",
    "taint-toleration",
    "gpu-model",
    "pod-affinity",
    "pod-anti-affinity",
    "pod-topology-spread",
    "node-resources",
    "gpu-fit",
)
"""Inventory filters first (their rejections are unresolvable), usage filters last."""


DEFAULT_SCORES = {
    "binpack": 1.0,
    "node-affinity-preference": 2.0,
    "pod-affinity-preference": 2.0,
    "pod-topology-spread-preference": 2.0,
}
"""Preferred node affinity, preferred pod (anti-)affinity and ``ScheduleAnyway`` spread weigh
twice the packing, as in kube-scheduler's default profile; each scores 0 everywhere for a pod
without them."""


def builtin_registry() -> Registry:
    return Registry(
        [
            NodeSchedulable,
            NodeSelector,
            NodeAffinity,
            TaintToleration,
            GpuModel,
            NodeResources,
            GpuFit,
            BinPack,
            Spread,
            BestFitCards,
            FgdScore,
            BestFitScore,
            DotProdScore,
            GpuPackingScore,
            GpuClusteringScore,
            RandomFit,
            GpupoolScore,
            PodAffinity,
            PodAntiAffinity,
            PodTopologySpread,
            PodAffinityPreference,
            PodTopologySpreadPreference,
            NodeAffinityPreference,
            BindQueue,
            MeasuredMemory,
            HotCardSpread,
            TargetLoadPacking,
            MeasuredCards,
        ]
    )


def default_profile(
    registry: Registry | None = None,
    scores: Mapping[str, float] | None = None,
    cards: str = "best-fit-cards",
    args: Mapping[str, Mapping[str, Any]] | None = None,
) -> Profile:
    return Profile.build(
        registry or builtin_registry(),
        filters=DEFAULT_FILTERS,
        scores=scores if scores is not None else DEFAULT_SCORES,
        cards=cards,
        args=args,
    )


MEASURED_SCORES = {"hot-card-spread": 2.0, "target-load-packing": 1.0}
"""Added to the default scores when placement reads measured use: keeping slices off hot
cards weighs twice the packing by requests."""


def measured_profile(
    registry: Registry | None = None,
    *,
    hot_pct: float = 80.0,
    target_pct: float = 80.0,
    scores: Mapping[str, float] | None = None,
) -> Profile:
    """The default profile with the measured-use plugins (``plugins/measured.py``): the
    ``measured-memory`` filter last, ``hot-card-spread`` and ``target-load-packing`` scores
    and ``measured-cards`` card choice. With no measured load in a cycle it places exactly as
    the default profile does."""
    chosen = scores if scores is not None else {**DEFAULT_SCORES, **MEASURED_SCORES}
    args = {
        "hot-card-spread": {"hot_pct": hot_pct},
        "measured-cards": {"hot_pct": hot_pct},
        "target-load-packing": {"target_pct": target_pct},
    }
    return Profile.build(
        registry or builtin_registry(),
        filters=(*DEFAULT_FILTERS, "measured-memory"),
        scores=chosen,
        cards="measured-cards",
        args={k: v for k, v in args.items() if k in chosen or k == "measured-cards"},
        name="measured",
    )


OPENB_FILTERS = ("node-resources", "gpu-model", "gpu-fit")
"""What the FGD paper's simulator filters on: CPU and memory, GPU model, GPU room."""

OPENB_CARDS = {"random": "random", "fgd": "fgd", "gpupool": "gpupool"}
"""Card choice per policy; the others take the fitting card with the least left."""

NEEDS_TYPICAL_PODS = frozenset({"fgd", "gpupool"})


def openb_profile(
    policy: str,
    *,
    typical_pods: TypicalPods | None = None,
    seed: int = 0,
    registry: Registry | None = None,
) -> Profile:
    """The profile of one policy as the openb experiments run it: one score plugin, its
    card choice, and the filters of :data:`OPENB_FILTERS`.

    ``typical_pods`` (the target workload) is required by ``fgd`` and ``gpupool``; ``seed``
    seeds ``random``'s generator.
    """
    registry = registry or builtin_registry()
    args: dict[str, dict[str, Any]] = {}
    if policy in NEEDS_TYPICAL_PODS:
        if typical_pods is None:
            raise ConfigError(f"policy {policy!r} needs the typical pods of the workload")
        args[policy] = {"typical_pods": typical_pods}
    elif policy == "random":
        args[policy] = {"seed": seed}
    return Profile.build(
        registry,
        filters=OPENB_FILTERS,
        scores={policy: 1.0},
        cards=OPENB_CARDS.get(policy, "best-fit-cards"),
        args=args,
        name=f"openb-{policy}",
    )
