"""kaiwo-ctrl as users install and run it, on a simulated cluster.

The order matters and is the order a user follows: install config/default,
start the operator (as its ServiceAccount), apply the samples, then watch a
KaiwoJob run. The real Kueue controller manager admits the workloads (see
:mod:`e2e.simcluster`): it creates each Workload, reserves quota in the
ClusterQueue the operator wrote, and unsuspends the Job.
"""

from __future__ import annotations

import pathlib

import httpx
import pytest

from e2e.conftest import (
    ROOT, condition, forbidden_lines, get, wait_for,
)
from support.tokens import bearer, grant_model_user, service_account_token

pytestmark = pytest.mark.e2e

NS = "kaiwo-samples"
KAIWO = "/apis/kaiwo.silogen.ai/v1alpha1"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"


def kaiwo_status(admin, plural: str, name: str) -> str:
    obj = get(admin, f"{KAIWO}/namespaces/{NS}/{plural}/{name}") or {}
    return (obj.get("status") or {}).get("status") or ""


def owned_children(admin, path: str, owner_uid: str) -> list[dict]:
    items = (get(admin, path) or {}).get("items", [])
    return [o for o in items if any(r.get("uid") == owner_uid for r in o["metadata"].get("ownerReferences") or [])]


def test_apply_default_and_server_dry_run(kubectl, installed, deployed, admin):
    """config/default installs for real, and a server-side dry run of it then succeeds."""
    assert "deployment.apps/kaiwo-controller-manager" in installed
    out = kubectl("apply", "-k", str(ROOT / "config" / "default"), "--dry-run=server")
    assert "(server dry run)" in out.stdout
    for kind, names in {
        "customresourcedefinitions.apiextensions.k8s.io": ["kaiwojobs.kaiwo.silogen.ai", "kaiwoconfigs.config.kaiwo.silogen.ai"],
        "clusterroles.rbac.authorization.k8s.io": ["kaiwo-manager-role", "kaiwo-kaiwojob-editor-role"],
    }.items():
        for name in names:
            kubectl("get", kind, name)
    sa = deployed["service_account"]["metadata"]
    kubectl("get", "serviceaccount", sa["name"], "-n", sa["namespace"])


def test_operator_runs_as_its_service_account(operator, admin, deployed):
    """Probes answer, the leader Lease is held in the operator's namespace, the default KaiwoConfig exists."""
    import httpx

    assert httpx.get(f"http://127.0.0.1:{operator.health_port}/healthz", timeout=5).status_code == 200
    # secure metrics: HTTPS, a token, and the kaiwo-metrics-reader role
    url = f"https://127.0.0.1:{operator.metrics_port}/metrics"
    assert httpx.get(url, timeout=5, verify=False).status_code == 401  # self-signed certificate
    import yaml

    token = yaml.safe_load(pathlib.Path(operator.env["KUBECONFIG"]).read_text())["users"][0]["user"]["token"]
    sa = deployed["service_account"]["metadata"]
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "e2e-metrics-reader"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kaiwo-metrics-reader"},
               "subjects": [{"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}]}
    assert admin.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json=binding).status_code in (201, 409)

    def scraped():
        r = httpx.get(url, timeout=5, verify=False, headers={"Authorization": f"Bearer {token}"})
        return r if r.status_code == 200 else None

    metrics = wait_for(scraped, 90, "an authorized metrics scrape")
    assert "rest_client_requests_total" in metrics.text
    ns = deployed["deployment"]["metadata"]["namespace"]
    lease = wait_for(lambda: get(admin, f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/83fc2279.silogen.ai"), 60, "leader Lease")
    assert lease["spec"]["holderIdentity"]
    wait_for(lambda: get(admin, "/apis/config.kaiwo.silogen.ai/v1alpha1/kaiwoconfigs/kaiwo"), 60, "KaiwoConfig kaiwo")
    # the identity really is the ServiceAccount, not an admin
    who = operator.env["KUBECONFIG"]
    assert "token" in pathlib.Path(who).read_text()


def test_proxy_runs_apart_as_its_own_service_account(proxy, deployed, admin):
    """The operator serves no proxy; the proxy process, as kaiwo-proxy, serves the in-cluster listener
    and opens the Gateway listener (it read the route key with its own Role), which refuses a request
    without a route token."""
    assert deployed["proxy"]["service_account"]["metadata"]["name"] == "kaiwo-proxy"
    assert "--proxy-bind-address=0" in deployed["container"]["args"]
    listing = f"http://127.0.0.1:{proxy.ports['http']}/openai/v1/models"
    r = httpx.get(listing, timeout=5)
    assert r.status_code == 401, "the shipped proxy checks its callers (--proxy-auth kubernetes)"
    # a known caller with no grant: its (empty) listing, through the proxy's own TokenReview/SubjectAccessReview
    r = httpx.get(listing, headers=bearer(service_account_token(admin, "default", "nobody")), timeout=5)
    assert r.status_code == 200 and r.json() == {"object": "list", "data": []}, r.text

    def gateway_refuses():
        try:
            r = httpx.post(f"http://127.0.0.1:{proxy.ports['gateway']}/kaiwo-samples/m/v1/completions", json={}, timeout=5)
        except httpx.TransportError:
            return None  # not open yet: the route key is being read
        return r

    r = wait_for(gateway_refuses, 60, "the proxy's Gateway listener")
    assert r.status_code == 404


def test_samples_converge(operator, kubectl, admin):
    """The queue config first (the cluster as an admin prepares it), then the workloads."""
    kubectl("apply", "-f", str(ROOT / "config" / "samples" / "namespace.yaml"))
    kubectl("apply", "-f", str(ROOT / "config" / "samples" / "kaiwo_v1alpha1_kaiwoqueueconfig.yaml"))

    def nodes_pooled():
        nodes = get(admin, "/api/v1/nodes")["items"]
        pools = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get("kaiwo/nodepool") for n in nodes}
        return all(pools.values()) and pools

    pools = wait_for(nodes_pooled, 90, "the operator to label the node pools")
    assert pools == {
        "sim-gpu-0": "amd-mi300x-8gpu-57core-460gi",
        "sim-gpu-1": "amd-mi300x-8gpu-57core-460gi",
        "sim-cpu-0": "cpu-only-0gpu-14core-57gi",
    }
    cq = wait_for(lambda: get(admin, f"{KUEUE}/clusterqueues/kaiwo"), 30, "ClusterQueue kaiwo")
    assert cq["metadata"]["ownerReferences"][0]["kind"] == "KaiwoQueueConfig"
    want = {"amd-mi300x-8gpu-57core-460gi", "cpu-only-0gpu-14core-57gi"}
    wait_for(
        lambda: want <= {f["metadata"]["name"] for f in get(admin, f"{KUEUE}/resourceflavors")["items"]},
        60,
        f"ResourceFlavors {sorted(want)}",
    )

    out = kubectl("apply", "-k", str(ROOT / "config" / "samples"))
    assert "kaiwojob.kaiwo.silogen.ai/hello-job" in out.stdout

    job = get(admin, f"{KAIWO}/namespaces/{NS}/kaiwojobs/hello-job")
    svc = get(admin, f"{KAIWO}/namespaces/{NS}/kaiwoservices/hello-service")
    batch = wait_for(lambda: owned_children(admin, f"/apis/batch/v1/namespaces/{NS}/jobs", job["metadata"]["uid"]), 90, "the KaiwoJob's Job")
    assert batch[0]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "kaiwo"
    wait_for(lambda: owned_children(admin, f"/apis/apps/v1/namespaces/{NS}/deployments", svc["metadata"]["uid"]), 90, "the KaiwoService's Deployment")
    wait_for(lambda: get(admin, f"{KUEUE}/namespaces/{NS}/localqueues/kaiwo"), 60, "LocalQueue kaiwo")
    wait_for(lambda: kaiwo_status(admin, "kaiwoservices", "hello-service") in ("PENDING", "STARTING", "RUNNING", "READY"), 60, "KaiwoService status (not ERROR)")


def kueue_workloads(admin, owner_uid: str) -> list[dict]:
    """The Workloads Kueue created for an object (owned by it)."""
    items = get(admin, f"{KUEUE}/namespaces/{NS}/workloads")["items"]
    return [w for w in items if any(r.get("uid") == owner_uid for r in w["metadata"].get("ownerReferences") or [])]


def workload_when(admin, name: str, cond: str, what: str) -> dict:
    """The Workload once its condition ``cond`` is True."""
    return wait_for(
        lambda: (w := get(admin, f"{KUEUE}/namespaces/{NS}/workloads/{name}")) and condition(w, cond).get("status") == "True" and w,
        90,
        what,
    )


def test_kaiwojob_runs_and_completes_on_simulated_nodes(operator, admin):
    """Kueue creates the Job's Workload, reserves quota in ClusterQueue kaiwo,
    admits it and unsuspends the Job (injecting the flavor's node labels). Then
    the real job controller creates the Pod, the kaiwo-scheduler binds it to a
    kwok GPU node, kwok runs it (Ready for a few seconds) and completes it."""
    job = get(admin, f"{KAIWO}/namespaces/{NS}/kaiwojobs/hello-job")
    batch = owned_children(admin, f"/apis/batch/v1/namespaces/{NS}/jobs", job["metadata"]["uid"])[0]
    wl = wait_for(lambda: kueue_workloads(admin, batch["metadata"]["uid"]), 90, "Kueue to create the Job's Workload")[0]
    assert wl["metadata"]["name"].startswith("job-hello-job-"), wl["metadata"]["name"]
    wl = workload_when(admin, wl["metadata"]["name"], "Admitted", "Kueue to admit the Workload")
    assert condition(wl, "QuotaReserved").get("status") == "True"
    assert wl["status"]["admission"]["clusterQueue"] == "kaiwo"
    seen: list[str] = []

    def status_is(want: str):
        s = kaiwo_status(admin, "kaiwojobs", "hello-job")
        if not seen or seen[-1] != s:
            seen.append(s)
        return s == want

    wait_for(lambda: status_is("RUNNING"), 120, "KaiwoJob RUNNING")
    unsuspended = get(admin, f"/apis/batch/v1/namespaces/{NS}/jobs/{batch['metadata']['name']}")
    assert unsuspended["spec"]["suspend"] is False
    flavor = wl["status"]["admission"]["podSetAssignments"][0]["flavors"]["amd.com/gpu"]
    pods = get(admin, f"/api/v1/namespaces/{NS}/pods")["items"]
    pod = next(p for p in pods if p["metadata"]["labels"].get("job-name") == batch["metadata"]["name"])
    assert pod["spec"]["schedulerName"] == "kaiwo-scheduler"
    assert pod["spec"]["nodeSelector"].get("kaiwo/nodepool") == flavor, "Kueue injects the flavor's node labels"
    assert pod["spec"]["nodeName"].startswith("sim-gpu-"), "a GPU pod lands on a GPU node"
    wait_for(lambda: status_is("COMPLETE"), 120, "KaiwoJob COMPLETE")
    assert "RUNNING" in seen and seen[-1] == "COMPLETE", seen
    final = get(admin, f"{KAIWO}/namespaces/{NS}/kaiwojobs/hello-job")["status"]
    assert final.get("startTime") and final.get("completionTime")

    def reasons() -> set[str]:
        return {e["reason"] for e in get(admin, f"/api/v1/namespaces/{NS}/events")["items"] if e["involvedObject"]["name"] == "hello-job"}

    # Events are written in the background, after the status write that reports the change
    wait_for(lambda: {"WorkloadPending", "WorkloadRunning", "WorkloadComplete"} <= reasons(), 30,
             "the KaiwoJob's Pending, Running and Complete Events")
    finished = workload_when(admin, wl["metadata"]["name"], "Finished", "Kueue to mark the Workload Finished (its quota released)")
    assert finished["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == batch["metadata"]["uid"]


def test_kaiwoservice_becomes_ready(operator, admin):
    """Kueue's deployment and pod integrations: the Pod is created gated, Kueue
    admits a Workload for it and lifts the gate, then it runs on a kwok node."""
    svc = get(admin, f"{KAIWO}/namespaces/{NS}/kaiwoservices/hello-service")

    def service_pods():
        pods = get(admin, f"/api/v1/namespaces/{NS}/pods")["items"]
        return [p for p in pods if (p["metadata"].get("labels") or {}).get("kaiwo.silogen.ai/run-id") == svc["metadata"]["uid"]]

    pods = wait_for(service_pods, 90, "the KaiwoService's Pod")
    for pod in pods:
        assert pod["metadata"]["labels"].get("kueue.x-k8s.io/managed") == "true", pod["metadata"]["labels"]
        wl = wait_for(lambda pod=pod: kueue_workloads(admin, pod["metadata"]["uid"]), 90, "Kueue to create the Pod's Workload")[0]
        workload_when(admin, wl["metadata"]["name"], "Admitted", "Kueue to admit the Pod's Workload")
    wait_for(lambda: kaiwo_status(admin, "kaiwoservices", "hello-service") == "READY", 120, "KaiwoService READY")
    for pod in service_pods():
        assert not pod["spec"].get("schedulingGates"), "Kueue lifted its admission gate"


def test_queue_config_becomes_ready(operator, admin):
    wait_for(
        lambda: (get(admin, f"{KAIWO}/kaiwoqueueconfigs/kaiwo").get("status") or {}).get("status") == "READY",
        90,
        "KaiwoQueueConfig READY",
    )


def test_proxy_serves_the_sample_model_listing(proxy, admin):
    """The proxy's own ServiceAccount may list and watch Models: the sample Model appears in the listing
    of a caller its namespace's kaiwo-model-user binding allows."""
    grant_model_user(admin, "kaiwo-samples", "kaiwo-samples", "model-user", binding="e2e-model-user")
    auth = bearer(service_account_token(admin, "kaiwo-samples", "model-user"))

    def listed():
        r = httpx.get(f"http://127.0.0.1:{proxy.ports['http']}/openai/v1/models", headers=auth, timeout=5)
        return r.status_code == 200 and any("qwen2-500m-cpu" in m["id"] for m in r.json()["data"]) and r

    wait_for(listed, 60, "the sample Model in the proxy's listing")


def test_no_forbidden_in_proxy_log(proxy):
    """The proxy's generated roles are enough for what it did above (no 403)."""
    bad = forbidden_lines(proxy.text())
    assert not bad, "\n".join(bad[:20])
    assert "Traceback" not in proxy.text(), proxy.text()[-4000:]


def test_no_forbidden_in_operator_log(operator):
    """The generated RBAC is enough for everything above (owner references with
    blockOwnerDeletion included: the apiserver enforces OwnerReferencesPermissionEnforcement)."""
    bad = forbidden_lines(operator.text())
    assert not bad, "\n".join(bad[:20])
    assert "Traceback" not in operator.text(), operator.text()[-4000:]
