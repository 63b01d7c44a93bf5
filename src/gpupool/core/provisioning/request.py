"""A ProvisioningRequest (cluster-autoscaler's ``autoscaling.x-k8s.io/v1`` object): its spec, its
conditions, the limits checked when one is built, and the names gpupool gives it.

Rules checked when a request is built (InvalidJobError naming the field otherwise): 1 to
``MAX_POD_SETS`` (32, the API's ``maxItems``) pod sets; at most ``MAX_NODES`` (1,000) pods in
all, one node each at most; ``maxRunDurationSeconds`` at most ``MAX_RUN_DURATION_S`` (7 days).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from gpupool.core.errors import InvalidJobError
from gpupool.core.model import Job, PodSet, Toleration

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
        return {
            "type": self.type.value,
            "status": "True" if self.status else "False",
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": self.time_s,
        }


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
            return InvalidJobError(
                path, value, rule, job=f"ProvisioningRequest {self.namespace}/{self.name}"
            )

        if not _NAME.fullmatch(self.name or ""):
            raise bad("name", self.name, "must be a lowercase RFC 1123 name")
        if not _LABEL.fullmatch(self.namespace or ""):
            raise bad("namespace", self.namespace, "must be a lowercase RFC 1123 label")
        if not 1 <= len(self.pod_sets) <= MAX_POD_SETS:
            raise bad(
                "pod_sets",
                [ps.name for ps in self.pod_sets],
                f"a ProvisioningRequest holds 1..{MAX_POD_SETS} pod sets",
            )
        for i, ps in enumerate(self.pod_sets):
            if not 1 <= ps.count <= MAX_NODES:
                raise bad(
                    f"pod_sets[{i}].count",
                    ps.count,
                    f"must be 1..{MAX_NODES}: a request asks for at most {MAX_NODES} nodes",
                )
        total = sum(ps.count for ps in self.pod_sets)
        if total > MAX_NODES:
            raise bad(
                "pod_sets[*].count",
                total,
                f"the pod sets' counts add up to at most {MAX_NODES}: a request asks "
                f"for at most {MAX_NODES} nodes",
            )
        m = self.max_run_duration_s
        if m is not None and not (math.isfinite(m) and 0 < m <= MAX_RUN_DURATION_S):
            raise bad(MAX_RUN_PARAMETER, m, f"must be 1..{MAX_RUN_DURATION_S:.0f} seconds (7 days)")
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
        return any(
            self.is_true(k)
            for k in (
                ConditionType.FAILED,
                ConditionType.BOOKING_EXPIRED,
                ConditionType.CAPACITY_REVOKED,
            )
        )

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
        return None if t is None or self.max_run_duration_s is None else t + self.max_run_duration_s

    def with_condition(
        self, kind: ConditionType, status: bool, reason: str, message: str, now_s: float
    ) -> ProvisioningRequest:
        old = self.condition(kind)
        when = old.time_s if old is not None and old.status == status else now_s
        cond = Condition(kind, status, reason, message, when)
        rest = tuple(c for c in self.conditions if c.type is not kind)
        order = list(ConditionType)
        return replace(
            self, conditions=tuple(sorted((*rest, cond), key=lambda c: order.index(c.type)))
        )

    def pinned(self, job: Job) -> Job:
        """``job`` with its pods pinned to this request's nodes: the selector and the
        toleration of ``REQUEST_LABEL``, as Kueue's podSetUpdates would write them."""
        tol = Toleration(REQUEST_LABEL, "Equal", self.node_label)
        pod_sets = tuple(
            replace(
                ps,
                node_selector={**ps.node_selector, REQUEST_LABEL: self.node_label},
                tolerations=(*ps.tolerations, tol),
            )
            for ps in job.pod_sets
        )
        return replace(job, pod_sets=pod_sets)

    def to_dict(self) -> dict[str, Any]:
        params = (
            {}
            if self.max_run_duration_s is None
            else {MAX_RUN_PARAMETER: str(int(self.max_run_duration_s))}
        )
        return {
            "name": self.name,
            "namespace": self.namespace,
            "provisioningClassName": self.provisioning_class_name,
            "podSets": [
                {
                    "name": ps.name,
                    "count": ps.count,
                    "cpuMilli": ps.cpu_milli,
                    "memoryMib": ps.memory_mib,
                    "gpu": {
                        "count": ps.gpu.count,
                        "gpuMilli": ps.gpu.gpu_milli,
                        "memoryMib": ps.gpu.memory_mib,
                        "migProfile": ps.gpu.mig_profile,
                        "models": sorted(ps.gpu.models),
                    },
                    "nodeSelector": dict(ps.node_selector),
                }
                for ps in self.pod_sets
            ],
            "parameters": params,
            "job": self.job,
            "queue": self.queue,
            "createdAt": self.created_s,
            "conditions": [c.to_dict() for c in self.conditions],
            "nodes": list(self.nodes),
            "consumedAt": self.consumed_s,
        }


_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def request_name(job: str, attempt: int) -> str:
    """A request's name from its job's id and the attempt (``<job>-<n>``), lowercased, with
    characters a Kubernetes name cannot hold replaced by '-'."""
    base = re.sub(r"[^a-z0-9.-]+", "-", job.lower()).strip("-.") or "job"
    return f"{base[:240]}-{attempt}"
