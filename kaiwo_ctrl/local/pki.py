"""The local control plane's PKI and kubeconfigs.

Three independent CAs, as a real cluster has: one signs the apiserver's serving
certificate, one signs client certificates (user = CN, groups = O), and one key
pair signs service-account tokens. All files live in one ``certs`` directory.
"""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from kaiwo_ctrl.runtime.net.certs import TinyCA


def write_pki(certs: Path) -> None:
    """The three CAs and the apiserver's serving certificate, unless ``certs`` holds them."""
    certs.mkdir(parents=True, exist_ok=True)
    if (certs / "client-ca.crt").exists():
        return  # reuse on restart so existing kubeconfigs stay valid
    serving_ca, client_ca, sa = TinyCA("serving-ca"), TinyCA("client-ca"), TinyCA("sa-signer")
    serving_ca.pair.write(certs / "serving-ca.crt", certs / "serving-ca.key")
    client_ca.pair.write(certs / "client-ca.crt", certs / "client-ca.key")
    sa.pair.write(certs / "sa-signer.crt", certs / "sa-signer.key")
    serving_ca.issue("localhost", server=True, dns=("localhost",), ips=("127.0.0.1",)).write(
        certs / "apiserver.crt", certs / "apiserver.key"
    )


def client_ca(certs: Path) -> TinyCA:
    """The client CA written by :func:`write_pki`, loaded to issue client certificates."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    ca = TinyCA.__new__(TinyCA)
    from kaiwo_ctrl.runtime.net.certs import CertPair

    ca.pair = CertPair(
        x509.load_pem_x509_certificate((certs / "client-ca.crt").read_bytes()),
        serialization.load_pem_private_key((certs / "client-ca.key").read_bytes(), None),  # type: ignore[arg-type]
    )
    return ca


def write_kubeconfig(path: Path, certs: Path, server: str, user: str, groups: tuple[str, ...]) -> Path:
    """A kubeconfig for ``user`` (in ``groups``) with a fresh client certificate."""
    pair = client_ca(certs).issue(user, groups)
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kaiwo-local",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": b64((certs / "serving-ca.crt").read_bytes()),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(pair.cert_pem),
                    "client-key-data": b64(pair.key_pem),
                },
            }
        ],
        "contexts": [{"name": "kaiwo-local", "context": {"cluster": "kaiwo-local", "user": user}}],
        "current-context": "kaiwo-local",
    }
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
