"""Two replicas of ``gpupool k8s run`` on one Lease: only the leader binds; when it is killed
the other takes over, and no pod is bound twice."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gpupool.k8s.kube import Kube, KubeError
from tests.k8s.conftest import ControlPlane
from tests.k8s.kit import (
    delete_pod,
    ensure_namespace,
    list_pods,
    make_node,
    make_pod,
    wait_for,
)
from tests.k8s.test_scheduler_live import NS, live

pytestmark = pytest.mark.k8s

QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: default, namespace: team-a}
spec: {clusterQueue: default}
"""
# its own namespace: the deploy test deletes gpupool-system, which stays Terminating here
# (no namespace controller runs)
LEASE_NS = "gpupool-leader-test"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/gpupool-scheduler"


def replica(cp: ControlPlane, identity: str, queues: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpupool.k8s",
            "run",
            "--kubeconfig",
            cp.kubeconfig,
            "--identity",
            identity,
            "--queues",
            str(queues),
            "--lease-duration",
            "4",
            "--renew-interval",
            "0.5",
            "--lease-namespace",
            LEASE_NS,
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def holder(kube: Kube) -> str | None:
    try:
        lease = await kube.request("GET", LEASE)
    except KubeError:
        return None
    return lease.get("spec", {}).get("holderIdentity") or None


async def bound_by(kube: Kube) -> dict[str, str]:
    out = {}
    for pod in await list_pods(kube, NS):
        if pod["spec"].get("nodeName"):
            out[pod["metadata"]["name"]] = pod["metadata"]["annotations"]["gpupool.io/bound-by"]
    return out


def test_two_replicas_one_killed(control_plane: ControlPlane, tmp_path: Path) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(QUEUES)
    procs: dict[str, subprocess.Popen[bytes]] = {}

    async def body(kube: Kube) -> None:
        await ensure_namespace(kube, LEASE_NS)
        with contextlib.suppress(KubeError):
            await kube.request("DELETE", LEASE)
        # pods other tests left in other namespaces would be scheduled too, onto these cards
        for pod in (await kube.request("GET", "/api/v1/pods")).get("items") or []:
            meta = pod["metadata"]
            await delete_pod(kube, meta["namespace"], meta["name"])
        # node names no other test uses: what other tests leave behind that names a node
        # (Elastic GPU objects, recorded placements) must not hold these cards
        await make_node(kube, "leader-test-1", gpus=4)
        await make_node(kube, "leader-test-2", gpus=4)
        for name in ("r1", "r2"):
            procs[name] = replica(control_plane, name, queues, tmp_path / f"{name}.log")
        leader = await wait_for(lambda: holder(kube), 30, "a leader")
        other = "r2" if leader == "r1" else "r1"
        first = [f"p{i}" for i in range(4)]
        for n in first:
            await make_pod(kube, n, ns=NS, limits={"nvidia.com/gpu": 1})
        await wait_for(lambda: _count(kube, 4), 30, "first pods bound")
        assert set((await bound_by(kube)).values()) == {leader}
        # the leader dies without a word; the other takes over after the lease runs out
        procs[leader].send_signal(signal.SIGKILL)
        procs[leader].wait(10)
        second = [f"q{i}" for i in range(4)]
        for n in second:
            await make_pod(kube, n, ns=NS, limits={"nvidia.com/gpu": 1})
        try:
            await wait_for(lambda: _count(kube, 8), 45, "second pods bound")
        except AssertionError:
            nodes = (await kube.request("GET", "/api/v1/nodes")).get("items") or []
            locks = {
                n["metadata"]["name"]: (n["metadata"].get("annotations") or {}).get(
                    "hami.io/mutex.lock"
                )
                for n in nodes
            }
            pods = {
                p["metadata"]["name"]: (
                    p["spec"].get("nodeName"),
                    (p["metadata"].get("annotations") or {}).get("hami.io/bind-phase"),
                    [c.get("message") for c in (p.get("status") or {}).get("conditions") or []],
                )
                for p in await list_pods(kube, NS)
            }
            elsewhere = [
                (p["metadata"]["namespace"], p["metadata"]["name"], p["spec"].get("nodeName"))
                for p in (await kube.request("GET", "/api/v1/pods")).get("items") or []
                if p["metadata"]["namespace"] != NS
            ]
            try:
                egpus = [
                    (g["metadata"]["name"], g.get("spec"), g.get("status"))
                    for g in (
                        await kube.request("GET", "/apis/elasticgpu.io/v1alpha1/elasticgpus")
                    ).get("items")
                    or []
                ]
            except KubeError as exc:
                egpus = [str(exc)]
            raise AssertionError(
                f"locks {locks}; pods {pods}; other pods {elsewhere}; elastic GPUs {egpus}"
            ) from None
        by = await bound_by(kube)
        assert {by[n] for n in first} == {leader}
        assert {by[n] for n in second} == {other}
        assert await holder(kube) == other
        cards: Counter[tuple[str, int]] = Counter()
        for pod in await list_pods(kube, NS):
            rec = json.loads(pod["metadata"]["annotations"]["gpupool.io/placement"])
            for c in rec["cards"]:
                cards[(pod["spec"]["nodeName"], c[0])] += 1
        assert len(cards) == 8 and set(cards.values()) == {1}  # no card given twice

    try:
        live(control_plane, body)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


async def _count(kube: Kube, n: int) -> bool:
    return len(await bound_by(kube)) >= n
