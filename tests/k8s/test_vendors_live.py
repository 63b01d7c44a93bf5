"""NVIDIA, Hygon and Ascend nodes side by side on a real API server: gpupool reads each
vendor's register annotation, binds each vendor's pods onto that vendor's cards only, and
writes each vendor's allocation annotations in HAMi's format, under HAMi's node lock (played
by ``kit.device_plugins``)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gpupool.k8s.extender import serve_http
from gpupool.k8s.kube import MERGE_PATCH, Kube, KubeError
from gpupool.k8s.main import default_config
from gpupool.k8s.tls import make_certificates
from tests.k8s.conftest import ControlPlane
from tests.k8s.hami_examples import HYGON_DEFAULT, alternative, same_limits
from tests.k8s.kit import (
    clean,
    device_plugins,
    ensure_namespace,
    get_pod,
    pod_body,
    running,
    wait_for,
)

pytestmark = pytest.mark.k8s

NS = "team-v"


def live(cp: ControlPlane, body: Callable[[Kube], Awaitable[None]]) -> None:
    async def main() -> None:
        kube = await Kube.connect(cp.kubeconfig)
        try:
            await ensure_namespace(kube, NS)
            await clean(kube, [NS])
            async with device_plugins(kube):
                await body(kube)
        finally:
            await clean(kube, [NS])
            await kube.close()

    asyncio.run(main())


async def webhook_nodes(kube: Kube, prefix: str, label: str) -> None:
    """The webhook tests' cluster: namespace ``NS`` labelled for the webhook (``label``), an
    NVIDIA H100 node (``<prefix>-nv``, 10 slices) and a Hygon DCU node (``<prefix>-dcu``)."""
    await kube.request(
        "PATCH",
        f"/api/v1/namespaces/{NS}",
        {"metadata": {"labels": {"gpupool.io/webhook-test": label}}},
        content_type=MERGE_PATCH,
    )
    card = {
        "id": f"GPU-{prefix}-0",
        "index": 0,
        "count": 10,
        "devmem": 81920,
        "devcore": 100,
        "type": "NVIDIA H100",
        "health": True,
    }
    register = {"hami.io/node-nvidia-register": json.dumps([card])}
    await node(kube, f"{prefix}-nv", register, {"nvidia.com/gpu": "10"})
    dcu = f"DCU-{prefix}-0,4,65536,100,DCU-K100,0,true,0,hami-core:"
    await node(kube, f"{prefix}-dcu", {"hami.io/node-dcu-register": dcu}, {"hygon.com/dcunum": "4"})


async def node(kube: Kube, name: str, annotations: dict[str, str], extra: dict[str, str]) -> None:
    await kube.request(
        "POST",
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "annotations": annotations},
        },
    )
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "220", **extra}
    await kube.request(
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        {
            "status": {
                "capacity": alloc,
                "allocatable": alloc,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "no kubelet: a test node",
                    }
                ],
            }
        },
        content_type=MERGE_PATCH,
    )
    await kube.request(
        "PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}}, content_type=MERGE_PATCH
    )


async def make(kube: Kube, name: str, limits: dict[str, Any]) -> None:
    await kube.request(
        "POST", f"/api/v1/namespaces/{NS}/pods", pod_body(name, ns=NS, limits=limits)
    )


async def bound(kube: Kube, name: str) -> dict[str, Any] | None:
    pod = await get_pod(kube, NS, name)
    return pod if pod["spec"].get("nodeName") else None


def slots(text: str, device_type: str) -> list[list[tuple[str, int, int]]]:
    """HAMi's per-container device list, strictly (``DecodePodDevices``)."""
    parts = text.split(";")
    assert parts[-1] == "", text
    out = []
    for slot in parts[:-1]:
        entries = slot.split(":")
        assert entries[-1] == "", slot
        devs = []
        for e in entries[:-1]:
            uuid, kind, mem, cores = e.split(",")
            assert kind == device_type, e
            devs.append((uuid, int(mem), int(cores)))
        out.append(devs)
    return out


def test_three_vendors_bind_on_their_own_cards_with_their_own_annotations(
    control_plane: ControlPlane,
) -> None:
    async def body(kube: Kube) -> None:
        nvidia = json.dumps(
            [
                {
                    "id": f"GPU-nv-{i}",
                    "index": i,
                    "count": 10,
                    "devmem": 81920,
                    "devcore": 100,
                    "type": "NVIDIA H100",
                    "health": True,
                }
                for i in range(2)
            ]
        )
        dcu = "".join(f"DCU-v-{i},4,65536,100,DCU-K100,0,true,{i},hami-core:" for i in range(2))
        npu = json.dumps(
            [
                {
                    "id": f"NPU-v-{i}",
                    "index": i,
                    "count": 4,
                    "devmem": 65536,
                    "devcore": 20,
                    "type": "Ascend910B3",
                    "health": True,
                }
                for i in range(4)
            ]
        )  # a slice on one, a pair of whole ones
        await node(kube, "v-nv", {"hami.io/node-nvidia-register": nvidia}, {"nvidia.com/gpu": "20"})
        await node(kube, "v-dcu", {"hami.io/node-dcu-register": dcu}, {"hygon.com/dcunum": "8"})
        await node(
            kube,
            "v-npu",
            {"hami.io/node-register-Ascend910B3": npu},
            {"huawei.com/Ascend910B3": "16"},
        )
        async with running(kube, default_config()):
            await make(kube, "on-nv", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000})
            await make(
                kube,
                "on-dcu",
                {"hygon.com/dcunum": 1, "hygon.com/dcumem": 8000, "hygon.com/dcucores": 30},
            )
            await make(
                kube,
                "on-npu",
                {"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 12000},
            )
            await make(kube, "npu-pair", {"huawei.com/Ascend910B3": 2})
            pods = {
                n: await wait_for(lambda n=n: bound(kube, n), what=f"{n} bound")
                for n in ("on-nv", "on-dcu", "on-npu", "npu-pair")
            }
            assert {n: p["spec"]["nodeName"] for n, p in pods.items()} == {
                "on-nv": "v-nv",
                "on-dcu": "v-dcu",
                "on-npu": "v-npu",
                "npu-pair": "v-npu",
            }
            ann = {n: p["metadata"]["annotations"] for n, p in pods.items()}
            assert (
                slots(ann["on-nv"]["hami.io/vgpu-devices-to-allocate"], "NVIDIA")[0][0][1] == 4000
            )
            d = ann["on-dcu"]
            assert d["hami.io/dcu-devices-to-allocate"] == d["hami.io/dcu-devices-allocated"]
            ((uuid, mem, cores),) = slots(d["hami.io/dcu-devices-to-allocate"], "DCU")[0]
            assert uuid.startswith("DCU-v-") and (mem, cores) == (8000, 30)
            assert "hami.io/vgpu-devices-to-allocate" not in d
            n = ann["on-npu"]
            ((uuid, mem, cores),) = slots(
                n["hami.io/Ascend910B3-devices-to-allocate"], "Ascend910B3"
            )[0]
            assert (mem, cores) == (16384, 5)  # trimmed up to vir05_1c_16g
            assert json.loads(n["huawei.com/Ascend910B3"])[0]["temp"] == "vir05_1c_16g"
            pair = slots(ann["npu-pair"]["hami.io/Ascend910B3-devices-to-allocate"], "Ascend910B3")[
                0
            ]
            assert {m for _, m, _ in pair} == {65536} and len({u for u, _, _ in pair}) == 2
            for p in pods.values():
                a = p["metadata"]["annotations"]
                assert a["hami.io/vgpu-node"] == p["spec"]["nodeName"]
                assert a["hami.io/bind-phase"] in ("allocating", "success")

    live(control_plane, body)


def test_the_webhook_makes_a_pod_in_the_form_its_queue_admits(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    certs = make_certificates(["localhost"], ["127.0.0.1"])
    certs.write(tmp_path)
    path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "gpupool-vendors-test"},
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
                "namespaceSelector": {"matchLabels": {"gpupool.io/webhook-test": "vendors"}},
            }
        ],
    }
    alternatives = json.dumps(
        [alternative("dcu", HYGON_DEFAULT, env={"HIP_VISIBLE_DEVICES": "auto"})]
    )

    async def body(kube: Kube) -> None:
        with contextlib.suppress(KubeError):
            await kube.request("DELETE", f"{path}/gpupool-vendors-test")
        await webhook_nodes(kube, "w", "vendors")
        async with running(kube, default_config()) as ctl:
            server = await serve_http(ctl, port, host="127.0.0.1", tls_dir=str(tmp_path))
            await kube.request("POST", path, config)
            try:
                await asyncio.sleep(1.0)  # the API server picks the configuration up
                first = pod_body("first", ns=NS, limits={"nvidia.com/gpu": 1})
                first["metadata"]["annotations"] = {"gpupool.io/alternatives": alternatives}
                await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", first)
                p1 = await wait_for(lambda: bound(kube, "first"), what="first bound")
                assert p1["spec"]["nodeName"] == "w-nv"  # its own form fits: unchanged
                assert "gpupool.io/alternative" not in p1["metadata"]["annotations"]
                second = pod_body("second", ns=NS, limits={"nvidia.com/gpu": 1})
                second["metadata"]["annotations"] = {"gpupool.io/alternatives": alternatives}
                await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", second)
                p2 = await wait_for(lambda: bound(kube, "second"), what="second bound")
                c = p2["spec"]["containers"][0]
                assert p2["spec"]["nodeName"] == "w-dcu"
                assert p2["metadata"]["annotations"]["gpupool.io/alternative"] == "dcu"
                assert c["image"] == HYGON_DEFAULT["image"]
                assert same_limits(c["resources"]["limits"], HYGON_DEFAULT["limits"])
                assert "nvidia.com/gpu" not in c["resources"]["limits"]
                assert {"name": "HIP_VISIBLE_DEVICES", "value": "auto"} in c["env"]
                ((uuid, _, _),) = slots(
                    p2["metadata"]["annotations"]["hami.io/dcu-devices-to-allocate"], "DCU"
                )[0]
                assert uuid == "DCU-w-0"
            finally:
                with contextlib.suppress(KubeError):
                    await kube.request("DELETE", f"{path}/gpupool-vendors-test")
                await server.cleanup()

    live(control_plane, body)


def test_enflame_drs_pods_bind_to_a_profile_with_enflames_annotations(
    control_plane: ControlPlane,
) -> None:
    drs = json.dumps(
        {
            "devices": [{"index": "0", "minor": "0", "capacity": 6}],
            "profiles": {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"},
        }
    )

    async def body(kube: Kube) -> None:
        await node(
            kube, "v-drs", {"enflame.com/gcu-drs-capacity": drs}, {"enflame.com/drs-gcu": "6"}
        )
        async with running(kube, default_config()):
            for name in ("drs-a", "drs-b", "drs-c"):  # three of 3 slices: two fit a card
                await make(kube, name, {"enflame.com/drs-gcu": 3})
            pods = {
                n: await wait_for(lambda n=n: bound(kube, n), what=f"{n} bound")
                for n in ("drs-a", "drs-b")
            }
            for p in pods.values():
                a = p["metadata"]["annotations"]
                assert p["spec"]["nodeName"] == "v-drs"
                assert (
                    a["hami.io/enflame-vgpu-devices-allocated"]
                    == "v-drs-enflame-drs-0,Enflame,20480,50:;"
                )
                assert a["enflame.com/gcu-request-size"] == "3"
                assert json.loads(a["assigned-containers"])["main"]["profileName"] == "3g.20gb"
                assert "hami.io/mutex.lock" not in a  # Enflame's plugin takes no node lock
            await asyncio.sleep(1.0)
            assert not await bound(kube, "drs-c")  # the card's compute is taken

    live(control_plane, body)
