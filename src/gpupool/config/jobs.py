"""Job documents: what a tenant submits to ``gpupool serve`` (``gpupool submit -f job.yaml``).

::

    apiVersion: gpupool.io/v1alpha1
    kind: Job
    metadata:
      name: llama-ft
      namespace: team-a                 # the tenant's namespace
      labels: {gpupool.io/queue: llm}   # or kueue.x-k8s.io/queue-name, or spec.queue
    spec:
      queue: llm                        # a LocalQueue of the namespace
      priorityClassName: high           # or priority: 100
      duration: 30m                     # how long it runs on the virtual cluster
      runLimit: 1h                      # optional: stopped at this limit; lets it backfill
      minMember: 4                      # optional gang size (default: every replica)
      user: alice
      podSets:
      - name: workers
        count: 4
        cpu: 8
        memory: 64Gi
        gpu: {count: 2, models: [A100-80GB]}     # or {milli: 500, memory: 20Gi}, {mig: 1g.5gb}
      alternatives:                     # optional: other accelerators it may run on, tried
      - name: ascend                    # after its own request in each of the queue's
        gpu: {count: 4, models: [Ascend910B3]}   # flavors, in the queue's flavor order
        image: registry/llama-ft:cann8  # the container settings that go with it
        env: {ASCEND_RT_VISIBLE_DEVICES: auto}

Pod sets that ask for a GPU tolerate the ``nvidia.com/gpu`` taint without saying so, as
Kubernetes' ExtendedResourceToleration admission plugin does. Errors name the field, the value
and the rule (``spec.podSets[0].gpu.milli=1500 is not a slice...``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Field, ValidationError

from gpupool.config.documents import (
    NAME_RULE,
    Duration,
    Metadata,
    Quantity,
    Strict,
    first_problem,
    is_name,
)
from gpupool.config.quantity import Converter, cpu_milli, duration_s, gpu_memory_mib, memory_mib
from gpupool.core.errors import ConfigError, InvalidJobError
from gpupool.core.model import (
    WHOLE_GPU_MILLI,
    Alternative,
    GpuRequest,
    Job,
    JobId,
    PodSet,
    QueueName,
    TaintEffect,
    Toleration,
)
from gpupool.core.quota import QueueConfig

API_VERSION = "gpupool.io/v1alpha1"
QUEUE_LABELS = ("gpupool.io/queue", "kueue.x-k8s.io/queue-name")
GPU_TOLERATION = Toleration("nvidia.com/gpu", "Exists")
MAX_REPLICAS = 10_000
MAX_DURATION_S = 366 * 86_400.0


class GpuSpec(Strict):
    count: int | None = Field(default=None, ge=1, le=64)
    milli: int | None = Field(default=None, ge=1, le=WHOLE_GPU_MILLI - 1)
    memory: Quantity | None = None
    mig: str | None = None
    models: list[str] = Field(default_factory=list)


class TolerationSpec(Strict):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str | None = None


class PodSetSpec(Strict):
    name: str = "main"
    count: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    cpu: Quantity = 0
    memory: Quantity = 0
    gpu: GpuSpec | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[TolerationSpec] = Field(default_factory=list)


class AlternativeSpec(Strict):
    name: str
    gpu: GpuSpec
    image: str = ""
    env: dict[str, str] = Field(default_factory=dict)


class JobSpec(Strict):
    queue: str | None = None
    priority: int | None = Field(default=None, ge=-(10**9), le=10**9)
    priority_class_name: str | None = None
    duration: Duration
    run_limit: Duration | None = None
    min_member: int | None = Field(default=None, ge=1, le=MAX_REPLICAS)
    user: str = ""
    pod_sets: list[PodSetSpec] = Field(min_length=1, max_length=8)
    alternatives: list[AlternativeSpec] = Field(default_factory=list, max_length=8)


class JobDocument(Strict):
    api_version: str = API_VERSION
    kind: str = "Job"
    metadata: Metadata
    spec: JobSpec


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A submitted job as the service keeps it: its document and the core job it makes."""

    namespace: str
    name: str
    queue: str
    priority_class: str
    job: Job
    document: Mapping[str, Any]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _err(path: str, value: object, rule: str) -> InvalidJobError:
    return InvalidJobError(path, value, rule)


def parse_job(
    body: object,
    config: QueueConfig,
    *,
    namespace: str | None = None,
    submit_time_s: float = 0.0,
    check_queue: bool = True,
) -> JobRequest:
    """A Job document -> JobRequest. InvalidJobError (field, value, rule) for anything wrong
    in the document itself or a queue that is not a LocalQueue of the namespace."""
    if not isinstance(body, Mapping):
        raise _err("(document)", body, "must be a mapping (a Job document)")
    try:
        doc = JobDocument.model_validate(dict(body))
    except ValidationError as exc:
        path, value, rule = first_problem(exc, JobDocument)
        raise InvalidJobError(path, value, rule) from exc
    if doc.api_version != API_VERSION:
        raise _err("apiVersion", doc.api_version, f"must be {API_VERSION}")
    if doc.kind != "Job":
        raise _err("kind", doc.kind, "must be Job")
    meta = doc.metadata
    if not is_name(meta.name) or len(meta.name) > 63:
        raise _err("metadata.name", meta.name, NAME_RULE.replace("253", "63"))
    ns = meta.namespace or namespace or "default"
    if namespace is not None and meta.namespace is not None and meta.namespace != namespace:
        raise _err(
            "metadata.namespace",
            meta.namespace,
            f"does not match the namespace of the request ({namespace})",
        )
    if not is_name(ns) or len(ns) > 63:
        raise _err("metadata.namespace", ns, NAME_RULE.replace("253", "63"))
    spec = doc.spec
    queue = spec.queue or next((meta.labels[k] for k in QUEUE_LABELS if k in meta.labels), "")
    if not queue:
        raise _err(
            "spec.queue",
            None,
            "is required: name a LocalQueue of the namespace (or set the gpupool.io/queue label)",
        )
    priority, pclass = _priority(spec, config) if check_queue else (spec.priority or 0, "")
    duration = _duration(spec.duration, "spec.duration", allow_zero=False)
    run_limit = (
        None
        if spec.run_limit is None
        else _duration(spec.run_limit, "spec.runLimit", allow_zero=False)
    )
    pod_sets = tuple(_pod_set(ps, f"spec.podSets[{i}]") for i, ps in enumerate(spec.pod_sets))
    names = [ps.name for ps in pod_sets]
    for i, n in enumerate(names):
        if n in names[:i]:
            raise _err(f"spec.podSets[{i}].name", n, "is used by another pod set")
    total = sum(ps.count for ps in pod_sets)
    if spec.min_member is not None and spec.min_member > total:
        raise _err("spec.minMember", spec.min_member, f"is more than the job's {total} replica(s)")
    qname = queue if "/" in queue else f"{ns}/{queue}"
    locals_ = sorted(f"{q.namespace}/{q.name}" for q in config.local_queues)
    if check_queue and (qname not in locals_ or qname.split("/", 1)[0] != ns):
        mine = [q.split("/", 1)[1] for q in locals_ if q.startswith(f"{ns}/")]
        raise _err(
            "spec.queue",
            queue,
            f"is not a LocalQueue of namespace {ns} (its LocalQueues: {', '.join(mine) or 'none'})",
        )
    alternatives = _alternatives(spec.alternatives, pod_sets)
    job = Job(
        JobId(f"{ns}/{meta.name}"),
        pod_sets,
        QueueName(qname),
        priority,
        submit_time_s,
        duration,
        spec.min_member,
        spec.user or ns,
        run_limit,
        alternatives,
    )
    document = doc.model_dump(by_alias=True, exclude_none=True, mode="json")
    document["metadata"] = {
        k: v
        for k, v in document["metadata"].items()
        if k in ("name", "namespace", "labels", "annotations")
    }
    document["metadata"]["namespace"] = ns
    return JobRequest(ns, meta.name, qname, pclass, job, document)


def _priority(spec: JobSpec, config: QueueConfig) -> tuple[int, str]:
    if spec.priority_class_name is not None:
        if spec.priority is not None:
            raise _err(
                "spec.priority", spec.priority, "give priority or priorityClassName, not both"
            )
        try:
            return config.priority(spec.priority_class_name), spec.priority_class_name
        except ConfigError as exc:
            raise _err(
                "spec.priorityClassName", spec.priority_class_name, exc.rule or str(exc)
            ) from None
    return (spec.priority or 0), ""


def _duration(value: object, path: str, allow_zero: bool) -> float:
    try:
        seconds = duration_s(value, path)
    except ConfigError as exc:
        raise _err(path, value, exc.rule or str(exc)) from None
    if seconds <= 0 and not allow_zero:
        raise _err(path, value, "must be more than zero")
    if seconds > MAX_DURATION_S:
        raise _err(path, value, "must be at most 366 days")
    return seconds


def _quantity(fn: Converter, value: object, path: str, limit: int) -> int:
    """``value`` in the unit ``fn`` (a converter of ``config.quantity``) makes, at most
    ``limit``."""
    try:
        amount = int(fn(value, path))
    except ConfigError as exc:
        raise _err(path, value, exc.rule or str(exc)) from None
    if amount > limit:
        raise _err(path, value, f"is more than any node could hold (limit {limit:,})")
    return amount


def _pod_set(ps: PodSetSpec, at: str) -> PodSet:
    if not is_name(ps.name) or len(ps.name) > 63:
        raise _err(f"{at}.name", ps.name, NAME_RULE.replace("253", "63"))
    cpu = _quantity(cpu_milli, ps.cpu, f"{at}.cpu", 10**8)
    mem = _quantity(memory_mib, ps.memory, f"{at}.memory", 2**32)
    gpu = GpuRequest() if ps.gpu is None else _gpu(ps.gpu, f"{at}.gpu")
    tolerations = tuple(
        _toleration(t, f"{at}.tolerations[{i}]") for i, t in enumerate(ps.tolerations)
    )
    if gpu.kind.name != "NONE" and GPU_TOLERATION not in tolerations:
        tolerations = (*tolerations, GPU_TOLERATION)
    return PodSet(ps.name, ps.count, cpu, mem, gpu, dict(ps.node_selector), tolerations)


def _gpu(g: GpuSpec, at: str) -> GpuRequest:
    mem = 0 if g.memory is None else _quantity(gpu_memory_mib, g.memory, f"{at}.memory", 2**24)
    models = frozenset(g.models)
    if g.mig is not None:
        if g.count is not None or g.milli is not None or g.memory is not None:
            raise _err(
                f"{at}.mig", g.mig, "is a request of its own: leave out count, milli and memory"
            )
        return GpuRequest(mig_profile=g.mig, models=models)
    if g.count is not None:
        if g.milli is not None:
            raise _err(
                f"{at}.milli",
                g.milli,
                "is for a slice of one card: leave out count (whole cards) or milli",
            )
        return GpuRequest(count=g.count, memory_mib=mem, models=models)
    if g.milli is None and mem == 0:
        raise _err(
            at,
            {},
            "asks for no GPU: give count (whole cards), milli and memory (a "
            "slice of one card) or mig (a MIG instance)",
        )
    return GpuRequest(gpu_milli=g.milli or 0, memory_mib=mem, models=models)


def _alternatives(
    specs: list[AlternativeSpec], pod_sets: tuple[PodSet, ...]
) -> tuple[Alternative, ...]:
    if specs and all(ps.gpu.kind.name == "NONE" for ps in pod_sets):
        raise _err(
            "spec.alternatives",
            [a.name for a in specs],
            "replace the GPU request of the pod sets, and no pod set asks for a GPU",
        )
    out: list[Alternative] = []
    for i, a in enumerate(specs):
        at = f"spec.alternatives[{i}]"
        if not is_name(a.name) or len(a.name) > 63:
            raise _err(f"{at}.name", a.name, NAME_RULE.replace("253", "63"))
        if any(o.name == a.name for o in out):
            raise _err(f"{at}.name", a.name, "is used by another alternative")
        for k in a.env:
            if not k or "=" in k:
                raise _err(f"{at}.env", k, "is not an environment variable name")
        out.append(Alternative(a.name, _gpu(a.gpu, f"{at}.gpu"), a.image, dict(a.env)))
    return tuple(out)


def _toleration(t: TolerationSpec, at: str) -> Toleration:
    if t.operator not in ("Equal", "Exists"):
        raise _err(f"{at}.operator", t.operator, "must be Equal or Exists")
    effect: TaintEffect | None = None
    if t.effect is not None:
        try:
            effect = TaintEffect(t.effect)
        except ValueError:
            raise _err(
                f"{at}.effect", t.effect, "must be NoSchedule, PreferNoSchedule or NoExecute"
            ) from None
    return Toleration(t.key, t.operator, t.value, effect)
