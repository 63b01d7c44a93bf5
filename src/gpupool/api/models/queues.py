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


class ClusterQueue(KubeObject):
    status: ClusterQueueStatus


class LocalQueue(KubeObject):
    status: LocalQueueStatus


class Flavor(KubeObject):
    status: FlavorStatus


class Cohort(KubeObject):
    status: CohortStatus


class ClusterQueueList(Wire):
    items: list[ClusterQueue]


class LocalQueueList(Wire):
    items: list[LocalQueue]


class FlavorList(Wire):
    items: list[Flavor]


class CohortList(Wire):
    items: list[Cohort]


STATUS_MODELS: dict[str, tuple[type[KubeObject], type[Wire]]] = {
    "ClusterQueue": (ClusterQueue, ClusterQueueList), "LocalQueue": (LocalQueue, LocalQueueList),
    "ResourceFlavor": (Flavor, FlavorList), "Cohort": (Cohort, CohortList)}
"""Per kind: the object with its status, and a list of them."""

Written = KubeObject
"""What a create or replace answers: the object as stored (its status comes with a GET)."""
