"""Gateway exposure of Models (pure): the HTTPRoute per Model, the
ReferenceGrant per tenant namespace, and what route status says.

* HTTPRoute ``model-<name>`` in the Model's namespace, controlled by the Model,
  attached to the config's Gateway (namespace defaults to the config's), with
  one rule: PathPrefix ``/<namespace>/<model>`` -> Service ``kaiwo-proxy-gateway``,
  port 8001, in the operator's namespace, setting the header
  ``X-Kaiwo-Route-Token`` to the namespace's route token. That port is the
  proxy's fenced Gateway listener: it serves ``/<namespace>/<model>/v1/...``
  only with ``<namespace>``'s token, so this route reaches only its own
  namespace's Models, whatever other routes a tenant writes (:mod:`.fence`).
  No path rewriting is needed.
* A cross-namespace backendRef is only allowed by a ReferenceGrant in the
  target namespace: one per tenant namespace, in the operator's namespace,
  named ``aim-routes-<namespace>``, labelled with the tenant namespace. A grant
  cannot name a port, so it names only ``kaiwo-proxy-gateway``, a Service that
  exposes nothing but the fenced listener (the in-cluster listener, port 80 of
  ``kaiwo-proxy``, is behind no Service a grant names); the token keeps a
  tenant's own routes from another namespace's Models.
* The Gateway list: ConfigMap ``kaiwo-aim-gateways`` in the operator's namespace,
  one key ``<gateway namespace>.<gateway name>`` per Gateway any config names
  (a namespace has no dot, so the key is unambiguous). It is the param of the
  ``aim-route-paths`` admission policy (config/policy/route_paths.yaml).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from kaiwo_ctrl.runtime.objects.ownership import owner_reference
from kaiwo_ctrl.runtime.objects.objpath import meta as _meta
from kaiwo_ctrl.aim.fence import TOKEN_HEADER

GATEWAY_GROUP = "gateway.networking.k8s.io"
ROUTE_API = f"{GATEWAY_GROUP}/v1"
#: v1beta1 is served by every Gateway API release that has ReferenceGrant
#: (v1 only since 1.5), so gateways on older clusters understand it too.
GRANT_API = f"{GATEWAY_GROUP}/v1beta1"
#: The Service of the proxy's Gateway listener alone, and its port (the in-cluster listener is kaiwo-proxy:80).
PROXY_SERVICE, PROXY_GATEWAY_PORT = "kaiwo-proxy-gateway", 8001
#: The ConfigMap listing the AIM Gateways (the aim-route-paths policy's param).
GATEWAY_LIST = "kaiwo-aim-gateways"
ROUTE_PREFIX = "model-"
GRANT_PREFIX = "aim-routes-"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
MANAGED_BY = "kaiwo-ctrl"
#: On a ReferenceGrant: the tenant namespace whose routes it admits.
LABEL_TENANT = "aim.kaiwo.silogen.ai/tenant-namespace"
#: On an HTTPRoute: the AIMNamespaceConfig it was made for.
LABEL_CONFIG = "aim.kaiwo.silogen.ai/config"

Obj = Mapping[str, Any]
_CM_KEY = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\.[a-z0-9]([-.a-z0-9]*[a-z0-9])?")


def route_name(model: str) -> str:
    # Model names are DNS-1123 labels (<= 63 chars in practice for Pods); a
    # route name may be a 253-char subdomain, so the prefix always fits.
    return f"{ROUTE_PREFIX}{model}"


def grant_name(tenant_namespace: str) -> str:
    return f"{GRANT_PREFIX}{tenant_namespace}"


def gateway_of(config: Obj) -> tuple[str, str] | None:
    """(namespace, name) of the config's Gateway, or None when exposure is off."""
    gw = (config.get("spec") or {}).get("gateway") or {}
    name = (gw.get("name") or "").strip()
    if not name:
        return None
    return ((gw.get("namespace") or "").strip() or _meta(config).get("namespace") or "", name)


def desired_route(model: Obj, config: Obj, operator_namespace: str, token: str) -> dict[str, Any]:
    """The route of ``model``; ``token`` is its namespace's route token (``fence.route_token``)."""
    meta = _meta(model)
    ns, name = meta.get("namespace") or "", meta.get("name") or ""
    gw_ns, gw_name = gateway_of(config) or ("", "")
    return {
        "apiVersion": ROUTE_API,
        "kind": "HTTPRoute",
        "metadata": {
            "name": route_name(name),
            "namespace": ns,
            "labels": {LABEL_MANAGED: MANAGED_BY, LABEL_CONFIG: _meta(config).get("name") or ""},
            "ownerReferences": [owner_reference(dict(model))],
        },
        "spec": {
            "parentRefs": [{"group": GATEWAY_GROUP, "kind": "Gateway", "namespace": gw_ns, "name": gw_name}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": f"/{ns}/{name}"}}],
                    # "set" replaces any value a client sent
                    "filters": [{"type": "RequestHeaderModifier",
                                 "requestHeaderModifier": {"set": [{"name": TOKEN_HEADER, "value": token}]}}],
                    "backendRefs": [
                        {"group": "", "kind": "Service", "name": PROXY_SERVICE, "namespace": operator_namespace,
                         "port": PROXY_GATEWAY_PORT}
                    ],
                }
            ],
        },
    }


def desired_grant(tenant_namespace: str, operator_namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": GRANT_API,
        "kind": "ReferenceGrant",
        "metadata": {
            "name": grant_name(tenant_namespace),
            "namespace": operator_namespace,
            "labels": {LABEL_MANAGED: MANAGED_BY, LABEL_TENANT: tenant_namespace},
        },
        "spec": {
            "from": [{"group": GATEWAY_GROUP, "kind": "HTTPRoute", "namespace": tenant_namespace}],
            "to": [{"group": "", "kind": "Service", "name": PROXY_SERVICE}],
        },
    }


def desired_gateway_list(configs: Iterable[Obj], operator_namespace: str) -> dict[str, Any]:
    """The ConfigMap naming every Gateway some config names (keys ``<namespace>.<name>``)."""
    data = {f"{gw[0]}.{gw[1]}": "" for c in configs if not _meta(c).get("deletionTimestamp") and (gw := gateway_of(c))}
    # a config naming no valid Gateway (its status says so) must not make the list unwritable for all
    data = {k: v for k, v in data.items() if len(k) <= 253 and _CM_KEY.fullmatch(k)}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": GATEWAY_LIST, "namespace": operator_namespace,
                         "labels": {LABEL_MANAGED: MANAGED_BY}},
            "data": dict(sorted(data.items()))}


def is_ours(obj: Obj) -> bool:
    return (_meta(obj).get("labels") or {}).get(LABEL_MANAGED) == MANAGED_BY


def route_accepted(route: Obj, gateway: tuple[str, str]) -> bool | None:
    """Accepted condition of the route's status entry for ``gateway``:
    True/False, or None when no gateway controller has reported yet."""
    gw_ns, gw_name = gateway
    route_ns = _meta(route).get("namespace") or ""
    for parent in (route.get("status") or {}).get("parents") or ():
        ref = parent.get("parentRef") or {}
        if ref.get("name") != gw_name or (ref.get("namespace") or route_ns) != gw_ns:
            continue
        for cond in parent.get("conditions") or ():
            if cond.get("type") == "Accepted":
                return cond.get("status") == "True"
    return None


def not_accepted(routes: Iterable[Obj], gateway: tuple[str, str]) -> tuple[list[str], list[str]]:
    """(names refused, names without a verdict yet), each sorted."""
    refused, waiting = [], []
    for r in routes:
        verdict = route_accepted(r, gateway)
        if verdict is False:
            refused.append(_meta(r).get("name") or "")
        elif verdict is None:
            waiting.append(_meta(r).get("name") or "")
    return sorted(refused), sorted(waiting)


def names_list(names: list[str], limit: int = 10) -> str:
    """A bounded, human list of names."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
