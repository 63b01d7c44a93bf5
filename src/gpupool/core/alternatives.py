"""Fallback between accelerators: the forms a job may run in.

A job's own request comes first, then each ``Alternative`` in the order declared; admission
tries them in every flavor of the queue, in the queue's flavor order (the flavor decides, the
job's order breaks ties within it), so a queue that lists ``h100`` before ``ascend`` runs a
job on H100 cards when it can and on Ascend cards, in the Ascend form, when it cannot. Only
the pod sets that ask for GPUs change; CPU, memory, counts and the gang stay as written.
"""

from __future__ import annotations

from dataclasses import replace

from gpupool.core.model import Alternative, GpuKind, Job

OWN = ""
"""The name under which a job's own request is tried."""


def variant(job: Job, alt: Alternative) -> Job:
    """``job`` with each GPU pod set asking ``alt``'s request instead."""
    pod_sets = tuple(
        replace(ps, gpu=alt.gpu) if ps.gpu.kind is not GpuKind.NONE else ps for ps in job.pod_sets
    )
    return replace(job, pod_sets=pod_sets, alternatives=())


def variants(job: Job) -> list[tuple[str, Job]]:
    """(name, job as run in that form): the job's own request first, then its alternatives."""
    if not job.alternatives:
        return [(OWN, job)]
    return [(OWN, job), *((a.name, variant(job, a)) for a in job.alternatives)]


def chosen(job: Job, name: str) -> Job:
    """The job in the form admission chose (its own for ``OWN``)."""
    if name == OWN:
        return job
    for a in job.alternatives:
        if a.name == name:
            return variant(job, a)
    raise KeyError(f"job {job.id} has no alternative {name!r}")
