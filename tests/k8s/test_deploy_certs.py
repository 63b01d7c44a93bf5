"""The webhook certificate's bootstrap decisions (k8s/certs.py) and the DRA start-up line
(k8s/dra_live.py), without a server; tests/k8s/test_deploy_live.py runs both on one."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
from typing import Any

import pytest

from gpupool.k8s.certs import bootstrap, covers, service_names
from gpupool.k8s.dra_live import dra_message, dra_versions
from gpupool.k8s.kube import KubeError
from gpupool.k8s.tls import make_certificates

NAMES = service_names("gpupool", "gpupool-system")


def test_covers_names_and_time_left() -> None:
    cert = make_certificates(NAMES, days=365).cert_pem
    assert covers(cert, NAMES, 30)
    assert not covers(cert, [*NAMES, "other.example"], 30)  # a name it lacks
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=340)
    assert not covers(cert, NAMES, 30, now=later)  # expires within 30 days then
    assert not covers(b"not a certificate", NAMES, 30)


class FakeKube:
    """Secrets and one webhook configuration in memory, with the API server's answers."""

    def __init__(self, secret: dict[str, Any] | None = None, conflict: int = 0) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.conflict = conflict
        if secret is not None:
            self.objects["/api/v1/namespaces/gpupool-system/secrets/tls"] = secret
        self.objects[
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpupool"
        ] = {"webhooks": [{"clientConfig": {}}, {"clientConfig": {}}]}
        self.calls: list[str] = []

    async def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        self.calls.append(f"{method} {path}")
        if method == "GET":
            if path not in self.objects:
                raise KubeError(404, "NotFound", "not found", f"GET {path}")
            return self.objects[path]
        if method == "POST":
            path = f"{path}/{body['metadata']['name']}"
            if self.conflict:  # another replica's create won
                self.conflict -= 1
                self.objects[path] = _secret(make_certificates(NAMES))
                raise KubeError(409, "AlreadyExists", "exists", f"POST {path}")
        self.objects[path] = body
        return body


def _secret(certs: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "tls", "resourceVersion": "1"},
        "data": {
            "tls.crt": base64.b64encode(certs.cert_pem).decode(),
            "tls.key": base64.b64encode(certs.key_pem).decode(),
            "ca.crt": base64.b64encode(certs.ca_pem).decode(),
        },
    }


def _run(kube: FakeKube) -> Any:
    return asyncio.run(
        bootstrap(
            kube,
            namespace="gpupool-system",
            secret="tls",  # type: ignore[arg-type]
            webhook="gpupool",
            names=NAMES,
        )
    )


@pytest.mark.parametrize("case", ["missing", "valid", "other names", "race lost"])
def test_bootstrap(case: str) -> None:
    old = make_certificates(NAMES)
    secret = {
        "missing": None,
        "valid": _secret(old),
        "race lost": None,
        "other names": _secret(make_certificates(["elsewhere"])),
    }[case]
    kube = FakeKube(secret, conflict=1 if case == "race lost" else 0)
    certs = _run(kube)
    stored = kube.objects["/api/v1/namespaces/gpupool-system/secrets/tls"]
    assert base64.b64decode(stored["data"]["ca.crt"]) == certs.ca_pem  # what is served
    assert (certs == old) is (case == "valid")
    hook = kube.objects[
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpupool"
    ]
    assert {w["clientConfig"]["caBundle"] for w in hook["webhooks"]} == {
        base64.b64encode(certs.ca_pem).decode()
    }
    if case == "other names":
        assert any(
            c.startswith("PUT /api/v1/namespaces/gpupool-system/secrets/tls") for c in kube.calls
        )
    # a second run changes nothing
    kube.calls.clear()
    assert _run(kube) == certs
    assert all(c.startswith("GET") for c in kube.calls)


def test_dra_said_plainly() -> None:
    class NoGroup:
        async def request(self, *_: Any, **__: Any) -> Any:
            raise KubeError(404, "NotFound", "not found", "GET /apis/resource.k8s.io")

    class Group:
        async def request(self, *_: Any, **__: Any) -> Any:
            return {"versions": [{"groupVersion": "resource.k8s.io/v1", "version": "v1"}]}

    assert asyncio.run(dra_versions(NoGroup())) == []  # type: ignore[arg-type]
    assert dra_message([]).startswith("DRA is off: the API server serves no resource.k8s.io")
    assert asyncio.run(dra_versions(Group())) == ["v1"]  # type: ignore[arg-type]
    assert "not counted" in dra_message(["v1"])
