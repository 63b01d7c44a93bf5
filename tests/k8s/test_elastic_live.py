"""Elastic GPU objects on a real API server: the CRDs, the binding recorded on the objects,
the card view taken back from them after a restart, release by reclaim policy, the webhook
resolving a pod's claim annotation into resources (called by the real kube-apiserver), and
bad objects refused with the reason."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gpupool.core.model import TaskId
from gpupool.k8s.controller import Controller, Options
from gpupool.k8s.elastic import ElasticController
from gpupool.k8s.extender import serve_http
from gpupool.k8s.kube import Kube, KubeError
from gpupool.k8s.main import default_config
from gpupool.k8s.tls import make_certificates
from tests.k8s.conftest import REPO, ControlPlane
from tests.k8s.kit import get_pod, make_node, make_pod, wait_for
from tests.k8s.test_scheduler_live import live

pytestmark = pytest.mark.k8s

NS = "egpu"
API = "/apis/elasticgpu.io/v1alpha1"
CRDS = [
    str(REPO / "deploy" / "crds" / f)
    for f in ("elasticgpuclasses.yaml", "elasticgpuclaims.yaml", "elasticgpus.yaml")
]


def install_crds(cp: ControlPlane) -> None:
    for path in CRDS:
        cp.kubectl("apply", "-f", path)
    cp.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/elasticgpuclasses.elasticgpu.io",
        "crd/elasticgpuclaims.elasticgpu.io",
        "crd/elasticgpus.elasticgpu.io",
    )


@contextlib.asynccontextmanager
async def elastic_running(kube: Kube) -> AsyncIterator[tuple[Controller, ElasticController]]:
    ctl = Controller(kube, default_config(), Options(leader_elect=False))
    el = ElasticController(kube, ctl, interval_s=0.2)
    ctl.attach(elastic=el)
    tasks = [asyncio.create_task(ctl.run()), asyncio.create_task(el.run())]
    try:

        async def ready() -> bool:
            for t in tasks:
                if t.done():
                    t.result()
            return ctl.sched is not None and el.binder is not None

        await wait_for(ready, 20, "controller sync")
        yield ctl, el
    finally:
        for t in tasks:
            t.cancel()
        async with asyncio.timeout(30):  # a loop that ignores cancel fails here
            await asyncio.gather(*tasks, return_exceptions=True)


async def gpu_node(kube: Kube, name: str, gpus: int = 2) -> None:
    await make_node(kube, name, gpus=gpus, labels={"kubernetes.io/hostname": name})


def klass(name: str, provisioner: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "elasticgpu.io/v1alpha1",
        "kind": "ElasticGPUClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        **extra,
    }


def claim(name: str, requests: dict[str, Any], class_name: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "elasticgpu.io/v1alpha1",
        "kind": "ElasticGPUClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"requests": requests, **({"className": class_name} if class_name else {})},
    }


async def get_claim(kube: Kube, name: str) -> dict[str, Any]:
    return await kube.request("GET", f"{API}/namespaces/{NS}/elasticgpuclaims/{name}")


async def egpus(kube: Kube) -> dict[str, dict[str, Any]]:
    items = (await kube.request("GET", f"{API}/elasticgpus")).get("items") or []
    return {i["metadata"]["name"]: i for i in items}


async def bound_claim(kube: Kube, name: str) -> dict[str, Any] | None:
    obj = await get_claim(kube, name)
    return obj if (obj.get("status") or {}).get("phase") == "Bound" else None


async def clean_elastic(kube: Kube) -> None:
    for plural in ("elasticgpuclasses", "elasticgpus"):
        with contextlib.suppress(KubeError):
            await kube.request("DELETE", f"{API}/{plural}")
    with contextlib.suppress(KubeError):
        await kube.request("DELETE", f"{API}/namespaces/{NS}/elasticgpuclaims")


def test_claims_bound_recorded_restored_and_released(control_plane: ControlPlane) -> None:
    install_crds(control_plane)

    async def body(kube: Kube) -> None:
        await clean_elastic(kube)
        await gpu_node(kube, "gpu-1", gpus=2)
        try:
            # a class with an unknown provisioner is refused by the API server (the enum)
            with pytest.raises(KubeError) as bad:
                await kube.request("POST", f"{API}/elasticgpuclasses", klass("x", "nvidia"))
            assert bad.value.status == 422 and "provisioner" in bad.value.message
            await kube.request("POST", f"{API}/elasticgpuclasses", klass("cards", "physical"))
            await kube.request(
                "POST",
                f"{API}/elasticgpuclasses",
                klass("slices", "hami-core", reclaimPolicy="Retain"),
            )
            async with elastic_running(kube) as (ctl, el):
                await kube.request(
                    "POST",
                    f"{API}/namespaces/{NS}/elasticgpuclaims",
                    claim("whole", {"cards": 1}, "cards"),
                )
                await kube.request(
                    "POST",
                    f"{API}/namespaces/{NS}/elasticgpuclaims",
                    claim("part", {"gpuMilli": 300, "memoryMib": 10000}, "slices"),
                )
                # TFLOPS for a model without a published peak: Pending, rejected, nothing made
                await kube.request(
                    "POST",
                    f"{API}/namespaces/{NS}/elasticgpuclaims",
                    claim("unknown", {"tflops": 50, "models": ["MI300X"]}),
                )
                whole = await wait_for(lambda: bound_claim(kube, "whole"), 20, "whole bound")
                part = await wait_for(lambda: bound_claim(kube, "part"), 20, "part bound")
                assert whole["status"]["node"] == "gpu-1"
                assert whole["status"]["elasticGPUs"] == ["egpu.egpu.whole.0"]

                async def rejected() -> dict[str, Any] | None:
                    st = (await get_claim(kube, "unknown")).get("status") or {}
                    return st if "rejected" in st.get("message", "") else None

                st = await wait_for(rejected, 20, "unknown-model claim rejected")
                assert st["phase"] == "Pending" and "MI300X" in st["message"]
                objs = await egpus(kube)
                assert set(objs) == {"egpu.egpu.whole.0", "egpu.egpu.part.0"}
                w = objs["egpu.egpu.whole.0"]
                assert w["spec"]["claimRef"] == {"namespace": NS, "name": "whole"}
                assert w["spec"]["node"] == "gpu-1" and w["spec"]["source"] == "physical"
                assert w["spec"]["uuid"] == f"GPU-gpu-1-{w['spec']['card']}"
                assert w["status"]["phase"] == "Bound"
                p = objs["egpu.egpu.part.0"]
                assert p["spec"]["capacity"]["gpuMilli"] == 300
                assert p["spec"]["capacity"]["memoryMib"] == 10000
                assert p["spec"]["card"] != w["spec"]["card"]
                assert part["status"]["elasticGPUs"] == ["egpu.egpu.part.0"]
                # the cards are taken in the scheduler: no whole card is left for a pod
                await make_pod(kube, "needs-card", ns=NS, limits={"nvidia.com/gpu": 1})
                await asyncio.sleep(1.0)
                assert not (await get_pod(kube, NS, "needs-card"))["spec"].get("nodeName")
            held = {g: w["spec"]["card"] for g, w in objs.items()}

            # a restart: the card view comes back from the objects alone
            async with elastic_running(kube) as (ctl, el):
                assert ctl.sched is not None
                for name, card in held.items():
                    p = ctl.sched._state.placement(TaskId(f"elasticgpu/{name}"))
                    assert p is not None and p.node == "gpu-1" and p.shares[0].index == card
                assert {c.key: c.phase.value for c in el.ready().claims()} == {
                    f"{NS}/whole": "Bound",
                    f"{NS}/part": "Bound",
                }
                await asyncio.sleep(1.0)
                assert not (await get_pod(kube, NS, "needs-card"))["spec"].get("nodeName")
                assert set(await egpus(kube)) == set(held)  # nothing bound again, nothing lost

                # release: Delete removes the ElasticGPU and frees the card; Retain keeps it
                await kube.request("DELETE", f"{API}/namespaces/{NS}/elasticgpuclaims/whole")
                await kube.request("DELETE", f"{API}/namespaces/{NS}/elasticgpuclaims/part")

                async def released() -> dict[str, Any] | None:
                    objs = await egpus(kube)
                    kept = objs.get("egpu.egpu.part.0")
                    if "egpu.egpu.whole.0" in objs or kept is None:
                        return None
                    return kept if kept["status"]["phase"] == "Released" else None

                kept = await wait_for(released, 20, "claims released by policy")
                assert kept["spec"]["claimRef"] == {"namespace": NS, "name": "part"}

                async def card_bound() -> bool:
                    return bool((await get_pod(kube, NS, "needs-card"))["spec"].get("nodeName"))

                await wait_for(card_bound, 20, "the freed card bound to the waiting pod")
        finally:
            await clean_elastic(kube)

    live(control_plane, body, namespaces=(NS,))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_webhook_resolves_claims_and_refuses_bad_ones(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    install_crds(control_plane)
    port = free_port()
    certs = make_certificates(["localhost"], ["127.0.0.1"])
    certs.write(tmp_path)
    path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    hook = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "gpupool-elastic-test"},
        "webhooks": [
            {
                "name": "elastic.gpupool.io",
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
                    },
                    {
                        "apiGroups": ["elasticgpu.io"],
                        "apiVersions": ["v1alpha1"],
                        "operations": ["CREATE"],
                        "resources": ["elasticgpuclaims"],
                    },
                ],
                "namespaceSelector": {"matchLabels": {"gpupool.io/webhook-test": "elastic"}},
            }
        ],
    }

    async def body(kube: Kube) -> None:
        await clean_elastic(kube)
        with contextlib.suppress(KubeError):
            await kube.request("DELETE", f"{path}/gpupool-elastic-test")
        await kube.request(
            "PATCH",
            f"/api/v1/namespaces/{NS}",
            {"metadata": {"labels": {"gpupool.io/webhook-test": "elastic"}}},
            content_type="application/merge-patch+json",
        )
        await gpu_node(kube, "gpu-1", gpus=2)
        await gpu_node(kube, "gpu-2", gpus=2)
        await kube.request("POST", f"{API}/elasticgpuclasses", klass("slices", "hami-core"))
        await kube.request(
            "POST",
            f"{API}/elasticgpuclasses",
            klass("lazy", "physical", bindingMode="WaitForFirstConsumer"),
        )
        async with elastic_running(kube) as (ctl, _el):
            server = await serve_http(ctl, port, host="127.0.0.1", tls_dir=str(tmp_path))
            await kube.request("POST", path, hook)
            try:
                await asyncio.sleep(1.0)  # the API server picks the configuration up
                await kube.request(
                    "POST",
                    f"{API}/namespaces/{NS}/elasticgpuclaims",
                    claim("nb", {"gpuMilli": 250, "memoryMib": 8000}, "slices"),
                )
                nb = await wait_for(lambda: bound_claim(kube, "nb"), 20, "claim bound")
                node = nb["status"]["node"]
                (gpu_name,) = nb["status"]["elasticGPUs"]
                gpu = (await egpus(kube))[gpu_name]
                # a pod naming the claim gets its resources, its node, and is bound there
                await make_pod(
                    kube,
                    "notebook",
                    ns=NS,
                    scheduler="default-scheduler",
                    annotations={"elasticgpu.io/egpuc-main": "nb"},
                )
                pod = await get_pod(kube, NS, "notebook")
                limits = pod["spec"]["containers"][0]["resources"]["limits"]
                assert limits["nvidia.com/gpu"] == "1"
                assert limits["nvidia.com/gpumem"] in ("8000", "8k")  # a quantity: 8000 MiB
                assert limits["nvidia.com/gpucores"] == "25"
                assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": node}
                assert pod["spec"]["schedulerName"] == "gpupool"

                async def bound() -> dict[str, Any] | None:
                    p = await get_pod(kube, NS, "notebook")
                    return p if p["spec"].get("nodeName") else None

                pod = await wait_for(bound, 20, "claim pod bound")
                assert pod["spec"]["nodeName"] == node
                ann = pod["metadata"]["annotations"]
                assert (
                    ann["hami.io/vgpu-devices-to-allocate"]
                    == f"{gpu['spec']['uuid']},NVIDIA,8000,25:;"
                )
                rec = json.loads(ann["gpupool.io/placement"])
                assert rec["cards"] == []  # the ElasticGPU holds the card, not the pod
                # a missing claim and an unbound one refuse the pod, with the reason
                with pytest.raises(KubeError) as refused:
                    await make_pod(
                        kube, "ghost", ns=NS, annotations={"elasticgpu.io/egpuc-main": "nope"}
                    )
                assert "does not exist" in refused.value.message
                await kube.request(
                    "POST",
                    f"{API}/namespaces/{NS}/elasticgpuclaims",
                    claim("later", {"cards": 1}, "lazy"),
                )
                await wait_for(lambda: _has_status(kube, "later"), 20, "claim status")
                with pytest.raises(KubeError) as refused:
                    await make_pod(
                        kube, "early", ns=NS, annotations={"elasticgpu.io/egpuc-main": "later"}
                    )
                assert "not Bound" in refused.value.message
                # claims no class can serve are refused at creation; nothing is stored
                for name, req in (
                    ("tflops-unknown", {"tflops": 10, "models": ["MI300X"]}),
                    ("too-many", {"cards": 3}),
                    ("no-class", {"cards": 1, "models": ["H100"]}),
                ):
                    with pytest.raises(KubeError) as refused:
                        await kube.request(
                            "POST", f"{API}/namespaces/{NS}/elasticgpuclaims", claim(name, req)
                        )
                    assert "gpupool" in refused.value.message, name
                    with pytest.raises(KubeError):
                        await get_claim(kube, name)
            finally:
                with contextlib.suppress(KubeError):
                    await kube.request("DELETE", f"{path}/gpupool-elastic-test")
                await server.cleanup()
                await clean_elastic(kube)

    live(control_plane, body, namespaces=(NS,))


async def _has_status(kube: Kube, name: str) -> bool:
    return bool((await get_claim(kube, name)).get("status"))
