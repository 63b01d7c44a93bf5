"""``gpupool k8s bench --scale``: ``gpupool k8s run`` at 5,000 nodes and 100,000 pods.

100,000 realistic pods (about 32 KB of JSON each, ``managedFields`` included) are 3 GB in
etcd and more in kube-apiserver's watch cache: more than the 2-core development machine
holds. The cluster is therefore a recorded list/watch stream replayed by
:class:`~gpupool.k8s.replay.ReplayServer` in a process of its own, and the scheduler is the
real ``gpupool k8s run`` in another, with the same informers, controller, binder, node locks,
status writer and Lease thread as in a cluster (``"source": "replay"`` in the figures).

The cluster: ``--nodes`` nodes with 8 cards each; ``--pods`` pods, of which ``--pending`` are
gpupool's and wait (one whole card each), a quarter of the rest gpupool's already bound (one
card each, recorded), the rest other schedulers' pods spread over the nodes.

Figures (JSON):

- ``peak_rss_mib``: the scheduler process's peak resident memory (``VmHWM``);
- ``initial_sync_s``: from the scheduler's start to its watches of both nodes and pods
  (every page listed, every object cached);
- ``pods_per_s``: pending pods bound, over the time from the end of the initial sync to the
  last bind (the leader's rebuild and first cycle included); ``bind_wall_s`` that time;
- ``lease_lost``: whether the Lease went unrenewed for its whole duration at any time, or
  changed hands, or the scheduler logged that it stopped leading; ``lease_max_gap_s`` the
  longest time between two renewals;
- ``status_writes``, ``events_written``: pending-reason and Event writes the server saw;
- ``scheduler_cpu_s``, ``replay_server_cpu_s``, ``wall_s``, ``load_average``: where the
  machine's time went (other work on the machine shows in the load average);
- ``json_bytes_per_pod`` / ``_per_node`` and ``cached_bytes_per_*``: an object's JSON and
  what one costs in the informers' caches before (full object as parsed) and after
  (``k8s/slim.py``), measured on sample objects in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from gpupool.core.errors import ConfigError
from gpupool.k8s import slim
from gpupool.k8s.podview import reduce
from gpupool.k8s.replay import ReplayServer

__all__ = ["object_costs", "run_scale_bench", "scale_command"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kubeconfig(path: Path, port: int) -> None:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "replay",
                "clusters": [{"name": "replay", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "replay", "user": {"token": "replay"}}],
                "contexts": [
                    {"name": "replay", "context": {"cluster": "replay", "user": "replay"}}
                ],
            }
        )
    )


def _rss_mib(pid: int, field: str = "VmHWM") -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def object_costs(server: ReplayServer) -> dict[str, int]:
    """JSON bytes and cached bytes (full, slim) of sample objects, averaged."""

    def avg(values: list[int]) -> int:
        return int(sum(values) / max(1, len(values)))

    pods = {"pending": 0, "own": server.pending, "other": server.pending + server.own_bound}
    out: dict[str, int] = {}
    for kind, first in pods.items():
        if first >= server.n_pods:
            continue
        sample = [first + k for k in range(10) if first + k < server.n_pods]
        texts = [server.pod_json(i) for i in sample]
        full = [json.loads(t) for t in texts]
        cut = slim.own_pod if kind != "other" else reduce
        out[f"json_bytes_per_pod_{kind}"] = avg([len(t) for t in texts])
        out[f"cached_bytes_per_pod_{kind}_before"] = avg([slim.deep_size(p) for p in full])
        out[f"cached_bytes_per_pod_{kind}_after"] = avg(
            [slim.deep_size(cut(json.loads(t))) for t in texts]
        )
    texts = [server.node_json(i) for i in range(min(10, server.n_nodes))]
    out["json_bytes_per_node"] = avg([len(t) for t in texts])
    out["cached_bytes_per_node_before"] = avg([slim.deep_size(json.loads(t)) for t in texts])
    out["cached_bytes_per_node_after"] = avg(
        [slim.deep_size(slim.node(json.loads(t))) for t in texts]
    )
    return out


async def _serve(port: int, nodes: int, pods: int, pending: int) -> None:
    server = ReplayServer(nodes, pods, pending)
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


async def _stats(session: aiohttp.ClientSession, port: int) -> dict[str, Any]:
    async with session.get(f"http://127.0.0.1:{port}/replay/stats") as resp:
        data: dict[str, Any] = await resp.json()
        return data


def _lease(renewals: list[list[Any]], lease_s: float, until: float) -> dict[str, Any]:
    """Longest gap between renewals of the first holder, and whether it ever changed."""
    holders = [h for _, h in renewals]
    first = holders[0] if holders else ""
    times = [t for t, h in renewals if h == first]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    if times:
        gaps.append(until - times[-1])
    changed = any(h != first for h in holders)
    return {
        "lease_max_gap_s": round(max(gaps, default=0.0), 2),
        "lease_renewals": len(times),
        "lease_changed_hands": changed,
        "lease_lost_gap": bool(gaps) and max(gaps) >= lease_s,
    }


async def run_scale_bench(
    nodes: int,
    pods: int,
    pending: int,
    *,
    timeout_s: float = 600.0,
    lease_s: float = 15.0,
    renew_s: float = 2.0,
) -> dict[str, Any]:
    if pending > pods:
        raise ConfigError(f"--pending={pending} must not exceed --pods={pods}")
    if nodes < 1 or pods < 1:
        raise ConfigError(f"--nodes={nodes} and --pods={pods} must be at least 1")
    port = _free_port()
    tmp = Path(tempfile.mkdtemp(prefix="gpupool-scale-"))
    kubeconfig = tmp / "kubeconfig"
    _kubeconfig(kubeconfig, port)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpupool.k8s.bench_scale",
            "--port",
            str(port),
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--pending",
            str(pending),
        ],
        stdout=subprocess.PIPE,
        env=env,
    )
    sched: subprocess.Popen[bytes] | None = None
    log_path = tmp / "scheduler.log"
    try:
        assert server.stdout is not None
        line = await asyncio.to_thread(server.stdout.readline)
        if line.strip() != b"ready":
            raise RuntimeError(f"the replay server did not start: {line!r}")
        started = time.time()
        with log_path.open("wb") as log:
            sched = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gpupool.k8s",
                    "run",
                    "--kubeconfig",
                    str(kubeconfig),
                    "--identity",
                    "bench",
                    "--lease-duration",
                    str(lease_s),
                    "--renew-interval",
                    str(renew_s),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        stats: dict[str, Any] = {}
        rss_now = 0.0
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                if sched.poll() is not None:
                    raise RuntimeError("gpupool k8s run exited:\n" + log_path.read_text()[-3000:])
                rss_now = max(rss_now, _rss_mib(sched.pid, "VmRSS"))
                stats = await _stats(session, port)
                if stats["binds"] >= pending:
                    break
            await asyncio.sleep(2 * renew_s)  # renewals after the last bind count too
            stats = await _stats(session, port)
            ended = time.time()
        peak = _rss_mib(sched.pid)
        cpu: dict[str, Any] = {
            "scheduler_cpu_s": round(_cpu_s(sched.pid), 1),
            "replay_server_cpu_s": round(_cpu_s(server.pid), 1),
            "wall_s": round(time.time() - started, 1),
            "load_average": [round(x, 1) for x in os.getloadavg()],
        }
        text = log_path.read_text(errors="replace")  # before its shutdown gives the lease up
        sched.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            sched.wait(20)
        synced = stats["synced_s"]
        sync_at = max(synced.values()) if len(synced) == 2 else 0.0
        bind_wall = stats["last_bind_s"] - sync_at if stats["binds"] and sync_at else 0.0
        lease = _lease(stats["renewals"], lease_s, ended)
        stopped = text.count("stopped leading")
        return {
            "source": "replay",
            "nodes": nodes,
            "pods": pods,
            "pending": pending,
            "own_bound": stats["own_bound"],
            "other_pods": stats["others"],
            "bound": stats["binds"],
            "peak_rss_mib": round(max(peak, rss_now), 1),
            "initial_sync_s": round(sync_at - started, 2) if sync_at else None,
            "list_s": round(sync_at - stats["first_request_s"], 2) if sync_at else None,
            "list_requests": stats["list_requests"],
            "list_mib": round(stats["list_bytes"] / 2**20, 1),
            "pods_per_s": round(stats["binds"] / bind_wall, 1) if bind_wall > 0 else 0.0,
            "bind_wall_s": round(bind_wall, 2),
            "binds_per_scheduler_cpu_s": round(
                stats["binds"] / max(1e-9, cpu["scheduler_cpu_s"]), 1
            ),
            "binds_only_per_s": round(
                stats["binds"] / max(1e-9, stats["last_bind_s"] - stats["first_bind_s"]), 1
            ),
            "lease_lost": lease["lease_changed_hands"] or lease["lease_lost_gap"] or stopped > 0,
            **{k: v for k, v in lease.items() if k.startswith("lease_m") or k == "lease_renewals"},
            "status_writes": stats["status_writes"],
            "events_written": stats["events_written"],
            "lock_conflicts": stats["conflicts"],
            **cpu,
            **object_costs(ReplayServer(nodes, pods, pending)),
        }
    finally:
        if sched is not None and sched.poll() is None:
            sched.kill()
        server.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(10)
        if server.poll() is None:
            server.kill()


def scale_command(args: argparse.Namespace) -> int:
    pending = args.pending if args.pending is not None else max(1, args.pods // 10)
    result = asyncio.run(run_scale_bench(args.nodes, args.pods, pending, timeout_s=args.timeout))
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


def main() -> None:
    """The replay server's own process (started by :func:`run_scale_bench`)."""
    p = argparse.ArgumentParser(prog="python -m gpupool.k8s.bench_scale")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--pods", type=int, required=True)
    p.add_argument("--pending", type=int, required=True)
    a = p.parse_args()
    asyncio.run(_serve(a.port, a.nodes, a.pods, a.pending))


if __name__ == "__main__":
    main()
