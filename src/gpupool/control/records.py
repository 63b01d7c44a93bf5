"""What the control plane's parts share: the job record, the tick's result, the Backend and
Watcher seams, the state file's kinds and limits, and how a job's owner reads a message."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from gpupool.config.jobs import JobRequest
from gpupool.core.errors import ConfigError, InvalidJobError
from gpupool.core.model import Job, Placement

if TYPE_CHECKING:
    from gpupool.core.scheduler import Scheduler

QUEUE_KINDS = (
    "ResourceFlavor",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
    "WorkloadPriorityClass",
    "PriorityClass",
    "QueueSettings",
    "AdmissionCheck",
    "ProvisioningRequestConfig",
)


class JobPhase(StrEnum):
    """Where a job of ``serve`` stands; the value is what the API, the state file and the
    dashboard say."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


class EventReason(StrEnum):
    """Why ``serve`` recorded an event (its ``reason``, as Kubernetes events have one); a
    ProvisioningRequest's condition types are events' reasons too, as the cloud says them."""

    CREATED = "Created"
    DELETED = "Deleted"
    CANCELLED = "Cancelled"
    RUN_LIMIT_REACHED = "RunLimitReached"
    COMPLETED = "Completed"
    PREEMPTED = "Preempted"
    ADMITTED = "Admitted"
    RECOVERED = "Recovered"
    RESTORE_CONFLICT = "RestoreConflict"
    CLOUD_RESET = "CloudReset"
    NODE_PROVISIONED = "NodeProvisioned"
    NODE_DEPROVISIONED = "NodeDeprovisioned"
    NODE_LOST = "NodeLost"
    NODE_ADDED = "NodeAdded"
    CORDONED = "Cordoned"
    UNCORDONED = "Uncordoned"
    NODE_FAILED = "NodeFailed"
    NODE_RECOVERED = "NodeRecovered"
    DRAINED = "Drained"
    NODE_REMOVED = "NodeRemoved"


ACTIVE = (JobPhase.PENDING, JobPhase.RUNNING)
TERMINAL = (JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.CANCELLED)
ESTIMATE_EVERY_S = 1.0  # wall seconds between wait-estimate runs
EVENTS_KEPT = 50_000
HISTORY_EVERY_S = 1.0  # wall seconds between samples of queue usage
HISTORY_KEPT = 900
MAX_POOL_NODES = 1_000  # nodes one API request may add
MAX_NODE_GPUS = 64  # cards on one node
REQUEST_KIND = "ProvisioningRequest"  # state-file kinds of the provisioning check's state
CHECK_KIND = "ProvisioningCheck"  # per job: its admission-check record, or its booking
CLOUD_KIND = "Cloud"  # the simulated cloud's snapshot
CLOUD_HORIZON_S = 365 * 86_400.0  # stock-outs are drawn this far ahead
CLOUD_REQUESTS_KEPT = 200  # ended requests the cloud remembers


class Backend(Protocol):
    """Where bound jobs run: the virtual cluster here, Kubernetes elsewhere."""

    def start(
        self, key: str, placements: Sequence[Placement], start_s: float, end_s: float
    ) -> None: ...

    def stop(self, key: str) -> None: ...

    def due(self, now_s: float) -> list[str]:
        """Jobs whose end time has come, in end order."""
        ...


class Watcher(Protocol):
    """Something that holds cards in the scheduler's state beside the jobs (ElasticGPUs):
    told when a new Scheduler is built (to take its cards back in it), when a node fails and
    when a cycle ran. Called under the plane's lock."""

    def scheduler_built(self, scheduler: Scheduler) -> None: ...

    def node_failed(self, name: str) -> None: ...

    def ticked(self, result: TickResult) -> None: ...


@dataclass(slots=True)
class JobRecord:
    uid: int
    request: JobRequest
    phase: JobPhase
    submitted_s: float
    started_s: float | None = None
    finished_s: float | None = None
    flavor: str = ""
    cluster_queue: str = ""
    placements: tuple[Placement, ...] = ()
    preemptions: int = 0
    message: str = ""
    alternative: str = ""  # the alternative it runs as ("" its own request)

    @property
    def key(self) -> str:
        return self.request.key

    @property
    def job(self) -> Job:
        return self.request.job


@dataclass(slots=True)
class TickResult:
    time_s: float
    finished: int = 0
    bound: int = 0
    evicted: int = 0
    parked: int = 0
    decision_s: float = 0.0


def namespace_of(kind: str, key: str) -> str:
    """Whose events a queue object's changes are: a LocalQueue's namespace's; the others are
    the cluster's (namespace '')."""
    return key.split("/", 1)[0] if kind == "LocalQueue" else ""


def key_of(kind: str, body: Mapping[str, Any]) -> str:
    meta = body.get("metadata")
    if kind == "QueueSettings" and not isinstance(meta, Mapping):
        return "default"
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        raise ConfigError(f"{kind}: metadata.name is required")
    if kind == "LocalQueue":
        ns = meta.get("namespace") or "default"
        return f"{ns}/{meta['name']}"
    return str(meta["name"])


_JOB_KEY = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
ANOTHER_TENANT = "a job of another namespace"


def for_owner(message: str, namespace: str, jobs: Mapping[str, Any]) -> str:
    """``message`` as the owner of a job in ``namespace`` reads it: another namespace's job
    named in it (a preemptor, a gang waited behind) is not named, as it does not exist
    for them."""
    if "/" not in message:
        return message

    def hide(m: re.Match[str]) -> str:
        key = m.group(0)
        return ANOTHER_TENANT if key in jobs and not key.startswith(f"{namespace}/") else key

    return _JOB_KEY.sub(hide, message)


_DOCUMENT_FIELDS = {
    "cpu_milli": "cpu",
    "memory_mib": "memory",
    "gpu.gpu_milli": "gpu.milli",
    "gpu.memory_mib": "gpu.memory",
    "gpu.mig_profile": "gpu.mig",
    "node_selector": "nodeSelector",
}


def in_document_terms(exc: InvalidJobError, request: JobRequest) -> InvalidJobError:
    """The core names its own fields (``pod_sets[0].memory_mib=3145728``); the submitter
    wrote a document: name its field (``spec.podSets[0].memory``) and the value as written."""
    if exc.field == "pod_sets":
        return InvalidJobError("spec.podSets", exc.value, exc.rule, job=exc.job)
    match = re.fullmatch(r"pod_sets\[(\d+)\]\.(.+)", exc.field)
    if match is None:
        return exc
    index, name = int(match.group(1)), _DOCUMENT_FIELDS.get(match.group(2), match.group(2))
    value: Any = exc.value
    try:
        found: Any = request.document["spec"]["podSets"][index]
        for part in name.split("."):
            found = found[part]
        value = found
    except (KeyError, IndexError, TypeError):
        pass
    return InvalidJobError(f"spec.podSets[{index}].{name}", value, exc.rule, job=exc.job)
