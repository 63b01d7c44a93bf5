"""What ``gpupool serve``'s virtual cluster reports of its cards: each node's DCGM exporter
page and each node's HAMi monitor page, from the running jobs' actual-use profiles, and the
pod names those pages give each task (so a read of Prometheus finds each pod's task again).

A task of the virtual cluster is one pod: task ``research/ft/main-0`` (job ``research/ft``,
pod set ``main``, replica 0) is pod ``ft-main-0`` in namespace ``research``, its container
named after its pod set (``main``), each of its cards a device of that container in the order
of its shares (``vdevice_index``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpupool.core.model import WHOLE_GPU_MILLI, NodeName, Placement
from gpupool.usage.dcgm import CardMetrics
from gpupool.usage.feed import PodTasks
from gpupool.usage.hami import ContainerMetrics
from gpupool.usage.profile import UseProfile, card_use, share_use

MIB = 1048576


@dataclass(frozen=True, slots=True)
class PodName:
    namespace: str
    pod: str
    container: str

    @property
    def key(self) -> str:
        """``namespace/name``, as the measured-use reader names a pod."""
        return f"{self.namespace}/{self.pod}"


def pod_name(namespace: str, task: str) -> PodName:
    """The pod that runs ``task`` of a job in ``namespace``."""
    local = task.removeprefix(f"{namespace}/")
    replica = local.rsplit("/", 1)[-1]
    container = replica.rsplit("-", 1)[0] if "-" in replica else replica
    return PodName(namespace, local.replace("/", "-"), container)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A running job as the exporter sees it: its namespace, placements and profile."""

    namespace: str
    placements: tuple[Placement, ...]
    profile: UseProfile


@dataclass(frozen=True, slots=True)
class InventoryCard:
    """One card of the inventory."""

    node: NodeName
    index: int
    uuid: str
    model: str
    memory_mib: int


def card_metrics(
    cards: Iterable[InventoryCard], jobs: Iterable[RunningJob]
) -> dict[str, list[CardMetrics]]:
    """Every node's cards as dcgm-exporter would report them, by node name."""
    jobs = list(jobs)
    use = card_use(
        [p for j in jobs for p in j.placements],
        {str(p.job): j.profile for j in jobs for p in j.placements},
    )
    out: dict[str, list[CardMetrics]] = {}
    for c in cards:
        u = use.get((c.node, c.index))
        used = min(c.memory_mib, round(u.memory_mib)) if u else 0
        out.setdefault(c.node, []).append(
            CardMetrics(
                c.index, c.uuid, c.model, u.util_pct if u else 0.0, used, c.memory_mib - used
            )
        )
    return out


def container_metrics(
    cards: Iterable[InventoryCard], jobs: Iterable[RunningJob]
) -> dict[str, list[ContainerMetrics]]:
    """Every node's containers on its cards as HAMi's monitor would report them, by node
    name (nodes without any left out): each holder's part of its card's busy time and used
    memory, adding up to what :func:`card_metrics` reports of the card."""
    by_key = {(c.node, c.index): c for c in cards}
    jobs = list(jobs)
    namespace = {p.task: j.namespace for j in jobs for p in j.placements}
    use = share_use(
        [p for j in jobs for p in j.placements],
        {str(p.job): j.profile for j in jobs for p in j.placements},
        {k: c.memory_mib for k, c in by_key.items()},
    )
    out: dict[str, list[ContainerMetrics]] = {}
    for key, holders in sorted(use.items()):
        card = by_key[key]
        for h in holders:
            name = pod_name(namespace[h.placement.task], str(h.placement.task))
            out.setdefault(card.node, []).append(
                ContainerMetrics(
                    name.namespace,
                    name.pod,
                    name.container,
                    h.position,
                    card.uuid,
                    h.util_pct,
                    h.memory_mib * MIB,
                    h.placement.shares[h.position].memory_mib * MIB,
                )
            )
    return out


def pod_tasks(jobs: Iterable[RunningJob]) -> PodTasks:
    """The task of each running pod (``namespace/name``), and the pods holding a slice of a
    card: how a read of HAMi's per-pod series finds its tasks, and which have none."""
    jobs = list(jobs)
    by_pod = {pod_name(j.namespace, str(p.task)).key: p.task for j in jobs for p in j.placements}
    held = {
        pod_name(j.namespace, str(p.task)).key
        for j in jobs
        for p in j.placements
        if any(0 < s.gpu_milli < WHOLE_GPU_MILLI and s.mig_profile is None for s in p.shares)
    }
    return PodTasks(by_pod.get, held)
