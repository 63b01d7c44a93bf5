"""The shape of queue documents: every field Kueue's ``v1beta1`` and ``v1beta2`` schemas allow.

These pydantic models check shape only (a key gpupool does not know is an error, so a typo is
caught); the values are checked and translated in ``queues.py`` (with ``queue_cluster.py`` and
``queue_checks.py``). The fields follow Kueue's API types (``apis/kueue/v1beta1`` and
``v1beta2``) so that ``kubectl get -o yaml`` of a live Kueue install, with every field the API
server defaults, loads. A default of ``None`` here means "not written": ``queue_cluster.py``
applies the defaults of the object's API group (Kueue's for ``kueue.x-k8s.io``, gpupool's for
``gpupool.io``). Structures gpupool reads but does not act on (``flavorFungibility``,
``podSetUpdates``, ...) are kept loose: any mapping is accepted, and the translation reports
them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gpupool.config.documents import Duration, Metadata, Quantity, Strict

__all__ = [
    "AdmissionCheckDoc",
    "ClusterQueueDoc",
    "CohortDoc",
    "FairSharingSpec",
    "LocalQueueDoc",
    "PriorityClassDoc",
    "ProvisioningRequestConfigDoc",
    "QueueSettingsDoc",
    "ResourceFlavorDoc",
    "ResourceGroupSpec",
    "ResourceQuotaSpec",
    "WorkloadPriorityClassDoc",
]

StopPolicy = Literal["None", "Hold", "HoldAndDrain"]


class ResourceQuotaSpec(Strict):
    name: str
    nominal_quota: Quantity
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class NormalizedQuotaSpec(Strict):
    """gpupool's extension: quota of compute across all flavors, in reference GPUs."""

    nominal_quota: Quantity
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class FlavorQuotasSpec(Strict):
    name: str
    resources: list[ResourceQuotaSpec] = Field(min_length=1)


class ResourceGroupSpec(Strict):
    covered_resources: list[str] | None = None
    flavors: list[FlavorQuotasSpec] = Field(min_length=1)


class FairSharingSpec(Strict):
    weight: Quantity | None = None


class BorrowWithinCohortSpec(Strict):
    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: int | None = None


class PreemptionSpec(Strict):
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] | None = (
        None
    )
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] | None = None
    borrow_within_cohort: BorrowWithinCohortSpec | None = None
    fair_share: bool | None = None
    """gpupool's extension: whether fair-share preemption across queues may take from it."""


class FlavorFungibilitySpec(Strict):
    when_can_borrow: Literal["MayStopSearch", "TryNextFlavor", "Borrow"] | None = None
    when_can_preempt: Literal["MayStopSearch", "TryNextFlavor", "Preempt"] | None = None
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] | None = None


class AdmissionCheckStrategyRuleSpec(Strict):
    name: str
    on_flavors: list[str] | None = None


class AdmissionChecksStrategySpec(Strict):
    admission_checks: list[AdmissionCheckStrategyRuleSpec] = Field(default_factory=list)


class ClusterQueueSpec(Strict):
    resource_groups: list[ResourceGroupSpec] = Field(default_factory=list)
    cohort: str | None = None  # v1beta1
    cohort_name: str | None = None  # the spelling of v1beta2 and v1
    queueing_strategy: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"
    preemption: PreemptionSpec | None = None
    fair_sharing: FairSharingSpec | None = None
    non_preemptive: bool = False  # gpupool's extension
    namespace_selector: dict[str, Any] | None = None
    flavor_fungibility: FlavorFungibilitySpec | None = None
    admission_checks: list[str] | None = None  # v1beta1: AdmissionCheck names
    admission_checks_strategy: AdmissionChecksStrategySpec | None = None
    admission_scope: dict[str, Any] | None = None
    concurrent_admission_policy: dict[str, Any] | None = None
    stop_policy: StopPolicy | None = None
    normalized_quota: NormalizedQuotaSpec | None = None  # gpupool's extension


class CohortSpec(Strict):
    parent: str | None = None
    parent_name: str | None = None  # Kueue's spelling
    resource_groups: list[ResourceGroupSpec] = Field(default_factory=list)
    fair_sharing: FairSharingSpec | None = None
    normalized_quota: NormalizedQuotaSpec | None = None  # gpupool's extension


class ResourceFlavorSpec(Strict):
    node_labels: dict[str, str] = Field(default_factory=dict)
    node_taints: list[dict[str, Any]] | None = None
    tolerations: list[dict[str, Any]] | None = None
    topology_name: str | None = None


class LocalQueueSpec(Strict):
    cluster_queue: str
    stop_policy: StopPolicy | None = None
    fair_sharing: FairSharingSpec | None = None


class QueueSettingsSpec(Strict):
    usage_half_life: Duration | None = None
    default_runtime: Duration | None = None
    min_runtime: Duration | None = None
    max_preemptions_per_job: int | None = None
    preemption_cooldown: Duration | None = None
    normalized_shares: bool | None = None


class AdmissionCheckParametersSpec(Strict):
    api_group: str = "kueue.x-k8s.io"
    kind: str = "ProvisioningRequestConfig"
    name: str


class AdmissionCheckSpec(Strict):
    controller_name: str
    parameters: AdmissionCheckParametersSpec | None = None
    retry_delay_minutes: int | None = None  # v1beta1 only, deprecated there


class RetryStrategySpec(Strict):
    backoff_limit_count: int | None = None
    backoff_base_seconds: int | None = None
    backoff_max_seconds: int | None = None


class ProvisioningRequestConfigSpec(Strict):
    provisioning_class_name: str
    parameters: dict[str, str] = Field(default_factory=dict)
    managed_resources: list[str] | None = None
    retry_strategy: RetryStrategySpec | None = None
    pod_set_updates: dict[str, Any] | None = None
    pod_set_merge_policy: (
        Literal["IdenticalPodTemplates", "IdenticalWorkloadSchedulingRequirements"] | None
    ) = None


class _Object(Strict):
    api_version: str | None = None
    kind: str
    metadata: Metadata
    status: Any = None  # written by the controller that owns the object; not read


class ResourceFlavorDoc(_Object):
    spec: ResourceFlavorSpec = ResourceFlavorSpec()


class ClusterQueueDoc(_Object):
    spec: ClusterQueueSpec = ClusterQueueSpec()


class CohortDoc(_Object):
    spec: CohortSpec = CohortSpec()


class LocalQueueDoc(_Object):
    spec: LocalQueueSpec


class AdmissionCheckDoc(_Object):
    spec: AdmissionCheckSpec


class ProvisioningRequestConfigDoc(_Object):
    spec: ProvisioningRequestConfigSpec


class WorkloadPriorityClassDoc(_Object):
    value: int
    description: str = ""


class PriorityClassDoc(_Object):
    value: int
    description: str = ""
    global_default: bool = False  # accepted; no effect
    preemption_policy: Literal["PreemptLowerPriority", "Never"] | None = None  # accepted


class QueueSettingsDoc(Strict):
    api_version: str | None = None
    kind: Literal["QueueSettings"]
    metadata: Metadata | None = None
    spec: QueueSettingsSpec = QueueSettingsSpec()
