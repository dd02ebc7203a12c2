"""The webhook server's TLS, managed by kaiwo-ctrl itself (no cert-manager).

One Secret in the operator's own namespace holds everything:

* ``ca.crt`` -- the CA bundle the apiserver trusts (the ``caBundle`` of our
  webhook configurations): the current CA, plus earlier CAs until they expire;
* ``ca.key`` -- the current CA's key;
* ``tls.crt`` / ``tls.key`` -- the serving certificate and its key.

Only the leader writes it (:func:`plan_secret` decides, :class:`CertManager`
writes); every replica watches it and reloads its server certificate when it
changes (:class:`ServingCert`). Rotation happens when a third of a
certificate's lifetime is left. A new CA is first only *added* to the bundle;
the serving certificate moves to it one renewal period later, so the
apiserver already trusts the new CA when the first certificate it signs is
served, and no request fails verification in between.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import logging
import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.serialization import Encoding

from kaiwo_ctrl.runtime.net.certs import TinyCA
from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.api.resources import SECRETS, namespace_exists

log = logging.getLogger("kaiwo_ctrl.webhooks.tls")
_PEM = Encoding.PEM

CA_ROTATED_ANNOTATION = "kaiwo.silogen.ai/ca-rotated-at"
#: How long a new CA sits in the bundle before it signs the served certificate.
CA_SETTLE = dt.timedelta(seconds=30)


@dataclass(frozen=True)
class TLSOptions:
    namespace: str
    secret_name: str = "kaiwo-webhook-server-cert"
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    cert_validity: dt.timedelta = dt.timedelta(days=90)
    ca_validity: dt.timedelta = dt.timedelta(days=3650)


@dataclass
class Material:
    """The Secret's contents, decoded (``None`` fields are missing/unreadable)."""

    ca_bundle: bytes = b""
    ca: TinyCA | None = None
    cert_pem: bytes = b""
    key_pem: bytes = b""
    cert: x509.Certificate | None = None
    ca_rotated_at: dt.datetime | None = None
    errors: list[str] = field(default_factory=list)

    @classmethod
    def from_secret(cls, secret: Mapping[str, Any] | None) -> Material:
        m = cls()
        if not secret:
            m.errors.append("secret missing")
            return m
        data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        m.ca_bundle = data.get("ca.crt", b"")
        m.cert_pem, m.key_pem = data.get("tls.crt", b""), data.get("tls.key", b"")
        try:
            m.cert = x509.load_pem_x509_certificate(m.cert_pem)
        except (ValueError, TypeError) as e:
            m.errors.append(f"unreadable: {type(e).__name__}")
        try:  # no ca.key when another issuer (cert-manager) writes the Secret: the certificate still serves
            ca_cert = x509.load_pem_x509_certificates(m.ca_bundle)[0]
            m.ca = TinyCA.from_pem(ca_cert.public_bytes(_PEM), data["ca.key"])
        except (ValueError, KeyError, IndexError, TypeError) as e:
            m.errors.append(f"unreadable: {type(e).__name__}")
        stamp = ((secret.get("metadata") or {}).get("annotations") or {}).get(CA_ROTATED_ANNOTATION)
        if stamp:
            m.ca_rotated_at = dt.datetime.fromisoformat(stamp)
        return m


def _renew_at(cert: x509.Certificate, validity: dt.timedelta) -> dt.datetime:
    """When a third of the intended lifetime is left (``notBefore`` is backdated
    a little for clock skew, so it is not used)."""
    return cert.not_valid_after_utc - validity / 3


def _sans(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    return set(ext.get_values_for_type(x509.DNSName)), {str(i) for i in ext.get_values_for_type(x509.IPAddress)}


def _signed_by(cert: x509.Certificate, ca: TinyCA) -> bool:
    try:
        cert.verify_directly_issued_by(ca.pair.cert)
        return True
    except (InvalidSignature, ValueError, TypeError):
        return False


def _pem_certs(bundle: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(bundle) if bundle else []
    except ValueError:
        return []


@dataclass(frozen=True)
class Plan:
    """What the leader must write: ``data`` (Secret data, base64) or nothing."""

    reason: str
    data: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    next_check: dt.datetime | None = None


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _issue(ca: TinyCA, opts: TLSOptions, now: dt.datetime) -> tuple[bytes, bytes]:
    cn = opts.dns_names[0] if opts.dns_names else (opts.ip_addresses[0] if opts.ip_addresses else "kaiwo-webhook")
    pair = ca.issue(cn, server=True, dns=opts.dns_names, ips=opts.ip_addresses, validity=opts.cert_validity, now=now)
    return pair.cert_pem, pair.key_pem


def plan_secret(m: Material, opts: TLSOptions, now: dt.datetime) -> Plan:
    """Decide whether the Secret must be (re)written. Pure."""
    if m.ca is None or m.cert is None:
        ca = TinyCA("kaiwo-webhook-ca", validity=opts.ca_validity, now=now)
        cert, key = _issue(ca, opts, now)
        return Plan(f"new CA and certificate ({', '.join(m.errors) or 'incomplete'})", _data(ca.pair.cert_pem, ca, cert, key))
    live = [c for c in _pem_certs(m.ca_bundle) if c.not_valid_after_utc > now]
    bundle = b"".join(c.public_bytes(_PEM) for c in live)
    if now >= _renew_at(m.ca.pair.cert, opts.ca_validity):
        ca = TinyCA("kaiwo-webhook-ca", validity=opts.ca_validity, now=now)
        # the new CA joins the bundle; the served certificate keeps the old one for now
        return Plan(
            "CA renewal", _data(ca.pair.cert_pem + bundle, ca, m.cert_pem, m.key_pem),
            {CA_ROTATED_ANNOTATION: now.isoformat()},
        )
    dns, ips = _sans(m.cert)
    want_ips = {str(ipaddress.ip_address(i)) for i in opts.ip_addresses}
    reason = ""
    if not _signed_by(m.cert, m.ca):
        settled = (m.ca_rotated_at or now - CA_SETTLE) + CA_SETTLE
        if now < settled:
            return Plan("", next_check=settled)
        reason = "certificate moves to the new CA"
    elif dns != set(opts.dns_names) or ips != want_ips:
        reason = "certificate names changed"
    elif now >= _renew_at(m.cert, opts.cert_validity):
        reason = "certificate renewal"
    elif bundle != m.ca_bundle:
        reason = "expired CA left the bundle"
    if not reason:
        due = (_renew_at(m.cert, opts.cert_validity), _renew_at(m.ca.pair.cert, opts.ca_validity))
        return Plan("", next_check=min(*due, *(c.not_valid_after_utc for c in live)))
    cert, key = (m.cert_pem, m.key_pem) if reason.startswith("expired") else _issue(m.ca, opts, now)
    return Plan(reason, _data(bundle, m.ca, cert, key))


def _data(bundle: bytes, ca: TinyCA, cert: bytes, key: bytes) -> dict[str, str]:
    return {"ca.crt": _b64(bundle), "ca.key": _b64(ca.pair.key_pem), "tls.crt": _b64(cert), "tls.key": _b64(key)}


class ServingCert:
    """The server's certificate, reloaded in place whenever the Secret changes.

    New TLS handshakes use the new certificate at once; connections the
    apiserver already holds keep working (the certificate was checked when
    they were opened).
    """

    def __init__(self) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.loaded_serial: int | None = None
        self.ca_bundle: bytes = b""
        self.reloads = 0
        self._dir = Path(tempfile.mkdtemp(prefix="kaiwo-webhook-tls-"))
        self._listeners: list[Callable[[], None]] = []

    def on_reload(self, fn: Callable[[], None]) -> None:
        self._listeners.append(fn)

    @property
    def ready(self) -> bool:
        return self.loaded_serial is not None

    def load(self, secret: Mapping[str, Any] | None) -> bool:
        """Load the certificate from the Secret; True when it changed."""
        m = Material.from_secret(secret)
        if m.cert is None or not m.key_pem or m.cert.serial_number == self.loaded_serial:
            return False
        crt, key = self._dir / "tls.crt", self._dir / "tls.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(m.key_pem)
        crt.write_bytes(m.cert_pem)
        try:
            self.context.load_cert_chain(str(crt), str(key))
        except ssl.SSLError as e:
            log.error("cannot load the webhook serving certificate", extra={"error": str(e)})
            return False
        finally:
            key.unlink(missing_ok=True)
        self.loaded_serial = m.cert.serial_number
        self.ca_bundle = m.ca_bundle
        self.reloads += 1
        log.info("webhook serving certificate loaded", extra={"serial": f"{m.cert.serial_number:x}", "not_after": m.cert.not_valid_after_utc.isoformat()})
        for fn in self._listeners:
            fn()
        return True


class CertManager:
    """Leader side: keep the Secret current, then tell ``on_change`` the CA bundle."""

    def __init__(self, client: Client, opts: TLSOptions, on_change: Callable[[bytes], Any]) -> None:
        self.client = client
        self.opts = opts
        self.on_change = on_change
        self.writes = 0
        self.missing_namespace_delay = 0.0  # seconds; grows while the namespace is missing

    async def ensure(self, now: dt.datetime | None = None) -> dt.datetime:
        """One pass; returns when the next pass is due."""
        now = now or dt.datetime.now(dt.timezone.utc)
        secret = await self.client.get_or_none(SECRETS, self.opts.secret_name, self.opts.namespace)
        plan = plan_secret(Material.from_secret(secret), self.opts, now)
        if plan.data is not None:
            # an idle operator writes nothing: while the namespace is missing, a read says so
            # and no create is attempted (a failed POST is still a write request)
            if secret is None and not await namespace_exists(self.client, self.opts.namespace):
                return self._namespace_missing(now)
            try:
                secret = await self._write(secret, plan)
            except ApiError as e:
                if secret is not None or not e.not_found:
                    raise
                return self._namespace_missing(now)
            self.missing_namespace_delay = 0.0
            self.writes += 1
            log.info("webhook certificate secret written", extra={"reason": plan.reason, "secret": self.opts.secret_name})
            again = plan_secret(Material.from_secret(secret), self.opts, now)
            plan = Plan(plan.reason, next_check=again.next_check or now)
        result = self.on_change(Material.from_secret(secret).ca_bundle)
        if hasattr(result, "__await__"):
            await result
        return plan.next_check or now + dt.timedelta(hours=1)

    def _namespace_missing(self, now: dt.datetime) -> dt.datetime:
        """Creating the Secret found no namespace (e.g. run out of cluster): one
        line naming it and the flag, no traceback, and the next try backs off."""
        delay = self.missing_namespace_delay = min(max(self.missing_namespace_delay * 2, 5.0), 300.0)
        ns = self.opts.namespace
        log.error(
            f"webhook certificate Secret {self.opts.secret_name!r} not written: the namespace {ns!r} does not exist; "
            f"create it (kubectl create namespace {ns}) or choose an existing one with --leader-election-namespace "
            f"(env POD_NAMESPACE); retrying in {delay:g}s"
        )
        return now + dt.timedelta(seconds=delay)

    async def _write(self, secret: Mapping[str, Any] | None, plan: Plan) -> dict:
        meta: dict[str, Any] = {
            "name": self.opts.secret_name,
            "namespace": self.opts.namespace,
            "labels": {"app.kubernetes.io/managed-by": "kaiwo-ctrl", "app.kubernetes.io/component": "webhook"},
        }
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "kubernetes.io/tls", "data": plan.data}
        if plan.annotations:
            meta["annotations"] = plan.annotations
        if secret is None:
            return await self.client.create(SECRETS, body)
        old_meta = secret.get("metadata") or {}
        meta["resourceVersion"] = old_meta.get("resourceVersion")
        if not plan.annotations and old_meta.get("annotations"):
            meta["annotations"] = old_meta["annotations"]
        if secret.get("type") != "kubernetes.io/tls":
            raise ApiError(422, {"message": f"secret {self.opts.secret_name} has type {secret.get('type')!r}"})
        return await self.client.replace(SECRETS, body)
