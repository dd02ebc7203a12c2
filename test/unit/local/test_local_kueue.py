"""kaiwo_ctrl.local.kueue: Kueue's manifests rewritten for loopback, and the
certificate its rotator must accept as it is."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

import yaml
from cryptography import x509

from kaiwo_ctrl.local import kueue

MANIFESTS = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- name: mjob.kb.io
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}
- name: mworkload.kb.io
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-kueue-x-k8s-io-v1beta2-workload}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- name: vpod.kb.io
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate--v1-pod}
"""

KUSTOMIZATION = """
resources: [manifests.yaml]
patches:
- patch: |-
    apiVersion: admissionregistration.k8s.io/v1
    kind: ValidatingWebhookConfiguration
    metadata:
      name: validating-webhook-configuration
    webhooks:
    - name: vpod.kb.io
      namespaceSelector:
        matchExpressions:
        - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system, kueue-system]}
replacements:
- source:
    kind: ValidatingWebhookConfiguration
    name: validating-webhook-configuration
    fieldPath: webhooks.[name=vpod.kb.io].namespaceSelector
  targets:
  - select: {kind: MutatingWebhookConfiguration, name: mutating-webhook-configuration}
    fieldPaths:
    - webhooks.[name=mjob.kb.io].namespaceSelector
"""

CRD_KUSTOMIZATION = """
resources: [bases/kueue.x-k8s.io_workloads.yaml]
patches:
- path: patches/webhook_in_workloads.yaml
#- path: patches/webhook_in_resourceflavors.yaml
"""

PATCH = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: workloads.kueue.x-k8s.io
spec:
  conversion:
    strategy: Webhook
    webhook:
      clientConfig:
        service: {namespace: system, name: webhook-service, path: /convert}
      conversionReviewVersions: [v1]
"""


def _manifests(tmp_path: Path) -> Path:
    (tmp_path / "crd-patches").mkdir()
    (tmp_path / "manifests.yaml").write_text(MANIFESTS)
    (tmp_path / "kustomization.yaml").write_text(KUSTOMIZATION)
    (tmp_path / "crd-kustomization.yaml").write_text(CRD_KUSTOMIZATION)
    (tmp_path / "crd-patches" / "webhook_in_workloads.yaml").write_text(PATCH)
    (tmp_path / "crd-patches" / "webhook_in_resourceflavors.yaml").write_text(PATCH.replace("workloads", "resourceflavors"))
    return tmp_path


def test_webhook_configurations_point_at_loopback_with_kueue_names_and_selectors(tmp_path):
    out = {c["kind"]: c for c in kueue.webhook_configurations(_manifests(tmp_path), "https://127.0.0.1:9", "Q0E=")}
    mutating, validating = out["MutatingWebhookConfiguration"], out["ValidatingWebhookConfiguration"]
    # the names Kueue's cert rotator looks up
    assert mutating["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    assert validating["metadata"] == {"name": "kueue-validating-webhook-configuration"}
    job, workload = mutating["webhooks"]
    assert job["clientConfig"] == {"url": "https://127.0.0.1:9/mutate-batch-v1-job", "caBundle": "Q0E="}
    selector = validating["webhooks"][0]["namespaceSelector"]
    assert selector["matchExpressions"][0]["values"] == ["kube-system", "kueue-system"]
    assert job["namespaceSelector"] == selector, "copied by the kustomization's replacements"
    assert "namespaceSelector" not in workload


def test_conversion_only_for_the_patches_kueue_applies(tmp_path):
    out = kueue.conversion_patches(_manifests(tmp_path), "https://127.0.0.1:9", "Q0E=")
    assert list(out) == ["workloads.kueue.x-k8s.io"], "the commented-out ResourceFlavor patch stays off"
    hook = out["workloads.kueue.x-k8s.io"]
    assert hook["strategy"] == "Webhook"
    assert hook["webhook"] == {"clientConfig": {"url": "https://127.0.0.1:9/convert", "caBundle": "Q0E="}, "conversionReviewVersions": ["v1"]}


def test_configuration_is_loopback_single_replica():
    cfg = kueue.configuration(kueue.KueuePorts(webhook=1, health=2, metrics=3), Path("/x/certs"))
    assert cfg["webhook"] == {"host": "127.0.0.1", "port": 1, "certDir": "/x/certs"}
    assert cfg["health"]["healthProbeBindAddress"] == "127.0.0.1:2"
    assert cfg["metrics"]["bindAddress"] == "127.0.0.1:3"
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["featureGates"] == {"VisibilityOnDemand": False}
    assert cfg["internalCertManagement"]["enable"] is True
    assert {"batch/job", "ray.io/rayjob", "ray.io/raycluster", "workload.codeflare.dev/appwrapper", "pod", "deployment"} == set(
        cfg["integrations"]["frameworks"]
    )
    yaml.safe_dump(cfg)


def test_pki_is_what_kueues_rotator_keeps():
    pki = kueue.KueuePKI.create()
    # the rotator parses the CA key with x509.ParsePKCS1PrivateKey
    assert pki.ca_key_pem.startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    ca = x509.load_pem_x509_certificate(pki.ca_pem)
    leaf = x509.load_pem_x509_certificate(pki.cert_pem)
    lookahead = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=90)
    for cert in (ca, leaf):
        assert cert.not_valid_after_utc > lookahead, "valid beyond the rotator's 90-day look-ahead"
    assert ca.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName) == ["kueue-ca"]
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["kueue-webhook-service.kueue-system.svc"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert leaf.issuer == ca.subject
    ca.public_key().verify(leaf.signature, leaf.tbs_certificate_bytes, *_rsa_args(leaf))
    secret = pki.secret()
    assert secret["metadata"] == {"name": "kueue-webhook-server-cert", "namespace": "kueue-system"}
    assert set(secret["data"]) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}


def _rsa_args(cert: x509.Certificate) -> tuple:
    from cryptography.hazmat.primitives.asymmetric import padding

    return (padding.PKCS1v15(), cert.signature_hash_algorithm)
