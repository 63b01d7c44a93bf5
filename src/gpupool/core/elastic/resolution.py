"""Which class serves an ElasticGPUClaim, and the ways it could be served: a GPU request for
the cluster (cards, a slice, a MIG instance, cards per model for a TFLOPS claim) or remote
cards. The binder asks (``Resolver.resolve`` at submission, ``Resolver.options`` when it
binds); nothing here holds capacity."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.core.cluster import ClusterState
from gpupool.core.elastic.classes import ElasticGPUClass
from gpupool.core.elastic.objects import (
    ElasticGPUClaim,
    Provisioner,
    RequestKind,
    ServingModel,
)
from gpupool.core.elastic.tflops import PEAK_TFLOPS, convert, peak_tflops
from gpupool.core.errors import InvalidJobError
from gpupool.core.model import GpuRequest, Job, JobId, PodSet, TaskId, Toleration
from gpupool.core.validation import Validator

TASK_PREFIX = "elasticgpu/"
"""ElasticGPUs hold their capacity in the ClusterState as placements of task
``elasticgpu/<ElasticGPU name>`` and job ``elasticgpu/<claim key>``."""


@dataclass(frozen=True, slots=True)
class Option:
    """One way to serve a claim: a GPU request for the cluster, or remote cards."""

    request: GpuRequest
    remote_cards: int = 0
    serving: ServingModel | None = None


@dataclass(frozen=True, slots=True)
class MigProfile:
    name: str
    gpu_milli: int
    memory_mib: int
    models: frozenset[str]


class Resolver:
    """Reads the binder's classes and the cluster's cards; keeps the MIG profiles the cluster
    offers, refreshed when the node table changes."""

    def __init__(self, state: ClusterState, classes: Mapping[str, ElasticGPUClass]) -> None:
        self.state = state
        self._classes = classes
        self._validator = Validator()
        self._mig: tuple[int, dict[str, MigProfile]] = (-1, {})

    def resolve(self, claim: ElasticGPUClaim) -> tuple[ElasticGPUClass, list[Option]]:
        who = f"ElasticGPUClaim {claim.key}"
        if claim.requests.kind is RequestKind.TFLOPS:
            for m in sorted(claim.requests.models):
                if peak_tflops(m) is None:
                    raise InvalidJobError(
                        "requests.models",
                        m,
                        f"no published peak is known for model {m}, so "
                        f"TFLOPS cannot be converted; known: {', '.join(sorted(PEAK_TFLOPS))}",
                        job=who,
                    )
        if claim.class_name:
            cls = self._classes.get(claim.class_name)
            if cls is None:
                raise InvalidJobError(
                    "class_name",
                    claim.class_name,
                    "no such ElasticGPUClass; known: "
                    + (", ".join(sorted(self._classes)) or "none"),
                    job=who,
                )
            options, problem = self.options(claim, cls)
            if problem is not None:
                raise InvalidJobError(*problem, job=who)
            return cls, options
        reasons = []
        for name in sorted(self._classes):
            cls = self._classes[name]
            options, problem = self.options(claim, cls)
            if problem is None:
                return cls, options
            reasons.append(f"{name}: {problem[0]}={problem[1]!r}: {problem[2]}")
        raise InvalidJobError(
            "class_name",
            "",
            "no ElasticGPUClass can serve this claim"
            + (" (" + "; ".join(reasons) + ")" if reasons else " (there are no classes)"),
            job=who,
        )

    def options(
        self, claim: ElasticGPUClaim, cls: ElasticGPUClass
    ) -> tuple[list[Option], tuple[str, object, str] | None]:
        """The ways ``cls`` can serve ``claim``, best first, or (field, value, rule) saying
        why it never can."""
        r = claim.requests
        kind = r.kind
        prov = cls.provisioner
        allowed = r.models
        if cls.models:
            allowed = (allowed & cls.models) if allowed else cls.models
            if not allowed:
                return [], (
                    "requests.models",
                    sorted(r.models),
                    f"class {cls.name} serves only {', '.join(sorted(cls.models))}",
                )
        whole_only = prov in (Provisioner.PHYSICAL, Provisioner.REMOTE)
        if kind is RequestKind.CARDS and not whole_only:
            makes = "slices of one card" if prov is Provisioner.HAMI_CORE else "MIG instances"
            return [], (
                "requests.cards",
                r.cards,
                f"class {cls.name} (provisioner {prov}) makes {makes}; ask for "
                "gpu_milli + memory_mib, or use a physical class for cards",
            )
        if kind is RequestKind.SLICE and whole_only:
            return [], (
                "requests.gpu_milli",
                r.gpu_milli,
                f"class {cls.name} (provisioner {prov}) makes whole "
                f"{'cards' if prov is Provisioner.PHYSICAL else 'remote GPUs'}; ask "
                "for cards, or use a hami-core or mig class for a slice",
            )
        if prov is Provisioner.REMOTE:
            return self._remote_options(claim, cls)
        options: list[Option] = []
        if kind is RequestKind.TFLOPS:
            models, problem = self._tflops_models(
                r.tflops, allowed, sorted(self.state.table.models)
            )
            if problem is not None:
                return [], problem
            why: list[str] = []
            for m in models:
                share = convert(r.tflops, m)
                assert share is not None
                if prov is Provisioner.PHYSICAL:
                    cards = share.cards or 1
                    options.append(
                        Option(
                            GpuRequest(count=cards, memory_mib=r.memory_mib, models=frozenset({m})),
                            serving=ServingModel(m, share.peak_tflops, cards, 0),
                        )
                    )
                elif share.whole:
                    why.append(
                        f"{m} ({share.peak_tflops:g} TFLOPS a card) would need {share.cards} cards"
                    )
                elif prov is Provisioner.HAMI_CORE:
                    options.append(
                        Option(
                            GpuRequest(
                                gpu_milli=share.gpu_milli,
                                memory_mib=r.memory_mib,
                                models=frozenset({m}),
                            ),
                            serving=ServingModel(m, share.peak_tflops, 0, share.gpu_milli),
                        )
                    )
                else:
                    for p in self._mig_fits(share.gpu_milli, r.memory_mib, frozenset({m}), cls):
                        options.append(
                            Option(
                                GpuRequest(mig_profile=p.name, models=frozenset({m})),
                                serving=ServingModel(
                                    m, share.peak_tflops, 0, share.gpu_milli, p.name
                                ),
                            )
                        )
                        break
            options.sort(
                key=lambda o: (
                    o.serving.cards if o.serving else 0,
                    o.serving.peak_tflops if o.serving else 0.0,
                )
            )
            if not options:
                return [], (
                    "requests.tflops",
                    r.tflops,
                    f"class {cls.name} (provisioner {prov}) cannot serve it on one "
                    "card of any model here" + (": " + "; ".join(why) if why else ""),
                )
            field = "requests.tflops"
        elif kind is RequestKind.CARDS:
            options.append(
                Option(GpuRequest(count=r.cards, memory_mib=r.memory_mib, models=allowed))
            )
            field = "requests.cards"
        elif prov is Provisioner.HAMI_CORE:
            options.append(
                Option(GpuRequest(gpu_milli=r.gpu_milli, memory_mib=r.memory_mib, models=allowed))
            )
            field = "requests.gpu_milli"
        else:
            fits = self._mig_fits(r.gpu_milli, r.memory_mib, allowed, cls)
            if not fits:
                profiles = self._mig_profiles()
                return [], (
                    "requests",
                    {"gpu_milli": r.gpu_milli, "memory_mib": r.memory_mib},
                    f"no MIG profile here holds it (class {cls.name}); profiles here: "
                    + (
                        ", ".join(
                            f"{p.name} ({p.gpu_milli} milli, {p.memory_mib} MiB)"
                            for p in profiles.values()
                        )
                        or "none"
                    ),
                )
            options.extend(Option(GpuRequest(mig_profile=p.name, models=allowed)) for p in fits)
            field = "requests"
        kept = []
        last: InvalidJobError | None = None
        for o in options:
            try:
                self._validator.check(_job(claim.key, o.request), self.state.table)
            except InvalidJobError as exc:
                last = exc
                continue
            kept.append(o)
        if not kept:
            assert last is not None
            return [], (_claim_field(last.field, field), last.value, last.rule)
        return kept, None

    def _remote_options(
        self, claim: ElasticGPUClaim, cls: ElasticGPUClass
    ) -> tuple[list[Option], tuple[str, object, str] | None]:
        r = claim.requests
        model = cls.parameters["model"]
        count = int(cls.parameters["count"])
        memory = int(cls.parameters["memoryMib"])
        if r.memory_mib > memory:
            return [], (
                "requests.memory_mib",
                r.memory_mib,
                f"remote pool {cls.parameters['pool']} has {memory} MiB GPUs",
            )
        if r.kind is RequestKind.TFLOPS:
            models, problem = self._tflops_models(r.tflops, frozenset({model}), [model])
            if problem is not None:
                return [], problem
            share = convert(r.tflops, models[0])
            assert share is not None
            cards = share.cards or 1
            serving: ServingModel | None = ServingModel(model, share.peak_tflops, cards, 0)
            field = "requests.tflops"
            value: object = r.tflops
        else:
            cards, serving, field, value = r.cards, None, "requests.cards", r.cards
        if cards > count:
            return [], (
                field,
                value,
                f"remote pool {cls.parameters['pool']} has {count} GPUs; this needs {cards}",
            )
        return [Option(GpuRequest(count=cards), remote_cards=cards, serving=serving)], None

    def _tflops_models(
        self, tflops: float, allowed: frozenset[str], here: list[str]
    ) -> tuple[list[str], tuple[str, object, str] | None]:
        known = ", ".join(sorted(PEAK_TFLOPS))
        if allowed:
            for m in sorted(allowed):
                if peak_tflops(m) is None:
                    return [], (
                        "requests.models",
                        m,
                        f"no published peak is known for model {m}, so TFLOPS cannot "
                        f"be converted; known: {known}",
                    )
            models = sorted(m for m in allowed if m in here) or sorted(allowed)
        else:
            models = [m for m in here if peak_tflops(m) is not None]
            if not models:
                return [], (
                    "requests.tflops",
                    tflops,
                    "no GPU model here has a published peak to convert TFLOPS with "
                    f"(models here: {', '.join(here) or 'none'}; known: {known})",
                )
        return models, None

    def _mig_profiles(self) -> dict[str, MigProfile]:
        t = self.state.table
        if self._mig[0] == t.version:
            return self._mig[1]
        found: dict[str, MigProfile] = {}
        for i in t.live().tolist():
            for g in t.nodes[i].gpus:
                for inst in g.mig:
                    p = found.get(inst.profile)
                    models = (p.models if p else frozenset()) | {g.model}
                    found[inst.profile] = MigProfile(
                        inst.profile, inst.gpu_milli, inst.memory_mib, models
                    )
        ordered = dict(
            sorted(found.items(), key=lambda kv: (kv[1].gpu_milli, kv[1].memory_mib, kv[0]))
        )
        self._mig = (t.version, ordered)
        return ordered

    def _mig_fits(
        self, milli: int, mib: int, models: frozenset[str], cls: ElasticGPUClass
    ) -> list[MigProfile]:
        """MIG profiles that hold ``milli`` and ``mib``, smallest first."""
        return [
            p
            for p in self._mig_profiles().values()
            if p.gpu_milli >= milli
            and p.memory_mib >= mib
            and (not models or p.models & models)
            and (not cls.profiles or p.name in cls.profiles)
        ]


GPU_TOLERATION = Toleration("nvidia.com/gpu", "Exists")
"""What an ElasticGPU is made for is a pod asking for GPUs, which tolerates the usual
``nvidia.com/gpu`` taint of GPU nodes (Kubernetes' ExtendedResourceToleration); every other
taint still keeps ElasticGPUs away."""


def task_of(name: str) -> TaskId:
    """The task an ElasticGPU's placement is held under."""
    return TaskId(f"{TASK_PREFIX}{name}")


def _job(key: str, request: GpuRequest) -> Job:
    return Job(
        JobId(f"{TASK_PREFIX}{key}"),
        (PodSet("claim", 1, 0, 0, gpu=request, tolerations=(GPU_TOLERATION,)),),
    )


_FIELDS = {
    "gpu.count": "requests.cards",
    "gpu.gpu_milli": "requests.gpu_milli",
    "gpu.memory_mib": "requests.memory_mib",
    "gpu.models": "requests.models",
}


def _claim_field(job_field: str, default: str) -> str:
    """A validator's ``pod_sets[0].gpu.count`` as the claim's ``requests.cards``."""
    tail = job_field.split(".", 1)[1] if job_field.startswith("pod_sets[") else job_field
    return _FIELDS.get(tail, default)
