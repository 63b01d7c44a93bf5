"""``gpupool bench serve``: sustained job submissions to a real ``gpupool serve`` over loopback.

The server runs as a subprocess (``python -m gpupool.cli serve``) on a free port, with a state
file in a temporary directory, and a cluster and queues written here:

- ``nodes`` nodes of 8 GPUs in three flavors (H100, A100, L4; a third of the nodes each);
- one cohort of four ClusterQueues, each with a quarter of every flavor's GPUs as nominal
  quota (so the nodes hold every queue's nominal quota at once), and eight namespaces with one
  LocalQueue each, two per ClusterQueue;
- jobs that are mostly slices of a card (250 or 500 milli-GPU) and 1-2 GPU pods, running 30 to
  180 cluster seconds, so that at ``--speed`` 60 they end within a few wall seconds and free
  their cards: at 200 jobs/s about 300 of the 1,200 GPUs of the default 150 nodes are busy.

The load is open-loop: job ``i`` is due at ``start + i / rate`` whatever became of the ones
before it, and goes out as soon as one of ``concurrency`` connections is free (an async httpx
client). ``latency_ms`` is measured from the moment a request is sent to its response;
``client_queue_ms`` is how long requests waited before being sent, past their due time, for a
free connection or for the generator itself (it shares the CPU with the server). A server that
cannot keep up shows as a growing client queue and an achieved rate under the offered one.
``server_submit_ms`` is the p99 of the same requests as the server timed them (its
``gpupool_api_request_duration_seconds`` histogram, so bucket-coarse): the difference is time
spent in the generator, the kernel and uvicorn's HTTP parsing.

The admissible backlog is sampled once a second from ``/api/v1/clusterqueues``: the pending
jobs of ClusterQueues that have at least ``ADMISSIBLE_ROOM_MILLI`` (the largest bench job, 2
GPUs) of nominal GPU quota unused. Since the nodes hold every queue's nominal quota, those
jobs fit their quota and the cluster; a backlog of them that grows means scheduling does not
keep up. (With the default sizes every queue always has room, so this is all pending jobs.)
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml
from prometheus_client.parser import text_string_to_metric_families

FLAVORS = (
    ("h100", "H100-80GB", "80Gi", 192, "2Ti"),
    ("a100", "A100-80GB", "80Gi", 128, "1Ti"),
    ("l4", "L4", "24Gi", 64, "512Gi"),
)
CLUSTER_QUEUES = 4
NAMESPACES = 8
GPUS_PER_NODE = 8
ADMISSIBLE_ROOM_MILLI = 2000
TARGET_RATE = 200.0
TARGET_P99_MS = 100.0
SERVER_COMMAND = (sys.executable, "-m", "gpupool.cli")


@dataclass(slots=True)
class BacklogSample:
    """The server's backlog at one instant of the run (seconds from its start)."""

    t: float
    pending: int
    admissible: int


@dataclass(slots=True)
class ServeBenchResult:
    rate: float
    duration_s: float
    nodes: int
    speed: float
    concurrency: int
    submitted: int
    accepted: int
    errors: int
    error_kinds: dict[str, int]
    load_wall_s: float
    latencies_ms: np.ndarray
    queued_ms: np.ndarray
    samples: list[BacklogSample]
    admitted: int
    cycles: int
    decision_ms_p99: float | None
    server_peak_rss_mib: float | None
    drain_s: float | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def achieved_rate(self) -> float:
        return self.accepted / self.load_wall_s if self.load_wall_s > 0 else 0.0

    def _pct(self, values: np.ndarray, q: float) -> float:
        return round(float(np.percentile(values, q)), 2) if len(values) else 0.0

    @property
    def p99_ms(self) -> float:
        return self._pct(self.latencies_ms, 99)

    @property
    def met(self) -> dict[str, bool]:
        """The rate is met when jobs were offered at >= TARGET_RATE, every one was accepted,
        and the last answer came within a second of the end of the schedule (the server kept
        pace); p99 when the requests' p99 latency is under TARGET_P99_MS."""
        kept_pace = self.load_wall_s <= self.duration_s + 1.0
        return {
            "rate": self.rate >= TARGET_RATE and self.errors == 0 and kept_pace,
            "p99": len(self.latencies_ms) > 0 and self.p99_ms < TARGET_P99_MS,
        }

    def as_json(self) -> dict[str, Any]:
        lat = self.latencies_ms
        admissible = [s.admissible for s in self.samples]
        return {
            "rate": self.rate,
            "duration_s": self.duration_s,
            "nodes": self.nodes,
            "gpus": self.nodes * GPUS_PER_NODE,
            "speed": self.speed,
            "concurrency": self.concurrency,
            "submitted": self.submitted,
            "accepted": self.accepted,
            "errors": self.errors,
            "error_kinds": dict(sorted(self.error_kinds.items())),
            "achieved_rate": round(self.achieved_rate, 1),
            "latency_ms": {
                "p50": self._pct(lat, 50),
                "p99": self._pct(lat, 99),
                "max": round(float(lat.max()), 2) if len(lat) else 0.0,
            },
            "client_queue_ms": {
                "p50": self._pct(self.queued_ms, 50),
                "p99": self._pct(self.queued_ms, 99),
                "max": round(float(self.queued_ms.max()), 2) if len(self.queued_ms) else 0.0,
            },
            "backlog": {
                "definition": "pending jobs of ClusterQueues with at least "
                f"{ADMISSIBLE_ROOM_MILLI} milli-GPU of nominal quota unused, "
                "sampled once a second",
                "pending_admissible_start": admissible[0] if admissible else 0,
                "pending_admissible_end": admissible[-1] if admissible else 0,
                "max": max(admissible, default=0),
                "samples": len(admissible),
            },
            "drain_s": None if self.drain_s is None else round(self.drain_s, 2),
            "admitted": self.admitted,
            "cycles": self.cycles,
            "decision_ms": {"p99": self.decision_ms_p99},
            "server_peak_rss_mib": self.server_peak_rss_mib,
            "targets": {
                "rate_jobs_per_s": TARGET_RATE,
                "p99_ms": TARGET_P99_MS,
                "rate_met": self.met["rate"],
                "p99_met": self.met["p99"],
            },
            **self.extra,
        }


# -- the cluster, queues and jobs ------------------------------------------------------------


def cluster_doc(nodes: int) -> dict[str, Any]:
    counts = _split(nodes)
    pools = []
    for (name, model, mem, cpu, ram), count in zip(FLAVORS, counts, strict=True):
        if count:
            pools.append(
                {
                    "name": name,
                    "count": count,
                    "cpu": cpu,
                    "memory": ram,
                    "labels": {"gpupool.io/flavor": name},
                    "gpus": {"model": model, "count": GPUS_PER_NODE, "memory": mem},
                }
            )
    return {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "bench"},
        "nodePools": pools,
    }


def _split(nodes: int) -> list[int]:
    base, extra = divmod(nodes, len(FLAVORS))
    return [base + (1 if i < extra else 0) for i in range(len(FLAVORS))]


def queue_docs(nodes: int) -> list[dict[str, Any]]:
    kueue = "kueue.x-k8s.io/v1beta1"
    counts = _split(nodes)
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": kueue,
            "kind": "ResourceFlavor",
            "metadata": {"name": name},
            "spec": {"nodeLabels": {"gpupool.io/flavor": name}},
        }
        for (name, *_), count in zip(FLAVORS, counts, strict=True)
        if count
    ]
    docs.append({"apiVersion": kueue, "kind": "Cohort", "metadata": {"name": "bench"}, "spec": {}})
    for q in range(CLUSTER_QUEUES):
        flavors = []
        for (name, *_), count in zip(FLAVORS, counts, strict=True):
            if count:
                share = count * GPUS_PER_NODE * 1000 // CLUSTER_QUEUES
                flavors.append(
                    {
                        "name": name,
                        "resources": [{"name": "nvidia.com/gpu", "nominalQuota": f"{share}m"}],
                    }
                )
        docs.append(
            {
                "apiVersion": kueue,
                "kind": "ClusterQueue",
                "metadata": {"name": f"team-{q}"},
                "spec": {
                    "cohort": "bench",
                    "namespaceSelector": {},
                    # gpupool's preemption, which Kueue's objects must ask for
                    "preemption": {
                        "withinClusterQueue": "LowerPriority",
                        "reclaimWithinCohort": "Any",
                    },
                    "resourceGroups": [
                        {"coveredResources": ["nvidia.com/gpu"], "flavors": flavors}
                    ],
                },
            }
        )
    for n in range(NAMESPACES):
        docs.append(
            {
                "apiVersion": kueue,
                "kind": "LocalQueue",
                "metadata": {"name": "jobs", "namespace": f"ns-{n}"},
                "spec": {"clusterQueue": f"team-{n % CLUSTER_QUEUES}"},
            }
        )
    return docs


def job_bodies(count: int, seed: int) -> list[bytes]:
    """``count`` Job documents, JSON-encoded: half slices of a card, the rest 1-2 GPU pods."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        ns = f"ns-{rng.randrange(NAMESPACES)}"
        r = rng.random()
        gpu: dict[str, Any]
        if r < 0.5:
            milli = rng.choice((250, 500))
            gpu = {"milli": milli, "memory": f"{milli * 12}Mi"}
        elif r < 0.85:
            gpu = {"count": 1}
        else:
            gpu = {"count": 2}
        doc = {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "Job",
            "metadata": {"name": f"bench-{i:07d}", "namespace": ns},
            "spec": {
                "queue": "jobs",
                "duration": f"{rng.randint(30, 180)}s",
                "user": f"user-{rng.randrange(16)}",
                "podSets": [{"name": "main", "count": 1, "cpu": 2, "memory": "8Gi", "gpu": gpu}],
            },
        }
        out.append(json.dumps(doc, separators=(",", ":")).encode())
    return out


# -- the server ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """A ``gpupool serve`` subprocess on a free loopback port with its own state directory."""

    def __init__(self, workdir: Path, nodes: int, speed: float, interval: float) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = secrets.token_hex(16)
        (workdir / "cluster.yaml").write_text(yaml.safe_dump(cluster_doc(nodes)))
        (workdir / "queues.yaml").write_text(yaml.safe_dump_all(queue_docs(nodes)))
        env = dict(os.environ, GPUPOOL_TOKENS=f"{self.token},bench,admin")
        self.log_path = workdir / "server.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                *SERVER_COMMAND,
                "serve",
                "--cluster",
                str(workdir / "cluster.yaml"),
                "--queues",
                str(workdir / "queues.yaml"),
                "--state",
                str(workdir / "state.db"),
                "--port",
                str(self.port),
                "--speed",
                str(speed),
                "--interval",
                str(interval),
            ],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"gpupool serve exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(
            f"gpupool serve did not answer /healthz in {timeout_s:g} s:\n{self.log_tail()}"
        )

    def log_tail(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-2000:]

    def peak_rss_mib(self) -> float | None:
        """The server's peak resident memory (VmHWM), while it still runs."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
        except OSError:
            pass
        return None

    def cpu_s(self) -> float | None:
        """CPU seconds (user + system) the server has used so far."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


# -- measuring -------------------------------------------------------------------------------


def admissible_backlog(queues: list[Mapping[str, Any]]) -> tuple[int, int]:
    """(pending jobs, pending jobs of queues with room) from /api/v1/clusterqueues items."""
    pending = admissible = 0
    for item in queues:
        status = item.get("status", {})
        n = int(status.get("pendingJobs", 0))
        pending += n
        nominal = sum(int(v.get("gpuMilli", 0)) for v in status.get("nominal", {}).values())
        used = sum(int(v.get("gpuMilli", 0)) for v in status.get("usage", {}).values())
        if nominal - used >= ADMISSIBLE_ROOM_MILLI:
            admissible += n
    return pending, admissible


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """Prometheus' estimate of quantile ``q`` from cumulative (upper bound, count) buckets."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            inside = count - below
            return lower + (upper - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = upper, count
    return lower


def scrape(text: str) -> dict[str, Any]:
    """From the Prometheus exposition: admissions, the p99 of a scheduling cycle and the p99
    of POST /api/v1/jobs as the server measured it (ms; estimated from histogram buckets)."""
    admitted = 0.0
    cycles: list[tuple[float, float]] = []
    posts: dict[float, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "gpupool_jobs_admitted_total":
                admitted += s.value
            elif s.name == "gpupool_decision_latency_seconds_bucket":
                cycles.append((float(s.labels["le"]), s.value))
            elif (
                s.name == "gpupool_api_request_duration_seconds_bucket"
                and s.labels.get("route") == "/api/v1/jobs"
                and s.labels.get("method") == "POST"
            ):
                le = float(s.labels["le"])
                posts[le] = posts.get(le, 0.0) + s.value

    def ms(q: float | None) -> float | None:
        return None if q is None else round(q * 1000, 2)

    return {
        "admitted": int(admitted),
        "decision_ms_p99": ms(histogram_quantile(cycles, 0.99)),
        "server_submit_ms_p99": ms(histogram_quantile(list(posts.items()), 0.99)),
    }


async def _drive(
    server: Server,
    bodies: list[bytes],
    rate: float,
    concurrency: int,
    progress: Callable[[int], None],
) -> dict[str, Any]:
    n = len(bodies)
    latencies = np.full(n, np.nan)
    queued = np.zeros(n)
    codes: dict[str, int] = {}
    samples: list[BacklogSample] = []
    done = 0
    # idle connections are dropped well before the server's keep-alive timeout (5 s), so a
    # request never races the server closing its connection
    limits = httpx.Limits(
        max_connections=concurrency + 1,
        max_keepalive_connections=concurrency + 1,
        keepalive_expiry=2.0,
    )
    headers = {**server.headers, "Content-Type": "application/json"}
    # at most ``concurrency`` requests in flight; the rest wait here, in order (httpx's own
    # pool costs time in the number of waiting requests)
    slots = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(
        base_url=server.url, limits=limits, timeout=30.0, headers=server.headers
    ) as client:
        loop = asyncio.get_running_loop()

        async def one(i: int, due: float) -> None:
            nonlocal done
            async with slots:
                t0 = loop.time()
                queued[i] = (t0 - due) * 1000
                try:
                    r = await client.post("/api/v1/jobs", content=bodies[i], headers=headers)
                    latencies[i] = (loop.time() - t0) * 1000
                    kind = str(r.status_code)
                except httpx.HTTPError as exc:
                    kind = type(exc).__name__
            codes[kind] = codes.get(kind, 0) + 1
            done += 1

        async def backlog() -> BacklogSample | None:
            try:
                r = await client.get("/api/v1/clusterqueues")
                pending, admissible = admissible_backlog(r.json()["items"])
            except (httpx.HTTPError, KeyError, ValueError):
                return None
            return BacklogSample(loop.time() - start, pending, admissible)

        async def sample_loop(stop: asyncio.Event) -> None:
            while True:
                sample = await backlog()
                if sample is not None:
                    samples.append(sample)
                try:
                    await asyncio.wait_for(stop.wait(), 1.0)
                    return
                except TimeoutError:
                    pass

        start = loop.time()
        server_cpu0, client_cpu0 = server.cpu_s(), time.process_time()
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_loop(stop))
        tasks: set[asyncio.Task[None]] = set()
        reported = 0
        for i in range(n):
            due = start + i / rate
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(i, due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            if done - reported >= 50:
                progress(done - reported)
                reported = done
        while tasks:
            await asyncio.wait(list(tasks))
        load_wall = loop.time() - start
        server_cpu1, client_cpu1 = server.cpu_s(), time.process_time()
        progress(done - reported)
        stop.set()
        await sampler
        last = await backlog()  # right at the end of the load
        if last is not None:
            samples.append(last)
    return {
        "latencies": latencies,
        "queued": queued,
        "codes": codes,
        "samples": samples,
        "load_wall_s": load_wall,
        "client_cpu_s": client_cpu1 - client_cpu0,
        "server_cpu_s": None
        if server_cpu0 is None or server_cpu1 is None
        else server_cpu1 - server_cpu0,
    }


def _drain(server: Server, timeout_s: float) -> float | None:
    """Wall seconds until no job is pending after the load stopped (None: not within
    ``timeout_s``)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        r = httpx.get(server.url + "/api/v1/clusterqueues", headers=server.headers, timeout=10)
        if admissible_backlog(r.json()["items"])[0] == 0:
            return time.monotonic() - t0
        time.sleep(0.2)
    return None


def run(
    rate: float,
    duration_s: float,
    *,
    nodes: int = 150,
    speed: float = 60.0,
    interval: float = 0.1,
    concurrency: int = 16,
    seed: int = 1,
    progress: Callable[[int], None] = lambda n: None,
) -> ServeBenchResult:
    count = max(1, round(rate * duration_s))
    bodies = job_bodies(count, seed)
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-serve-") as tmp:
        server = Server(Path(tmp), nodes, speed, interval)
        try:
            server.wait_ready()
            driven = asyncio.run(_drive(server, bodies, rate, concurrency, progress))
            drain = _drain(server, 10.0)
            metrics = scrape(
                httpx.get(server.url + "/metrics", headers=server.headers, timeout=10).text
            )
            cycles = int(httpx.get(server.url + "/healthz", timeout=10).json()["cycles"])
            rss = server.peak_rss_mib()
        finally:
            server.stop()
    codes: dict[str, int] = driven["codes"]
    accepted = codes.get("201", 0)
    latencies = driven["latencies"]
    return ServeBenchResult(
        rate=rate,
        duration_s=duration_s,
        nodes=nodes,
        speed=speed,
        concurrency=concurrency,
        submitted=count,
        accepted=accepted,
        errors=count - accepted,
        error_kinds={k: v for k, v in codes.items() if k != "201"},
        load_wall_s=driven["load_wall_s"],
        latencies_ms=latencies[~np.isnan(latencies)],
        queued_ms=driven["queued"],
        samples=driven["samples"],
        admitted=metrics["admitted"],
        cycles=cycles,
        decision_ms_p99=metrics["decision_ms_p99"],
        server_peak_rss_mib=rss,
        drain_s=drain,
        extra={
            "load_wall_s": round(driven["load_wall_s"], 2),
            "server_submit_ms": {"p99": metrics["server_submit_ms_p99"]},
            "cpu_s": {
                "server": _round(driven["server_cpu_s"]),
                "load_generator": _round(driven["client_cpu_s"]),
            },
            "machine": {"cpus": os.cpu_count(), "loadavg_1m_at_end": round(os.getloadavg()[0], 2)},
        },
    )


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)
