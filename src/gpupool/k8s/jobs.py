"""Pods into core jobs: one pod alone, or a gang's pods as one job.

Pods with the same request and the same constraints (node and pod rules, namespace and
labels) share a pod set; each task maps to the
pod it stands for, in the order given. :class:`JobInfo` keeps, per core job, its pods and
where each stands.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpupool.core.model import Job, JobId, PodSet, QueueName, TaskId
from gpupool.k8s.constraints import Constraints
from gpupool.k8s.translate import PodRequest

__all__ = ["JobInfo", "job_for_pods"]


@dataclass
class JobInfo:
    """The pods behind one core job and where each stands."""

    id: JobId
    queue: str
    task_pod: dict[TaskId, str]  # task -> pod key
    gang_size: int = 1
    running: bool = False
    ended: set[str] = field(default_factory=set)  # pod keys that ended while running

    @property
    def pods(self) -> list[str]:
        return list(self.task_pod.values())


def job_for_pods(
    job_id: JobId,
    queue: str,
    pods: list[tuple[str, PodRequest]],
    *,
    gang: bool,
    min_member: int | None = None,
    now_s: float = 0.0,
    constraints: Mapping[str, Constraints] | None = None,
) -> tuple[Job, dict[TaskId, str]]:
    """A core job for pods: pods with the same request (and constraints) share a pod set;
    tasks map to pods in the order given."""
    cons = constraints or {}
    groups: dict[tuple[tuple[object, ...], Constraints], list[tuple[str, PodRequest]]] = {}
    for key, req in pods:
        groups.setdefault((req.key(), cons.get(key, Constraints())), []).append((key, req))
    pod_sets = []
    task_pod: dict[TaskId, str] = {}
    for i, ((_, con), members) in enumerate(groups.items()):
        req = members[0][1]
        ps = PodSet(
            name=f"ps{i}",
            count=len(members),
            cpu_milli=req.cpu_milli,
            memory_mib=req.memory_mib,
            gpu=req.gpu,
            node_selector=req.node_selector,
            tolerations=req.tolerations,
            node_affinity=con.node_affinity,
            preferred_node_affinity=con.preferred_node_affinity,
            pod=con.pod,
            pod_affinity=con.pod_affinity,
            pod_anti_affinity=con.pod_anti_affinity,
            spread=con.spread,
            soft_spread=con.soft_spread,
            preferred_affinity=con.preferred_affinity,
            preferred_anti_affinity=con.preferred_anti_affinity,
            extended=con.extended,
        )
        pod_sets.append(ps)
        for j, (key, _) in enumerate(members):
            task_pod[TaskId(f"{job_id}/ps{i}-{j}")] = key
    priority = max((req.priority for _, req in pods), default=0)
    job = Job(
        id=job_id,
        pod_sets=tuple(pod_sets),
        queue=QueueName(queue),
        priority=priority,
        submit_time_s=now_s,
        min_member=min_member if gang else None,
    )
    return job, task_pod
