"""The real Kueue controller manager as a component of the local control plane.

``hack/envtest/build.sh`` builds ``sigs.k8s.io/kueue/cmd/kueue`` from its Go
module and copies Kueue's published webhook manifests and CRD conversion
patches out of the same module zip. This module turns them into what a
cluster install would have, with loopback in place of a Service:

* Kueue's webhook configurations (``config/components/webhook``) with each
  ``clientConfig.service`` rewritten to ``clientConfig.url:
  https://127.0.0.1:<port><path>``, the namespace selectors its kustomization
  adds, and the ``kueue-`` name prefix of its default install;
* the conversion webhook its CRD patches turn on (LocalQueue, ClusterQueue,
  Cohort, Workload, ...), pointed at the same URL;
* a ``Configuration`` file and a serving certificate.

Certificates. With internal cert management off, Kueue's main() insists on a
metrics certificate at the fixed path ``/etc/kueue/metrics/certs``. So internal
cert management stays on (Kueue's default), and its rotator is handed a
certificate it accepts as valid, in the Secret it reads
(``kueue-system/kueue-webhook-server-cert``): an RSA CA (the rotator parses
the CA key as PKCS#1 and checks the CA for the DNS name ``kueue-ca``), and a
serving certificate for ``kueue-webhook-service.kueue-system.svc`` that also
carries the IP SAN 127.0.0.1 the apiserver verifies. Both are valid for more
than the rotator's 90-day look-ahead, so it never replaces them. The same
files go into the webhook server's certDir (in a cluster the Secret is
mounted there) and the CA into every caBundle (the rotator injects the same
one again). The metrics endpoint then serves controller-runtime's
self-signed certificate.
"""

from __future__ import annotations

import base64
import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import yaml

from kaiwo_ctrl.runtime.net.certs import TinyCA
from kaiwo_ctrl.runtime.net.fetch import BlockingFetcher

NAMESPACE = "kueue-system"
SERVICE = "kueue-webhook-service"
SECRET = "kueue-webhook-server-cert"
#: kustomize namePrefix of Kueue's config/default; the rotator looks the
#: webhook configurations up by these names.
NAME_PREFIX = "kueue-"
CA_NAME = "kueue-ca"
#: Longer than the rotator's 90-day look-ahead, or it regenerates (without our IP SAN).
CERT_VALIDITY = dt.timedelta(days=365)
FRAMEWORKS = (
    "batch/job",
    "ray.io/rayjob",
    "ray.io/raycluster",
    "workload.codeflare.dev/appwrapper",
    "pod",
    "deployment",
)


@dataclass
class KueuePorts:
    webhook: int
    health: int
    metrics: int


def configuration(ports: KueuePorts, cert_dir: Path) -> dict:
    """Kueue's ``Configuration`` for a single local replica on loopback."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports.metrics}"},
        "webhook": {"host": "127.0.0.1", "port": ports.webhook, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": True, "webhookServiceName": SERVICE, "webhookSecretName": SECRET},
        "clientConnection": {"qps": 300, "burst": 500},
        # the visibility API server would need an APIService and aggregation
        "featureGates": {"VisibilityOnDemand": False},
        # v1beta2 always waits for pods ready; kwok Pods are Ready within a second of
        # binding, so the timeout only evicts Pods that cannot be placed at all
        "waitForPodsReady": {"timeout": "10m", "blockAdmission": False},
        "integrations": {"frameworks": list(FRAMEWORKS)},
    }


# --------------------------------------------------------------------- manifests


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _namespace_selectors(kustomization: dict) -> dict[tuple[str, str], dict]:
    """(configuration kind, webhook name) -> namespaceSelector, as Kueue's
    webhook kustomization sets them (a patch plus replacements that copy it)."""
    selectors: dict[tuple[str, str], dict] = {}
    for patch in kustomization.get("patches", []):
        doc = yaml.safe_load(patch.get("patch", "")) or {}
        for wh in doc.get("webhooks", []):
            if "namespaceSelector" in wh:
                selectors[(doc["kind"], wh["name"])] = wh["namespaceSelector"]
    for rep in kustomization.get("replacements", []):
        src = rep["source"]
        name = src["fieldPath"].split("[name=", 1)[1].split("]", 1)[0]
        selector = selectors.get((src["kind"], name))
        if selector is None:
            continue
        for target in rep.get("targets", []):
            for fp in target.get("fieldPaths", []):
                selectors[(target["select"]["kind"], fp.split("[name=", 1)[1].split("]", 1)[0])] = selector
    return selectors


def webhook_configurations(manifests: Path, base_url: str, ca_bundle: str) -> list[dict]:
    """Kueue's published webhook configurations, served at ``base_url``."""
    selectors = _namespace_selectors(yaml.safe_load((manifests / "kustomization.yaml").read_text()))
    out = []
    for doc in _docs(manifests / "manifests.yaml"):
        if doc.get("kind") not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        doc["metadata"] = {"name": NAME_PREFIX + doc["metadata"]["name"]}
        for wh in doc["webhooks"]:
            path = wh["clientConfig"]["service"]["path"]
            wh["clientConfig"] = {"url": base_url + path, "caBundle": ca_bundle}
            if (doc["kind"], wh["name"]) in selectors:
                wh["namespaceSelector"] = selectors[(doc["kind"], wh["name"])]
        out.append(doc)
    return out


def conversion_patches(manifests: Path, base_url: str, ca_bundle: str) -> dict[str, dict]:
    """CRD name -> ``spec.conversion`` for the patches Kueue's CRD kustomization applies."""
    kustomization = yaml.safe_load((manifests / "crd-kustomization.yaml").read_text())
    out = {}
    for entry in kustomization.get("patches", []):
        doc = yaml.safe_load((manifests / "crd-patches" / Path(entry["path"]).name).read_text())
        conv = doc["spec"]["conversion"]
        path = conv["webhook"]["clientConfig"]["service"].get("path", "/convert")
        conv["webhook"]["clientConfig"] = {"url": base_url + path, "caBundle": ca_bundle}
        out[doc["metadata"]["name"]] = conv
    return out


# ------------------------------------------------------------------ certificates


@dataclass
class KueuePKI:
    ca_pem: bytes
    ca_key_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_pem).decode()

    @classmethod
    def create(cls) -> "KueuePKI":
        ca = TinyCA(CA_NAME, use_rsa=True, validity=CERT_VALIDITY, dns=(CA_NAME,))
        leaf = ca.issue(f"{SERVICE}.{NAMESPACE}.svc", server=True, dns=(f"{SERVICE}.{NAMESPACE}.svc",), ips=("127.0.0.1",))
        return cls(ca.pair.cert_pem, ca.pair.key_pem, leaf.cert_pem, leaf.key_pem)

    def write_cert_dir(self, cert_dir: Path) -> None:
        cert_dir.mkdir(parents=True, exist_ok=True)
        for name, data in (("ca.crt", self.ca_pem), ("tls.crt", self.cert_pem), ("tls.key", self.key_pem)):
            (cert_dir / name).write_bytes(data)
        (cert_dir / "tls.key").chmod(0o600)

    def secret(self) -> dict:
        data = {"ca.crt": self.ca_pem, "ca.key": self.ca_key_pem, "tls.crt": self.cert_pem, "tls.key": self.key_pem}
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": NAMESPACE},
            "type": "kubernetes.io/tls",
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }


# ------------------------------------------------------------------------ set-up


def _apply(h: BlockingFetcher, collection: str, body: dict) -> None:
    """Create, or replace what is there (a restarted plane keeps its objects)."""
    name = body["metadata"]["name"]
    r = h.post(collection, json=body)
    if r.status == 409:
        cur = h.get(f"{collection}/{name}").json()
        body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        r = h.put(f"{collection}/{name}", json=body)
    if r.status >= 300:
        raise RuntimeError(f"{collection}/{name}: {r.status} {r.text()[:500]}")


def missing_crds(h: BlockingFetcher, manifests: Path) -> list[Path]:
    """Kueue's published CRDs that the plane does not have yet (it installs only
    those the operator uses; Kueue watches MultiKueue's and others too)."""
    out = []
    for f in sorted((manifests / "crds").glob("*.yaml")):
        name = next(d["metadata"]["name"] for d in _docs(f) if d.get("kind") == "CustomResourceDefinition")
        if h.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").status == 404:
            out.append(f)
    return out


def install(h: BlockingFetcher, manifests: Path, pki: KueuePKI, webhook_port: int) -> list[str]:
    """Namespace, Secret, webhook configurations and CRD conversion, before Kueue starts.

    Returns the names of the CRDs that now convert through Kueue.
    """
    base_url = f"https://127.0.0.1:{webhook_port}"
    _apply(h, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    _apply(h, f"/api/v1/namespaces/{NAMESPACE}/secrets", pki.secret())
    converted = []
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for name, conversion in conversion_patches(manifests, base_url, pki.ca_bundle).items():
        r = h.get(f"{crds}/{name}")
        if r.status == 404:
            continue  # not installed here (e.g. MultiKueueCluster)
        crd = r.json()
        crd["spec"]["conversion"] = conversion
        r = h.put(f"{crds}/{name}", json=crd)
        if r.status >= 300:
            raise RuntimeError(f"conversion webhook on CRD {name}: {r.status} {r.text()[:500]}")
        converted.append(name)
    for cfg in webhook_configurations(manifests, base_url, pki.ca_bundle):
        plural = cfg["kind"].lower() + "s"
        _apply(h, f"/apis/admissionregistration.k8s.io/v1/{plural}", cfg)
    return converted


def webhooks_answer(h: BlockingFetcher) -> bool:
    """A server-side dry run through Kueue's mutating and validating webhooks."""
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "kueue-readiness-probe"},
    }
    r = h.post("/apis/kueue.x-k8s.io/v1beta2/resourceflavors?dryRun=All", json=body)
    return r.status in (200, 201)
