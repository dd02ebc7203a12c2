"""``--webhook-cert-source=secret`` against a real kube-apiserver: another issuer
(here the test, standing in for cert-manager's CA issuer) writes the webhook
Secret with tls.crt, tls.key and ca.crt and no CA key. The operator serves that
certificate, publishes ca.crt as the configurations' caBundle (the apiserver then
verifies the server with it), follows a renewal to a new CA, and never writes
the Secret."""

from __future__ import annotations

import base64
import datetime as dt
import os

import pytest

from kaiwo_ctrl.local.controlplane import free_port
from kaiwo_ctrl.runtime.net.certs import TinyCA
from support import eventually
from support.operator import OperatorProcess
from support.planes import own_plane
from test_workloads_support import ensure_queue_config
from support.admin import admin_http

pytestmark = pytest.mark.integration

OP_NS = "kaiwo-system"
SECRET = f"/api/v1/namespaces/{OP_NS}/secrets/kaiwo-webhook-server-cert"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kaiwo-validating-webhook-configuration"
BAD_JOB = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob", "metadata": {"name": "probe"},
           "spec": {"gpus": 1, "gpusPerReplica": 2, "replicas": 1, "user": "probe"}}


def issuer_secret(ca_name: str) -> tuple[dict, bytes]:
    """A Secret as cert-manager's CA issuer writes it (the server is called at 127.0.0.1)."""
    now = dt.datetime.now(dt.timezone.utc)
    ca = TinyCA(ca_name, validity=dt.timedelta(days=30), now=now)
    pair = ca.issue("127.0.0.1", server=True, ips=("127.0.0.1",), validity=dt.timedelta(days=1), now=now)
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    body = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "kaiwo-webhook-server-cert", "namespace": OP_NS},
            "data": {"ca.crt": b64(ca.pair.cert_pem), "tls.crt": b64(pair.cert_pem), "tls.key": b64(pair.key_pem)}}
    return body, ca.pair.cert_pem


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    with own_plane(tmp_path_factory, "webhook-external-plane") as cp:
        yield cp


@pytest.fixture(scope="module")
def admin(plane):
    with admin_http(plane) as h:
        assert h.post("/api/v1/namespaces", json={"metadata": {"name": OP_NS}}).status_code == 201
        ensure_queue_config(h)
        yield h


def ca_bundles(admin) -> set[bytes]:
    r = admin.get(VALIDATING)
    if r.status_code != 200:
        return set()
    return {base64.b64decode(w["clientConfig"].get("caBundle") or "") for w in r.json()["webhooks"]}


def refused(admin) -> bool:
    r = admin.post("/apis/kaiwo.silogen.ai/v1alpha1/namespaces/default/kaiwojobs", json=BAD_JOB, params={"dryRun": "All"})
    return r.status_code == 403 and 'admission webhook "validate-kaiwojob.kaiwo.silogen.ai" denied' in r.json()["message"]


async def test_operator_serves_and_publishes_the_issuers_certificate(plane, admin, tmp_path):
    secret, ca_pem = issuer_secret("issuer-ca-1")
    r = admin.post(f"/api/v1/namespaces/{OP_NS}/secrets", json=secret)
    assert r.status_code == 201, r.text
    written = r.json()["metadata"]["resourceVersion"]
    port = free_port()
    os.environ["WEBHOOK_CERT_SOURCE"] = "secret"  # the flag's environment form, as the chart could set it
    try:
        op = OperatorProcess(str(plane.kubeconfig), tmp_path / "operator.log",
                             f"--webhook-bind-address=127.0.0.1:{port}", "--webhook-url-host=127.0.0.1")
    finally:
        os.environ.pop("WEBHOOK_CERT_SOURCE")
    try:
        await eventually(lambda: ca_bundles(admin) == {ca_pem}, timeout=90, interval=0.5, what="the issuer's CA as caBundle")
        # the apiserver verifies the served certificate with that bundle and gets our answer
        await eventually(lambda: refused(admin), timeout=60, interval=0.5, what="the webhook to answer over the issuer's TLS")
        renewed, new_ca = issuer_secret("issuer-ca-2")
        renewed["metadata"]["resourceVersion"] = admin.get(SECRET).json()["metadata"]["resourceVersion"]
        r = admin.put(SECRET, json=renewed)
        assert r.status_code == 200, r.text
        rotated = r.json()["metadata"]["resourceVersion"]
        await eventually(lambda: ca_bundles(admin) == {new_ca}, timeout=60, interval=0.5, what="the renewed CA as caBundle")
        await eventually(lambda: refused(admin), timeout=60, interval=0.5, what="the webhook to answer with the renewed certificate")
        after = admin.get(SECRET).json()
        assert after["metadata"]["resourceVersion"] == rotated and rotated != written  # only the issuer wrote it
        assert "ca.key" not in after["data"]
        assert "webhook certificate secret written" not in op.log_path.read_text()
    finally:
        assert op.stop() == 0
