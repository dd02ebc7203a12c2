"""Reading kubeconfigs and the in-cluster service account without kubernetes-asyncio."""

from __future__ import annotations

import asyncio
import base64

import pytest
import yaml

from kaiwo_ctrl.runtime.api import restconfig as client_mod
from kaiwo_ctrl.runtime.api.restconfig import RestConfig


def write(tmp_path, user: dict, cluster: dict | None = None, **extra) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://10.0.0.1:6443/"}}],
        "users": [{"name": "u", "user": user}, {"name": "other", "user": {"token": "nope"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}, {"name": "o", "context": {"cluster": "c", "user": "other"}}],
        "current-context": "ctx",
        **extra,
    }
    p = tmp_path / "kubeconfig"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


def test_client_certificate_data_and_ca_data(tmp_path):
    pem = b"-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"
    b64 = base64.b64encode(pem).decode()
    cfg = client_mod._simple_kubeconfig(
        write(tmp_path, {"client-certificate-data": b64, "client-key-data": b64}, {"server": "https://h:1/", "certificate-authority-data": b64}), None
    )
    assert cfg is not None and cfg.host == "https://h:1"
    assert cfg.cert_data == pem and cfg.key_data == pem and cfg.ca_data == pem.decode() and cfg.verify


def test_relative_files_token_and_context(tmp_path):
    cfg = client_mod._simple_kubeconfig(
        write(tmp_path, {"client-certificate": "certs/a.crt", "client-key": "/abs/a.key"}, {"server": "https://h", "certificate-authority": "ca.crt", "insecure-skip-tls-verify": True}),
        None,
    )
    assert cfg.cert_file == str(tmp_path / "certs/a.crt") and cfg.key_file == "/abs/a.key"
    assert cfg.ca_file == str(tmp_path / "ca.crt") and not cfg.verify
    other = client_mod._simple_kubeconfig(str(tmp_path / "kubeconfig"), "o")
    assert other.token == "nope" and other.token_hook is None


def test_token_file_is_reread_and_wins_over_token(tmp_path):
    (tmp_path / "tok").write_text("first\n")
    cfg = client_mod._simple_kubeconfig(write(tmp_path, {"token": "static", "tokenFile": "tok"}), None)
    hook = cfg.token_hook
    assert asyncio.run(hook()) == "first"
    (tmp_path / "tok").write_text("second")
    assert asyncio.run(hook()) == "first"  # cached for a minute
    fresh = client_mod._token_file(str(tmp_path / "tok"), every=0.0)
    assert asyncio.run(fresh()) == "second"


@pytest.mark.parametrize(
    "user,cluster",
    [
        ({"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}}, None),
        ({"auth-provider": {"name": "oidc"}}, None),
        ({"username": "a", "password": "b"}, None),
        ({"token": "t"}, {"server": "https://h", "proxy-url": "http://proxy:3128"}),
    ],
)
def test_other_shapes_go_to_kubernetes_asyncio(tmp_path, user, cluster):
    assert client_mod._simple_kubeconfig(write(tmp_path, user, cluster), None) is None


def test_missing_context_goes_to_kubernetes_asyncio(tmp_path):
    assert client_mod._simple_kubeconfig(write(tmp_path, {"token": "t"}), "no-such-context") is None


def test_in_cluster_service_account(tmp_path, monkeypatch):
    (tmp_path / "token").write_text("sa-token")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cfg = client_mod._in_cluster(str(tmp_path))
    assert cfg.host == "https://[fd00::1]:443" and cfg.ca_file == str(tmp_path / "ca.crt")
    assert asyncio.run(cfg.token_hook()) == "sa-token"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(RuntimeError, match="KUBERNETES_SERVICE_HOST"):
        client_mod._in_cluster(str(tmp_path))


def test_load_falls_back_to_the_library_for_exec(tmp_path, monkeypatch):
    seen = []

    async def library(cls, path, context):
        seen.append((path, context))
        return RestConfig(host="https://from-library")

    monkeypatch.setattr(RestConfig, "_load_with_library", classmethod(library))
    path = write(tmp_path, {"exec": {"command": "true", "apiVersion": "client.authentication.k8s.io/v1"}})
    assert asyncio.run(RestConfig.load(path)).host == "https://from-library"
    assert seen == [(path, None)]
    assert asyncio.run(RestConfig.load(write(tmp_path, {"token": "t"}))).host == "https://10.0.0.1:6443"


def test_fast_path_agrees_with_kubernetes_asyncio(tmp_path):
    path = write(tmp_path, {"token": "abc"}, {"server": "https://h:6443", "insecure-skip-tls-verify": True})
    fast = client_mod._simple_kubeconfig(path, None)
    lib = asyncio.run(RestConfig._load_with_library(path, None))
    assert (fast.host, fast.verify) == (lib.host, lib.verify)
    assert asyncio.run(lib.token_hook()) == f"Bearer {fast.token}"


def test_pod_namespace_and_the_operator_namespace(tmp_path, monkeypatch):
    from kaiwo_ctrl.settings import operator_namespace

    sa = tmp_path / "sa"
    sa.mkdir()
    monkeypatch.setattr(client_mod.pod_namespace, "__defaults__", (str(sa),))
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert client_mod.pod_namespace() is None  # out of a cluster
    assert operator_namespace() == "kaiwo-system"
    (sa / "namespace").write_text("from-account\n")
    assert client_mod.pod_namespace() == "from-account"
    monkeypatch.setenv("POD_NAMESPACE", " from-env ")  # the downward API wins over the account
    assert client_mod.pod_namespace() == "from-env"
    assert operator_namespace() == "from-env"
    assert operator_namespace("from-flag") == "from-flag"
    (sa / "namespace").write_text("")
    monkeypatch.setenv("POD_NAMESPACE", "")
    assert operator_namespace() == "kaiwo-system"  # an empty file names nothing
