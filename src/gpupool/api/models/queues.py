"""Kueue's queue objects (ResourceFlavor, Cohort, ClusterQueue, LocalQueue) with their status.

Amounts per flavor and resource are in the resource's unit: ``gpu`` cards, ``gpuMilli``
(1000 a card), ``gpuMemoryMib``, ``cpuMilli``, ``memoryMib``.
"""

from __future__ import annotations

from gpupool.api.models.base import KubeObject, Wire

PerFlavor = dict[str, dict[str, int]]


class ClusterQueueStatus(Wire):
    usage: PerFlavor
    nominal: PerFlavor
    borrowed: PerFlavor
    share: float
    entitled_gpus: float
    share_basis: str
    pending_jobs: int
    running_jobs: int


class LocalQueueStatus(Wire):
    pending_jobs: int
    running_jobs: int


class FlavorStatus(Wire):
    nodes: int
    gpus: int


class CohortStatus(Wire):
    cluster_queues: list[str]
    cohorts: list[str]


class ClusterQueueView(KubeObject):
    schema_name = "ClusterQueue"

    status: ClusterQueueStatus


class LocalQueueView(KubeObject):
    schema_name = "LocalQueue"

    status: LocalQueueStatus


class Flavor(KubeObject):
    status: FlavorStatus


class CohortView(KubeObject):
    schema_name = "Cohort"

    status: CohortStatus


class ClusterQueueList(Wire):
    items: list[ClusterQueueView]


class LocalQueueList(Wire):
    items: list[LocalQueueView]


class FlavorList(Wire):
    items: list[Flavor]


class CohortList(Wire):
    items: list[CohortView]


STATUS_MODELS: dict[str, tuple[type[KubeObject], type[Wire]]] = {
    "ClusterQueue": (ClusterQueueView, ClusterQueueList),
    "LocalQueue": (LocalQueueView, LocalQueueList),
    "ResourceFlavor": (Flavor, FlavorList),
    "Cohort": (CohortView, CohortList),
}
"""Per kind: the object with its status, and a list of them."""

Written = KubeObject
"""What a create or replace answers: the object as stored (its status comes with a GET)."""
