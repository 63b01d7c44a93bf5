"""A waiting pod switches form on a real API server: made in its own form (NVIDIA) because no
form fitted when it was created, it is made again as its Hygon alternative once a DCU frees
while the H100 stays taken, through the webhook like any new pod; a pod with an owner is left
as it is."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from gpupool.k8s.extender import serve_http
from gpupool.k8s.kube import Kube, KubeError
from gpupool.k8s.main import default_config
from gpupool.k8s.tls import make_certificates
from tests.k8s.conftest import ControlPlane
from tests.k8s.hami_examples import HYGON_DEFAULT, alternative, same_limits
from tests.k8s.kit import delete_pod, get_pod, pod_body, running, wait_for
from tests.k8s.test_vendors_live import NS, bound, live, slots, webhook_nodes

pytestmark = pytest.mark.k8s

WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
NAME = "gpupool-switch-test"
ALTERNATIVES = json.dumps([alternative("dcu", HYGON_DEFAULT, env={"HIP_VISIBLE_DEVICES": "auto"})])


def webhook(port: int, ca_pem: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": NAME},
        "webhooks": [
            {
                "name": "pods.gpupool.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/mutate",
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"gpupool.io/webhook-test": "switch"}},
            }
        ],
    }


def with_alternatives(name: str, **meta: Any) -> dict[str, Any]:
    body = pod_body(name, ns=NS, limits={"nvidia.com/gpu": 1})
    body["metadata"]["annotations"] = {"gpupool.io/alternatives": ALTERNATIVES}
    body["metadata"].update(meta)
    return body


def test_a_waiting_pod_is_made_again_in_the_form_that_fits_now(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    certs = make_certificates(["localhost"], ["127.0.0.1"])
    certs.write(tmp_path)

    async def body(kube: Kube) -> None:
        with contextlib.suppress(KubeError):
            await kube.request("DELETE", f"{WEBHOOKS}/{NAME}")
        await webhook_nodes(kube, "s", "switch")
        pods = f"/api/v1/namespaces/{NS}/pods"
        async with running(kube, default_config()) as ctl:
            server = await serve_http(ctl, port, host="127.0.0.1", tls_dir=str(tmp_path))
            await kube.request("POST", WEBHOOKS, webhook(port, certs.ca_pem))
            try:
                await asyncio.sleep(1.0)  # the API server picks the configuration up
                await kube.request(
                    "POST", pods, pod_body("holder", ns=NS, limits={"nvidia.com/gpu": 1})
                )
                await kube.request(
                    "POST",
                    pods,
                    pod_body(
                        "blocker",
                        ns=NS,
                        limits={
                            "hygon.com/dcunum": 1,
                            "hygon.com/dcumem": 65536,
                            "hygon.com/dcucores": 100,
                        },
                    ),
                )
                for name in ("holder", "blocker"):
                    await wait_for(lambda n=name: bound(kube, n), what=f"{name} bound")
                # no form fits now: both are made in their own form and wait
                await kube.request("POST", pods, with_alternatives("waiter"))
                owner = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "owner",
                    "uid": "00000000-0000-0000-0000-000000000001",
                }
                await kube.request(
                    "POST", pods, with_alternatives("owned", ownerReferences=[owner])
                )
                await asyncio.sleep(1.5)  # some cycles: both wait, nothing is switched
                first = {n: await get_pod(kube, NS, n) for n in ("waiter", "owned")}
                for p in first.values():
                    assert not p["spec"].get("nodeName")
                    assert "gpupool.io/alternative" not in p["metadata"]["annotations"]
                assert ctl.switcher.switched == 0

                await delete_pod(kube, NS, "blocker")  # the DCU frees, the H100 does not

                async def remade() -> dict[str, Any] | None:
                    with contextlib.suppress(KubeError):
                        p = await bound(kube, "waiter")
                        if (
                            p is not None
                            and p["metadata"]["uid"] != first["waiter"]["metadata"]["uid"]
                        ):
                            return p
                    return None

                p = await wait_for(remade, what="waiter made again as dcu and bound")
                notes = p["metadata"]["annotations"]
                c = p["spec"]["containers"][0]
                assert p["spec"]["nodeName"] == "s-dcu"
                assert notes["gpupool.io/alternative"] == "dcu"
                assert notes["gpupool.io/form-switches"] == "1"
                assert c["image"] == HYGON_DEFAULT["image"]
                assert same_limits(c["resources"]["limits"], HYGON_DEFAULT["limits"])
                assert "nvidia.com/gpu" not in c["resources"]["limits"]
                assert {"name": "HIP_VISIBLE_DEVICES", "value": "auto"} in c["env"]
                ((uuid, _, _),) = slots(notes["hami.io/dcu-devices-to-allocate"], "DCU")[0]
                assert uuid == "DCU-s-0"
                # what it was written as is kept, to make it again in its own form
                (orig,) = json.loads(notes["gpupool.io/original-containers"])
                assert orig["image"] == "example.invalid/cuda:12"
                assert orig["resources"]["limits"] == {"nvidia.com/gpu": "1"}
                owned = await get_pod(kube, NS, "owned")  # its owner makes its pods
                assert owned["metadata"]["uid"] == first["owned"]["metadata"]["uid"]
                assert not owned["spec"].get("nodeName")
                assert ctl.switcher.switched == 1
            finally:
                with contextlib.suppress(KubeError):
                    await kube.request("DELETE", f"{WEBHOOKS}/{NAME}")
                await server.cleanup()

    live(control_plane, body)
