"""The cluster as a whole, its history, and each node down to its cards and their holders."""

from __future__ import annotations

from pydantic import Field

from gpupool.api.models.base import Used, Wire


class NodeCounts(Wire):
    total: int
    ready: int
    cordoned: int
    failed: int


class GpuTotals(Wire):
    """Every card, MIG-partitioned ones too; ``allocated`` in cards."""

    total: int
    mig_partitioned: int
    allocated: float
    allocated_pct: float


class Fragmentation(Wire):
    free_gpu_milli: int
    fragmented_gpu_milli: int
    ratio: float
    rule: str


class FlavorUse(Wire):
    name: str
    nodes: int
    gpus: int
    gpu_milli_used: int


class LastCycle(Wire):
    time: str
    time_seconds: float
    bound: int
    finished: int
    evicted: int
    parked: int
    decision_ms: float


class Cluster(Wire):
    """Totals, allocation and fragmentation; ``time`` is the cluster's clock now."""

    time: str
    time_seconds: float
    speed: float
    nodes: NodeCounts
    gpus: GpuTotals
    gpu_milli: Used
    cpu_milli: Used
    memory_mib: Used
    fragmentation: Fragmentation
    jobs: dict[str, int] = Field(description="jobs by phase")
    flavors: list[FlavorUse]
    cycles: int
    last_cycle: LastCycle | None


class QueueSample(Wire):
    gpu_milli: int
    share: float


class Sample(Wire):
    time: str
    time_seconds: float
    queues: dict[str, QueueSample]
    allocated_pct: float
    pending: int


class History(Wire):
    samples: list[Sample]


class Holder(Wire):
    """Who holds how much of a card; another tenant's holder reads ``(another tenant)``."""

    job: str
    namespace: str
    task: str
    gpu_milli: int
    memory_mib: int
    mig_profile: str | None


class MigSlots(Wire):
    profile: str
    count: int
    free: int
    gpu_milli: int
    memory_mib: int


class MeasuredCard(Wire):
    """What a card is measured to do (placement by measured use), beside its requests."""

    fresh: bool = Field(description="false: no recent sample, placed by requests")
    load_milli: int = Field(
        description="the load placement uses: measured with estimates, or requested when not fresh"
    )
    util_pct: float | None
    used_mib: int | None
    free_mib: int | None
    age_seconds: float | None
    estimate_milli: int = Field(
        description="what pods placed since the last sample are expected to add"
    )


class Card(Wire):
    index: int
    model: str
    memory_mib: int
    vendor: str = Field("nvidia", description="the accelerator's vendor")
    division: str = Field(
        "", description="how the card may be divided (free split, templates, fractions, whole only)"
    )
    relative_capacity: float = Field(
        1.0, description="compute relative to the reference card, for normalised quota and share"
    )
    uuid: str
    healthy: bool
    nvlink_peers: list[int]
    mig: list[MigSlots]
    used_milli: int
    used_mib: int
    holders: list[Holder]
    measured: MeasuredCard | None = None


class TaintView(Wire):
    schema_name = "Taint"

    key: str
    value: str
    effect: str


class NodeView(Wire):
    name: str
    state: str = Field(description="ready, cordoned or failed")
    unschedulable: bool
    failed: bool
    flavor: str
    labels: dict[str, str]
    taints: list[TaintView]
    cpu_milli: Used
    memory_mib: Used
    gpus: list[Card]
    measured_reason: str | None = Field(
        None,
        description="with placement by measured use: why this node is placed by "
        "requests (stale or missing samples), empty when its samples are read",
    )


class NodeList(Wire):
    items: list[NodeView]


class DrainedNode(NodeView):
    requeued: list[str] = Field(description="the jobs sent back to their queues")
