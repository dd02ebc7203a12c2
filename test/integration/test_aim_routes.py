"""AIMNamespaceConfig gateway exposure and status on the real kube-apiserver
with the published Gateway API CRDs: one HTTPRoute per Model plus the
ReferenceGrant, removed with the Model, with the gateway field and with the
config; RoutesAccepted following route status patched as a gateway controller
would; Conflict on the younger of two configs; events."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kaiwo_ctrl.aim import controller as aim
from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from kaiwo_ctrl.aim import fence
from support import eventually
from test_aim_workloads import config_url, create_config
from test_workloads_support import MERGE, conditions, create_kaiwo, get

pytestmark = pytest.mark.integration

GW = "/apis/gateway.networking.k8s.io/v1"
GRANTS = "/apis/gateway.networking.k8s.io/v1beta1"


@pytest.fixture
def operator_ns(admin) -> str:
    name = f"op-{uuid.uuid4().hex[:8]}"
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": name}}).status_code == 201
    return name


@pytest.fixture
async def aim_operator(control_plane, operator_ns):
    client = await Client.from_kubeconfig(str(control_plane.kubeconfig))
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    assert await aim.gateway_api_served(mgr)
    aim.setup(mgr, operator_ns=operator_ns)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    await asyncio.wait_for(mgr.is_leader.wait(), 60)
    await eventually(lambda: all(c._tasks for c in mgr.controllers), what="controllers started")
    yield mgr
    stop.set()
    await asyncio.wait_for(task, 60)


def create_gateway(admin, ns: str, name: str = "kgw") -> None:
    body = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": {"name": name},
            "spec": {"gatewayClassName": "kgateway", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}
    r = admin.post(f"{GW}/namespaces/{ns}/gateways", json=body)
    assert r.status_code == 201, r.text


def create_model(admin, ns: str, name: str) -> dict:
    body = {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": name},
            "spec": {"url": "hf://org/model", "engine": "VLLM", "features": ["TextGeneration"]}}
    r = admin.post(f"/apis/kubeai.org/v1/namespaces/{ns}/models", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def route_url(ns: str, name: str | None = None) -> str:
    return f"{GW}/namespaces/{ns}/httproutes" + (f"/{name}" if name else "")


def grant_url(op_ns: str, tenant: str) -> str:
    return f"{GRANTS}/namespaces/{op_ns}/referencegrants/aim-routes-{tenant}"


def config_conditions(admin, ns: str, name: str = "tenant") -> dict:
    return conditions((get(admin, config_url(ns, name)) or {}).get("status") or {})


def accept(admin, ns: str, route: str, gw_ns: str, accepted: bool) -> None:
    status = {"parents": [{
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": gw_ns, "name": "kgw"},
        "controllerName": "example.com/gateway-controller",
        "conditions": [{"type": "Accepted", "status": "True" if accepted else "False",
                        "reason": "Accepted" if accepted else "NotAllowedByListeners", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}],
    }]}
    r = admin.patch(route_url(ns, route) + "/status", json={"status": status}, headers=MERGE)
    assert r.status_code == 200, r.text


async def wait_condition(admin, ns: str, type_: str, status: str, name: str = "tenant") -> tuple:
    return await eventually(
        lambda: (c := config_conditions(admin, ns, name).get(type_)) and c[0] == status and c,
        what=f"{type_}={status} (now {config_conditions(admin, ns, name).get(type_)})",
    )


def reasons(admin, ns: str) -> list[str]:
    return [e["reason"] for e in admin.get(f"/api/v1/namespaces/{ns}/events").json()["items"]]


async def test_routes_grant_and_status_follow_models_and_gateway(aim_operator, admin, namespace, operator_ns):
    create_gateway(admin, operator_ns)
    model = create_model(admin, namespace, "llama")
    create_model(admin, namespace, "qwen")
    create_config(admin, namespace, gateway={"name": "kgw", "namespace": operator_ns})

    route = await eventually(lambda: get(admin, route_url(namespace, "model-llama")), what="HTTPRoute model-llama")
    assert route["metadata"]["ownerReferences"] == [{
        "apiVersion": "kubeai.org/v1", "kind": "Model", "name": "llama", "uid": model["metadata"]["uid"],
        "controller": True, "blockOwnerDeletion": True}]
    assert route["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": operator_ns, "name": "kgw"}]
    (rule,) = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": f"/{namespace}/llama"}}]
    assert rule["backendRefs"] == [{"group": "", "kind": "Service", "name": "kaiwo-proxy-gateway", "namespace": operator_ns,
                                    "port": 8001, "weight": 1}]
    # the route carries its namespace's token (name and UID) under the key the operator made in its namespace
    secret = admin.get(f"/api/v1/namespaces/{operator_ns}/secrets/{fence.KEY_SECRET}").json()
    key, uid = fence.key_of(secret), admin.get(f"/api/v1/namespaces/{namespace}").json()["metadata"]["uid"]
    assert rule["filters"] == [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
        "set": [{"name": fence.TOKEN_HEADER, "value": fence.route_token(key, namespace, uid)}]}}]
    await eventually(lambda: get(admin, route_url(namespace, "model-qwen")), what="HTTPRoute model-qwen")
    grant = await eventually(lambda: get(admin, grant_url(operator_ns, namespace)), what="ReferenceGrant")
    assert grant["spec"] == {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": namespace}],
                             "to": [{"group": "", "kind": "Service", "name": "kaiwo-proxy-gateway"}]}
    # the grant names the Gateway listener's Service alone: none that exposes the in-cluster listener
    assert {t["name"] for t in grant["spec"]["to"]} == {"kaiwo-proxy-gateway"}

    # no gateway controller has answered yet
    assert (await wait_condition(admin, namespace, "GatewayFound", "True"))[1] == "Found"
    pending = await wait_condition(admin, namespace, "RoutesAccepted", "Unknown")
    assert "model-llama" in pending[2] and "model-qwen" in pending[2]
    assert config_conditions(admin, namespace)["Ready"][0] == "False"
    # the gateway accepts one and refuses the other
    accept(admin, namespace, "model-llama", operator_ns, True)
    accept(admin, namespace, "model-qwen", operator_ns, False)
    refused = await wait_condition(admin, namespace, "RoutesAccepted", "False")
    assert refused[1] == "NotAccepted" and "model-qwen" in refused[2] and "model-llama" not in refused[2]
    accept(admin, namespace, "model-qwen", operator_ns, True)
    await wait_condition(admin, namespace, "RoutesAccepted", "True")
    await wait_condition(admin, namespace, "Ready", "True")
    st = get(admin, config_url(namespace, "tenant"))["status"]
    assert (st["models"], st["routes"], st["observedGeneration"]) == (2, 2, 1)
    await eventually(lambda: reasons(admin, namespace).count("RouteCreated") == 2, what="RouteCreated events")
    # a reconcile that finds nothing changed writes nothing
    ctl = next(c for c in aim_operator.controllers if c.name == aim.CONTROLLER_NAME)
    writes, done = aim_operator.client.writes, ctl.reconciles
    ctl.enqueue(Request(namespace, aim.KEY))
    await eventually(lambda: ctl.reconciles > done, what="one more reconcile")
    assert aim_operator.client.writes == writes

    # the Model goes, its route goes (no garbage collector runs here: the controller removes it)
    assert admin.delete(f"/apis/kubeai.org/v1/namespaces/{namespace}/models/qwen").status_code == 200
    await eventually(lambda: get(admin, route_url(namespace, "model-qwen")) is None, what="route of deleted Model removed")
    await eventually(lambda: "RouteRemoved" in reasons(admin, namespace), what="RouteRemoved event")

    # the Gateway disappears: GatewayFound=False names the field
    assert admin.delete(f"{GW}/namespaces/{operator_ns}/gateways/kgw").status_code == 200
    missing = await wait_condition(admin, namespace, "GatewayFound", "False")
    assert missing[1] == "GatewayNotFound" and missing[2].startswith("spec.gateway:")
    assert config_conditions(admin, namespace)["Ready"][:2] == ("False", "GatewayNotFound")

    # removing the gateway field removes the routes and the grant
    r = admin.patch(config_url(namespace, "tenant"), json={"spec": {"gateway": None}}, headers=MERGE)
    assert r.status_code == 200, r.text
    await eventually(lambda: not admin.get(route_url(namespace)).json()["items"], what="routes removed")
    await eventually(lambda: get(admin, grant_url(operator_ns, namespace)) is None, what="grant removed")
    await wait_condition(admin, namespace, "Ready", "True")
    assert config_conditions(admin, namespace)["GatewayFound"][1] == "NotConfigured"


async def test_gateway_namespace_defaults_and_config_deletion(aim_operator, admin, namespace, operator_ns):
    create_gateway(admin, namespace)
    create_model(admin, namespace, "m")
    create_config(admin, namespace, gateway={"name": "kgw"})
    route = await eventually(lambda: get(admin, route_url(namespace, "model-m")), what="route")
    assert route["spec"]["parentRefs"][0]["namespace"] == namespace
    await eventually(lambda: get(admin, grant_url(operator_ns, namespace)), what="grant")
    # the workloads of the namespace are counted
    create_kaiwo(admin, "KaiwoJob", namespace, "w", image="busybox")
    await eventually(lambda: (get(admin, config_url(namespace, "tenant")).get("status") or {}).get("workloads") == 1,
                     what="workloads counted")
    # a Model created later gets its route too
    create_model(admin, namespace, "later")
    await eventually(lambda: get(admin, route_url(namespace, "model-later")), what="route of a later Model")
    # a route name somebody else already uses is reported, and their route left alone
    theirs = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "model-taken"},
              "spec": {"parentRefs": [{"name": "elsewhere"}]}}
    assert admin.post(route_url(namespace), json=theirs).status_code == 201
    create_model(admin, namespace, "taken")
    blocked = await wait_condition(admin, namespace, "RoutesAccepted", "False")
    assert blocked[1] == "RouteNameTaken" and "model-taken" in blocked[2]
    assert get(admin, route_url(namespace, "model-taken"))["spec"]["parentRefs"][0]["name"] == "elsewhere"
    assert admin.delete(route_url(namespace, "model-taken")).status_code == 200
    # deleting the config stops exposure
    assert admin.delete(config_url(namespace, "tenant")).status_code == 200
    await eventually(lambda: not admin.get(route_url(namespace)).json()["items"], what="routes removed with the config")
    await eventually(lambda: get(admin, grant_url(operator_ns, namespace)) is None, what="grant removed with the config")


async def test_two_configs_conflict_on_the_younger(aim_operator, admin, namespace, operator_ns):
    create_config(admin, namespace, "aaa-first")
    create_config(admin, namespace, "zzz-second", gateway={"name": "kgw"})
    conflict = await wait_condition(admin, namespace, "Conflict", "True", name="zzz-second")
    assert conflict[1] == "Conflict" and "aaa-first" in conflict[2]
    assert config_conditions(admin, namespace, "zzz-second")["Ready"][:2] == ("False", "Conflict")
    assert "GatewayFound" not in config_conditions(admin, namespace, "zzz-second")
    await wait_condition(admin, namespace, "Ready", "True", name="aaa-first")
    assert config_conditions(admin, namespace, "aaa-first")["Conflict"][0] == "False"
    # the younger one's gateway does not apply: no routes
    create_model(admin, namespace, "m")
    await eventually(lambda: (get(admin, config_url(namespace, "aaa-first"))["status"] or {}).get("models") == 1,
                     what="the Model seen by the reconcile")
    assert not admin.get(route_url(namespace)).json()["items"]
    # the older one goes: the younger takes over
    assert admin.delete(config_url(namespace, "aaa-first")).status_code == 200
    await wait_condition(admin, namespace, "Conflict", "False", name="zzz-second")
    await eventually(lambda: get(admin, route_url(namespace, "model-m")), what="route under the config now in force")


async def test_a_bad_spec_is_reported_by_the_reconciler(aim_operator, admin, namespace, operator_ns):
    """No webhook runs here (as when the operator's webhook is down: fail-open):
    the reconciler runs the webhook's checks and names the same field."""
    create_config(admin, namespace, credentials={"huggingFaceToken": {"secretName": "hf"}})
    ready = await wait_condition(admin, namespace, "Ready", "False")
    assert ready[1] == "InvalidSpec" and ready[2].startswith("spec.credentials.huggingFaceToken.secretKey: "), ready
    fix = {"spec": {"credentials": {"huggingFaceToken": {"secretName": "hf", "secretKey": "token"}}}}
    assert admin.patch(config_url(namespace, "tenant"), json=fix, headers=MERGE).status_code == 200
    await wait_condition(admin, namespace, "Ready", "True")


async def test_rotation_rerenders_routes_and_gateway_list_follows_configs(aim_operator, admin, namespace, operator_ns):
    """A rotation asked on the key Secret: the operator writes the new key (the old one kept for the
    overlap) and every route gets its new token; the policy's Gateway list names the configs' Gateways."""
    create_gateway(admin, operator_ns)
    create_model(admin, namespace, "llama")
    create_config(admin, namespace, gateway={"name": "kgw", "namespace": operator_ns})
    uid = admin.get(f"/api/v1/namespaces/{namespace}").json()["metadata"]["uid"]
    secret_url = f"/api/v1/namespaces/{operator_ns}/secrets/{fence.KEY_SECRET}"

    def token() -> str | None:
        route = get(admin, route_url(namespace, "model-llama"))
        return route and route["spec"]["rules"][0]["filters"][0]["requestHeaderModifier"]["set"][0]["value"]
    old_key = fence.key_of(await eventually(lambda: get(admin, secret_url), what="the key Secret"))
    await eventually(lambda: token() == fence.route_token(old_key, namespace, uid), what="route with the first key's token")
    gw_list = f"/api/v1/namespaces/{operator_ns}/configmaps/kaiwo-aim-gateways"
    # (the list names the Gateways of every config in the cluster: other tests' too)
    await eventually(lambda: f"{operator_ns}.kgw" in ((get(admin, gw_list) or {}).get("data") or {}), what="the Gateway listed")

    r = admin.patch(secret_url, json={"metadata": {"annotations": {fence.ROTATE_ANNOTATION: "120"}}}, headers=MERGE)
    assert r.status_code == 200, r.text
    rotated = await eventually(lambda: (s := get(admin, secret_url)) and fence.ROTATE_ANNOTATION not in
                               (s["metadata"].get("annotations") or {}) and s, what="the rotation done")
    keys = fence.keys_of(rotated)
    assert keys.previous == old_key and keys.current != old_key and keys.previous_until > 0
    await eventually(lambda: token() == fence.route_token(keys.current, namespace, uid), what="route with the new key's token")

    # the config goes: its Gateway leaves the list
    assert admin.delete(config_url(namespace, "tenant")).status_code == 200
    await eventually(lambda: f"{operator_ns}.kgw" not in ((get(admin, gw_list) or {}).get("data") or {}),
                     what="the Gateway gone from the list")
