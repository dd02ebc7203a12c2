"""charts/kaiwo-ctrl has one source of truth: the kustomize tree.

1. The committed chart is what ``hack/gen-chart`` generates from config/ now (drift).
2. ``helm template`` with the default values renders the objects
   ``kubectl kustomize config/default`` (and, with monitoring on,
   ``config/monitoring``) renders, except for what values or Helm itself
   explain, each listed in :func:`normalize`.
3. ``helm lint --strict`` passes, and each value changes what it says.

helm is built from its Go module by hack/envtest/build-helm.sh (cached).
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import REPO

ROOT = REPO
CHART = ROOT / "charts" / "kaiwo-ctrl"
KUBECTL = Path(sys.executable).parent / "kubectl"
#: Labels Helm's chart adds to every object (not to selectors or Pod templates).
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance")
CLUSTER_SCOPED = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}


def _generator():
    spec = importlib.util.spec_from_file_location("gen_chart", ROOT / "hack" / "chart" / "gen_chart.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def helm() -> str:
    out = subprocess.run([str(ROOT / "hack" / "envtest" / "build-helm.sh")], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def helm_template(helm: str, *args: str) -> list[dict[str, Any]]:
    out = subprocess.run([helm, "template", "kaiwo", str(CHART), "--namespace", "kaiwo-system", *args],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def kustomize(path: str) -> list[dict[str, Any]]:
    out = subprocess.run([str(KUBECTL), "kustomize", str(ROOT / path)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_key(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    out = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert len(out) == len(docs), "two objects of the same kind and name"
    return out


def normalize(obj: dict[str, Any], *, chart: bool) -> dict[str, Any]:
    """What values or Helm explain, removed from either side."""
    obj = json.loads(json.dumps(obj))
    md = obj["metadata"]
    labels = md.get("labels") or {}
    for k in HELM_LABELS:  # Helm's own labels
        labels.pop(k, None)
    if not labels:
        md.pop("labels", None)
    if obj["kind"] in CLUSTER_SCOPED:  # kustomize puts a namespace on kinds it does not know
        md.pop("namespace", None)
    annotations = md.get("annotations") or {}
    annotations.pop("helm.sh/resource-policy", None)  # crds.keep
    if not annotations:
        md.pop("annotations", None)
    if obj["kind"] == "Deployment" and chart:
        c = obj["spec"]["template"]["spec"]["containers"][0]
        # logLevel / logFormat: the chart passes the operator's (and the proxy's) own defaults explicitly
        c["args"] = [a for a in c["args"] if a not in ("--log-level=info", "--log-format=json")]
    if obj["kind"] == "ConfigMap" and obj.get("data"):  # (the AIM Gateway list ships empty)
        # the model config (comments differ) and the dashboards compare parsed
        obj["data"] = {k: (json.loads(v) if k.endswith(".json") else yaml.safe_load(v)) for k, v in obj["data"].items()}
    return obj


def assert_same(chart: list[dict[str, Any]], kust: list[dict[str, Any]]) -> None:
    got = {k: normalize(v, chart=True) for k, v in by_key(chart).items()}
    want = {k: normalize(v, chart=False) for k, v in by_key(kust).items()}
    assert sorted(got) == sorted(want), f"only in chart: {set(got) - set(want)}; only in kustomize: {set(want) - set(got)}"
    diffs = []
    for key in sorted(want):
        if got[key] != want[key]:
            a, b = yaml.safe_dump(want[key]).splitlines(True), yaml.safe_dump(got[key]).splitlines(True)
            diffs.append("".join(difflib.unified_diff(a, b, f"kustomize/{key}", f"helm/{key}")))
    assert not diffs, "\n".join(diffs)[:20000]


def test_committed_chart_is_generated_from_config():
    gen = _generator()
    diffs = gen.stale(gen.generate())
    assert not diffs, "charts/kaiwo-ctrl is stale: run hack/gen-chart\n" + "".join(diffs)[:8000]


def test_stale_chart_is_detected(tmp_path):
    """The drift check sees an edited, a missing and a leftover generated file."""
    gen = _generator()
    files = gen.generate()
    gen.write(files, tmp_path)
    assert gen.stale(files, tmp_path) == []
    (tmp_path / "values.yaml").write_text(files["values.yaml"].replace("replicas: 1", "replicas: 3"))
    (tmp_path / "Chart.yaml").unlink()
    (tmp_path / "templates" / "rbac" / "role-gone.yaml").write_text(gen.MARKER + "\n")
    stale = "".join(gen.stale(files, tmp_path))
    assert "+replicas: 1" in stale and "generated/Chart.yaml" in stale and "committed/templates/rbac/role-gone.yaml" in stale


def test_default_values_render_what_kustomize_renders(helm):
    kust = [d for d in kustomize("config/default") if d["kind"] != "Namespace"]  # helm install --create-namespace
    assert_same(helm_template(helm), kust)


def test_monitoring_values_render_config_monitoring(helm):
    on = ["--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.podMonitor.enabled=true",
          "--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.dashboards.enabled=true"]
    kust = [d for d in kustomize("config/default") if d["kind"] != "Namespace"] + kustomize("config/monitoring")
    assert_same(helm_template(helm, *on), kust)


@pytest.mark.parametrize("extra", [[], ["--set", "metrics.serviceMonitor.enabled=true,metrics.podMonitor.enabled=true,"
                                        "metrics.prometheusRule.enabled=true,metrics.dashboards.enabled=true"]])
def test_helm_lint_strict(helm, extra):
    out = subprocess.run([helm, "lint", "--strict", str(CHART), *extra], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def _deployment(docs, name="kaiwo-controller-manager"):
    dep = by_key(docs)[("Deployment", name)]
    return dep, dep["spec"]["template"]["spec"], dep["spec"]["template"]["spec"]["containers"][0]


def test_values_change_what_they_say(helm, tmp_path):
    values = {
        "image": {"repository": "registry.example/kaiwo-ctrl", "tag": "9.9.9", "pullPolicy": "Always"},
        "replicas": 3, "resources": {"requests": {"cpu": "1"}}, "logLevel": "debug", "logFormat": "console",
        "proxy": {"enabled": True, "port": 8100, "replicas": 5, "service": {"type": "ClusterIP", "port": 8080},
                  "resources": {"limits": {"memory": "3Gi"}}, "extraArgs": ["--proxy-request-timeout=10m"],
                  "nodeSelector": {"pool": "proxy"}, "priorityClassName": "proxy-critical"},
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        "priorityClassName": "system-cluster-critical", "imagePullSecrets": [{"name": "pull"}],
        "extraArgs": ["--workers=32"], "crds": {"keep": False},
    }
    f = tmp_path / "values.yaml"
    f.write_text(yaml.safe_dump(values))
    docs = helm_template(helm, "-f", str(f), "--namespace", "team-ai")
    dep, pod, c = _deployment(docs)
    assert dep["spec"]["replicas"] == 3 and dep["metadata"]["namespace"] == "team-ai"
    assert c["image"] == "registry.example/kaiwo-ctrl:9.9.9" and c["imagePullPolicy"] == "Always"
    assert {"name": "KAIWO_CTRL_IMAGE", "value": "registry.example/kaiwo-ctrl:9.9.9"} in c["env"]
    assert c["resources"] == {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}  # merged over the defaults
    assert {"--leader-elect", "--log-level=debug", "--log-format=console", "--workers=32"} <= set(c["args"])
    # the operator serves no proxy: that is the proxy Deployment's
    assert {"--proxy-bind-address=0", "--proxy-gateway-bind-address=0"} <= set(c["args"])
    assert not {p["name"] for p in c["ports"]} & {"proxy", "proxy-gateway"}
    for key in ("nodeSelector", "tolerations", "affinity", "priorityClassName", "imagePullSecrets"):
        assert pod[key] == values[key], key
    pdep, ppod, pc = _deployment(docs, "kaiwo-proxy")
    assert pdep["spec"]["replicas"] == 5 and pc["image"] == c["image"] and pc["command"] == ["kaiwo-ctrl", "proxy"]
    assert {"--proxy-bind-address=:8100", "--proxy-request-timeout=10m", "--log-level=debug"} <= set(pc["args"])
    assert "--workers=32" not in pc["args"]
    assert {"name": "proxy", "containerPort": 8100, "protocol": "TCP"} in pc["ports"]
    assert pc["resources"] == {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "3Gi"}}
    assert ppod["nodeSelector"] == {"pool": "proxy"} and ppod["priorityClassName"] == "proxy-critical"
    assert ppod["imagePullSecrets"] == values["imagePullSecrets"] and ppod["serviceAccountName"] == "kaiwo-proxy"
    proxy = by_key(docs)[("Service", "kaiwo-proxy")]["spec"]
    assert proxy["type"] == "ClusterIP" and proxy["ports"][0]["port"] == 8080
    gateway = by_key(docs)[("Service", "kaiwo-proxy-gateway")]["spec"]
    assert gateway["type"] == "ClusterIP" and [(p["port"], p["targetPort"]) for p in gateway["ports"]] == [(8001, "proxy-gateway")]
    crd = by_key(docs)[("CustomResourceDefinition", "kaiwojobs.kaiwo.silogen.ai")]
    assert "helm.sh/resource-policy" not in (crd["metadata"].get("annotations") or {})
    # the admission policies fence the ServiceAccount of the release's namespace
    policy = by_key(docs)[("ValidatingAdmissionPolicy", "kaiwo-owned-children")]
    assert "system:serviceaccount:team-ai:kaiwo-controller-manager" in json.dumps(policy)
    assert "kaiwo-system" not in json.dumps([d for d in docs if d["kind"] != "CustomResourceDefinition"])


def test_disabling_proxy_webhooks_crds_and_leader_election(helm):
    docs = helm_template(helm, "--set", "proxy.enabled=false,webhooks.enabled=false,crds.install=false,"
                                        "leaderElection.enabled=false,metrics.secure=false")
    kinds = by_key(docs)
    assert ("Service", "kaiwo-proxy") not in kinds and ("Service", "kaiwo-webhook-service") not in kinds
    # proxy.enabled=false drops the proxy's Deployment, its Services and its identity
    assert not [k for k in kinds if "proxy" in k[1]], [k for k in kinds if "proxy" in k[1]]
    assert not {k for k in kinds if k[0] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "CustomResourceDefinition")}
    _, _, c = _deployment(docs)
    assert "--proxy-bind-address=0" in c["args"]
    assert not [a for a in c["args"] if a.startswith(("--webhook-bind-address", "--leader-elect", "--metrics-secure"))]
    assert {p["name"] for p in c["ports"]} == {"metrics", "health"}


@pytest.mark.parametrize("bad, message", [
    (["--set", "replicas=2,leaderElection.enabled=false"], "needs leaderElection.enabled"),
    (["--set", "logFormat=text"], "logFormat must be"),
    (["--set", "proxy.service.type=ExternalName"], "proxy.service.type must be ClusterIP"),
    # the in-cluster listener serves every namespace's Models: never outside the cluster
    (["--set", "proxy.service.type=LoadBalancer"], "proxy.service.type must be ClusterIP, not LoadBalancer"),
    (["--set", "proxy.service.type=NodePort"], "proxy.service.type must be ClusterIP, not NodePort"),
    (["--set", "proxy.mode=sidecar"], "proxy.mode must be internal or external, not sidecar"),
])
def test_invalid_values_are_refused(helm, bad, message):
    out = subprocess.run([helm, "template", "kaiwo", str(CHART), *bad], capture_output=True, text=True, check=False)
    assert out.returncode != 0 and message in out.stderr, out.stderr


def test_proxy_mode_external_reaches_the_operator_and_drops_the_proxy(helm, tmp_path):
    from kaiwo_ctrl.serving.model.config import load_config

    def model_config(docs: list[dict[str, Any]]) -> str:
        return str(by_key(docs)[("ConfigMap", "kaiwo-model-config")]["data"]["config.yaml"])

    internal = helm_template(helm)
    assert "proxy" not in yaml.safe_load(model_config(internal))  # the default renders what kustomize renders
    assert ("Deployment", "kaiwo-proxy") in by_key(internal)
    docs = helm_template(helm, "--set", "proxy.mode=external")
    (tmp_path / "config.yaml").write_text(model_config(docs))
    assert load_config(tmp_path / "config.yaml").proxy_mode == "external"  # the operator reads the mode
    # no proxy Deployment, Services or identity: a Gateway routes to the Models' headless Services
    kinds = by_key(docs)
    assert not [k for k in kinds if "proxy" in k[1]], [k for k in kinds if "proxy" in k[1]]
    _, _, c = _deployment(docs)
    assert "--proxy-bind-address=0" in c["args"]  # nor does the operator serve one


#: Sections of a KubeAI chart values file (its keys for the system config), pasted unchanged.
KUBEAI_VALUES = """
secrets:
  huggingface:
    create: false
    name: my-hf-token
  aws:
    create: true
    name: ""
resourceProfiles:
  nvidia-gpu-l4:
    imageName: nvidia-gpu
    limits:
      nvidia.com/gpu: "1"
    requests:
      nvidia.com/gpu: "1"
      cpu: "6"
      memory: 24Gi
    nodeSelector:
      cloud.google.com/gke-accelerator: nvidia-l4
cacheProfiles:
  standard-filestore:
    sharedFilesystem:
      storageClassName: standard-rwx
modelServers:
  VLLM:
    images:
      default: vllm/vllm-openai:v0.11.0
modelAutoscaling:
  interval: 15s
  timeWindow: 5m
  stateConfigMapName: kubeai-autoscaler-state
"""


def test_kubeai_values_file_becomes_the_model_config(helm, tmp_path):
    from kaiwo_ctrl.serving.model.config import load_config

    f = tmp_path / "kubeai-values.yaml"
    f.write_text(KUBEAI_VALUES)
    docs = helm_template(helm, "-f", str(f))
    text = by_key(docs)[("ConfigMap", "kaiwo-model-config")]["data"]["config.yaml"]
    rendered = yaml.safe_load(text)
    pasted = yaml.safe_load(KUBEAI_VALUES)
    assert rendered["secretNames"] == {"huggingface": "my-hf-token"}  # KubeAI's secrets.<kind>.name; unnamed ones left out
    del pasted["secrets"]
    for key, value in pasted.items():
        for name, item in value.items():  # Helm merges maps: the pasted entries join the chart's defaults
            assert rendered[key][name] == item, f"{key}.{name}"
    assert rendered["modelRollouts"] == {"surge": 1} and "cpu" in rendered["resourceProfiles"]  # defaults stay
    (tmp_path / "config.yaml").write_text(text)
    config = load_config(tmp_path / "config.yaml")  # the operator accepts it
    assert config.autoscaling_interval == 15 and config.autoscaling_state_configmap == "kubeai-autoscaler-state"
    assert "nvidia-gpu-l4" in config.resource_profiles and "cpu" in config.resource_profiles
    assert config.secret_names["huggingface"] == "my-hf-token"


def test_cert_manager_issues_the_certificate_the_operator_serves(helm):
    from kaiwo_ctrl.webhooks import WebhookOptions

    docs = helm_template(helm, "--set", "webhooks.certManager.enabled=true", "--namespace", "ops")
    _, _, c = _deployment(docs)
    assert "--webhook-cert-source=secret" in c["args"]
    objs = by_key(docs)
    cert = objs[("Certificate", "kaiwo-webhook-server-cert")]["spec"]
    want = WebhookOptions(namespace="ops")  # the operator's defaults: Secret name and the names it is called at
    assert cert["secretName"] == want.secret_name
    assert tuple(cert["dnsNames"]) == want.tls().dns_names
    assert cert["issuerRef"] == {"name": "kaiwo-webhook-ca", "kind": "Issuer"}
    assert objs[("Issuer", "kaiwo-webhook-ca")]["spec"] == {"ca": {"secretName": "kaiwo-webhook-ca"}}
    assert objs[("Certificate", "kaiwo-webhook-ca")]["spec"]["isCA"] is True
    own = helm_template(helm, "--set", "webhooks.certManager.enabled=true,webhooks.certManager.issuerRef.name=corp-ca,"
                                      "webhooks.certManager.issuerRef.kind=ClusterIssuer")
    kinds = by_key(own)
    assert kinds[("Certificate", "kaiwo-webhook-server-cert")]["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer"}
    assert ("Issuer", "kaiwo-webhook-ca") not in kinds
    # self-managed (the default): no cert-manager objects, no flag
    default = helm_template(helm)
    assert not [d for d in default if d["apiVersion"].startswith("cert-manager.io")]
    assert "--webhook-cert-source=secret" not in _deployment(default)[2]["args"]


def test_service_monitor_follows_metrics_secure_and_prometheus_can_read(helm):
    on = "metrics.serviceMonitor.enabled=true"
    secure = by_key(helm_template(helm, "--set", on))
    assert secure[("ServiceMonitor", "kaiwo-controller-manager-metrics")]["spec"]["endpoints"][0]["scheme"] == "https"
    assert not [k for k in secure if k == ("ClusterRoleBinding", "kaiwo-prometheus-metrics-reader")]
    plain = by_key(helm_template(helm, "--set", f"{on},metrics.secure=false"))
    assert plain[("ServiceMonitor", "kaiwo-controller-manager-metrics")]["spec"]["endpoints"][0]["scheme"] == "http"
    bound = by_key(helm_template(helm, "--set", f"{on},metrics.serviceMonitor.prometheusServiceAccount.name=prom,"
                                                "metrics.serviceMonitor.prometheusServiceAccount.namespace=monitoring"))
    crb = bound[("ClusterRoleBinding", "kaiwo-prometheus-metrics-reader")]
    assert crb["roleRef"]["name"] == "kaiwo-metrics-reader" and ("ClusterRole", "kaiwo-metrics-reader") in bound
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": "prom", "namespace": "monitoring"}]
    out = subprocess.run([helm, "template", "kaiwo", str(CHART), "--set", "metrics.serviceMonitor.prometheusServiceAccount.name=prom"],
                         capture_output=True, text=True, check=False)
    assert out.returncode != 0 and "needs both name and namespace" in out.stderr


def test_explicit_secret_names_win_over_kubeai_secrets(helm):
    docs = helm_template(helm, "--set", "secrets.huggingface.name=from-kubeai,secretNames.huggingface=explicit,secretNames.aws=aws-creds")
    rendered = yaml.safe_load(by_key(docs)[("ConfigMap", "kaiwo-model-config")]["data"]["config.yaml"])
    assert rendered["secretNames"] == {"huggingface": "explicit", "aws": "aws-creds"}
