"""gpupool beside kube-scheduler (the extender, called by the real kube-scheduler), behind the
API server (the admission webhook, called by the real kube-apiserver), its CRDs with status,
and the deploy/ manifests applied with ``kubectl apply -k``."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpupool.k8s.bench import run_bench
from gpupool.k8s.crd import CrdStatus
from gpupool.k8s.extender import serve_http
from gpupool.k8s.kube import Kube, KubeError
from gpupool.k8s.main import default_config, load_crd_config
from gpupool.k8s.tls import make_certificates
from tests.k8s.conftest import REPO, ControlPlane
from tests.k8s.kit import (
    device_plugins,
    get_pod,
    list_pods,
    make_node,
    make_pod,
    running,
    wait_for,
)
from tests.k8s.test_scheduler_live import NS, bound, live

pytestmark = pytest.mark.k8s


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_extender_called_by_kube_scheduler(control_plane: ControlPlane) -> None:
    port = free_port()
    control_plane.script(
        "start-scheduler", extra={"GPUPOOL_K8S_EXTENDER": f"http://127.0.0.1:{port}/extender"}
    )

    async def body(kube: Kube) -> None:
        await make_node(kube, "gpu-1", gpus=2)
        await make_node(kube, "gpu-2", gpus=2)
        async with running(
            kube, default_config(), foreign_schedulers=("default-scheduler",)
        ) as ctl:
            server = await serve_http(ctl, port, host="127.0.0.1")
            try:
                names = [f"k{i}" for i in range(5)]
                for n in names:
                    await make_pod(
                        kube, n, ns=NS, scheduler="default-scheduler", limits={"nvidia.com/gpu": 1}
                    )

                async def four_bound() -> list[dict[str, Any]] | None:
                    pods = [p for p in await list_pods(kube, NS) if p["spec"].get("nodeName")]
                    return pods if len(pods) >= 4 else None

                pods = await wait_for(four_bound, 60, "kube-scheduler binding 4 pods")
                await asyncio.sleep(1.0)
                pods = [p for p in await list_pods(kube, NS) if p["spec"].get("nodeName")]
                assert len(pods) == 4  # 4 cards: the fifth is filtered out everywhere
                cards = set()
                for p in pods:
                    ann = p["metadata"]["annotations"]
                    rec = json.loads(ann["gpupool.io/placement"])
                    assert rec["node"] == p["spec"]["nodeName"]
                    assert ann["hami.io/vgpu-node"] == p["spec"]["nodeName"]
                    cards.add((rec["node"], rec["cards"][0][0]))
                assert len(cards) == 4
                assert len(ctl.allocations()) == 4
                async with (
                    aiohttp.ClientSession() as http,
                    http.get(f"http://127.0.0.1:{port}/metrics") as resp,
                ):
                    text = await resp.text()
                assert "gpupool_k8s_binds_total 4" in text
                assert "gpupool_jobs_running 4" in text
            finally:
                await server.cleanup()

    try:
        live(control_plane, body)
    finally:
        control_plane.script("stop-one", "scheduler")


def test_webhook_called_by_the_api_server(control_plane: ControlPlane, tmp_path: Path) -> None:
    port = free_port()
    certs = make_certificates(["localhost"], ["127.0.0.1"])
    certs.write(tmp_path)
    ns = "webhooked"
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "gpupool-test"},
        "webhooks": [
            {
                "name": "pods.gpupool.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/mutate",
                    "caBundle": base64.b64encode(certs.ca_pem).decode(),
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"gpupool.io/webhook-test": "on"}},
            }
        ],
    }
    path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"

    async def body(kube: Kube) -> None:
        with contextlib.suppress(KubeError):
            await kube.request("DELETE", f"{path}/gpupool-test")
        await kube.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}",
            {"metadata": {"labels": {"gpupool.io/webhook-test": "on"}}},
            content_type="application/merge-patch+json",
        )
        await make_node(kube, "gpu-1", gpus=2)
        async with running(kube, default_config()) as ctl:
            server = await serve_http(ctl, port, host="127.0.0.1", tls_dir=str(tmp_path))
            await kube.request("POST", path, config)
            try:
                await asyncio.sleep(1.0)  # the API server picks the configuration up
                # a GPU pod left to the default scheduler is routed to gpupool, and bound
                await make_pod(
                    kube,
                    "routed",
                    ns=ns,
                    scheduler="default-scheduler",
                    limits={"nvidia.com/gpu": 1},
                )
                pod = await get_pod(kube, ns, "routed")
                assert pod["spec"]["schedulerName"] == "gpupool"
                assert pod["metadata"]["labels"]["gpupool.io/queue"] == "default"

                async def bound() -> bool:
                    return bool((await get_pod(kube, ns, "routed"))["spec"].get("nodeName"))

                await wait_for(bound, 20, "routed pod bound")
                # a pod that can never run is refused at creation, with the reason
                with pytest.raises(KubeError) as refused:
                    await make_pod(kube, "huge", ns=ns, limits={"nvidia.com/gpu": 9})
                assert "gpupool" in refused.value.message
                with pytest.raises(KubeError) as refused:
                    await make_pod(
                        kube,
                        "lost",
                        ns=ns,
                        limits={"nvidia.com/gpu": 1},
                        labels={"gpupool.io/queue": "nowhere"},
                    )
                assert "does not exist" in refused.value.message
                # a pod without GPUs passes untouched
                await make_pod(kube, "cpu-only", ns=ns, scheduler="default-scheduler")
                cpu = await get_pod(kube, ns, "cpu-only")
                assert cpu["spec"]["schedulerName"] == "default-scheduler"
            finally:
                with contextlib.suppress(KubeError):
                    await kube.request("DELETE", f"{path}/gpupool-test")
                await server.cleanup()

    live(control_plane, body, namespaces=(ns,))


QUEUE_OBJECTS = """
apiVersion: gpupool.io/v1alpha1
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {gpupool.io/flavor: a100}}
---
apiVersion: gpupool.io/v1alpha1
kind: Cohort
metadata: {name: org}
---
apiVersion: gpupool.io/v1alpha1
kind: ClusterQueue
metadata: {name: research}
spec:
  cohort: org
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: 1}]
---
apiVersion: gpupool.io/v1alpha1
kind: LocalQueue
metadata: {name: research, namespace: team-a}
spec: {clusterQueue: research}
"""


def test_deploy_manifests_apply_and_crds_drive_queues(control_plane: ControlPlane) -> None:
    applied = control_plane.kubectl("apply", "-k", str(REPO / "deploy"), check=False, timeout=120)
    try:
        assert applied.returncode == 0, applied.stderr
        sa = "system:serviceaccount:gpupool-system:gpupool"

        def can(*args: str) -> bool:
            out = control_plane.kubectl("auth", "can-i", *args, f"--as={sa}", check=False)
            return out.stdout.strip() == "yes"

        # what gpupool needs, and no more
        assert can("create", "pods", "--subresource=binding", "-n", NS)
        assert can("patch", "pods", "--subresource=status", "-n", NS)
        assert can("watch", "nodes")
        assert can("patch", "nodes")  # HAMi's node lock annotation
        assert can("list", "clusterqueues.gpupool.io")
        assert can("patch", "clusterqueues.gpupool.io", "--subresource=status")
        assert can("update", "leases/gpupool-scheduler", "-n", "gpupool-system")
        assert not can("update", "leases/other", "-n", "gpupool-system")
        assert not can("delete", "pods", "-n", NS)
        assert not can("get", "secrets", "-n", NS)
        assert not can("update", "nodes")
        assert not can("create", "clusterqueues.gpupool.io")
        control_plane.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/clusterqueues.gpupool.io",
            "crd/localqueues.gpupool.io",
            "crd/resourceflavors.gpupool.io",
            "crd/cohorts.gpupool.io",
        )
        # nothing serves the webhook here: keep it from slowing other tests' pods down
        control_plane.kubectl("delete", "mutatingwebhookconfiguration", "gpupool")
        control_plane.kubectl("create", "namespace", NS, check=False)
        control_plane.kubectl("apply", "-f", "-", stdin=QUEUE_OBJECTS)

        async def body(kube: Kube) -> None:
            config, present = await load_crd_config(kube)
            assert present
            assert [q.name for q in config.cluster_queues] == ["research"]
            await make_node(kube, "gpu-1", gpus=2, labels={"gpupool.io/flavor": "a100"})
            async with running(kube, config) as ctl:
                for i in range(2):
                    await make_pod(
                        kube,
                        f"r{i}",
                        ns=NS,
                        limits={"nvidia.com/gpu": 1},
                        labels={"gpupool.io/queue": "research"},
                    )
                status = CrdStatus(kube, ctl)

                async def counted() -> dict[str, Any] | None:
                    await status.write()
                    cq = await kube.request(
                        "GET", "/apis/gpupool.io/v1alpha1/clusterqueues/research"
                    )
                    st = cq.get("status") or {}
                    ok = st.get("admittedWorkloads") == 1 and st.get("pendingWorkloads") == 1
                    return st if ok else None

                st = await wait_for(counted, 20, "ClusterQueue status")
                usage = {r["name"]: r["total"] for f in st["flavorsUsage"] for r in f["resources"]}
                assert usage["gpu_milli"] == 1000
                lq = await kube.request(
                    "GET", f"/apis/gpupool.io/v1alpha1/namespaces/{NS}/localqueues/research"
                )
                assert lq["status"] == {"pendingWorkloads": 1, "admittedWorkloads": 1}
                cohort = await kube.request("GET", "/apis/gpupool.io/v1alpha1/cohorts/org")
                assert cohort["status"]["admittedWorkloads"] == 1
                assert cohort["status"]["pendingWorkloads"] == 1
                flavor = await kube.request("GET", "/apis/gpupool.io/v1alpha1/resourceflavors/a100")
                assert flavor["status"] == {"nodes": 1, "gpus": 2}

        live(control_plane, body)
    finally:
        control_plane.kubectl("delete", "-f", "-", stdin=QUEUE_OBJECTS, check=False)
        control_plane.kubectl(
            "delete", "-k", str(REPO / "deploy"), "--wait=false", check=False, timeout=120
        )


CRD_QUEUES = """
apiVersion: gpupool.io/v1alpha1
kind: ClusterQueue
metadata: {name: lab}
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: any
      resources: [{name: nvidia.com/gpu, nominalQuota: QUOTA}]
---
apiVersion: gpupool.io/v1alpha1
kind: ResourceFlavor
metadata: {name: any}
---
apiVersion: gpupool.io/v1alpha1
kind: LocalQueue
metadata: {name: lab, namespace: team-a}
spec: {clusterQueue: lab}
"""


def test_gpupool_run_follows_crd_changes(control_plane: ControlPlane, tmp_path: Path) -> None:
    """``gpupool k8s run`` without --queues: queues from the CRDs; raising a quota takes
    effect at once; the ClusterQueue's status is kept current."""
    _queue_crds(control_plane)
    control_plane.kubectl("apply", "-f", "-", stdin=CRD_QUEUES.replace("QUOTA", "1"))
    log = (tmp_path / "run.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpupool.k8s",
            "run",
            "--kubeconfig",
            control_plane.kubeconfig,
            "--no-leader-elect",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )

    async def status(kube: Kube) -> dict[str, Any]:
        cq = await kube.request("GET", "/apis/gpupool.io/v1alpha1/clusterqueues/lab")
        return cq.get("status") or {}

    async def body(kube: Kube) -> None:
        await make_node(kube, "gpu-1", gpus=4)
        for i in range(2):
            await make_pod(
                kube,
                f"l{i}",
                ns=NS,
                limits={"nvidia.com/gpu": 1},
                labels={"gpupool.io/queue": "lab"},
            )

        async def n_bound() -> int:
            return sum(1 for p in await list_pods(kube, NS) if p["spec"].get("nodeName"))

        await wait_for(n_bound, 30, "one pod bound")
        await wait_for(
            lambda: _has(status(kube), admittedWorkloads=1, pendingWorkloads=1),
            20,
            "status 1 admitted, 1 pending",
        )
        assert await n_bound() == 1
        control_plane.kubectl("apply", "-f", "-", stdin=CRD_QUEUES.replace("QUOTA", "2"))

        async def both() -> bool:
            return await n_bound() == 2

        await wait_for(both, 30, "the second pod bound after the quota was raised")
        await wait_for(
            lambda: _has(status(kube), admittedWorkloads=2, pendingWorkloads=0),
            20,
            "status 2 admitted",
        )
        # a bad edit (a flavor no ResourceFlavor names): the object is marked, the last
        # configuration stays in use, scheduling goes on, nothing restarts
        bad = CRD_QUEUES.replace("QUOTA", "3").replace("- name: any", "- name: missing")
        control_plane.kubectl("apply", "-f", "-", stdin=bad)

        async def marked() -> list[str]:
            evs = (await kube.request("GET", "/api/v1/namespaces/default/events")).get(
                "items"
            ) or []
            return [
                e["message"]
                for e in evs
                if e.get("reason") == "InvalidConfiguration"
                and e["involvedObject"].get("name") == "lab"
            ]

        msgs = await wait_for(marked, 30, "the bad ClusterQueue marked with an Event")
        assert any("missing" in m and "flavors[0].name" in m for m in msgs), msgs
        await make_pod(
            kube, "l2", ns=NS, limits={"nvidia.com/gpu": 1}, labels={"gpupool.io/queue": "lab"}
        )
        await wait_for(lambda: _has(status(kube), pendingWorkloads=1), 20, "l2 pending")
        assert await n_bound() == 2  # the last good quota (2) holds
        control_plane.kubectl("apply", "-f", "-", stdin=CRD_QUEUES.replace("QUOTA", "3"))

        async def three() -> bool:
            return await n_bound() == 3

        await wait_for(three, 30, "the third pod bound once the fixed quota of 3 applied")
        assert proc.poll() is None

    _live_with(control_plane, body, proc)


def test_gpupool_run_starts_on_bad_queue_objects_and_waits_for_a_fix(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """Queue objects that do not load at start-up: the scheduler runs (no crash loop), admits
    nothing, and schedules once they are fixed."""
    _queue_crds(control_plane)
    bad = CRD_QUEUES.replace("QUOTA", "1").replace("- name: any", "- name: missing")
    control_plane.kubectl("apply", "-f", "-", stdin=bad)
    # (Events of another test's ClusterQueue lab must not count here)
    control_plane.kubectl("delete", "events", "--all", "-n", "default", check=False)
    log_path = tmp_path / "run.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpupool.k8s",
            "run",
            "--kubeconfig",
            control_plane.kubeconfig,
            "--no-leader-elect",
        ],
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )

    async def body(kube: Kube) -> None:
        await make_node(kube, "gpu-1", gpus=4)
        await make_pod(
            kube, "s0", ns=NS, limits={"nvidia.com/gpu": 1}, labels={"gpupool.io/queue": "lab"}
        )

        async def said() -> bool:
            return "no queue admits anything until they load" in log_path.read_text()

        await wait_for(said, 30, "the bad objects said in the log")

        async def marked() -> bool:
            evs = (await kube.request("GET", "/api/v1/namespaces/default/events")).get(
                "items"
            ) or []
            return any(
                e.get("reason") == "InvalidConfiguration"
                and e["involvedObject"].get("name") == "lab"
                for e in evs
            )

        await wait_for(marked, 30, "the bad ClusterQueue marked with an Event")
        await asyncio.sleep(2.0)
        assert proc.poll() is None
        assert not (await get_pod(kube, NS, "s0"))["spec"].get("nodeName")
        control_plane.kubectl("apply", "-f", "-", stdin=CRD_QUEUES.replace("QUOTA", "1"))
        await wait_for(lambda: bound(kube, NS, "s0"), 30, "s0 bound once the objects load")

    _live_with(control_plane, body, proc)


def _queue_crds(control_plane: ControlPlane) -> None:
    """gpupool's queue CRDs installed and established, and the test namespace made."""
    control_plane.kubectl("apply", "-f", str(REPO / "deploy" / "crds"))
    control_plane.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/clusterqueues.gpupool.io",
        "crd/localqueues.gpupool.io",
        "crd/resourceflavors.gpupool.io",
        "crd/cohorts.gpupool.io",
    )
    control_plane.kubectl("create", "namespace", NS, check=False)


def _live_with(control_plane: ControlPlane, body: Any, proc: subprocess.Popen[bytes]) -> None:
    """``body`` against the API server while ``gpupool k8s run`` (``proc``) runs; then the
    run stopped and the queue objects deleted."""
    try:
        live(control_plane, body)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        control_plane.kubectl(
            "delete", "-f", "-", stdin=CRD_QUEUES.replace("QUOTA", "1"), check=False
        )


async def _has(status: Any, **want: int) -> bool:
    got = await status
    return all(got.get(k) == v for k, v in want.items())


def test_bench_small(control_plane: ControlPlane) -> None:
    """``gpupool k8s bench`` end to end, small: every pod bound, figures present."""

    async def bench() -> dict[str, Any]:
        kube = await Kube.connect(control_plane.kubeconfig)
        try:
            async with device_plugins(kube):  # the bench's nodes release no node locks
                return await run_bench(
                    control_plane.kubeconfig, nodes=3, gpus=2, pods=10, ns="gpupool-bench-test"
                )
        finally:
            await kube.close()

    result = asyncio.run(bench())
    assert result["bound"] == 10 and result["pods"] == 10
    assert result["pods_per_s"] > 0 and result["create_to_bound_ms"]["p99"] is not None
