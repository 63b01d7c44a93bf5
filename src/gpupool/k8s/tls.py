"""A CA and a serving certificate for the webhook, made with ``cryptography``.

The API server calls admission webhooks over HTTPS only and checks the certificate against
the ``caBundle`` of the webhook configuration; :func:`make_certificates` makes both (a
self-signed CA, and a certificate it signs for the given DNS names and IP addresses).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Certificates", "make_certificates"]


@dataclass(frozen=True, slots=True)
class Certificates:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: str | Path) -> Path:
        """``ca.crt``, ``tls.crt`` and ``tls.key`` in ``directory`` (the key private)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / "ca.crt").write_bytes(self.ca_pem)
        (d / "tls.crt").write_bytes(self.cert_pem)
        key = d / "tls.key"
        key.write_bytes(self.key_pem)
        key.chmod(0o600)
        return d


def make_certificates(
    dns_names: Sequence[str], ips: Sequence[str] = (), *, days: int = 365
) -> Certificates:
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpupool-webhook-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    alt += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cn = dns_names[0] if dns_names else (ips[0] if ips else "gpupool")
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return Certificates(
        ca_pem=ca.public_bytes(pem),
        cert_pem=cert.public_bytes(pem),
        key_pem=key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
