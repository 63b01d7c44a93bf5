"""deploy/ on a real API server, and gpupool run from it as its service account.

``kubectl apply -k deploy/`` (and ``deploy/pdb.yaml``); a token for
``system:serviceaccount:gpupool-system:gpupool`` from the TokenRequest API (what a pod's
projected token is), so every request below is authorised by deploy/'s RBAC alone:

- ``gpupool k8s certs --secret`` as the init container runs it: the Secret is made, the
  webhook's caBundle set; a second run keeps the same certificate;
- ``gpupool k8s run`` (the Deployment's arguments) with gpupool.io queue objects: a pod is
  bound, the four kinds' status written, the Lease held, nothing refused;
- the same with a queue of queued provisioning: ProvisioningRequest, PodTemplate, pods
  annotated, the booking recorded, all deleted when the job ends;
- kube-scheduler started with ``deploy/kube-scheduler/config-v1beta1.yaml`` (the server is
  v1.20) calls gpupool's extender over HTTPS with the bootstrapped CA and binds a pod.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.k8s.kube import MERGE_PATCH, Kube
from tests.k8s.conftest import ControlPlane
from tests.k8s.kit import device_plugins, get_pod, make_node, pod_body, set_phase, wait_for

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
NS = "deployed"
SYSTEM = "gpupool-system"
SA = f"system:serviceaccount:{SYSTEM}:gpupool"
BIN = Path(os.environ.get("GPUPOOL_K8S_CACHE", str(Path.home() / ".cache/gpupool-k8s")))

QUEUE_OBJECTS = f"""
apiVersion: gpupool.io/v1alpha1
kind: ResourceFlavor
metadata: {{name: a100}}
spec: {{nodeLabels: {{pool: a100}}}}
---
apiVersion: gpupool.io/v1alpha1
kind: Cohort
metadata: {{name: org}}
---
apiVersion: gpupool.io/v1alpha1
kind: ClusterQueue
metadata: {{name: research}}
spec:
  cohort: org
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{{name: nvidia.com/gpu, nominalQuota: 8}}]
---
apiVersion: gpupool.io/v1alpha1
kind: LocalQueue
metadata: {{name: research, namespace: {NS}}}
spec: {{clusterQueue: research}}
"""

PROVISIONED_QUEUES = f"""
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {{name: h100}}
spec: {{nodeLabels: {{pool: h100}}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ProvisioningRequestConfig
metadata: {{name: atomic}}
spec:
  provisioningClassName: best-effort-atomic-scale-up.autoscaling.x-k8s.io
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {{name: atomic}}
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
  parameters: {{apiGroup: kueue.x-k8s.io, kind: ProvisioningRequestConfig, name: atomic}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: train}}
spec:
  admissionChecks: [atomic]
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{{name: nvidia.com/gpu, nominalQuota: 16}}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: train, namespace: {NS}}}
spec: {{clusterQueue: train}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NAMESPACED = (
    "deployments,services,serviceaccounts,roles,rolebindings,secrets,leases,"
    "poddisruptionbudgets,pods,podtemplates,events"
)


def drop_namespace(cp: ControlPlane, ns: str) -> None:
    """Deletes a namespace and what it holds, as the namespace controller would (the test
    server runs none: a deleted namespace would stay Terminating, and a later
    ``kubectl apply`` into it be refused)."""
    got = cp.kubectl("get", "namespace", ns, "-o", "json", check=False)
    if got.returncode != 0:
        return
    cp.kubectl("delete", NAMESPACED, "--all", "-n", ns, "--wait=false", check=False)
    cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    obj = json.loads(cp.kubectl("get", "namespace", ns, "-o", "json", check=False).stdout or "{}")
    if obj:
        obj["spec"]["finalizers"] = []
        cp.kubectl(
            "replace",
            "--raw",
            f"/api/v1/namespaces/{ns}/finalize",
            "-f",
            "-",
            stdin=json.dumps(obj),
            check=False,
        )
    for _ in range(100):
        if cp.kubectl("get", "namespace", ns, check=False).returncode != 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"namespace {ns} not gone")


def apply_deploy(cp: ControlPlane) -> None:
    """deploy/ as a user applies it; the PodDisruptionBudget in the version the server
    serves (policy/v1 from 1.21; this one is 1.20: policy/v1beta1, the same fields)."""
    phase = cp.kubectl(
        "get", "namespace", SYSTEM, "-o", "jsonpath={.status.phase}", check=False
    ).stdout
    if phase == "Terminating":  # left so by an earlier test
        drop_namespace(cp, SYSTEM)
    cp.kubectl("apply", "-k", str(DEPLOY), timeout=120)
    (pdb,) = [d for d in yaml.safe_load_all((DEPLOY / "pdb.yaml").read_text()) if d]
    if "policy/v1" not in cp.kubectl("api-versions").stdout.split():
        pdb["apiVersion"] = "policy/v1beta1"
    cp.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pdb))
    cp.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        *(
            f"crd/{p.stem}.{g}"
            for g, p in [
                (yaml.safe_load(p.read_text())["spec"]["group"], p)
                for p in sorted((DEPLOY / "crds").glob("*.yaml"))
            ]
        ),
    )


def sa_kubeconfig(cp: ControlPlane, tmp: Path) -> Path:
    """A kubeconfig holding a TokenRequest token of gpupool's service account."""
    review = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    out = cp.kubectl(
        "create",
        "--raw",
        f"/api/v1/namespaces/{SYSTEM}/serviceaccounts/gpupool/token",
        "-f",
        "-",
        stdin=json.dumps(review),
    )
    token = json.loads(out.stdout)["status"]["token"]
    cfg = yaml.safe_load(Path(cp.kubeconfig).read_text())
    cfg["users"] = [{"name": "gpupool", "user": {"token": token}}]
    cfg["contexts"][0]["context"]["user"] = "gpupool"
    path = tmp / "gpupool.kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return path


def gpupool(*args: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{REPO}"}
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "gpupool.k8s", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@contextmanager
def process(proc: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def refused(log: Path) -> list[str]:
    """Lines where the API server refused the service account something."""
    return [
        line
        for line in log.read_text().splitlines()
        if ": 403 " in line or "forbidden" in line.lower()
    ]


async def _pod(
    kube: Kube,
    name: str,
    limits: dict[str, Any],
    queue: str,
    scheduler: str = "gpupool",
    **meta: Any,
) -> None:
    body = pod_body(
        name, ns=NS, limits=limits, labels={"gpupool.io/queue": queue}, scheduler=scheduler, **meta
    )
    await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", body)


async def _bound(kube: Kube, names: list[str]) -> list[str] | None:
    got = [(await get_pod(kube, NS, n))["spec"].get("nodeName") for n in names]
    return got if all(got) else None


def test_deploy_applies_and_runs_as_its_service_account(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    cp = control_plane
    apply_deploy(cp)
    cp.kubectl(
        "apply",
        "-f",
        str(Path(__file__).parent / "data" / "provisioningrequests.autoscaling.x-k8s.io.yaml"),
    )
    cp.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/provisioningrequests.autoscaling.x-k8s.io",
    )
    cp.kubectl("create", "namespace", NS, check=False)
    kubeconfig = sa_kubeconfig(cp, tmp_path)
    log = tmp_path / "gpupool.log"
    tls = tmp_path / "tls"
    try:
        # 1. the init container's command, twice: made once, then kept
        certs = [
            "certs",
            "--kubeconfig",
            str(kubeconfig),
            "--secret=gpupool-webhook-tls",
            "--webhook=gpupool",
            f"--namespace={SYSTEM}",
            f"--out={tls}",
        ]
        assert gpupool(*certs, log=log).wait(60) == 0, log.read_text()
        secret = json.loads(
            cp.kubectl("get", "secret", "-n", SYSTEM, "gpupool-webhook-tls", "-o", "json").stdout
        )
        assert secret["type"] == "kubernetes.io/tls"
        ca = base64.b64decode(secret["data"]["ca.crt"])
        assert (tls / "ca.crt").read_bytes() == ca
        hook = json.loads(
            cp.kubectl("get", "mutatingwebhookconfiguration", "gpupool", "-o", "json").stdout
        )
        assert [base64.b64decode(w["clientConfig"]["caBundle"]) for w in hook["webhooks"]] == [
            ca,
            ca,
        ]
        assert gpupool(*certs, log=log).wait(60) == 0, log.read_text()
        again = json.loads(
            cp.kubectl("get", "secret", "-n", SYSTEM, "gpupool-webhook-tls", "-o", "json").stdout
        )
        assert again["data"] == secret["data"]
        # nothing serves the webhook's Service here (no kubelet, no endpoints): pods of the
        # tests below would wait for its timeout
        cp.kubectl("delete", "mutatingwebhookconfiguration", "gpupool")
        cp.kubectl("apply", "-f", "-", stdin=QUEUE_OBJECTS)

        # 2. the scheduler with the Deployment's arguments, as the service account
        port = free_port()
        (deployment,) = [
            d for d in yaml.safe_load_all((DEPLOY / "deployment.yaml").read_text()) if d
        ]
        args = [
            a
            for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            if not a.startswith(("--identity", "--extender-port", "--tls-dir", "--metrics-port"))
        ]
        run = [
            *args[1:],
            "--kubeconfig",
            str(kubeconfig),
            "--identity=gpupool-0",
            f"--extender-port={port}",
            f"--tls-dir={tls}",
            "--extender-for=default-scheduler",
        ]

        async def scheduled(kube: Kube) -> None:
            await make_node(kube, "a100-1", gpus=2, labels={"pool": "a100"})
            with process(gpupool(*run, log=log)):
                await _pod(kube, "r0", {"nvidia.com/gpu": 1}, "research")
                await wait_for(lambda: _bound(kube, ["r0"]), 60, "pod bound by gpupool")
                lease = await kube.request(
                    "GET",
                    f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases/gpupool-scheduler",
                )
                assert lease["spec"]["holderIdentity"] == "gpupool-0"

                async def statuses() -> list[Any] | None:
                    base = "/apis/gpupool.io/v1alpha1"
                    got = [
                        (await kube.request("GET", p)).get("status")
                        for p in (
                            f"{base}/cohorts/org",
                            f"{base}/resourceflavors/a100",
                            f"{base}/clusterqueues/research",
                            f"{base}/namespaces/{NS}/localqueues/research",
                        )
                    ]
                    return got if all(got) else None

                cohort, flavor, cq, lq = await wait_for(statuses, 30, "queue status written")
                assert flavor == {"nodes": 1, "gpus": 2}
                assert cohort["admittedWorkloads"] == 1 and lq["admittedWorkloads"] == 1
                assert cq["admittedWorkloads"] == 1
                # 4. kube-scheduler as deploy/kube-scheduler/ configures it, over HTTPS
                with kube_scheduler(cp, tmp_path, port, tls / "ca.crt"):
                    await _pod(
                        kube, "k0", {"nvidia.com/gpu": 1}, "research", scheduler="default-scheduler"
                    )
                    await wait_for(
                        lambda: _bound(kube, ["k0"]),
                        60,
                        "kube-scheduler binding through gpupool's extender",
                    )
                    ann = (await get_pod(kube, NS, "k0"))["metadata"]["annotations"]
                    assert ann["hami.io/vgpu-node"] == "a100-1"
            assert refused(log) == []
            # the v1.20 server has no resource.k8s.io: said once, plainly
            assert "DRA is off: the API server serves no resource.k8s.io" in log.read_text()

        asyncio.run(_session(cp, scheduled))

        # 3. queued provisioning, as the service account
        queues = tmp_path / "queues.yaml"
        queues.write_text(PROVISIONED_QUEUES)

        async def provisioned(kube: Kube) -> None:
            pr = f"/apis/autoscaling.x-k8s.io/v1/namespaces/{NS}/provisioningrequests"
            with process(gpupool(*run, f"--queues={queues}", log=log)):
                await _pod(kube, "t0", {"nvidia.com/gpu": 8}, "train")

                async def made() -> dict[str, Any] | None:
                    items = (await kube.request("GET", pr)).get("items") or []
                    return items[0] if items else None

                req = await wait_for(made, 60, "ProvisioningRequest made")
                name = req["metadata"]["name"]
                (tpl,) = [p["podTemplateRef"]["name"] for p in req["spec"]["podSets"]]
                await kube.request("GET", f"/api/v1/namespaces/{NS}/podtemplates/{tpl}")
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                await kube.request(
                    "PATCH",
                    f"{pr}/{name}/status",
                    {
                        "status": {
                            "conditions": [
                                {
                                    "type": t,
                                    "status": "True",
                                    "reason": r,
                                    "message": r,
                                    "lastTransitionTime": now,
                                }
                                for t, r in (
                                    ("Accepted", "Accepted"),
                                    ("Provisioned", "CapacityIsProvisioned"),
                                )
                            ]
                        }
                    },
                    content_type=MERGE_PATCH,
                )
                await make_node(kube, "h100-1", gpus=8, labels={"pool": "h100"})
                await wait_for(lambda: _bound(kube, ["t0"]), 60, "pod bound on the new node")
                ann = (await get_pod(kube, NS, "t0"))["metadata"]["annotations"]
                assert ann["autoscaling.x-k8s.io/consume-provisioning-request"] == name

                async def recorded() -> bool:
                    got = await kube.request("GET", f"{pr}/{name}")
                    return (got["metadata"].get("annotations") or {}).get(
                        "gpupool.io/nodes"
                    ) == "h100-1"

                await wait_for(recorded, 30, "booking recorded on the request")
                await set_phase(kube, NS, "t0", "Succeeded")

                async def deleted() -> bool:
                    return not (await kube.request("GET", pr)).get("items")

                await wait_for(deleted, 30, "request deleted after the job")
                tpls = await kube.request("GET", f"/api/v1/namespaces/{NS}/podtemplates")
                assert not tpls.get("items")
            assert refused(log) == []

        asyncio.run(_session(cp, provisioned))
    finally:
        cp.kubectl("delete", "-f", "-", stdin=QUEUE_OBJECTS, check=False)
        cp.kubectl(
            "delete", "provisioningrequests.autoscaling.x-k8s.io", "--all", "-n", NS, check=False
        )
        drop_namespace(cp, NS)
        cp.kubectl("delete", "nodes", "--all", check=False)
        drop_namespace(cp, SYSTEM)
        cp.kubectl("delete", "-k", str(DEPLOY), "--wait=false", check=False, timeout=120)


async def _session(cp: ControlPlane, body: Any) -> None:
    """``body`` with a client, and HAMi's device plugin's part in the node lock played
    (no kubelet runs here: without it a node's lock, once taken, is held until it expires)."""
    kube = await Kube.connect(cp.kubeconfig)
    try:
        async with device_plugins(kube):
            await body(kube)
    finally:
        await kube.close()


@contextmanager
def kube_scheduler(cp: ControlPlane, tmp: Path, port: int, ca: Path) -> Iterator[None]:
    """The v1.20 kube-scheduler with deploy/'s v1beta1 example: only what a test machine
    needs changed (the kubeconfig, the extender's address, the CA's path, ports of its own,
    no leader election); the rest, HTTPS with serverName, nodeCacheCapable and
    managedResources, as shipped."""
    binary = BIN / "bin" / "kube-scheduler"
    if not binary.exists():
        pytest.skip(f"no kube-scheduler in {binary.parent}")
    cfg = yaml.safe_load((DEPLOY / "kube-scheduler" / "config-v1beta1.yaml").read_text())
    cfg["clientConnection"]["kubeconfig"] = cp.kubeconfig
    cfg["leaderElection"] = {"leaderElect": False}
    health = free_port()
    cfg["healthzBindAddress"] = cfg["metricsBindAddress"] = f"127.0.0.1:{health}"
    (ext,) = cfg["extenders"]
    ext["urlPrefix"] = ext["urlPrefix"].replace(
        "gpupool.gpupool-system.svc:443", f"127.0.0.1:{port}"
    )
    ext["tlsConfig"]["caFile"] = str(ca)
    path = tmp / "kube-scheduler.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = (tmp / "kube-scheduler.log").open("wb")
    proc = subprocess.Popen(
        [str(binary), f"--config={path}", "--port=0", "--secure-port=0"],
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    try:
        time.sleep(0.5)
        if proc.poll() is not None:
            raise AssertionError((tmp / "kube-scheduler.log").read_text()[-3000:])
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        out.close()
