"""Secure metrics on the real apiserver: /metrics over TLS answers only bearer
tokens that a TokenReview authenticates and a SubjectAccessReview allows."""

from __future__ import annotations

import ssl
import uuid

import httpx
import yaml

from kaiwo_ctrl import rbac
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.observe.metricsauth import MetricsAuth, server_ssl_context
from support import eventually


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _token(admin, namespace: str, name: str) -> str:
    assert admin.post(f"/api/v1/namespaces/{namespace}/serviceaccounts", json={"metadata": {"name": name}}).status_code == 201
    r = admin.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                   json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    assert r.status_code == 201, r.text
    return r.json()["status"]["token"]


async def test_metrics_need_an_authorized_token(client, admin, namespace):
    metrics_port, health_port = _free_port(), _free_port()
    mgr = Manager(client, metrics_addr=f"127.0.0.1:{metrics_port}", health_addr=f"127.0.0.1:{health_port}",
                  metrics_auth=MetricsAuth(client, ttl=0.2), metrics_ssl=server_ssl_context())
    await mgr._start_http()
    try:
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # the test trusts the self-signed certificate it just made
        url = f"https://127.0.0.1:{mgr.bound['metrics']}/metrics"
        async with httpx.AsyncClient(verify=insecure, timeout=10) as http:
            # plain HTTP is not served at all
            plain = f"http://127.0.0.1:{mgr.bound['metrics']}/metrics"
            try:
                r = await http.get(plain)
                assert r.status_code == 400
            except httpx.HTTPError:
                pass
            assert (await http.get(url)).status_code == 401
            assert (await http.get(url, headers={"Authorization": "Bearer not-a-token"})).status_code == 401
            scraper = f"scraper-{uuid.uuid4().hex[:6]}"
            token = _token(admin, namespace, scraper)
            auth = {"Authorization": f"Bearer {token}"}
            assert (await http.get(url, headers=auth)).status_code == 403
            # bind the generated metrics-reader ClusterRole to the scraper
            role = rbac.metrics_reader_role()
            role["metadata"]["name"] = f"metrics-reader-{scraper}"
            assert admin.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", json=role).status_code == 201
            binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                       "metadata": {"name": role["metadata"]["name"]},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]},
                       "subjects": [{"kind": "ServiceAccount", "name": scraper, "namespace": namespace}]}
            assert admin.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json=binding).status_code == 201

            async def allowed():
                r = await http.get(url, headers=auth)
                return r if r.status_code == 200 else None

            r = await eventually(allowed, timeout=30, interval=0.3, what="the scraper to be allowed")
            assert "rest_client_requests_total" in r.text
            # the health probes stay plain and open on their own port
            h = await http.get(f"http://127.0.0.1:{mgr.bound['health']}/healthz")
            assert h.status_code == 200
    finally:
        await mgr._stop_http()


def test_generated_metrics_reader_role_is_in_the_kustomization():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "config" / "rbac"
    assert "metrics_reader_role.yaml" in yaml.safe_load((root / "kustomization.yaml").read_text())["resources"]
