"""``gpupool k8s bench --compare-kube-scheduler``: gpupool's run, then kube-scheduler's.

Both are :func:`~gpupool.k8s.bench.run_bench` runs against the same API server, straight after
each other so that they are taken in the same minute of the machine's load; kube-scheduler
(:mod:`gpupool.k8s.kubescheduler`) binds pods that ask for ``nvidia.com/gpu: 1`` alone, and the
node agents run NVIDIA's stock device plugin for it, since it writes no HAMi annotations.
"""

from __future__ import annotations

from typing import Any

from gpupool.k8s.bench import run_bench
from gpupool.k8s.kubescheduler import KubeScheduler, default_kubeconfig

__all__ = ["run_with_kube_scheduler"]


async def run_with_kube_scheduler(
    binary: str,
    kubeconfig: str | None,
    nodes: int,
    gpus: int,
    pods: int,
    ns: str,
    *,
    qps: int = 50,
    **kwargs: Any,
) -> dict[str, Any]:
    """gpupool's run, then kube-scheduler's on the same API server at once after it (its own
    namespace, the same nodes made afresh, NVIDIA's stock device plugin on the agents):
    gpupool's figures with ``kube_scheduler`` (the other run's) and ``ratio`` (gpupool's
    pods/s and p99 over kube-scheduler's) added."""
    config = kubeconfig or default_kubeconfig()
    ks = KubeScheduler(binary, config, qps=qps)  # checks the paths before the first run
    ours = await run_bench(kubeconfig, nodes, gpus, pods, ns, **kwargs)
    kwargs.pop("profile", None)
    await ks.start()
    try:
        theirs = await run_bench(
            kubeconfig,
            nodes,
            gpus,
            pods,
            f"{ns}-ks",
            scheduler="default-scheduler",
            external=True,
            **kwargs,
        )
    finally:
        ks.stop()
    theirs["client_qps"] = qps
    ours["kube_scheduler"] = theirs
    ours["ratio"] = {
        "pods_per_s": _ratio(ours["pods_per_s"], theirs["pods_per_s"]),
        "create_to_bound_p99": _ratio(
            ours["create_to_bound_ms"]["p99"], theirs["create_to_bound_ms"]["p99"]
        ),
    }
    return ours


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None
