"""Queued, all-or-nothing provisioning: ProvisioningRequest and the admission check built on it.

**ProvisioningRequest** follows cluster-autoscaler's ``autoscaling.x-k8s.io/v1`` object: it asks
the cloud for capacity for a job's pod sets at once, all of it or none, and the cloud answers
with conditions:

- ``Accepted``: the request is queued by the cloud;
- ``Provisioned``: every node exists; the capacity is *booked* for the request's pods;
- ``BookingExpired``: ``BOOKING_S`` (10 minutes) after ``Provisioned`` no pod consumed the
  booking, so the nodes are no longer held for it;
- ``CapacityRevoked``: the cloud took the nodes back (at ``maxRunDurationSeconds`` after
  ``Provisioned``, or earlier);
- ``Failed``: it will not be provisioned (with the reason).

Rules checked when a request is built (InvalidJobError naming the field otherwise): 1 to
``MAX_POD_SETS`` (32, the API's ``maxItems``) pod sets; at most ``MAX_NODES`` (1,000) pods in
all, one node each at most; ``maxRunDurationSeconds``
at most ``MAX_RUN_DURATION_S`` (7 days). A project (a namespace) has at most
``MAX_ACTIVE_PER_PROJECT`` (100) requests active at once: the next one is refused, stored with
``Accepted=False`` and ``Failed=True`` and the reason. Deleting a request cancels it.

The **admission check** (Kueue's ``kueue.x-k8s.io/provisioning-request`` controller, named by a
ClusterQueue's ``admissionChecks``) makes a queue's jobs wait for such a request:

1. quota is reserved for the job (its request's quota, no placement yet: the nodes do not exist);
2. a ProvisioningRequest is made for its pod set (``Pending``);
3. when the request is ``Provisioned`` the check is ``Ready`` and the job is admitted, its pods
   pinned to the provisioned nodes (they carry the label and taint ``REQUEST_LABEL`` naming
   the request; the pods get the selector and the toleration) and its run limit cut to what
   is left of ``maxRunDurationSeconds``;
4. on ``Failed`` (or ``BookingExpired``, or ``CapacityRevoked`` before the job started) the
   quota is released and the job is queued again after a backoff (``RetryStrategy``: 3
   retries, 60 s doubling, at most 1,800 s, as Kueue's ``retryStrategy``); when the retries
   are spent the check is ``Rejected`` and the job stays parked with the reason.

gpupool plans with the parameters rather than passing them through: a provisioned booking is
consumed in order of expiry (the one about to expire first), a booking left by a job that went
away is taken by the next job of its queue that fits its nodes, and the run limit a booking
imposes is the job's run limit, which backfill and wait estimates read.

Nothing here reads a clock: times are plain numbers passed in by the adapter.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from gpupool.core.errors import ConfigError, ConflictError, InvalidJobError, NotFoundError
from gpupool.core.model import Job, JobId, PodSet, Toleration
from gpupool.core.validation import check_request

if TYPE_CHECKING:
    from gpupool.core.admission import Vec
    from gpupool.core.quota import QueueConfig

MAX_POD_SETS = 32
MAX_NODES = 1000
MAX_RUN_DURATION_S = 7 * 24 * 3600.0
BOOKING_S = 600.0
MAX_ACTIVE_PER_PROJECT = 100
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
CHECK_CAPACITY_CLASS = "check-capacity.autoscaling.x-k8s.io"
BEST_EFFORT_ATOMIC_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
DEFAULT_CLASS = BEST_EFFORT_ATOMIC_CLASS
"""The class of a ProvisioningRequestConfig that names none: cluster-autoscaler's own
all-or-nothing scale-up (not a cloud's class such as GKE's ``queued-provisioning.gke.io``)."""
REQUEST_LABEL = "gpupool.io/provisioning-request"
"""Label and NoSchedule taint on provisioned nodes; the value is the request's ``node_label``."""
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
MAX_RUN_PARAMETER = "maxRunDurationSeconds"


class ConditionType(StrEnum):
    ACCEPTED = "Accepted"
    PROVISIONED = "Provisioned"
    FAILED = "Failed"
    BOOKING_EXPIRED = "BookingExpired"
    CAPACITY_REVOKED = "CapacityRevoked"


@dataclass(frozen=True, slots=True)
class Condition:
    type: ConditionType
    status: bool
    reason: str = ""
    message: str = ""
    time_s: float = 0.0  # lastTransitionTime, simulated or adapter seconds

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type.value, "status": "True" if self.status else "False",
                "reason": self.reason, "message": self.message,
                "lastTransitionTime": self.time_s}


# -- the request ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProvisioningRequest:
    """Capacity for a job's pod sets, all of it or none (spec: name to ``max_run_duration_s``;
    status: ``conditions``, ``nodes``, ``consumed_s``).

    ``job`` and ``queue`` name the job and ClusterQueue an admission check made it for ("" for
    a request made by hand); ``nodes`` are the provisioned nodes; ``consumed_s`` when a pod
    first ran on them.
    """

    name: str
    pod_sets: tuple[PodSet, ...]
    namespace: str = "default"
    provisioning_class_name: str = DEFAULT_CLASS
    max_run_duration_s: float | None = None
    job: str = ""
    queue: str = ""
    created_s: float = 0.0
    conditions: tuple[Condition, ...] = ()
    nodes: tuple[str, ...] = ()
    consumed_s: float | None = None

    def __post_init__(self) -> None:
        def bad(path: str, value: object, rule: str) -> InvalidJobError:
            return InvalidJobError(path, value, rule,
                                   job=f"ProvisioningRequest {self.namespace}/{self.name}")

        if not _NAME.fullmatch(self.name or ""):
            raise bad("name", self.name, "must be a lowercase RFC 1123 name")
        if not _LABEL.fullmatch(self.namespace or ""):
            raise bad("namespace", self.namespace, "must be a lowercase RFC 1123 label")
        if not 1 <= len(self.pod_sets) <= MAX_POD_SETS:
            raise bad("pod_sets", [ps.name for ps in self.pod_sets],
                      f"a ProvisioningRequest holds 1..{MAX_POD_SETS} pod sets")
        for i, ps in enumerate(self.pod_sets):
            if not 1 <= ps.count <= MAX_NODES:
                raise bad(f"pod_sets[{i}].count", ps.count,
                          f"must be 1..{MAX_NODES}: a request asks for at most {MAX_NODES} "
                          "nodes")
        total = sum(ps.count for ps in self.pod_sets)
        if total > MAX_NODES:
            raise bad("pod_sets[*].count", total,
                      f"the pod sets' counts add up to at most {MAX_NODES}: a request asks "
                      f"for at most {MAX_NODES} nodes")
        m = self.max_run_duration_s
        if m is not None and not (math.isfinite(m) and 0 < m <= MAX_RUN_DURATION_S):
            raise bad(MAX_RUN_PARAMETER, m, f"must be 1..{MAX_RUN_DURATION_S:.0f} seconds "
                                            "(7 days)")
        if not self.provisioning_class_name:
            raise bad("provisioning_class_name", "", "must not be empty")

    # -- reading ---------------------------------------------------------------------------------

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def node_label(self) -> str:
        """The value of ``REQUEST_LABEL`` on its nodes (namespaces hold no dots: unique)."""
        return f"{self.namespace}.{self.name}"

    @property
    def pod_set(self) -> PodSet:
        """The first pod set (the only one of most requests)."""
        return self.pod_sets[0]

    @property
    def pod_count(self) -> int:
        return sum(ps.count for ps in self.pod_sets)

    def condition(self, kind: ConditionType) -> Condition | None:
        return next((c for c in self.conditions if c.type is kind), None)

    def is_true(self, kind: ConditionType) -> bool:
        c = self.condition(kind)
        return c is not None and c.status

    @property
    def provisioned_s(self) -> float | None:
        c = self.condition(ConditionType.PROVISIONED)
        return c.time_s if c is not None and c.status else None

    @property
    def ended(self) -> bool:
        """Failed, expired or revoked: it holds nothing any more."""
        return any(self.is_true(k) for k in (ConditionType.FAILED, ConditionType.BOOKING_EXPIRED,
                                             ConditionType.CAPACITY_REVOKED))

    @property
    def booked(self) -> bool:
        """Provisioned, not consumed yet, and not ended: its nodes wait for its pods."""
        return self.provisioned_s is not None and self.consumed_s is None and not self.ended

    @property
    def booking_expires_s(self) -> float | None:
        t = self.provisioned_s
        return None if t is None or self.consumed_s is not None else t + BOOKING_S

    @property
    def run_ends_s(self) -> float | None:
        """When the cloud reclaims the nodes: ``maxRunDurationSeconds`` after Provisioned."""
        t = self.provisioned_s
        return None if t is None or self.max_run_duration_s is None \
            else t + self.max_run_duration_s

    def with_condition(self, kind: ConditionType, status: bool, reason: str, message: str,
                       now_s: float) -> ProvisioningRequest:
        old = self.condition(kind)
        when = old.time_s if old is not None and old.status == status else now_s
        cond = Condition(kind, status, reason, message, when)
        rest = tuple(c for c in self.conditions if c.type is not kind)
        order = list(ConditionType)
        return replace(self, conditions=tuple(sorted((*rest, cond),
                                                     key=lambda c: order.index(c.type))))

    def pinned(self, job: Job) -> Job:
        """``job`` with its pods pinned to this request's nodes: the selector and the
        toleration of ``REQUEST_LABEL``, as Kueue's podSetUpdates would write them."""
        tol = Toleration(REQUEST_LABEL, "Equal", self.node_label)
        pod_sets = tuple(replace(ps, node_selector={**ps.node_selector,
                                                    REQUEST_LABEL: self.node_label},
                                 tolerations=(*ps.tolerations, tol))
                         for ps in job.pod_sets)
        return replace(job, pod_sets=pod_sets)

    def to_dict(self) -> dict[str, Any]:
        params = {} if self.max_run_duration_s is None else \
            {MAX_RUN_PARAMETER: str(int(self.max_run_duration_s))}
        return {
            "name": self.name, "namespace": self.namespace,
            "provisioningClassName": self.provisioning_class_name,
            "podSets": [{"name": ps.name, "count": ps.count, "cpuMilli": ps.cpu_milli,
                         "memoryMib": ps.memory_mib,
                         "gpu": {"count": ps.gpu.count, "gpuMilli": ps.gpu.gpu_milli,
                                 "memoryMib": ps.gpu.memory_mib,
                                 "migProfile": ps.gpu.mig_profile,
                                 "models": sorted(ps.gpu.models)},
                         "nodeSelector": dict(ps.node_selector)} for ps in self.pod_sets],
            "parameters": params, "job": self.job, "queue": self.queue,
            "createdAt": self.created_s,
            "conditions": [c.to_dict() for c in self.conditions],
            "nodes": list(self.nodes), "consumedAt": self.consumed_s,
        }


_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def request_name(job: str, attempt: int) -> str:
    """A request's name from its job's id and the attempt (``<job>-<n>``), lowercased, with
    characters a Kubernetes name cannot hold replaced by '-'."""
    base = re.sub(r"[^a-z0-9.-]+", "-", job.lower()).strip("-.") or "job"
    return f"{base[:240]}-{attempt}"


# -- the book of requests ------------------------------------------------------------------------


class ProvisioningBook:
    """Every ProvisioningRequest and its conditions. The cloud's answers come in as facts
    (``accept``, ``provisioned``, ``fail``, ``revoke``), pods starting on the nodes as
    ``consume``; the booking's expiry is derived from the time given to ``expire``."""

    def __init__(self, max_active_per_project: int = MAX_ACTIVE_PER_PROJECT,
                 booking_s: float = BOOKING_S) -> None:
        self.max_active_per_project = max_active_per_project
        self.booking_s = booking_s
        self._reqs: dict[str, ProvisioningRequest] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._reqs

    def __iter__(self) -> Iterator[ProvisioningRequest]:
        return iter(list(self._reqs.values()))

    def __len__(self) -> int:
        return len(self._reqs)

    def get(self, key: str) -> ProvisioningRequest:
        try:
            return self._reqs[key]
        except KeyError:
            raise NotFoundError(f"ProvisioningRequest {key!r} does not exist") from None

    def find(self, key: str) -> ProvisioningRequest | None:
        return self._reqs.get(key)

    def active(self, namespace: str) -> int:
        """Requests of a project (namespace) that are not ended: they count to its limit."""
        return sum(1 for r in self._reqs.values() if r.namespace == namespace and not r.ended)

    def at_limit(self, namespace: str) -> bool:
        return self.active(namespace) >= self.max_active_per_project

    def create(self, req: ProvisioningRequest, now_s: float) -> ProvisioningRequest:
        """Store a new request. The same request again is a no-op; another one under a taken
        name a ConflictError. Past the project's limit it is stored refused: Accepted=False,
        Failed=True, with the reason."""
        old = self._reqs.get(req.key)
        if old is not None:
            if replace(old, conditions=(), nodes=(), consumed_s=None, created_s=0.0) == \
                    replace(req, conditions=(), nodes=(), consumed_s=None, created_s=0.0):
                return old
            raise ConflictError(f"ProvisioningRequest {req.key} exists already")
        req = replace(req, created_s=now_s, conditions=(), nodes=(), consumed_s=None)
        if self.at_limit(req.namespace):
            why = (f"project {req.namespace} has {self.active(req.namespace)} active "
                   f"ProvisioningRequests, the most allowed ({self.max_active_per_project})")
            req = req.with_condition(ConditionType.ACCEPTED, False, "TooManyRequests", why,
                                     now_s)
            req = req.with_condition(ConditionType.FAILED, True, "TooManyRequests", why, now_s)
        self._reqs[req.key] = req
        return req

    def restore(self, req: ProvisioningRequest) -> None:
        """A request as it stood before a restart, conditions and all (no rule is applied:
        it was accepted then)."""
        self._reqs[req.key] = req

    def _set(self, req: ProvisioningRequest) -> ProvisioningRequest:
        self._reqs[req.key] = req
        return req

    def accept(self, key: str, now_s: float) -> ProvisioningRequest:
        req = self.get(key)
        if req.ended or req.is_true(ConditionType.ACCEPTED):
            return req
        return self._set(req.with_condition(ConditionType.ACCEPTED, True, "Accepted",
                                            "queued for capacity", now_s))

    def provisioned(self, key: str, nodes: Iterable[str], now_s: float) -> ProvisioningRequest:
        """Every node of the request exists (the adapter added them to the cluster)."""
        req = self.get(key)
        if req.ended:
            raise ConflictError(f"ProvisioningRequest {key} has ended; it cannot be "
                                "provisioned")
        if req.provisioned_s is not None:
            return req
        req = replace(req, nodes=tuple(nodes))
        if not req.is_true(ConditionType.ACCEPTED):
            req = req.with_condition(ConditionType.ACCEPTED, True, "Accepted",
                                     "queued for capacity", now_s)
        return self._set(req.with_condition(
            ConditionType.PROVISIONED, True, "Provisioned",
            f"{len(req.nodes)} nodes provisioned; booked for {self.booking_s:.0f}s", now_s))

    def fail(self, key: str, message: str, now_s: float,
             reason: str = "ProvisioningFailed") -> ProvisioningRequest:
        req = self.get(key)
        if req.ended:
            return req
        return self._set(req.with_condition(ConditionType.FAILED, True, reason, message, now_s))

    def revoke(self, key: str, message: str, now_s: float,
               reason: str = "CapacityRevoked") -> ProvisioningRequest:
        req = self.get(key)
        if req.is_true(ConditionType.CAPACITY_REVOKED):
            return req
        return self._set(req.with_condition(ConditionType.CAPACITY_REVOKED, True, reason,
                                            message, now_s))

    def consume(self, key: str, now_s: float) -> ProvisioningRequest:
        req = self.get(key)
        if req.consumed_s is not None:
            return req
        if not req.booked:
            raise ConflictError(f"ProvisioningRequest {key} holds no booking to consume")
        return self._set(replace(req, consumed_s=now_s))

    def delete(self, key: str) -> ProvisioningRequest:
        """Delete (cancel) a request; what it asked for is no longer wanted."""
        req = self.get(key)
        del self._reqs[key]
        return req

    def expire(self, now_s: float) -> list[ProvisioningRequest]:
        """Bookings not consumed ``booking_s`` after Provisioned: BookingExpired now."""
        out = []
        for req in list(self._reqs.values()):
            t = req.provisioned_s
            if req.booked and t is not None and now_s >= t + self.booking_s:
                out.append(self._set(req.with_condition(
                    ConditionType.BOOKING_EXPIRED, True, "BookingExpired",
                    f"no pod consumed the booking within {self.booking_s:.0f}s of "
                    "provisioning", now_s)))
        return out

    def next_deadline(self) -> float | None:
        """The earliest time a booking expires, if any waits."""
        times = [r.provisioned_s + self.booking_s for r in self._reqs.values()
                 if r.booked and r.provisioned_s is not None]
        return min(times, default=None)


# -- the admission check's configuration ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryStrategy:
    """Kueue's ``retryStrategy``: after a failed request the job waits ``delay_s(k)`` before
    its k-th retry; after ``backoff_limit_count`` retries the check is Rejected."""

    backoff_limit_count: int = 3
    backoff_base_s: float = 60.0
    backoff_max_s: float = 1800.0

    def __post_init__(self) -> None:
        if self.backoff_limit_count < 0:
            raise ConfigError(f"retryStrategy.backoffLimitCount={self.backoff_limit_count}: "
                              "must be zero or more")
        if not self.backoff_base_s > 0:
            raise ConfigError(f"retryStrategy.backoffBaseSeconds={self.backoff_base_s}: must "
                              "be positive")
        if self.backoff_max_s < self.backoff_base_s:
            raise ConfigError(f"retryStrategy.backoffMaxSeconds={self.backoff_max_s}: must be "
                              f"at least backoffBaseSeconds ({self.backoff_base_s})")

    def delay_s(self, retry: int) -> float:
        """Wait before retry number ``retry`` (1-based): base x 2^(retry-1), capped."""
        return min(self.backoff_max_s, self.backoff_base_s * 2.0 ** max(0, retry - 1))


@dataclass(frozen=True, slots=True)
class ProvisioningRequestConfig:
    """Kueue's ProvisioningRequestConfig: the class the requests name, parameters passed to the
    cloud (``maxRunDurationSeconds`` among them, which gpupool also reads), the retries."""

    name: str = "default"
    provisioning_class_name: str = DEFAULT_CLASS
    parameters: Mapping[str, str] = field(default_factory=dict)
    retry: RetryStrategy = RetryStrategy()
    node_selector_details: Mapping[str, str] = field(default_factory=dict)
    """Kueue's ``podSetUpdates.nodeSelector``: node label key -> the key of the request's
    ``status.provisioningClassDetails`` whose value the provisioned nodes carry in that label
    (classes that label their nodes per request, e.g. GKE's ``ResizeRequestName``)."""

    def __post_init__(self) -> None:
        if not self.provisioning_class_name:
            raise ConfigError(f"ProvisioningRequestConfig {self.name}: provisioningClassName "
                              "must not be empty")
        object.__setattr__(self, "parameters", dict(self.parameters))
        object.__setattr__(self, "node_selector_details", dict(self.node_selector_details))
        _ = self.max_run_duration_s  # validated here

    @property
    def max_run_duration_s(self) -> float | None:
        raw = self.parameters.get(MAX_RUN_PARAMETER)
        if raw is None:
            return None
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and 0 < value <= MAX_RUN_DURATION_S):
            raise ConfigError(f"ProvisioningRequestConfig {self.name}: parameters."
                              f"{MAX_RUN_PARAMETER}={raw!r}: must be 1..{MAX_RUN_DURATION_S:.0f}"
                              " seconds (7 days)")
        return value


@dataclass(frozen=True, slots=True)
class AdmissionCheck:
    """Kueue's AdmissionCheck: a name ClusterQueues list in ``admissionChecks``, the controller
    that decides it, and its parameters. gpupool decides the provisioning-request check."""

    name: str
    controller_name: str = PROVISIONING_CONTROLLER
    config: ProvisioningRequestConfig = ProvisioningRequestConfig()

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("AdmissionCheck: name must not be empty")
        if self.controller_name != PROVISIONING_CONTROLLER:
            raise ConfigError(f"AdmissionCheck {self.name}: controllerName="
                              f"{self.controller_name!r}: not supported; known: "
                              f"{PROVISIONING_CONTROLLER}")


# -- the admission check's state -----------------------------------------------------------------


class CheckState(StrEnum):
    """Kueue's AdmissionCheckState, per job."""

    PENDING = "Pending"  # waiting for quota (queued) or for its request (quota reserved)
    READY = "Ready"  # its request is Provisioned: the job starts on the nodes
    RETRY = "Retry"  # its request failed; quota released; waiting out the backoff
    REJECTED = "Rejected"  # retries spent: parked for good


@dataclass(slots=True)
class CheckRecord:
    """One job's way through the check. ``request`` is the key of its current request ("" when
    none); ``demand`` the quota reserved for it (empty when none); ``attempts`` the requests
    made so far."""

    job: Job
    queue: str
    check: AdmissionCheck
    namespace: str
    state: CheckState = CheckState.PENDING
    request: str = ""
    flavor: str = ""
    demand: Vec = field(default_factory=dict)
    attempts: int = 0
    retry_at_s: float = 0.0
    message: str = ""
    preemptions: int = 0


class AdmissionChecks:
    """The provisioning admission checks of a QueueConfig and every job's state in them; the
    queue-aware cycle (``core.cycle``) drives it."""

    def __init__(self, config: QueueConfig,
                 max_active_per_project: int = MAX_ACTIVE_PER_PROJECT) -> None:
        self.reconfigure(config)
        self.book = ProvisioningBook(max_active_per_project)
        self.records: dict[JobId, CheckRecord] = {}
        self.made: dict[JobId, int] = {}  # requests made per job, ever: their names' suffix
        self.booked: dict[JobId, str] = {}  # running job -> the request it consumed
        self.submitted: dict[JobId, Job] = {}  # running job -> as submitted (run limit uncut)
        self.outbox: list[str] = []  # requests deleted between cycles, for the next result

    def reconfigure(self, config: QueueConfig) -> None:
        """The checks of a new configuration; requests, records and bookings are kept (a job
        already in a check finishes it as it began)."""
        self.checks = {c.name: c for c in config.admission_checks}
        self.by_queue: dict[str, AdmissionCheck] = {}
        for q in config.cluster_queues:
            for name in q.admission_checks:
                self.by_queue[q.name] = self.checks[name]
        self._ns = {lq.name: lq.namespace for lq in config.local_queues}

    def check_for(self, queue: str) -> AdmissionCheck | None:
        return self.by_queue.get(queue)

    def namespace(self, job: Job) -> str:
        """The project a job's requests count to: its LocalQueue's namespace."""
        q = str(job.queue)
        if "/" in q:
            return q.split("/", 1)[0]
        return self._ns.get(q, "default")

    def validate(self, job: Job, queue: str) -> None:
        """Rules for a job of a queue with a provisioning check, instead of the inventory
        checks (its nodes do not exist yet): at most MAX_POD_SETS pod sets and MAX_NODES pods."""
        check_request(job)
        if len(job.pod_sets) > MAX_POD_SETS:
            raise InvalidJobError(
                "pod_sets", [ps.name for ps in job.pod_sets],
                f"queue {queue} provisions capacity through admission check "
                f"{self.by_queue[queue].name}, and a ProvisioningRequest holds at most "
                f"{MAX_POD_SETS} pod sets", job=job.id)
        for i, ps in enumerate(job.pod_sets):
            if ps.count > MAX_NODES:
                raise InvalidJobError(
                    f"pod_sets[{i}].count", ps.count,
                    f"a ProvisioningRequest asks for at most {MAX_NODES} nodes", job=job.id)
        if job.task_count > MAX_NODES:
            raise InvalidJobError(
                "pod_sets[*].count", job.task_count,
                f"a ProvisioningRequest asks for at most {MAX_NODES} nodes in all its pod sets",
                job=job.id)

    def request_for(self, rec: CheckRecord, pod_sets: tuple[PodSet, ...], now_s: float) \
            -> ProvisioningRequest:
        """The next request of ``rec``'s job (attempt ``rec.attempts + 1``), named
        ``<job>-<n>`` with n counting every request the job ever had, so a name is not reused
        (a job requeued after its capacity was revoked starts its attempts afresh)."""
        rec.attempts += 1
        made = self.made.get(rec.job.id, 0)
        while True:
            made += 1
            name = request_name(str(rec.job.id), made)
            if f"{rec.namespace}/{name}" not in self.book:
                break
        self.made[rec.job.id] = made
        cfg = rec.check.config
        req = ProvisioningRequest(
            name=name, pod_sets=pod_sets, namespace=rec.namespace,
            provisioning_class_name=cfg.provisioning_class_name,
            max_run_duration_s=cfg.max_run_duration_s, job=str(rec.job.id), queue=rec.queue)
        return self.book.create(req, now_s)

    def record_of(self, request: str) -> CheckRecord | None:
        for rec in self.records.values():
            if rec.request == request:
                return rec
        return None

    def orphans(self, queue: str) -> list[ProvisioningRequest]:
        """Bookings a check made for a job of ``queue`` that no longer waits for them, the one
        that expires first first: the next job that fits their nodes takes them."""
        mine = {r.request for r in self.records.values() if r.request}
        out = [r for r in self.book if r.booked and r.queue == queue and r.job
               and r.key not in mine and r.key not in self.booked.values()]
        out.sort(key=lambda r: (r.booking_expires_s or 0.0, r.key))
        return out

    def status(self, rec: CheckRecord) -> str:
        return f"admission check {rec.check.name} {rec.state.value}: {rec.message}"
