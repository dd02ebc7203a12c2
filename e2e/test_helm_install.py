"""kaiwo-ctrl installed the way platform engineers install operators: ``helm install``.

A simulated cluster of its own (the session's plane holds the kustomize install,
and one cluster holds one installation): helm (built from its Go module by
hack/envtest/build-helm.sh) installs charts/kaiwo-ctrl into it, then the operator
runs with the command, args, env and model config of the release's manifest,
as the release's ServiceAccount. As in test_deploy, there is no container
runtime: the chart is installed with ``replicas=0`` and the same program runs as
a local process (health, metrics, proxy and webhook ports on loopback). It must
become Ready, reconcile the samples as Kueue admits them, export the series the
dashboards read, and leave the CRDs behind on ``helm uninstall``.

The install-to-Ready time (``helm install`` start to the operator's /readyz) is
printed (run with -s to see it).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from e2e.conftest import (
    ROOT, Kubectl, OperatorProcess, forbidden_lines, get, operator_command, service_account_kubeconfig, wait_for,
)
from e2e.simcluster import start_sim_plane
from kaiwo_ctrl.local.controlplane import free_port
from support.admin import admin_http

pytestmark = pytest.mark.e2e

NS = "kaiwo-samples"
RELEASE_NS = "kaiwo-system"
KAIWO = "/apis/kaiwo.silogen.ai/v1alpha1"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def helm_binary() -> str:
    out = subprocess.run([str(ROOT / "hack" / "envtest" / "build-helm.sh")], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


class Helm:
    def __init__(self, kubeconfig: Path) -> None:
        self.binary, self.kubeconfig = helm_binary(), kubeconfig

    def __call__(self, *args: str) -> subprocess.CompletedProcess:
        out = subprocess.run([self.binary, "--kubeconfig", str(self.kubeconfig), *args],
                             capture_output=True, text=True, timeout=300, check=False)
        assert out.returncode == 0, f"helm {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
        return out


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    p = start_sim_plane(tmp_path_factory.mktemp("helm-plane"), run_ms=8000)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def admin(plane):
    with admin_http(plane) as h:
        yield h


@pytest.fixture(scope="module")
def release(plane, admin, tmp_path_factory):
    """Nodes first (a cluster has them before an operator), then helm install, then the operator process."""
    kubectl, helm = Kubectl(plane.kubeconfig), Helm(plane.kubeconfig)
    kubectl("apply", "-f", str(ROOT / "config" / "samples" / "nodes_kwok.yaml"))
    t0 = time.monotonic()
    helm("install", "kaiwo", str(ROOT / "charts" / "kaiwo-ctrl"), "--namespace", RELEASE_NS, "--create-namespace",
         "--set", "replicas=0,proxy.replicas=0", "--wait", "--timeout", "120s")
    installed = time.monotonic()
    docs = [d for d in yaml.safe_load_all(helm("get", "manifest", "kaiwo", "--namespace", RELEASE_NS).stdout) if d]
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "kaiwo-controller-manager")
    deployed = {"deployment": dep, "container": dep["spec"]["template"]["spec"]["containers"][0]}
    sa = next(d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "kaiwo-controller-manager")["metadata"]
    work = tmp_path_factory.mktemp("helm-operator")
    # the model config the release's ConfigMap holds (mounted at --model-config in a Pod)
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kaiwo-model-config")
    (work / "model-config.yaml").write_text(config["data"]["config.yaml"])
    kubeconfig = service_account_kubeconfig(plane, admin, sa["namespace"], sa["name"], work / "kubeconfig")
    health, metrics = free_port(), free_port()
    argv, env = operator_command(deployed, kubeconfig, health, metrics)
    argv = [f"--model-config={work / 'model-config.yaml'}" if a.startswith("--model-config=") else a for a in argv]
    proc = OperatorProcess(argv, env, work / "operator.log", health, metrics)

    def ready() -> bool:
        if proc.popen.poll() is not None:
            raise AssertionError(f"operator exited with {proc.popen.returncode}:\n{proc.text()[-4000:]}")
        return httpx.get(f"http://127.0.0.1:{health}/readyz", timeout=2).status_code == 200

    wait_for(ready, 120, "operator /readyz")
    done = time.monotonic()
    print(f"\n[helm e2e] install-to-Ready {done - t0:.1f}s (helm install --wait {installed - t0:.1f}s, "
          f"operator start to /readyz {done - installed:.1f}s)")
    yield {"kubectl": kubectl, "helm": helm, "proc": proc, "docs": docs, "sa": sa, "token_kubeconfig": kubeconfig}
    rc = proc.stop()
    assert rc == 0, f"operator exit code {rc}:\n{proc.text()[-4000:]}"


def kaiwo_status(admin, plural: str, name: str) -> str:
    return ((get(admin, f"{KAIWO}/namespaces/{NS}/{plural}/{name}") or {}).get("status") or {}).get("status") or ""


def test_release_is_deployed_with_the_chart_objects(release, admin):
    status = release["helm"]("status", "kaiwo", "--namespace", RELEASE_NS, "-o", "yaml").stdout
    assert yaml.safe_load(status)["info"]["status"] == "deployed"
    for name in ("kaiwojobs.kaiwo.silogen.ai", "models.kubeai.org"):
        crd = get(admin, f"{CRD}/{name}")
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    # the proxy is its own Deployment behind two Services; the operator serves no proxy
    assert get(admin, f"/apis/apps/v1/namespaces/{RELEASE_NS}/deployments/kaiwo-proxy") is not None
    for name in ("kaiwo-proxy", "kaiwo-proxy-gateway"):
        assert get(admin, f"/api/v1/namespaces/{RELEASE_NS}/services/{name}")["spec"]["type"] == "ClusterIP"
    assert "--proxy-bind-address=0" in next(d for d in release["docs"] if d["kind"] == "Deployment" and d["metadata"]["name"]
                                             == "kaiwo-controller-manager")["spec"]["template"]["spec"]["containers"][0]["args"]
    policy = get(admin, "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/kaiwo-owned-children")
    assert f"system:serviceaccount:{RELEASE_NS}:kaiwo-controller-manager" in str(policy["spec"])


def test_samples_reconcile(release, admin):
    kubectl = release["kubectl"]
    kubectl("apply", "-f", str(ROOT / "config" / "samples" / "namespace.yaml"))
    kubectl("apply", "-f", str(ROOT / "config" / "samples" / "kaiwo_v1alpha1_kaiwoqueueconfig.yaml"))
    wait_for(lambda: get(admin, f"{KUEUE}/clusterqueues/kaiwo"), 90, "ClusterQueue kaiwo")
    kubectl("apply", "-k", str(ROOT / "config" / "samples"))
    wait_for(lambda: kaiwo_status(admin, "kaiwojobs", "hello-job") in ("RUNNING", "COMPLETE"), 150,
             "KaiwoJob hello-job admitted by Kueue and RUNNING")
    wait_for(lambda: kaiwo_status(admin, "kaiwoservices", "hello-service") == "READY", 150, "KaiwoService READY")
    wait_for(lambda: (get(admin, f"{KAIWO}/kaiwoqueueconfigs/kaiwo").get("status") or {}).get("status") == "READY",
             90, "KaiwoQueueConfig READY")


def test_dashboard_series_are_exported(release, admin):
    """The series the workloads and serving dashboards read come from this running operator."""
    proc, sa = release["proc"], release["sa"]
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "helm-e2e-metrics-reader"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kaiwo-metrics-reader"},
               "subjects": [{"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}]}
    assert admin.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json=binding).status_code in (201, 409)
    token = yaml.safe_load(release["token_kubeconfig"].read_text())["users"][0]["user"]["token"]

    def scraped():
        r = httpx.get(f"https://127.0.0.1:{proc.metrics_port}/metrics", timeout=5, verify=False,
                      headers={"Authorization": f"Bearer {token}"})
        return r.status_code == 200 and 'kaiwo_workloads{kind="KaiwoJob"' in r.text and r.text

    text = wait_for(scraped, 60, "an authorized scrape with kaiwo_workloads")
    from prometheus_client.parser import text_string_to_metric_families

    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}
    desired = samples.get(("kaiwo_model_replicas", (("model_name", "qwen2-500m-cpu"), ("model_namespace", NS), ("state", "desired"))))
    assert desired == 1.0, sorted(k for k in samples if k[0] == "kaiwo_model_replicas")
    jobs = sum(v for (name, labels), v in samples.items() if name == "kaiwo_workloads" and ("kind", "KaiwoJob") in labels)
    assert jobs == 1.0  # hello-job, in whichever phase it is now


def test_no_forbidden_in_operator_log(release):
    bad = forbidden_lines(release["proc"].text())
    assert not bad, "\n".join(bad[:20])
    assert "Traceback" not in release["proc"].text(), release["proc"].text()[-4000:]


def test_uninstall_keeps_the_crds_and_the_objects(release, admin):
    proc = release["proc"]
    assert proc.stop() == 0, proc.text()[-4000:]  # before its ServiceAccount goes
    release["helm"]("uninstall", "kaiwo", "--namespace", RELEASE_NS, "--wait")
    assert get(admin, f"/apis/apps/v1/namespaces/{RELEASE_NS}/deployments/kaiwo-controller-manager") is None
    assert get(admin, f"{CRD}/kaiwojobs.kaiwo.silogen.ai") is not None  # crds.keep
    assert get(admin, f"{KAIWO}/namespaces/{NS}/kaiwojobs/hello-job") is not None
