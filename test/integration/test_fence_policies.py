"""The issue-39 fence on the real kube-apiserver (config/policy applied as in test_security_policy):

* aim-route-paths (every user): an HTTPRoute on an AIM Gateway (listed in the operator's
  kaiwo-aim-gateways ConfigMap) matches only paths under its own namespace;
* owned-children / model-pods (the operator's ServiceAccount): no children in kube-system or the
  operator's namespace, whatever the owner reference says; no hostPath, privileged init containers,
  added capabilities (ephemeral containers included) or privilege escalation in any Pod they make."""

from __future__ import annotations

import uuid

import pytest

from support import eventually
from test_security_policy import MODEL_OWNER, OWNER, _headers, _job, _pod, _refused, _wait_active, policies  # noqa: F401

pytestmark = pytest.mark.integration

GW = "/apis/gateway.networking.k8s.io/v1"
GATEWAY_LIST = "/api/v1/namespaces/kaiwo-system/configmaps/kaiwo-aim-gateways"
MERGE = {"Content-Type": "application/merge-patch+json"}


def _tenant_route(name: str, paths: list[str], gateway: tuple[str, str], backend_ns: str | None = None, **match) -> dict:
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": name},
            "spec": {"parentRefs": [{"name": gateway[1], "namespace": gateway[0]}],
                     "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": p}, **match} for p in paths],
                                "backendRefs": [{"name": "mine", "port": 80, **({"namespace": backend_ns} if backend_ns else {})}]}]}}


@pytest.fixture
def aim_gateway(policies, admin):
    """A Gateway namespace with an AIM Gateway (listed in the param) and another Gateway (not listed)."""
    gw_ns = f"gw-{uuid.uuid4().hex[:6]}"
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": gw_ns}}).status_code == 201
    r = admin.patch(GATEWAY_LIST, json={"data": {f"{gw_ns}.aim": ""}}, headers=MERGE)
    assert r.status_code == 200, r.text
    yield gw_ns
    admin.patch(GATEWAY_LIST, json={"data": {f"{gw_ns}.aim": None}}, headers=MERGE)


async def test_a_tenant_route_cannot_take_another_namespaces_path(aim_gateway, admin):
    team_a, team_b = (f"team-{x}-{uuid.uuid4().hex[:6]}" for x in "ab")
    for ns in (team_a, team_b):
        assert admin.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    routes = f"{GW}/namespaces/{team_a}/httproutes"
    aim, other = (aim_gateway, "aim"), (aim_gateway, "other")
    capture = _tenant_route("capture", [f"/{team_b}/llm/v1"], aim)

    # bindings take effect asynchronously: wait until team-a's capture of team-b's path is refused (by the tenant, no impersonation)
    async def refused():
        r = admin.post(routes, json=capture)
        if r.status_code == 201:
            admin.delete(f"{routes}/capture")
            return False
        return _refused(r, f"attached to the AIM Gateway {aim_gateway}/aim may only match paths under /{team_a}/") and r
    r = await eventually(refused, timeout=60, interval=0.5, what="the aim-route-paths policy to be enforced")
    assert admin.get(f"{routes}/capture").status_code == 404
    # every way around it is refused too
    hostile = {
        "one good match, one bad": _tenant_route("h1", [f"/{team_a}/x", f"/{team_b}/llm"], aim),
        "everything": _tenant_route("h2", ["/"], aim),
        "a name that only starts like team-a": _tenant_route("h3", [f"/{team_a}x/llm"], aim),
        "dot segments": _tenant_route("h4", [f"/{team_a}/../{team_b}/llm"], aim),
        "percent-encoding": _tenant_route("h5", [f"/{team_a}/%2e%2e/{team_b}"], aim),
        "the namespace alone, no slash": _tenant_route("h6", [f"/{team_a}"], aim),
        "a regular expression": _tenant_route("h7", [f"/{team_a}/.*"], aim),
        "default parentRef group and kind spelled out": {**_tenant_route("h8", [f"/{team_b}/llm"], aim)},
    }
    hostile["a regular expression"]["spec"]["rules"][0]["matches"][0]["path"]["type"] = "RegularExpression"
    hostile["default parentRef group and kind spelled out"]["spec"]["parentRefs"][0].update(
        {"group": "gateway.networking.k8s.io", "kind": "Gateway"})
    no_match = _tenant_route("h9", [f"/{team_a}/x"], aim)
    del no_match["spec"]["rules"][0]["matches"]
    hostile["no match (CRD default: everything)"] = no_match
    # (the Gateway API CRD's own validation may refuse dot segments and '%' first: refused either way)
    crd_may_refuse = {"dot segments", "percent-encoding"}
    for label, route in hostile.items():
        r = admin.post(routes, json=route)
        assert r.status_code in (403, 422) and (label in crd_may_refuse or "may only match paths under" in r.text), (label, r.text)
    # an admitted route cannot be changed into a capture either
    mine = _tenant_route("mine", [f"/{team_a}/llm/v1", f"/{team_a}/other"], aim)
    assert admin.post(routes, json=mine).status_code == 201
    grab = {"spec": {"rules": [{"matches": [{"path": {"type": "PathPrefix", "value": f"/{team_b}/llm/v1"}}],
                                "backendRefs": [{"name": "mine", "port": 80}]}]}}
    assert _refused(admin.patch(f"{routes}/mine", json=grab, headers=MERGE), "may only match paths under")
    # routes on another Gateway are not affected; nor is one that names the AIM Gateway's
    # name in another namespace (a parentRef without namespace means the route's own)
    assert admin.post(routes, json=_tenant_route("elsewhere", [f"/{team_b}/llm/v1"], other)).status_code == 201
    same_name = _tenant_route("own-gw", ["/"], (team_a, "aim"))
    del same_name["spec"]["parentRefs"][0]["namespace"]
    assert admin.post(routes, json=same_name).status_code == 201
    # a tenant cannot change the list: it lives in the operator's namespace
    tenant = [("Impersonate-User", "alice"), ("Impersonate-Group", "system:authenticated")]
    assert admin.patch(GATEWAY_LIST, json={"data": {f"{aim_gateway}.aim": None}}, headers=[*MERGE.items(), *tenant]).status_code == 403


async def test_the_operators_own_routes_are_admitted_on_the_aim_gateway(aim_gateway, admin, namespace):
    from kaiwo_ctrl.aim.fence import route_token
    from kaiwo_ctrl.aim.routes import desired_route

    model = {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": "m", "namespace": namespace, "uid": MODEL_OWNER["uid"]}}
    config = {"metadata": {"name": "aim", "namespace": namespace}, "spec": {"gateway": {"name": "aim", "namespace": aim_gateway}}}
    ours = desired_route(model, config, "kaiwo-system", route_token(bytes(32), namespace, "uid"))
    routes = f"{GW}/namespaces/{namespace}/httproutes"
    probe = _tenant_route("probe", ["/elsewhere/"], (aim_gateway, "aim"))

    async def enforced():
        r = admin.post(routes, json=probe)
        if r.status_code == 201:
            admin.delete(f"{routes}/probe")
        return r.status_code != 201
    await eventually(enforced, timeout=60, interval=0.5, what="the aim-route-paths policy to be enforced")
    r = admin.post(routes, json=ours, headers=_headers(True))
    assert r.status_code == 201, r.text


def _in(namespace: str, body: dict) -> dict:
    return {**body, "metadata": {**body["metadata"], "namespace": namespace}}


async def test_operator_makes_no_children_in_kube_system_or_its_namespace(policies, admin, namespace):
    """A forged owner reference (the policy cannot look the owner up) buys nothing there."""
    await _wait_active(admin, namespace)
    op = _headers(True)
    for ns in ("kube-system", "kaiwo-system"):
        job = _job(f"forged-{uuid.uuid4().hex[:6]}", ownerReferences=[OWNER])
        r = admin.post(f"/apis/batch/v1/namespaces/{ns}/jobs", json=_in(ns, job), headers=op)
        assert _refused(r, f"in namespace {ns}"), (ns, r.text)
        assert admin.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{job['metadata']['name']}").status_code == 404
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "forged", "ownerReferences": [OWNER]}}
        assert _refused(admin.post(f"/api/v1/namespaces/{ns}/configmaps", json=cm, headers=op), f"in namespace {ns}"), ns
        assert _refused(admin.post(f"/api/v1/namespaces/{ns}/pods", json=_pod("forged", MODEL_OWNER), headers=op),
                        f"in namespace {ns}"), ns
    # the same Job in a tenant namespace passes (the operator's legitimate children)
    ok = admin.post(f"/apis/batch/v1/namespaces/{namespace}/jobs", json=_job("legit", ownerReferences=[OWNER]), headers=op)
    assert ok.status_code == 201, ok.text
    # its own bookkeeping ConfigMap in its namespace stays writable
    state = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kaiwo-autoscaler-state"}, "data": {}}
    r = admin.post("/api/v1/namespaces/kaiwo-system/configmaps", json=state, headers=op)
    assert r.status_code in (201, 409), r.text


def _template_job(name: str, **pod) -> dict:
    job = _job(name, ownerReferences=[OWNER])
    job["spec"]["template"]["spec"].update(pod)
    return job


async def test_operator_children_pod_templates_are_checked_in_every_container_list(policies, admin, namespace):
    await _wait_active(admin, namespace)
    op = _headers(True)
    jobs, deps, pods = (f"/apis/batch/v1/namespaces/{namespace}/jobs", f"/apis/apps/v1/namespaces/{namespace}/deployments",
                        f"/api/v1/namespaces/{namespace}/pods")
    c = {"name": "c", "image": "i"}

    def sc(**ctx):
        return {**c, "name": "bad", "securityContext": ctx}
    refused_jobs = {
        "hostPath volume": _template_job("hp", volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
        "privileged initContainer": _template_job("pi", initContainers=[sc(privileged=True)]),
        "initContainer adds SYS_ADMIN": _template_job("ic", initContainers=[sc(capabilities={"add": ["SYS_ADMIN"]})]),
        "container adds CAP_NET_ADMIN": _template_job("cn", containers=[sc(capabilities={"add": ["CAP_NET_ADMIN"]})]),
        "privilege escalation": _template_job("pe", containers=[sc(allowPrivilegeEscalation=True)]),
        "hostNetwork": _template_job("hn", hostNetwork=True),
        "the operator's ServiceAccount": _template_job("sa", serviceAccountName="kaiwo-controller-manager"),
    }
    for label, job in refused_jobs.items():
        r = admin.post(jobs, json=job, headers=op)
        assert _refused(r, "kaiwo-ctrl may not make"), (label, r.text)
    # a Deployment's template is checked the same way
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "ownerReferences": [OWNER]},
           "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {
               "containers": [c], "volumes": [{"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}}]}}}}
    assert _refused(admin.post(deps, json=dep, headers=op), "hostPath")
    # model Pods: a privileged initContainer, hostPath, an ephemeral container adding capabilities
    assert _refused(admin.post(pods, json=_pod("pi", MODEL_OWNER, initContainers=[sc(privileged=True)]), headers=op), "kaiwo-ctrl may not")
    assert _refused(admin.post(pods, json=_pod("hp", MODEL_OWNER, volumes=[{"name": "r", "hostPath": {"path": "/"}}]), headers=op),
                    "hostPath")
    assert admin.post(pods, json=_pod("server", MODEL_OWNER), headers=op).status_code == 201
    # ephemeral containers come through the pods/ephemeralcontainers subresource: grant it to the
    # operator's ServiceAccount for this test (its RBAC does not), so the policy alone decides
    role = f"eph-{uuid.uuid4().hex[:6]}"
    rules = [{"apiGroups": [""], "resources": ["pods/ephemeralcontainers"], "verbs": ["get", "update", "patch"]}]
    assert admin.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
                      json={"metadata": {"name": role}, "rules": rules}).status_code == 201
    binding = {"metadata": {"name": role}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
               "subjects": [{"kind": "ServiceAccount", "name": "kaiwo-controller-manager", "namespace": "kaiwo-system"}]}
    assert admin.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", json=binding).status_code == 201
    strategic = [("Content-Type", "application/strategic-merge-patch+json"), *op]
    debug = {"name": "debug", "image": "i", "targetContainerName": "c", "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}}}

    async def ephemeral_refused():
        r = admin.patch(f"{pods}/server/ephemeralcontainers", json={"spec": {"ephemeralContainers": [debug]}}, headers=strategic)
        assert r.status_code != 200, r.text  # never admitted
        return _refused(r, "kaiwo-ctrl may not make containers (debug)") and r
    await eventually(ephemeral_refused, timeout=30, interval=0.5, what="the ephemeral container refused by the policy")
    assert not admin.get(f"{pods}/server").json()["spec"].get("ephemeralContainers")
    harmless = {**debug, "name": "debug2", "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}}}
    r = admin.patch(f"{pods}/server/ephemeralcontainers", json={"spec": {"ephemeralContainers": [harmless]}}, headers=strategic)
    assert r.status_code == 200, r.text
    # baseline capabilities and a plain template pass
    ok = _template_job("ok", containers=[{**c, "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                                                                  "allowPrivilegeEscalation": False}}])
    r = admin.post(jobs, json=ok, headers=op)
    assert r.status_code == 201, r.text


async def test_the_operators_own_children_pass_the_fence(policies, admin, namespace):
    """Every child the builders make (test_child_schemas' walk: KaiwoJob and KaiwoService samples and
    examples, Model Pods, file ConfigMaps, cache Jobs), sent as the operator (dry run) into a tenant
    namespace: none is refused by the hardened owned-children and model-pods policies."""
    import copy

    from test_child_schemas import embedded, serving_children, url, workload_children

    await _wait_active(admin, namespace)
    checked, refused = set(), []
    for obj in workload_children() + serving_children():
        if obj["kind"] not in {"Job", "Deployment", "RayJob", "RayService", "AppWrapper", "ConfigMap", "Pod"}:
            continue
        if not obj["metadata"].get("ownerReferences"):
            continue  # (owned-children refused those before this change too)
        body = copy.deepcopy(obj)
        body.pop("status", None)
        body["metadata"]["namespace"] = namespace
        r = admin.post(url(body, namespace), json=body, headers=_headers(True))
        checked.add(obj["kind"])
        if r.status_code != 201:
            refused.append(f"{obj['kind']} {obj['metadata'].get('name')}: {r.status_code} {r.json().get('message')}")
    assert not refused, "\n".join(refused)
    assert checked >= {"Job", "Deployment", "RayJob", "AppWrapper", "ConfigMap", "Pod"}, checked
    assert any(embedded(o) for o in workload_children())  # the AppWrapper's RayService template was walked


async def test_the_shared_model_cache_is_the_one_unowned_claim_the_operator_may_write(policies, admin, namespace):
    """One cache PVC per profile serves every Model of the profile, so it has no owner: the operator may
    create it and annotate it, but not relabel, re-own or delete it, nor make any other unowned claim."""
    await _wait_active(admin, namespace)
    op = _headers(True)
    claims = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"

    def claim(name: str) -> dict:
        return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
                "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}

    r = admin.post(claims, json=claim("shared-model-cache-fast"), headers=op)
    assert r.status_code == 201, r.text
    cache = f"{claims}/shared-model-cache-fast"
    r = admin.patch(cache, json={"metadata": {"annotations": {"models.kubeai.org/m": '{"uid":"u"}'}}}, headers=[*op, *MERGE.items()])
    assert r.status_code == 200, r.text
    assert admin.get(cache).json()["metadata"]["annotations"]["models.kubeai.org/m"] == '{"uid":"u"}'
    assert _refused(admin.patch(cache, json={"metadata": {"labels": {"x": "y"}}}, headers=[*op, *MERGE.items()]))
    assert _refused(admin.patch(cache, json={"metadata": {"ownerReferences": [MODEL_OWNER]}}, headers=[*op, *MERGE.items()]))
    assert _refused(admin.delete(cache, headers=op))
    assert "x" not in (admin.get(cache).json()["metadata"].get("labels") or {})
    assert _refused(admin.post(claims, json=claim("data"), headers=op))
    assert admin.get(f"{claims}/data").status_code == 404
    for ns in ("kube-system", "kaiwo-system"):
        r = admin.post(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", json=claim("shared-model-cache-fast"), headers=op)
        assert _refused(r, f"in namespace {ns}"), (ns, r.text)
