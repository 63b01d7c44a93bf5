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

Each part has its module: the cluster, queues and jobs (``serve_workload``), the server
subprocess (``serve_server``), what is read from it (``serve_metrics``) and the result with its
targets (``serve_result``); this one drives the load and puts them together.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from gpupool.bench.serve_metrics import admissible_backlog, scrape
from gpupool.bench.serve_result import BacklogSample, ServeBenchResult
from gpupool.bench.serve_server import Server
from gpupool.bench.serve_workload import job_bodies


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
