"""Factories for tests: the form of kube-scheduler's MakePod() and Kueue's MakeWorkload()."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpupool.core import (
    Gpu,
    GpuRequest,
    Job,
    JobId,
    MigInstance,
    Node,
    NodeName,
    PodSet,
    Taint,
    Toleration,
)


def gpus(
    count: int,
    model: str = "A100",
    memory_mib: int = 40960,
    nvlink: bool = False,
    unhealthy: Iterable[int] = (),
) -> tuple[Gpu, ...]:
    bad = set(unhealthy)
    return tuple(
        Gpu(
            index=i,
            model=model,
            memory_mib=memory_mib,
            uuid=f"GPU-{model}-{i}",
            healthy=i not in bad,
            nvlink_peers=tuple(j for j in range(count) if j != i) if nvlink else (),
        )
        for i in range(count)
    )


def node(
    name: str,
    gpu: int = 8,
    model: str = "A100",
    cpu: int = 64_000,
    mem: int = 512_000,
    gpu_mem: int = 40960,
    labels: Mapping[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    schedulable: bool = True,
    nvlink: bool = False,
    unhealthy: Iterable[int] = (),
    cards: tuple[Gpu, ...] | None = None,
) -> Node:
    return Node(
        NodeName(name),
        cpu,
        mem,
        cards if cards is not None else gpus(gpu, model, gpu_mem, nvlink, unhealthy),
        labels=dict(labels or {}),
        taints=taints,
        schedulable=schedulable,
    )


def mig_node(name: str, profile: str = "1g.10gb", per_card: int = 7, cards: int = 2) -> Node:
    inst = (MigInstance(profile, per_card, 140, 10240),)
    return Node(
        NodeName(name),
        64_000,
        512_000,
        tuple(Gpu(i, "A100-80GB", 81920, mig=inst) for i in range(cards)),
    )


def whole(count: int, models: Iterable[str] = (), memory_mib: int = 0) -> GpuRequest:
    return GpuRequest(count=count, models=frozenset(models), memory_mib=memory_mib)


def share(milli: int, mib: int = 0, models: Iterable[str] = ()) -> GpuRequest:
    return GpuRequest(gpu_milli=milli, memory_mib=mib, models=frozenset(models))


def mig(profile: str) -> GpuRequest:
    return GpuRequest(mig_profile=profile)


def job(
    name: str,
    tasks: int = 1,
    gpu: GpuRequest | None = None,
    cpu: int = 1000,
    mem: int = 1024,
    queue: str = "default",
    priority: int = 0,
    min_member: int | None = None,
    selector: Mapping[str, str] | None = None,
    tolerations: tuple[Toleration, ...] = (),
    submit: float = 0.0,
    duration: float | None = None,
) -> Job:
    from gpupool.core import QueueName

    return Job(
        id=JobId(name),
        pod_sets=(
            PodSet(
                "main",
                count=tasks,
                cpu_milli=cpu,
                memory_mib=mem,
                gpu=gpu or GpuRequest(),
                node_selector=dict(selector or {}),
                tolerations=tolerations,
            ),
        ),
        queue=QueueName(queue),
        priority=priority,
        min_member=min_member,
        submit_time_s=submit,
        duration_s=duration,
    )


def queue_config(
    quotas: Mapping[str, int],
    cohort: str | None = "all",
    flavor_labels: Mapping[str, str] | None = None,
    **settings: float,
):
    """ClusterQueues with a nominal quota in whole GPUs each, in one cohort by default."""
    from gpupool.core.quota import (
        ClusterQueue,
        FlavorQuotas,
        QueueConfig,
        QueueSettings,
        Quota,
        Resource,
        ResourceFlavor,
    )

    base = {"min_runtime_s": 0.0, "preemption_cooldown_s": 0.0}
    base.update(settings)
    return QueueConfig(
        flavors=(ResourceFlavor("gpu", dict(flavor_labels or {})),),
        cluster_queues=tuple(
            ClusterQueue(
                name, (FlavorQuotas("gpu", {Resource.GPU_MILLI: Quota(n * 1000)}),), cohort=cohort
            )
            for name, n in quotas.items()
        ),
        settings=QueueSettings(**base),  # type: ignore[arg-type]
    )
