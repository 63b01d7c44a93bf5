"""The webhook's certificate bootstrapped in the cluster: ``gpupool k8s certs --secret``.

The API server calls the admission webhook over HTTPS only, checking the serving
certificate against the ``caBundle`` of the MutatingWebhookConfiguration. The Deployment's
init container runs :func:`bootstrap` before gpupool starts, so no pod waits for a Secret
made by hand:

1. the Secret (``kubernetes.io/tls``: ``tls.crt``, ``tls.key``, ``ca.crt``) is read; when it
   is missing, does not cover the Service's names, or expires within ``renew_days``, a new CA
   and certificate are made (``k8s/tls.py``) and written (create, or update). Replicas
   starting together race on the create: the loser (409) reads the winner's, so every
   replica serves the same certificate;
2. each webhook of the configuration gets that CA as its ``caBundle`` (updated only when it
   differs; a configuration that does not exist yet is logged, not fatal);
3. the three files are written to ``out``, the directory the server reads (``--tls-dir``).

cert-manager can do the same instead (``deploy/optional/cert-manager.yaml``).
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography import x509

from gpupool.core.errors import AdapterError
from gpupool.k8s.kube import Kube, KubeError
from gpupool.k8s.tls import Certificates, make_certificates

__all__ = ["bootstrap", "covers", "service_names"]

log = logging.getLogger("gpupool.k8s.certs")
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def service_names(service: str, namespace: str) -> list[str]:
    """The DNS names a Service is called by inside the cluster."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def covers(
    cert_pem: bytes, names: Sequence[str], renew_days: int, now: dt.datetime | None = None
) -> bool:
    """Whether the certificate names every one of ``names`` and stays valid for more than
    ``renew_days``."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    have = set(alt.get_values_for_type(x509.DNSName))
    now = now or dt.datetime.now(dt.UTC)
    return set(names) <= have and cert.not_valid_after_utc > now + dt.timedelta(days=renew_days)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _secret(name: str, namespace: str, certs: Certificates) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "gpupool"},
        },
        "data": {
            "tls.crt": _b64(certs.cert_pem),
            "tls.key": _b64(certs.key_pem),
            "ca.crt": _b64(certs.ca_pem),
        },
    }


def _from_secret(obj: dict[str, Any]) -> Certificates | None:
    data = obj.get("data") or {}
    try:
        return Certificates(
            ca_pem=base64.b64decode(data["ca.crt"]),
            cert_pem=base64.b64decode(data["tls.crt"]),
            key_pem=base64.b64decode(data["tls.key"]),
        )
    except (KeyError, ValueError):
        return None


async def _certificates(
    kube: Kube,
    namespace: str,
    secret: str,
    names: Sequence[str],
    ips: Sequence[str],
    renew_days: int,
) -> Certificates:
    path = f"/api/v1/namespaces/{namespace}/secrets"
    for _ in range(3):
        try:
            obj: dict[str, Any] | None = await kube.request("GET", f"{path}/{secret}")
        except KubeError as exc:
            if exc.status != 404:
                raise AdapterError(f"reading Secret {namespace}/{secret} failed") from exc
            obj = None
        have = _from_secret(obj) if obj is not None else None
        if have is not None and covers(have.cert_pem, names, renew_days):
            log.info("Secret %s/%s holds a valid certificate: kept", namespace, secret)
            return have
        made = make_certificates(names, ips)
        body = _secret(secret, namespace, made)
        try:
            if obj is None:
                await kube.request("POST", path, body)
            else:
                body["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
                await kube.request("PUT", f"{path}/{secret}", body)
        except KubeError as exc:
            if exc.status == 409:  # another replica wrote it first: read theirs
                continue
            raise AdapterError(f"writing Secret {namespace}/{secret} failed") from exc
        log.info(
            "Secret %s/%s written: a new certificate for %s", namespace, secret, ", ".join(names)
        )
        return made
    raise AdapterError(f"Secret {namespace}/{secret}: kept changing under 3 attempts")


async def _ca_bundle(kube: Kube, webhook: str, ca_pem: bytes) -> None:
    bundle = _b64(ca_pem)
    for _ in range(3):
        try:
            obj = await kube.request("GET", f"{WEBHOOKS}/{webhook}")
        except KubeError as exc:
            if exc.status == 404:
                log.warning(
                    "MutatingWebhookConfiguration %s does not exist: caBundle not "
                    "set (apply deploy/webhook.yaml, then run certs again)",
                    webhook,
                )
                return
            raise AdapterError(f"reading MutatingWebhookConfiguration {webhook} failed") from exc
        hooks = obj.get("webhooks") or []
        if all((h.get("clientConfig") or {}).get("caBundle") == bundle for h in hooks):
            return
        for h in hooks:
            h.setdefault("clientConfig", {})["caBundle"] = bundle
        try:
            await kube.request("PUT", f"{WEBHOOKS}/{webhook}", obj)
        except KubeError as exc:
            if exc.status == 409:
                continue
            raise AdapterError(f"updating MutatingWebhookConfiguration {webhook} failed") from exc
        log.info(
            "MutatingWebhookConfiguration %s: caBundle set on %d webhooks", webhook, len(hooks)
        )
        return
    raise AdapterError(f"MutatingWebhookConfiguration {webhook}: kept changing")


async def bootstrap(
    kube: Kube,
    *,
    namespace: str,
    secret: str,
    webhook: str,
    names: Sequence[str],
    ips: Sequence[str] = (),
    out: str | Path = "",
    renew_days: int = 30,
) -> Certificates:
    """The Secret's certificate (made when missing, wrong or about to expire), the
    webhook's caBundle set to its CA, and the files in ``out`` when given."""
    certs = await _certificates(kube, namespace, secret, names, ips, renew_days)
    if webhook:
        await _ca_bundle(kube, webhook, certs.ca_pem)
    if out:
        certs.write(out)
    return certs
