"""A stream of example jobs for ``gpupool serve --demo``: what a shared GPU cluster sees.

For each LocalQueue of the configuration, jobs whose shape suits the GPUs its ClusterQueue
has quota for: training gangs of whole cards on H100/A100 flavors, notebooks and inference
pods on slices of a card, MIG pods where a flavor's cards are partitioned, CPU-only jobs.
Arrivals are Poisson at ``rate`` jobs per wall-clock second; durations are in cluster time
(so ``--speed`` makes them pass faster). One seed, one stream.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gpupool.core.model import Node
from gpupool.core.quota import QueueConfig, Resource


@dataclass(frozen=True, slots=True)
class Target:
    namespace: str
    queue: str
    flavor: str
    models: tuple[str, ...]
    mig: str | None
    card_mib: int
    gpus_per_node: int


def targets(config: QueueConfig, nodes: list[Node]) -> list[Target]:
    """Every (LocalQueue, GPU flavor it has quota for), with what the flavor's nodes hold."""
    by_cq = {q.name: q for q in config.cluster_queues}
    flavors = {f.name: f for f in config.flavors}
    out = []
    for lq in config.local_queues:
        cq = by_cq.get(lq.cluster_queue)
        if cq is None:
            continue
        for fq in cq.flavors:
            quota = fq.resources.get(Resource.GPU_MILLI) or fq.resources.get(Resource.GPU)
            flavor = flavors.get(fq.flavor)
            if quota is None or flavor is None:
                continue
            members = [
                n
                for n in nodes
                if n.gpus and all(n.labels.get(k) == v for k, v in flavor.node_labels.items())
            ]
            if not members:
                continue
            card = members[0].gpus[0]
            mig = card.mig[0].profile if card.mig else None
            out.append(
                Target(
                    lq.namespace,
                    lq.name,
                    fq.flavor,
                    (card.model,),
                    mig,
                    card.memory_mib,
                    max(len(n.gpus) for n in members),
                )
            )
    return out


KINDS = ("train", "nb", "inf", "mig", "burst")
_NAME = re.compile(rf"({'|'.join(KINDS)})-(\d{{5,}})-[0-9a-f]{{4}}")


def demo_count(names: Iterable[str]) -> int:
    """The highest number among demo job names (``nb-00042-1f3a`` is 42), 0 if none: where a
    stream restarted on the same state file carries on."""
    best = 0
    for name in names:
        m = _NAME.fullmatch(name)
        if m:
            best = max(best, int(m.group(2)))
    return best


class DemoStream:
    """Example jobs for the demo. With ``burst`` (a cloud runs beside the cluster), about
    one job in 40 is a 2 x 8-GPU gang for a queue with a provisioning admission check,
    which waits for the cloud to make its nodes.

    ``start`` is the number of demo jobs made before (``demo_count`` of a state file's job
    names): numbering carries on after it, and the random stream is seeded with it too, so a
    restart makes new jobs at once rather than repeating old names."""

    def __init__(
        self,
        config: QueueConfig,
        nodes: list[Node],
        seed: int = 7,
        rate: float = 0.8,
        burst: bool = False,
        start: int = 0,
    ) -> None:
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"rate={rate!r} must be a finite number > 0 (jobs per second)")
        self.targets = targets(config, nodes)
        self.rng = random.Random(seed if not start else f"{seed}/{start}")
        self.rate = rate
        self.count = start
        checked = {q.name for q in config.cluster_queues if q.admission_checks}
        self.burst = (
            [lq for lq in config.local_queues if lq.cluster_queue in checked] if burst else []
        )
        self.burst_rng = random.Random(seed + 1 if not start else f"{seed + 1}/{start}")

    def gap_s(self) -> float:
        """Wall seconds to the next arrival."""
        return self.rng.expovariate(self.rate)

    def jobs(self) -> Iterator[dict[str, Any]]:
        while True:
            yield self.next_job()

    def next_job(self) -> dict[str, Any]:
        self.count += 1
        if self.burst and self.burst_rng.random() < 1 / 40:
            return self._burst_job()
        rng = self.rng
        if not self.targets:
            raise ValueError("no LocalQueue has quota for a flavor with GPU nodes")
        t = rng.choice(self.targets)
        minutes = rng.uniform(5, 40)
        gpu: dict[str, Any]
        if t.mig:
            kind, gpu, count = "mig", {"mig": t.mig}, 1
            minutes = rng.uniform(10, 60)
        elif t.gpus_per_node >= 8 and rng.random() < 0.45:
            size = rng.choice((1, 2, 4, 8, 8, 16))
            per = min(size, 8)
            kind, gpu, count = "train", {"count": per, "models": list(t.models)}, size // per
            minutes = rng.uniform(15, 60)
        else:
            milli = rng.choice((100, 200, 250, 300, 500, 500, 700))
            mib = min(t.card_mib, max(1024, int(t.card_mib * milli / 1000)))
            kind = "nb" if rng.random() < 0.5 else "inf"
            gpu, count = {"milli": milli, "memory": f"{mib}Mi"}, rng.choice((1, 1, 1, 2))
        job: dict[str, Any] = {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "Job",
            "metadata": {
                "name": f"{kind}-{self.count:05d}-{rng.randrange(16**4):04x}",
                "namespace": t.namespace,
            },
            "spec": {
                "queue": t.queue,
                "duration": f"{minutes:.0f}m",
                "user": rng.choice(("alice", "bob", "carol", "dan")),
                "podSets": [
                    {
                        "name": "workers" if kind == "train" else "main",
                        "count": count,
                        "cpu": 4 if kind == "train" else 2,
                        "memory": "32Gi" if kind == "train" else "8Gi",
                        "gpu": gpu,
                    }
                ],
            },
        }
        if count > 1 and kind == "train":
            job["spec"]["runLimit"] = f"{minutes * 1.5:.0f}m"
        return job

    def _burst_job(self) -> dict[str, Any]:
        rng = self.burst_rng
        lq = rng.choice(self.burst)
        return {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "Job",
            "metadata": {
                "name": f"burst-{self.count:05d}-{rng.randrange(16**4):04x}",
                "namespace": lq.namespace,
            },
            "spec": {
                "queue": lq.name,
                "duration": f"{rng.uniform(20, 90):.0f}m",
                "user": rng.choice(("alice", "bob", "carol", "dan")),
                "podSets": [
                    {
                        "name": "workers",
                        "count": 2,
                        "cpu": 16,
                        "memory": "64Gi",
                        "gpu": {"count": 8},
                    }
                ],
            },
        }
