"""The ValidatingAdmissionPolicies of config/policy on the real kube-apiserver:
the operator's ServiceAccount (impersonated, with exactly the generated RBAC)
may write only what it owns, and only kaiwo labels and taints of Nodes."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from support import eventually
from support.admin import admin_http

ROOT = Path(__file__).resolve().parents[2]
SA_USER = "system:serviceaccount:kaiwo-system:kaiwo-controller-manager"
AS_OPERATOR = {
    "Impersonate-User": SA_USER,
    "Impersonate-Group": ["system:serviceaccounts", "system:serviceaccounts:kaiwo-system", "system:authenticated"],
}
PATHS = {
    "ValidatingAdmissionPolicy": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "ConfigMap": "/api/v1/namespaces/kaiwo-system/configmaps",
}
OWNER = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob", "name": "j",
         "uid": "00000000-0000-0000-0000-000000000001", "controller": True}
FLAVORS = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"


def _headers(impersonate: bool) -> list[tuple[str, str]]:
    if not impersonate:
        return []
    out = [("Impersonate-User", SA_USER)]
    out += [("Impersonate-Group", g) for g in AS_OPERATOR["Impersonate-Group"]]
    return out


def _built() -> list[dict]:
    kubectl = str(Path(sys.executable).parent / "kubectl")
    out = subprocess.run([kubectl, "kustomize", str(ROOT / "config" / "default")], capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def policies(control_plane):
    docs = [d for d in _built() if d["kind"] in PATHS and (
        d["kind"].startswith("ValidatingAdmissionPolicy") or d["metadata"]["name"].startswith("kaiwo-manager-role")
        or d["metadata"]["name"] == "kaiwo-aim-gateways")]
    assert {d["kind"] for d in docs} == set(PATHS)
    # the param of aim-route-paths first: without it the policy refuses every HTTPRoute
    docs.sort(key=lambda d: d["kind"] != "ConfigMap")
    with admin_http(control_plane) as h:
        h.post("/api/v1/namespaces", json={"metadata": {"name": "kaiwo-system"}})  # 409 when another test made it
        for doc in docs:
            doc["metadata"].pop("namespace", None)
            r = h.patch(f"{PATHS[doc['kind']]}/{doc['metadata']['name']}", params={"fieldManager": "test", "force": "true"},
                        content=yaml.safe_dump(doc), headers={"Content-Type": "application/apply-patch+yaml"})
            assert r.status_code in (200, 201), r.text
    return docs


def _cm(name: str, owned: bool) -> dict:
    meta: dict = {"name": name}
    if owned:
        meta["ownerReferences"] = [OWNER]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def _refused(r, what: str = "kaiwo-ctrl may") -> bool:
    return r.status_code in (403, 422) and what in r.text


async def _wait_active(admin, namespace):
    """Bindings take effect asynchronously: wait until an unowned create is refused."""
    async def probe():
        name = f"probe-{uuid.uuid4().hex[:6]}"
        r = admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=_cm(name, False), headers=_headers(True))
        if r.status_code == 201:
            admin.delete(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
            return False
        return _refused(r)
    await eventually(probe, timeout=60, interval=0.5, what="the owned-children policy to be enforced")


async def test_operator_may_write_only_owned_children(policies, admin, namespace):
    await _wait_active(admin, namespace)
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    op = _headers(True)
    # unowned create: refused, with the policy's message
    r = admin.post(base, json=_cm("foreign", False), headers=op)
    assert _refused(r, "owned by a KaiwoJob, KaiwoService or Model"), r.text
    # owned: create, update and delete allowed
    r = admin.post(base, json=_cm("mine", True), headers=op)
    assert r.status_code == 201, r.text
    mine = r.json()
    mine["data"] = {"k": "v2"}
    assert admin.put(f"{base}/mine", json=mine, headers=op).status_code == 200
    # someone else's ConfigMap: the operator can neither take it over nor delete it
    assert admin.post(base, json=_cm("users", False)).status_code == 201
    users = admin.get(f"{base}/users").json()
    users["metadata"]["ownerReferences"] = [OWNER]
    assert _refused(admin.put(f"{base}/users", json=users, headers=op))
    # the policy binds only the operator: an admin is not limited
    assert admin.delete(f"{base}/users").status_code == 200
    # PVCs (the operator may delete them): only its own
    pvcs = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "users"},
           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    assert admin.post(pvcs, json=pvc).status_code == 201
    assert _refused(admin.delete(f"{pvcs}/users", headers=op))
    pvc["metadata"] = {"name": "mine", "ownerReferences": [OWNER]}
    assert admin.post(pvcs, json=pvc, headers=op).status_code == 201
    assert admin.delete(f"{pvcs}/mine", headers=op).status_code == 200
    # the same holds for Jobs
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}
    assert _refused(admin.post(f"/apis/batch/v1/namespaces/{namespace}/jobs", json=job, headers=op))
    job["metadata"]["ownerReferences"] = [OWNER]
    assert admin.post(f"/apis/batch/v1/namespaces/{namespace}/jobs", json=job, headers=op).status_code == 201


async def test_operator_may_write_only_labelled_kueue_objects(policies, admin, namespace):
    await _wait_active(admin, namespace)
    name = f"rf-{uuid.uuid4().hex[:6]}"
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": {}}
    assert _refused(admin.post(FLAVORS, json=flavor, headers=_headers(True)))
    flavor["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "kaiwo-ctrl"}
    assert admin.post(FLAVORS, json=flavor, headers=_headers(True)).status_code == 201
    assert admin.delete(f"{FLAVORS}/{name}", headers=_headers(True)).status_code == 200


async def test_operator_may_change_only_kaiwo_node_labels_and_taints(policies, admin, namespace):
    await _wait_active(admin, namespace)
    name = f"n-{uuid.uuid4().hex[:6]}"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"team": "a", "kaiwo/nodepool": "p"}}}
    assert admin.post("/api/v1/nodes", json=node).status_code == 201
    url = f"/api/v1/nodes/{name}"
    merge = {"Content-Type": "application/merge-patch+json"}

    def patch(body):
        return admin.patch(url, json=body, headers=[*merge.items(), *_headers(True)])

    # what the queue controller does: kaiwo/* labels and the GPU taint
    assert patch({"metadata": {"labels": {"kaiwo/nodepool": "q", "kaiwo/worker": "true"}}}).status_code == 200
    # (the apiserver may have put a not-ready taint on the new Node: it is kept)
    existing = admin.get(url).json()["spec"].get("taints") or []
    kaiwo_taint = {"key": "kaiwo.silogen.ai/gpu", "effect": "NoSchedule"}
    r = patch({"spec": {"taints": [*existing, kaiwo_taint]}})
    assert r.status_code == 200, r.text
    if existing:  # dropping someone else's taint is refused
        assert _refused(patch({"spec": {"taints": [kaiwo_taint]}}), "kaiwo taints")
    # anything else is refused
    assert _refused(patch({"metadata": {"labels": {"team": "b"}}}), "kaiwo/* labels")
    assert _refused(patch({"metadata": {"labels": {"team": None}}}), "kaiwo/* labels")
    assert _refused(patch({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}), "kaiwo/* labels")
    assert _refused(patch({"spec": {"taints": [*existing, kaiwo_taint, {"key": "evict-everything", "effect": "NoExecute"}]}}),
                    "kaiwo taints")
    assert _refused(patch({"spec": {"unschedulable": True}}), "kaiwo taints")
    assert _refused(patch({"metadata": {"annotations": {"x": "y"}}}), "annotations")
    labels = admin.get(url).json()["metadata"]["labels"]
    assert labels == {"team": "a", "kaiwo/nodepool": "q", "kaiwo/worker": "true"}
    admin.delete(url)


def _job(name: str, **meta) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, **meta},
            "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}


async def test_owner_is_checked_by_group_and_kind(policies, admin, namespace):
    """A made-up ownerReference in kaiwo.silogen.ai (or naming our kind in another
    group) is no owner; KaiwoJob, KaiwoService and Model are."""
    await _wait_active(admin, namespace)
    base, op = f"/api/v1/namespaces/{namespace}/configmaps", _headers(True)
    made_up = [("kaiwo.silogen.ai/v1alpha1", "Anything"), ("kaiwo.silogen.ai/v1", "Secret"),
               ("evil.example/v1", "KaiwoJob"), ("kaiwo.silogen.ai.evil.example/v1", "KaiwoJob"), ("v1", "Model")]
    for i, (api_version, kind) in enumerate(made_up):
        cm = _cm(f"made-up-{i}", False)
        cm["metadata"]["ownerReferences"] = [{**OWNER, "apiVersion": api_version, "kind": kind}]
        assert _refused(admin.post(base, json=cm, headers=op)), (api_version, kind)
    for i, (api_version, kind) in enumerate([("kaiwo.silogen.ai/v1alpha1", "KaiwoService"), ("kubeai.org/v1", "Model")]):
        cm = _cm(f"real-{i}", False)
        cm["metadata"]["ownerReferences"] = [{**OWNER, "apiVersion": api_version, "kind": kind}]
        assert admin.post(base, json=cm, headers=op).status_code == 201, (api_version, kind)


async def test_adopted_job_can_be_released_only_while_deleted(policies, admin, namespace):
    """The finalizer release of webhooks/jobdelete.py, sent as the operator with
    config/policy applied: allowed on an adopted Job being deleted (which then
    goes), refused before the delete, on an unlabelled Job, and with any other change."""
    from kaiwo_ctrl.webhooks.jobdelete import FINALIZER, finalizer_release_ops

    await _wait_active(admin, namespace)
    jobs, op = f"/apis/batch/v1/namespaces/{namespace}/jobs", _headers(True)
    json_patch = [("Content-Type", "application/json-patch+json"), *op]
    adopted = {"labels": {"kaiwo.silogen.ai/managed": "true"}, "finalizers": [FINALIZER]}
    for name, meta in (("adopted", adopted), ("plain", {"finalizers": [FINALIZER]})):
        assert admin.post(jobs, json=_job(name, **meta)).status_code == 201
    # not being deleted: the operator may not release anything
    for name in ("adopted", "plain"):
        stored = admin.get(f"{jobs}/{name}").json()
        assert _refused(admin.patch(f"{jobs}/{name}", json=finalizer_release_ops(stored), headers=json_patch)), name
    for name in ("adopted", "plain"):
        assert admin.request("DELETE", f"{jobs}/{name}", json={"propagationPolicy": "Background"}).status_code == 200
    # being deleted, but the patch changes more than the finalizer: refused
    stored = admin.get(f"{jobs}/adopted").json()
    more = [*finalizer_release_ops(stored), {"op": "add", "path": "/metadata/labels/stolen", "value": "yes"}]
    assert _refused(admin.patch(f"{jobs}/adopted", json=more, headers=json_patch))
    # an unlabelled Job is not adopted: refused
    plain = admin.get(f"{jobs}/plain").json()
    assert _refused(admin.patch(f"{jobs}/plain", json=finalizer_release_ops(plain), headers=json_patch))
    # the release itself: allowed, and the Job is gone
    r = admin.patch(f"{jobs}/adopted", json=finalizer_release_ops(stored), headers=json_patch)
    assert r.status_code == 200, r.text
    await eventually(lambda: admin.get(f"{jobs}/adopted").status_code == 404, timeout=30, what="the adopted Job deleted")
    admin.patch(f"{jobs}/plain", json={"metadata": {"finalizers": None}}, headers={"Content-Type": "application/merge-patch+json"})


def _pod(name: str, owner: dict | None = None, **spec) -> dict:
    meta: dict = {"name": name, **({"ownerReferences": [owner]} if owner else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "i"}], **spec}}


MODEL_OWNER = {"apiVersion": "kubeai.org/v1", "kind": "Model", "name": "m", "uid": "00000000-0000-0000-0000-000000000002",
               "controller": True}


async def test_operator_may_write_only_model_pods(policies, admin, namespace):
    await _wait_active(admin, namespace)
    pods, op = f"/api/v1/namespaces/{namespace}/pods", _headers(True)
    refused = {
        "unowned": _pod("unowned"),
        "owned-by-kaiwojob": _pod("owned-by-kaiwojob", OWNER),
        "model-not-controller": _pod("model-not-controller", {**MODEL_OWNER, "controller": False}),
        "made-up-model": _pod("made-up-model", {**MODEL_OWNER, "apiVersion": "kaiwo.silogen.ai/v1"}),
        "host-network": _pod("host-network", MODEL_OWNER, hostNetwork=True),
        "host-pid": _pod("host-pid", MODEL_OWNER, hostPID=True),
        "privileged": _pod("privileged", MODEL_OWNER, containers=[{"name": "c", "image": "i", "securityContext": {"privileged": True}}]),
    }
    for label, pod in refused.items():
        assert _refused(admin.post(pods, json=pod, headers=op), "kaiwo-ctrl may"), label
    r = admin.post(pods, json=_pod("model-server", MODEL_OWNER), headers=op)
    assert r.status_code == 201, r.text
    merge = [("Content-Type", "application/merge-patch+json"), *op]
    assert admin.patch(f"{pods}/model-server", json={"metadata": {"labels": {"adapter.kubeai.org/a": "a"}}}, headers=merge).status_code == 200
    assert admin.delete(f"{pods}/model-server", headers=op).status_code == 200
    # someone else's Pod: the operator can neither label nor delete it
    assert admin.post(pods, json=_pod("users")).status_code == 201
    assert _refused(admin.patch(f"{pods}/users", json={"metadata": {"labels": {"x": "y"}}}, headers=merge))
    assert _refused(admin.delete(f"{pods}/users", headers=op))


def _route(namespace: str, name: str, path: str, owner: dict | None = MODEL_OWNER, backend: str = "kaiwo-proxy-gateway",
           port: int | None = 8001, **rule) -> dict:
    ref = {"name": backend, "namespace": "kaiwo-system", **({"port": port} if port else {})}
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, **({"ownerReferences": [owner]} if owner else {})},
            "spec": {"parentRefs": [{"name": "gw", "namespace": "gateways"}],
                     "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": path}}],
                                "backendRefs": [ref], **rule}]}}


def _set_header(name: str, value: str) -> dict:
    return {"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": name, "value": value}]}}


async def test_operator_routes_reach_only_their_own_namespace(policies, admin, namespace):
    """What aim/routes.py writes passes; a route in this namespace aimed at another
    namespace's Models, rewritten, sent elsewhere or not owned by a Model is refused."""
    from kaiwo_ctrl.aim.routes import desired_route
    from kaiwo_ctrl.aim.fence import route_token

    await _wait_active(admin, namespace)
    routes, op = f"/apis/gateway.networking.k8s.io/v1/namespaces/{namespace}/httproutes", _headers(True)
    model = {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": "m", "namespace": namespace, "uid": MODEL_OWNER["uid"]}}
    config = {"metadata": {"name": "aim", "namespace": namespace}, "spec": {"gateway": {"name": "gw", "namespace": "gateways"}}}
    ours = desired_route(model, config, "kaiwo-system", route_token(bytes(32), namespace, "uid"))
    r = admin.post(routes, json=ours, headers=op)
    assert r.status_code == 201, r.text
    rewrite = {"filters": [{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/other/m"}}}]}
    hostile = {
        "other namespace": _route(namespace, "r1", "/other-tenant/m"),
        "prefix of another name": _route(namespace, "r2", f"/{namespace}x/m"),
        "everything": _route(namespace, "r3", "/"),
        "rewritten": _route(namespace, "r4", f"/{namespace}/m", **rewrite),
        "another backend": _route(namespace, "r5", f"/{namespace}/m", backend="kubernetes"),
        "not owned": _route(namespace, "r6", f"/{namespace}/m", owner=None),
        "owned by a KaiwoJob": _route(namespace, "r7", f"/{namespace}/m", owner=OWNER),
        "the unfenced in-cluster port": _route(namespace, "r8", f"/{namespace}/m", port=80),
        "the in-cluster Service": _route(namespace, "r9", f"/{namespace}/m", backend="kaiwo-proxy", port=80),
        "another header set": _route(namespace, "r10", f"/{namespace}/m", filters=[_set_header("X-Label-Selector", "a=b")]),
        "a token header added, not set": _route(namespace, "r11", f"/{namespace}/m", filters=[
            {"type": "RequestHeaderModifier", "requestHeaderModifier": {"add": [{"name": "X-Kaiwo-Route-Token", "value": "t"}]}}]),
        "token set and rewritten": _route(namespace, "r12", f"/{namespace}/m", filters=[
            _set_header("X-Kaiwo-Route-Token", "t"), rewrite["filters"][0]]),
    }
    for label, route in hostile.items():
        assert _refused(admin.post(routes, json=route, headers=op), "kaiwo-ctrl may only"), label
    assert admin.delete(f"{routes}/{ours['metadata']['name']}", headers=op).status_code == 200
