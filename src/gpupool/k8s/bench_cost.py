"""What a ``gpupool k8s bench`` run costs besides time: CPU seconds per process and API
requests per pod.

- CPU: user + system seconds of a process from ``/proc/<pid>/stat`` (Linux; None
  elsewhere), read before the first measured create and after the agents have judged every
  bound pod, for the scheduler's process and the bench's own (its creates, watch and the node
  agents);
- requests: the API server's ``apiserver_request_total`` counters (its ``/metrics``), summed
  by verb, resource and subresource, before and after; the difference over the pods bound is
  every client's requests per pod (the scheduler's, the agents' and the bench's creates).
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter

from gpupool.k8s.kube import Kube, KubeError

__all__ = ["Cost", "api_requests", "process_cpu_s", "request_counts"]

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_REQUEST = re.compile(r"^apiserver_request_total\{([^}]*)\}\s+([0-9.e+]+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` so far; None when it cannot be read."""
    if pid is None:
        return None
    if pid == os.getpid():
        return time.process_time()
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14, 15)


def request_counts(text: str) -> Counter[str]:
    """``apiserver_request_total`` of a ``/metrics`` answer, summed by ``VERB
    resource[/subresource]`` (its other labels, code and client among them, added up)."""
    out: Counter[str] = Counter()
    for line in text.splitlines():
        m = _REQUEST.match(line)
        if m is None:
            continue
        labels = dict(_LABEL.findall(m.group(1)))
        what = labels.get("resource", "")
        if labels.get("subresource"):
            what += "/" + labels["subresource"]
        out[f"{labels.get('verb', '')} {what}"] += int(float(m.group(2)))
    return out


async def api_requests(kube: Kube) -> Counter[str] | None:
    """The API server's request counters so far (:func:`request_counts`); None when
    ``/metrics`` cannot be read."""
    try:
        raw = await kube.request_raw("GET", "/metrics")
    except KubeError:
        return None
    return request_counts(raw.decode("utf-8", "replace"))


class Cost:
    """CPU and requests from :meth:`start` to :meth:`stop`, as the bench reports them."""

    def __init__(self, kube: Kube, scheduler_pid: int | None) -> None:
        self.kube = kube
        self.pid = scheduler_pid
        self.cpu0: tuple[float | None, float | None] = (None, None)
        self.req0: Counter[str] | None = None

    async def start(self) -> None:
        self.req0 = await api_requests(self.kube)
        self.cpu0 = (process_cpu_s(self.pid), process_cpu_s(os.getpid()))

    async def stop(self, pods: int) -> dict[str, object]:
        """``cpu_s`` {scheduler, bench_and_agents} and ``requests_per_pod`` {total, by
        kind (kinds under 0.05 a pod left out)} over ``pods`` bound pods."""
        cpu1 = (process_cpu_s(self.pid), process_cpu_s(os.getpid()))
        req1 = await api_requests(self.kube)
        cpu = {
            name: None if a is None or b is None else round(b - a, 2)
            for name, a, b in zip(("scheduler", "bench_and_agents"), self.cpu0, cpu1, strict=True)
        }
        per_pod: dict[str, object] | None = None
        if self.req0 is not None and req1 is not None and pods:
            diff = req1 - self.req0
            diff.pop("GET ", None)  # /metrics itself and other non-resource reads
            by = {k: round(v / pods, 2) for k, v in diff.most_common() if v / pods >= 0.05}
            per_pod = {"total": round(sum(diff.values()) / pods, 2), "by_kind": by}
        return {"cpu_s": cpu, "requests_per_pod": per_pod}
