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

The package: ``request`` (the object, its conditions and limits), ``ledger`` (every request),
``config`` (AdmissionCheck, ProvisioningRequestConfig, RetryStrategy), ``checks`` (each job's
way through the check, private behind verbs) and ``admit`` (the cycle's steps for checked
queues).
"""

from gpupool.core.provisioning.checks import (
    AdmissionChecks,
    CheckRecord,
    CheckState,
    Failure,
    ProvisioningState,
)
from gpupool.core.provisioning.config import (
    AdmissionCheck,
    ProvisioningRequestConfig,
    RetryStrategy,
)
from gpupool.core.provisioning.ledger import RequestLedger
from gpupool.core.provisioning.request import (
    BEST_EFFORT_ATOMIC_CLASS,
    BOOKING_S,
    CHECK_CAPACITY_CLASS,
    CLASS_ANNOTATION,
    CONSUME_ANNOTATION,
    DEFAULT_CLASS,
    MAX_ACTIVE_PER_PROJECT,
    MAX_NODES,
    MAX_POD_SETS,
    MAX_RUN_DURATION_S,
    MAX_RUN_PARAMETER,
    PROVISIONING_CONTROLLER,
    REQUEST_LABEL,
    Condition,
    ConditionType,
    ProvisioningRequest,
    request_name,
)

__all__ = [
    "BEST_EFFORT_ATOMIC_CLASS",
    "BOOKING_S",
    "CHECK_CAPACITY_CLASS",
    "CLASS_ANNOTATION",
    "CONSUME_ANNOTATION",
    "DEFAULT_CLASS",
    "MAX_ACTIVE_PER_PROJECT",
    "MAX_NODES",
    "MAX_POD_SETS",
    "MAX_RUN_DURATION_S",
    "MAX_RUN_PARAMETER",
    "PROVISIONING_CONTROLLER",
    "REQUEST_LABEL",
    "AdmissionCheck",
    "AdmissionChecks",
    "CheckRecord",
    "CheckState",
    "Condition",
    "ConditionType",
    "Failure",
    "ProvisioningRequest",
    "ProvisioningRequestConfig",
    "ProvisioningState",
    "RequestLedger",
    "RetryStrategy",
    "request_name",
]
