"""The admission webhooks of the operator as deployed (config/default), on the
simulated cluster: the operator (as its ServiceAccount, with only its Roles)
writes its certificate Secret, takes over the installed webhook
configurations and is called by the apiserver for real."""

from __future__ import annotations

import pytest

from e2e.conftest import wait_for

pytestmark = pytest.mark.e2e

VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kaiwo-validating-webhook-configuration"


def test_installed_configurations_are_served_by_the_operator(operator, admin):
    def registered():
        r = admin.get(VALIDATING)
        hooks = r.json()["webhooks"] if r.status_code == 200 else []
        return hooks and all(h["clientConfig"].get("caBundle") and h["failurePolicy"] == "Ignore" for h in hooks)

    wait_for(registered, 90, "CA bundle patched into the installed configuration")
    secret = admin.get("/api/v1/namespaces/kaiwo-system/secrets/kaiwo-webhook-server-cert")
    assert secret.status_code == 200 and secret.json()["type"] == "kubernetes.io/tls"
    body = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob", "metadata": {"name": "too-many"},
            "spec": {"user": "e2e", "image": "busybox", "gpus": 2, "replicas": 1, "gpusPerReplica": 4}}

    def refused():
        r = admin.post("/apis/kaiwo.silogen.ai/v1alpha1/namespaces/default/kaiwojobs", json=body, params={"dryRun": "All"})
        return r.status_code == 403 and r
    r = wait_for(refused, 60, "the deployed validating webhook to answer")
    assert 'admission webhook "validate-kaiwojob.kaiwo.silogen.ai" denied the request' in r.json()["message"]
    assert "spec.gpusPerReplica" in r.json()["message"]
