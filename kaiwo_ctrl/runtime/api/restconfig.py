"""Where the API server is and how to authenticate: :class:`RestConfig`.

The common shapes (the in-cluster service account; a kubeconfig whose user
is a client certificate or a bearer token) are read directly: importing
kubernetes-asyncio costs about 0.4 s of CPU at every start, a third of the
start-up budget. Everything else (exec plugins, auth providers, merged
kubeconfig lists, proxies) goes through kubernetes-asyncio, which handles
them well.
"""

from __future__ import annotations

import os
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class RestConfig:
    host: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    token: str | None = None
    token_hook: Callable[[], Awaitable[str | None]] | None = None

    ca_data: str | None = None
    cert_data: bytes | None = None
    key_data: bytes | None = None

    @classmethod
    async def load(cls, kubeconfig: str | None = None, context: str | None = None) -> "RestConfig":
        """kubeconfig (explicit path, $KUBECONFIG, ~/.kube/config) or the in-cluster service account.

        The common shapes (the in-cluster service account; a kubeconfig whose
        user is a client certificate or a bearer token) are read directly:
        importing kubernetes-asyncio costs about 0.4 s of CPU at every start,
        a third of the start-up budget. Everything else (exec plugins, auth
        providers, merged kubeconfig lists, proxies) goes through it.
        """
        path = kubeconfig or os.environ.get("KUBECONFIG")
        home_cfg = os.path.expanduser("~/.kube/config")
        if path or (not os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.exists(home_cfg)):
            fast = _simple_kubeconfig(path or home_cfg, context) if os.pathsep not in (path or "") else None
            if fast is not None:
                return fast
            return await cls._load_with_library(path or home_cfg, context)
        return _in_cluster()

    @classmethod
    async def _load_with_library(cls, path: str, context: str | None) -> "RestConfig":
        from kubernetes_asyncio import client as kclient
        from kubernetes_asyncio import config as kconfig

        cfg = kclient.Configuration()
        await kconfig.load_kube_config(config_file=path, context=context, client_configuration=cfg)

        async def token() -> str | None:
            value = await cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
            return value or None

        has_token = bool(cfg.api_key) or cfg.refresh_api_key_hook is not None
        return cls(
            host=(cfg.host or "").rstrip("/"),
            ca_file=cfg.ssl_ca_cert,
            cert_file=cfg.cert_file,
            key_file=cfg.key_file,
            verify=cfg.verify_ssl,
            token_hook=token if has_token else None,
        )

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.host.startswith("https"):
            return False
        ctx = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, keyfile=self.key_file)
        elif self.cert_data:
            # ssl only loads a key pair from files: a private directory, removed at once
            with tempfile.TemporaryDirectory(prefix="kaiwo-ctrl-") as d:
                cert, key = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
                for f, data in ((cert, self.cert_data), (key, self.key_data or b"")):
                    with open(os.open(f, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as out:
                        out.write(data)
                ctx.load_cert_chain(cert, keyfile=key if self.key_data else None)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx


SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
_SIMPLE_USER = {"client-certificate", "client-certificate-data", "client-key", "client-key-data", "token", "tokenFile"}
_SIMPLE_CLUSTER = {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify"}


def _token_file(path: str, every: float = 60.0) -> Callable[[], Awaitable[str | None]]:
    """A token hook that re-reads ``path`` once a minute (projected tokens rotate)."""
    cached: list[Any] = ["", -every]

    async def token() -> str | None:
        now = time.monotonic()
        if now - cached[1] >= every:
            with open(path) as f:
                cached[0], cached[1] = f.read().strip(), now
        return cached[0] or None

    return token


def pod_namespace(sa_dir: str = SERVICE_ACCOUNT_DIR) -> str | None:
    """The namespace this process runs in: ``$POD_NAMESPACE`` (the downward API),
    else its service account's; None out of a cluster."""
    ns = os.environ.get("POD_NAMESPACE", "").strip()
    path = os.path.join(sa_dir, "namespace")
    if not ns and os.path.isfile(path):
        with open(path) as f:
            ns = f.read().strip()
    return ns or None


def _in_cluster(sa_dir: str = SERVICE_ACCOUNT_DIR) -> RestConfig:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise RuntimeError("no kubeconfig and not in a cluster (KUBERNETES_SERVICE_HOST/PORT unset)")
    token = os.path.join(sa_dir, "token")
    if not os.path.exists(token):
        raise RuntimeError(f"in a cluster but the service account token {token} is missing")
    host = f"[{host}]" if ":" in host else host
    return RestConfig(host=f"https://{host}:{port}", ca_file=os.path.join(sa_dir, "ca.crt"), token_hook=_token_file(token))


def _simple_kubeconfig(path: str, context: str | None) -> RestConfig | None:
    """A kubeconfig whose user is a client certificate or a bearer token; None
    for anything else (the caller then asks kubernetes-asyncio)."""
    import base64

    import yaml

    with open(path) as f:
        doc = yaml.safe_load(f) or {}

    def named(section: str, name: Any, field: str) -> dict | None:
        for item in doc.get(section) or ():
            if isinstance(item, dict) and item.get("name") == name and isinstance(item.get(field), dict):
                return item[field]
        return None

    ctx = named("contexts", context or doc.get("current-context"), "context")
    cluster = named("clusters", ctx.get("cluster"), "cluster") if ctx else None
    user = named("users", ctx.get("user"), "user") if ctx else None
    if not cluster or not cluster.get("server") or user is None or set(cluster) - _SIMPLE_CLUSTER or set(user) - _SIMPLE_USER:
        return None
    base = os.path.dirname(os.path.abspath(path))

    def file(v: str | None) -> str | None:
        return os.path.join(base, v) if v else None  # relative to the kubeconfig; absolute stays

    def data(v: str | None) -> bytes | None:
        return base64.b64decode(v) if v else None

    ca = data(cluster.get("certificate-authority-data"))
    token_file = file(user.get("tokenFile"))
    return RestConfig(
        host=str(cluster["server"]).rstrip("/"),
        ca_file=file(cluster.get("certificate-authority")),
        ca_data=ca.decode() if ca else None,
        cert_file=file(user.get("client-certificate")),
        key_file=file(user.get("client-key")),
        cert_data=data(user.get("client-certificate-data")),
        key_data=data(user.get("client-key-data")),
        verify=not cluster.get("insecure-skip-tls-verify"),
        token=user.get("token") or None,
        # a tokenFile is re-read and wins over a static token, as in client-go
        token_hook=_token_file(token_file) if token_file else None,
    )
