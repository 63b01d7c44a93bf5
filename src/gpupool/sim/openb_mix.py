"""Workload mixes derived from an openb pod list, as the openb traces are derived.

The openb traces other than ``default`` are ``default`` resampled so that one proportion moves
and the rest stays (the trace's README: "sampled from the default one, emphasizing certain
types of workloads"; the FGD paper, ATC'23, section 6). Each axis below is that rule, stated
as the shipped files show it (``../shared/traces/openb/METHOD.md`` section 2.3):

``gpushare``  share of the *GPU request* (sum of ``num_gpu * gpu_milli``) that comes from
              sharing pods (one card, less than all of it): 0..100 %. The number of GPU pods
              stays; sharing and non-sharing GPU pods are resampled to the share; CPU-only pods
              stay. ``gpushare100`` has only sharing GPU pods, ``gpushare0`` none.
``cpu``       share of *pods* that ask for no GPU, in tenths of a percent as the trace names
              it (``cpu250`` = 25.0 % of pods): 0..1000 exclusive. GPU pods stay; CPU-only pods
              are resampled to the share. ``default`` is ``cpu133``.
``multigpu``  share of the GPU request from pods of two or more cards, in percent. Every other
              pod stays; multi-GPU pods are resampled to the share.
``gpuspec``   share of GPU pods, in percent, pinned to one GPU model: that many GPU pods, drawn
              at random, are each given one model drawn in proportion to the cluster's cards of
              the models whose nodes can hold the pod's card count. The rest stays.

Resampling a kind to ``n`` pods out of a pool of ``p`` keeps ``n // p`` copies of every pod
and draws the remaining ``n % p`` without replacement, so the kind's own distribution of
shapes is kept as closely as ``n`` allows (stratified, not i.i.d.). Copies are named
``<pod>-mix-<i>``. A mix is a function of (pod list, axis, value, ``mix_seed``); the
experiments then shuffle and tune it per seed as any openb trace.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpupool.core.errors import ConfigError
from gpupool.core.model import Node
from gpupool.sim.traces.openb import TracePod

AXES: tuple[str, ...] = ("gpushare", "cpu", "multigpu", "gpuspec")
"""The proportions a mix can move, one at a time."""

AXIS_RANGE: dict[str, tuple[float, float, bool]] = {
    "gpushare": (0.0, 100.0, True),
    "cpu": (0.0, 1000.0, False),
    "multigpu": (0.0, 100.0, False),
    "gpuspec": (0.0, 100.0, True),
}
"""Per axis: lowest and highest value, and whether the highest is allowed."""

AXIS_UNIT: dict[str, str] = {
    "gpushare": "% of the GPU request from sharing pods",
    "cpu": "tenths of a % of pods without GPUs",
    "multigpu": "% of the GPU request from multi-GPU pods",
    "gpuspec": "% of GPU pods pinned to a GPU model",
}


@dataclass(frozen=True, slots=True)
class MixSpec:
    """One point of a family: an axis and its value in the axis's unit."""

    axis: str
    value: float

    @property
    def name(self) -> str:
        """``gpushare40``, ``cpu250``, as the openb files are named (decimals kept)."""
        v = self.value
        text = (
            f"{int(v):03d}"
            if self.axis == "cpu" and v == int(v)
            else (str(int(v)) if v == int(v) else f"{v:g}")
        )
        return f"{self.axis}{text}"


@dataclass(frozen=True, slots=True)
class Composition:
    """What a pod list is made of, as METHOD.md section 2.3 tabulates it."""

    pods: int
    cpu_only: int
    sharing: int
    one_gpu: int
    multi_gpu: int
    pinned: int
    gpu_request_milli: int
    sharing_milli: int
    multi_milli: int

    @property
    def cpu_pct(self) -> float:
        return 100.0 * self.cpu_only / self.pods if self.pods else 0.0

    @property
    def gpushare_pct(self) -> float:
        return (
            100.0 * self.sharing_milli / self.gpu_request_milli if self.gpu_request_milli else 0.0
        )

    @property
    def multigpu_pct(self) -> float:
        return 100.0 * self.multi_milli / self.gpu_request_milli if self.gpu_request_milli else 0.0

    @property
    def gpuspec_pct(self) -> float:
        gpu_pods = self.sharing + self.one_gpu + self.multi_gpu
        return 100.0 * self.pinned / gpu_pods if gpu_pods else 0.0

    def value(self, axis: str) -> float:
        """The composition's own value on ``axis``, in that axis's unit."""
        return {
            "gpushare": self.gpushare_pct,
            "cpu": 10.0 * self.cpu_pct,
            "multigpu": self.multigpu_pct,
            "gpuspec": self.gpuspec_pct,
        }[axis]

    def as_dict(self) -> dict[str, float | int]:
        return {
            "pods": self.pods,
            "cpu_only": self.cpu_only,
            "sharing": self.sharing,
            "one_gpu": self.one_gpu,
            "multi_gpu": self.multi_gpu,
            "pinned": self.pinned,
            "gpu_request": round(self.gpu_request_milli / 1000, 2),
            "cpu_pct": round(self.cpu_pct, 2),
            "gpushare_pct": round(self.gpushare_pct, 2),
            "multigpu_pct": round(self.multigpu_pct, 2),
            "gpuspec_pct": round(self.gpuspec_pct, 2),
        }


def composition(pods: Sequence[TracePod]) -> Composition:
    cpu_only = sum(1 for p in pods if p.num_gpu == 0)
    sharing = [p for p in pods if p.is_sharing]
    multi = [p for p in pods if p.num_gpu > 1]
    return Composition(
        pods=len(pods),
        cpu_only=cpu_only,
        sharing=len(sharing),
        one_gpu=len(pods) - cpu_only - len(sharing) - len(multi),
        multi_gpu=len(multi),
        pinned=sum(1 for p in pods if p.num_gpu and p.gpu_spec),
        gpu_request_milli=sum(p.total_gpu_milli for p in pods),
        sharing_milli=sum(p.total_gpu_milli for p in sharing),
        multi_milli=sum(p.total_gpu_milli for p in multi),
    )


def check_value(axis: str, value: float) -> None:
    """A clear error naming the axis, the value and the rule."""
    if axis not in AXIS_RANGE:
        raise ConfigError(f"mix axis {axis!r} is unknown; known: {', '.join(AXES)}")
    lo, hi, hi_ok = AXIS_RANGE[axis]
    if not (lo <= value < hi or (hi_ok and value == hi)):
        bound = f"{lo:g} to {hi:g}" + ("" if hi_ok else " (exclusive)")
        raise ConfigError(f"mix {axis}={value:g}: must be {bound} ({AXIS_UNIT[axis]})")


def resample(
    pool: Sequence[TracePod], n: int, rng: np.random.Generator, taken: Counter[str]
) -> list[TracePod]:
    """``n`` pods of ``pool``: ``n // len(pool)`` copies of each, the rest drawn without
    replacement; a pod's second and later copies get fresh names (``<name>-mix-<i>``)."""
    if n <= 0 or not pool:
        return []
    ordered = sorted(pool, key=lambda p: p.name)
    whole, rest = divmod(n, len(ordered))
    picks = [p for p in ordered for _ in range(whole)]
    picks += [ordered[i] for i in sorted(rng.choice(len(ordered), rest, replace=False).tolist())]
    out = []
    for p in picks:
        i = taken[p.name]
        taken[p.name] += 1
        out.append(p if i == 0 else replace(p, name=f"{p.name}-mix-{i}"))
    return out


def _mean_milli(pods: Sequence[TracePod]) -> float:
    return sum(p.total_gpu_milli for p in pods) / len(pods) if pods else 0.0


def _count_for_share(
    share: float, per_pod: float, others: float, slots: int | None = None, per_other: float = 0.0
) -> int:
    """Pods of a kind (mean ``per_pod`` milli) for their request to be ``share`` of the total.

    With ``slots``, the kind and the others share a fixed number of pods (the others' mean
    ``per_other``); without, the others' request ``others`` is fixed.
    """
    if share <= 0:
        return 0
    if slots is not None:
        if share >= 1:
            return slots
        # n a = s (n a + (N - n) b)  ->  n = s N b / (a (1 - s) + s b)
        return min(
            slots, round(share * slots * per_other / (per_pod * (1 - share) + share * per_other))
        )
    return round(share * others / ((1 - share) * per_pod))


def derive(
    pods: Sequence[TracePod], spec: MixSpec, nodes: Sequence[Node] = (), mix_seed: int = 0
) -> list[TracePod]:
    """The mix ``spec`` derived from ``pods`` (see the module docstring for each axis)."""
    check_value(spec.axis, spec.value)
    rng = np.random.default_rng(mix_seed)
    cpu = [p for p in pods if p.num_gpu == 0]
    sharing = [p for p in pods if p.is_sharing]
    gpu_pods = [p for p in pods if p.num_gpu > 0]
    whole = [p for p in gpu_pods if not p.is_sharing]
    taken: Counter[str] = Counter()
    share = spec.value / 100.0
    if spec.axis == "gpushare":
        if (share > 0 and not sharing) or (share < 1 and not whole and gpu_pods):
            need = "sharing" if share > 0 and not sharing else "whole-GPU"
            raise ConfigError(
                f"mix gpushare={spec.value:g}: the pod list has no {need} pods to draw from"
            )
        n = _count_for_share(share, _mean_milli(sharing), 0.0, len(gpu_pods), _mean_milli(whole))
        return (
            resample(cpu, len(cpu), rng, taken)
            + resample(sharing, n, rng, taken)
            + resample(whole, len(gpu_pods) - n, rng, taken)
        )
    if spec.axis == "cpu":
        frac = spec.value / 1000.0
        n = round(frac * len(gpu_pods) / (1 - frac))
        if n and not cpu:
            raise ConfigError(
                f"mix cpu={spec.value:g}: the pod list has no CPU-only pods to draw from"
            )
        return resample(cpu, n, rng, taken) + list(gpu_pods)
    if spec.axis == "multigpu":
        multi = [p for p in gpu_pods if p.num_gpu > 1]
        rest = [p for p in pods if p.num_gpu <= 1]
        if share > 0 and not multi:
            raise ConfigError(
                f"mix multigpu={spec.value:g}: the pod list has no multi-GPU pods to draw from"
            )
        n = _count_for_share(share, _mean_milli(multi), sum(p.total_gpu_milli for p in rest))
        return list(rest) + resample(multi, n, rng, taken)
    return pin_models(pods, share, nodes, rng)


def pin_models(
    pods: Sequence[TracePod], share: float, nodes: Sequence[Node], rng: np.random.Generator
) -> list[TracePod]:
    """``share`` of the GPU pods (those without a model yet) pinned to one model each."""
    if not nodes:
        raise ConfigError("mix gpuspec: needs the node list to draw models from")
    cards: Counter[tuple[str, int]] = Counter()
    for n in nodes:
        if n.gpus:
            cards[(n.gpus[0].model, len(n.gpus))] += len(n.gpus)
    models = sorted({m for m, _ in cards})
    free = [i for i, p in enumerate(pods) if p.num_gpu and not p.gpu_spec]
    chosen: list[int] = (
        sorted(rng.choice(len(free), round(share * len(free)), replace=False).tolist())
        if free
        else []
    )
    out = list(pods)
    for j in chosen:
        i = free[j]
        pod = out[i]
        weight = np.asarray(
            [
                sum(c for (m2, size), c in cards.items() if m2 == m and size >= pod.num_gpu)
                for m in models
            ],
            float,
        )
        if not weight.sum():
            continue
        model = models[int(rng.choice(len(models), p=weight / weight.sum()))]
        out[i] = replace(pod, gpu_spec=frozenset({model}))
    return out


def parse_values(text: str, axis: str) -> list[float]:
    """``0,20,40`` or ``0-100:20`` (a range with a step, both ends included)."""
    values: list[float] = []
    for part in (x.strip() for x in text.split(",")):
        try:
            if "-" in part[1:]:
                span, _, step_text = part.partition(":")
                lo_text, _, hi_text = span.partition("-")
                lo, hi, step = float(lo_text), float(hi_text), float(step_text or 0)
                if step <= 0 or hi < lo:
                    raise ValueError
                values.extend(lo + i * step for i in range(int((hi - lo) / step + 1e-9) + 1))
            else:
                values.append(float(part))
        except ValueError:
            raise ConfigError(
                f"--{axis} {text!r}: {part!r} is not a value or a range "
                "LOW-HIGH:STEP (e.g. 0,20,40 or 0-100:20)"
            ) from None
    for v in values:
        check_value(axis, v)
    return sorted(set(values))
