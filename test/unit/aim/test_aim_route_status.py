"""kaiwo_ctrl.aim.routes and kaiwo_ctrl.aim.status (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from kaiwo_ctrl.aim import routes as r
from kaiwo_ctrl.aim.status import Observed, desired_status, ready

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
MODEL = {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": "llama", "namespace": "team", "uid": "u1"}}


def config(name="tenant", gateway=None):
    spec = {"gateway": gateway} if gateway is not None else {}
    return {"metadata": {"name": name, "namespace": "team"}, "spec": spec}


def routed(name: str, accepted: str | None, gw=("gw-ns", "kgw"), route_ns="team") -> dict:
    parents = []
    if accepted is not None:
        parents = [{"parentRef": {"name": gw[1], "namespace": gw[0]},
                    "conditions": [{"type": "Accepted", "status": accepted}]}]
    return {"metadata": {"name": name, "namespace": route_ns}, "status": {"parents": parents}}


def conds(status: dict) -> dict:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


def test_gateway_of_defaults_namespace_and_blank_is_off():
    assert r.gateway_of(config(gateway={"name": "kgw"})) == ("team", "kgw")
    assert r.gateway_of(config(gateway={"name": "kgw", "namespace": "gw"})) == ("gw", "kgw")
    assert r.gateway_of(config(gateway={"name": " "})) is None and r.gateway_of(config()) is None


def test_desired_route_shape():
    route = r.desired_route(MODEL, config(gateway={"name": "kgw"}), "kaiwo-system", "tok")
    assert route["metadata"]["name"] == "model-llama" and route["metadata"]["namespace"] == "team"
    assert route["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert route["metadata"]["labels"][r.LABEL_MANAGED] == "kaiwo-ctrl"
    assert route["spec"]["parentRefs"][0]["namespace"] == "team"
    rule = route["spec"]["rules"][0]
    assert rule["matches"][0]["path"] == {"type": "PathPrefix", "value": "/team/llama"}
    # the proxy's fenced Gateway port, with the namespace's token set (replacing any a client sent)
    assert rule["backendRefs"][0] == {"group": "", "kind": "Service", "name": "kaiwo-proxy-gateway",
                                      "namespace": "kaiwo-system", "port": 8001}
    assert rule["filters"] == [{"type": "RequestHeaderModifier",
                                "requestHeaderModifier": {"set": [{"name": "X-Kaiwo-Route-Token", "value": "tok"}]}}]


def test_desired_grant_shape():
    grant = r.desired_grant("team", "kaiwo-system")
    assert grant["metadata"]["name"] == "aim-routes-team" and grant["metadata"]["namespace"] == "kaiwo-system"
    assert grant["metadata"]["labels"][r.LABEL_TENANT] == "team"
    assert grant["spec"]["from"] == [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "team"}]
    # only the Gateway listener's Service: none that exposes the in-cluster listener (kaiwo-proxy:80)
    assert grant["spec"]["to"] == [{"group": "", "kind": "Service", "name": "kaiwo-proxy-gateway"}]


def test_gateway_list_names_each_configs_gateway_once_and_skips_bad_names():
    configs = [config(gateway={"name": "kgw"}), config(gateway={"name": "kgw", "namespace": "team"}),
               config(gateway={"name": "shared", "namespace": "gw"}), config(gateway={"name": "Bad Name!"}), config()]
    cm = r.desired_gateway_list(configs, "kaiwo-system")
    assert cm["metadata"]["name"] == "kaiwo-aim-gateways" and cm["metadata"]["namespace"] == "kaiwo-system"
    assert cm["data"] == {"gw.shared": "", "team.kgw": ""}


def test_route_accepted_only_counts_our_gateway():
    gw = ("gw-ns", "kgw")
    assert r.route_accepted(routed("a", "True"), gw) is True
    assert r.route_accepted(routed("a", "False"), gw) is False
    assert r.route_accepted(routed("a", None), gw) is None
    assert r.route_accepted(routed("a", "True", gw=("other", "kgw")), gw) is None
    # a parentRef without namespace means the route's namespace
    local = {"metadata": {"name": "a", "namespace": "team"},
             "status": {"parents": [{"parentRef": {"name": "kgw"}, "conditions": [{"type": "Accepted", "status": "True"}]}]}}
    assert r.route_accepted(local, ("team", "kgw")) is True


def test_names_list_is_bounded():
    names = [f"model-{i}" for i in range(25)]
    text = r.names_list(names)
    assert text.endswith("and 15 more") and "model-10" not in text


def test_status_no_gateway_is_ready():
    st = desired_status("tenant", None, Observed(generation=3, in_force_name="tenant", models=2, workloads=5), NOW)
    c = conds(st)
    assert c["Ready"][0] == "True" and c["GatewayFound"][:2] == ("False", "NotConfigured")
    assert c["Conflict"][0] == "False" and c["RoutesAccepted"][1] == "NoRoutes"
    assert (st["observedGeneration"], st["models"], st["workloads"], st["routes"]) == (3, 2, 5, 0)
    assert [x["type"] for x in st["conditions"]] == ["Ready", "GatewayFound", "RoutesAccepted", "Conflict"]
    assert ready(st)


def test_status_routes_refused_pending_accepted():
    gw = ("gw-ns", "kgw")
    base = dict(generation=1, in_force_name="tenant", gateway=gw, gateway_exists=True)
    refused = conds(desired_status("tenant", None, Observed(**base, routes=(routed("model-a", "True"), routed("model-b", "False"))), NOW))
    assert refused["RoutesAccepted"][:2] == ("False", "NotAccepted") and "model-b" in refused["RoutesAccepted"][2]
    assert "model-a" not in refused["RoutesAccepted"][2] and refused["Ready"][:2] == ("False", "RoutesNotAccepted")
    pending = conds(desired_status("tenant", None, Observed(**base, routes=(routed("model-a", None),)), NOW))
    assert pending["RoutesAccepted"][:2] == ("Unknown", "Pending") and pending["Ready"][1] == "RoutesPending"
    ok = conds(desired_status("tenant", None, Observed(**base, routes=(routed("model-a", "True"),)), NOW))
    assert ok["RoutesAccepted"][0] == "True" and ok["Ready"] == ("True", "Ready", "Models exposed through gw-ns/kgw")


def test_status_gateway_missing_names_the_field():
    st = desired_status("tenant", None, Observed(in_force_name="tenant", gateway=("g", "kgw")), NOW)
    assert conds(st)["GatewayFound"] == ("False", "GatewayNotFound", "spec.gateway: Gateway g/kgw not found")
    assert conds(st)["Ready"][:2] == ("False", "GatewayNotFound")


def test_status_conflict_only_ready_and_conflict_and_no_counts():
    stored = desired_status("young", None, Observed(in_force_name="young", models=2), NOW)
    st = desired_status("young", stored, Observed(in_force_name="old", models=2), NOW)
    c = conds(st)
    assert set(c) == {"Ready", "Conflict"} and c["Conflict"][0] == "True" and "old" in c["Conflict"][2]
    assert st["models"] == 0


def test_status_unchanged_is_equal_and_keeps_transition_times():
    seen = Observed(generation=1, in_force_name="tenant")
    first = desired_status("tenant", None, seen, NOW)
    again = desired_status("tenant", first, seen, NOW + timedelta(hours=1))
    assert again == first


def test_status_route_name_taken_is_reported():
    seen = Observed(in_force_name="tenant", gateway=("g", "kgw"), gateway_exists=True, taken=("model-x",))
    c = conds(desired_status("tenant", None, seen, NOW))
    assert c["RoutesAccepted"][:2] == ("False", "RouteNameTaken") and "model-x" in c["RoutesAccepted"][2]
    assert c["Ready"][:2] == ("False", "RoutesNotAccepted")
