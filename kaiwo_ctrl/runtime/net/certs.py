"""Throw-away PKI: small self-signed CAs that issue serving and client certificates.

:class:`TinyCA` makes a CA key and certificate and issues leaf certificates
(:class:`CertPair`) for servers (DNS names, IPs) or clients (user = CN,
groups = O). Keys are ECDSA P-256 unless ``use_rsa=True``, which some
consumers need (a certificate rotator that only accepts an RSA CA key in
PKCS#1 form). Uses: the local control plane's three CAs, the admission
webhooks' TLS, and the self-signed certificate of the metrics endpoint.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=7)


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name(attrs)


PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def _key_pem(key: PrivateKey) -> bytes:
    # RSA keys as PKCS#1 ("RSA PRIVATE KEY"), the form Go's x509.ParsePKCS1PrivateKey reads
    fmt = serialization.PrivateFormat.TraditionalOpenSSL if isinstance(key, rsa.RSAPrivateKey) else serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())


def _new_key(use_rsa: bool) -> PrivateKey:
    return rsa.generate_private_key(65537, 2048) if use_rsa else ec.generate_private_key(ec.SECP256R1())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class CertPair:
    cert: x509.Certificate
    key: PrivateKey

    @property
    def cert_pem(self) -> bytes:
        return _cert_pem(self.cert)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self.key)

    def write(self, cert_path: Path, key_path: Path) -> None:
        cert_path.write_bytes(self.cert_pem)
        key_path.write_bytes(self.key_pem)
        key_path.chmod(0o600)


class TinyCA:
    """A self-signed CA that issues leaf certificates (of its own key type and validity)."""

    use_rsa: bool = False
    validity: dt.timedelta = _VALIDITY

    def __init__(
        self,
        cn: str = "kaiwo-ctrl-local-ca",
        validity: dt.timedelta = _VALIDITY,
        now: dt.datetime | None = None,
        *,
        use_rsa: bool = False,
        dns: tuple[str, ...] = (),
    ) -> None:
        now = now or dt.datetime.now(dt.timezone.utc)
        self.use_rsa, self.validity = use_rsa, validity
        key = _new_key(use_rsa)
        name = _name(cn, ("kaiwo-ctrl",))
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
        )
        if dns:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
        self.pair = CertPair(builder.sign(key, hashes.SHA256()), key)

    @classmethod
    def from_pem(cls, cert_pem: bytes, key_pem: bytes) -> "TinyCA":
        """An existing CA (e.g. read back from a Secret) that can issue more leaves."""
        ca = cls.__new__(cls)
        key = serialization.load_pem_private_key(key_pem, None)
        ca.use_rsa = isinstance(key, rsa.RSAPrivateKey)
        ca.pair = CertPair(x509.load_pem_x509_certificate(cert_pem), key)  # type: ignore[arg-type]
        return ca

    def issue(
        self,
        cn: str,
        orgs: tuple[str, ...] = (),
        *,
        server: bool = False,
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        validity: dt.timedelta | None = None,
        now: dt.datetime | None = None,
    ) -> CertPair:
        now = now or dt.datetime.now(dt.timezone.utc)
        key = _new_key(self.use_rsa)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, orgs))
            .issuer_name(self.pair.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(min(now + (validity or self.validity), self.pair.cert.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return CertPair(builder.sign(self.pair.key, hashes.SHA256()), key)
