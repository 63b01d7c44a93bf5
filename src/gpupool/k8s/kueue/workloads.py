"""Which queue a pod goes to, and at what priority, as Kueue decides it for a workload.

- The queue is named by the ``kueue.x-k8s.io/queue-name`` label (or gpupool's
  ``gpupool.io/queue``) on the pod, else on the Job that owns it (Kueue reads a Job's label
  from the Job; the Job controller does not copy it to the pods).
- The name is a LocalQueue **in the pod's own namespace**, never one of another namespace and
  never a ClusterQueue: a team cannot submit into another team's queue by naming it.
- The LocalQueue's ClusterQueue must admit the namespace: its ``namespaceSelector`` matches
  the namespace's labels (``{}`` matches every namespace; an unset selector none, as in
  Kueue).
- ``kueue.x-k8s.io/priority-class`` (on the pod, else its Job) names a WorkloadPriorityClass
  whose value is the job's priority, in place of the pod's PriorityClass; a name that is no
  WorkloadPriorityClass is an error, as Kueue refuses to create such a workload.

Pure functions over the API server's JSON; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.core.errors import InvalidJobError, NotFoundError
from gpupool.core.quota import QueueConfig

__all__ = [
    "PRIORITY_CLASS_LABEL",
    "QUEUE_NAME_LABEL",
    "JobLabels",
    "admits",
    "job_labels",
    "local_queue",
    "owner_job",
    "selector_matches",
    "workload_labels",
    "workload_priority",
]

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
_QUEUE_LABELS = ("gpupool.io/queue", QUEUE_NAME_LABEL)

JobLabels = Mapping[str, Mapping[str, str]]
"""``namespace/name`` of a Job -> the labels of it that name a queue or a priority class."""


def job_labels(job: Mapping[str, Any]) -> dict[str, str]:
    """What gpupool keeps of a Job: its queue-name and priority-class labels (if any)."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    return {
        k: str(v) for k, v in labels.items() if k in (*_QUEUE_LABELS, PRIORITY_CLASS_LABEL) and v
    }


def owner_job(pod: Mapping[str, Any]) -> str | None:
    """``namespace/name`` of the Job controlling the pod, if one does."""
    meta = pod.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if (
            ref.get("kind") == "Job"
            and str(ref.get("apiVersion", "")).startswith("batch/")
            and ref.get("controller")
        ):
            return f"{meta.get('namespace', 'default')}/{ref.get('name')}"
    return None


def workload_labels(pod: Mapping[str, Any], jobs: JobLabels) -> tuple[str | None, str | None]:
    """(queue name, priority class) of the pod: its own labels first, then its Job's."""
    own = (pod.get("metadata") or {}).get("labels") or {}
    owner = owner_job(pod)
    job = jobs.get(owner, {}) if owner is not None else {}
    queue = next((str(src[k]) for src in (own, job) for k in _QUEUE_LABELS if src.get(k)), None)
    prio = next(
        (str(src[PRIORITY_CLASS_LABEL]) for src in (own, job) if src.get(PRIORITY_CLASS_LABEL)),
        None,
    )
    return queue, prio


def local_queue(config: QueueConfig, namespace: str, name: str) -> str:
    """``namespace/name`` when that LocalQueue exists; NotFoundError naming the namespace's
    LocalQueues otherwise (a LocalQueue of another namespace, or a ClusterQueue of that name,
    does not count)."""
    here = sorted(lq.name for lq in config.local_queues if lq.namespace == namespace)
    if name in here:
        return f"{namespace}/{name}"
    raise NotFoundError(
        f"LocalQueue {name!r} does not exist in namespace {namespace!r} "
        f"(a queue name is a LocalQueue of the pod's own namespace); "
        f"LocalQueues there: {', '.join(here) or 'none'}"
    )


def workload_priority(config: QueueConfig, name: str | None) -> int | None:
    """The value of WorkloadPriorityClass ``name`` (None when no name is given)."""
    if name is None:
        return None
    for pc in config.priority_classes:
        if pc.name == name:
            return pc.value
    known = ", ".join(sorted(p.name for p in config.priority_classes)) or "none"
    raise InvalidJobError(
        f"metadata.labels[{PRIORITY_CLASS_LABEL}]",
        name,
        f"is not a WorkloadPriorityClass; known: {known}",
    )


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a Kubernetes label selector matches ``labels``. An empty selector matches
    everything; None (unset) matches nothing, which is what Kueue's ``namespaceSelector``
    means when unset."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op = expr.get("key"), expr.get("operator")
        values = set(expr.get("values") or ())
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False  # an operator the API server would have refused
    return True


def admits(
    cluster_queue: str,
    selector: Mapping[str, Any] | None,
    namespace: str,
    labels: Mapping[str, str],
) -> None:
    """NotFoundError when ``cluster_queue``'s namespaceSelector does not match the
    namespace (the queue does not exist for that namespace)."""
    if not selector_matches(selector, labels):
        shown = "unset (no namespace)" if selector is None else dict(selector)
        raise NotFoundError(
            f"ClusterQueue {cluster_queue} does not admit namespace "
            f"{namespace!r}: its namespaceSelector {shown} does not match "
            f"the namespace's labels {dict(labels)}"
        )
