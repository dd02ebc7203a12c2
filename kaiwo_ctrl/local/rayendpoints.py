"""Serve endpoints of the simulated cluster's RayServices, so KubeRay can call one READY.

KubeRay v1.6.2 marks a RayService Ready once it counts a ready Serve endpoint
(``calculateNumServeEndpointsFromSlices`` in its RayService controller): it lists
the EndpointSlices labelled ``kubernetes.io/service-name=<serve Service>`` and counts
the distinct ``targetRef`` UIDs of endpoints whose ``Ready`` condition is true. It
never reads their addresses.

The EndpointSlice controller cannot write those slices here: the simulated Pods'
IPs are loopback (127.64.0.0/16, :data:`.components.POD_CIDR`), which the API
server refuses in an EndpointSlice. So this loop (run by the simulated Ray head's
process) writes one slice per KubeRay serve Service (label ``ray.io/serve``),
managed by this simulation (the EndpointSlice controller leaves alone slices it
does not manage) and owned by the Service (the garbage collector removes it with
the Service). It holds one endpoint per Pod the Service selects: the Pod as
``targetRef``, the Pod's readiness as ``Ready``, and a TEST-NET-1 address
(192.0.2.0/24, RFC 5737: for documentation, never routed). Nothing connects to
those addresses: KubeRay only counts the endpoints, and the simulated Serve health
check stays on the head Pod's loopback IP (:mod:`.raydashboard`).

Not simulated: kube-proxy (nothing routes the serve Service's ClusterIP), more than
:data:`MAX_ENDPOINTS` Pods per Service, dual-stack slices.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.runtime.api.apitypes import ApiError
from kaiwo_ctrl.runtime.api.client import Client

log = logging.getLogger("kaiwo_ctrl.local.rayendpoints")
MANAGED_BY = "simulated-ray-serve.kaiwo-ctrl.local"  # a label value: no "/"
SERVICE_NAME = "kubernetes.io/service-name"
#: endpoints written per slice, and serve Services handled per pass, at most
MAX_ENDPOINTS = 100
MAX_SERVICES = 500
SLICES = "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"


def _ready(pod: Mapping[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def desired_slice(svc: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The EndpointSlice of a serve Service: its selected Pods, TEST-NET addresses."""
    meta = svc["metadata"]
    live = sorted((p for p in pods if not p["metadata"].get("deletionTimestamp")), key=lambda p: p["metadata"]["name"])
    endpoints = [{
        # RFC 5737 TEST-NET-1: never routed, and nothing here dials it
        "addresses": [f"192.0.2.{i % 254 + 1}"],
        "conditions": {"ready": _ready(p), "serving": _ready(p), "terminating": False},
        "targetRef": {"kind": "Pod", "namespace": meta["namespace"], "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]},
    } for i, p in enumerate(live[:MAX_ENDPOINTS])]
    ports = [{"name": pt.get("name", ""), "protocol": pt.get("protocol", "TCP"),
              "port": pt["targetPort"] if isinstance(pt.get("targetPort"), int) else pt["port"]}
             for pt in (svc.get("spec") or {}).get("ports") or []]
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"{meta['name']}-simulated", "namespace": meta["namespace"],
                     "labels": {SERVICE_NAME: meta["name"], "endpointslice.kubernetes.io/managed-by": MANAGED_BY},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": meta["name"], "uid": meta["uid"],
                                          "controller": True, "blockOwnerDeletion": True}]},
        "addressType": "IPv4", "endpoints": endpoints, "ports": ports,
    }


def _differs(have: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    return any(have.get(k) != want[k] for k in ("endpoints", "ports")) or \
        (have["metadata"].get("ownerReferences") or [{}])[0].get("uid") != want["metadata"]["ownerReferences"][0]["uid"]


async def sync_serve_slices(client: Client) -> None:
    """One pass: write each serve Service's slice where it differs, drop orphans."""
    services = await client.request("GET", "/api/v1/services", params={"labelSelector": "ray.io/serve", "limit": str(MAX_SERVICES)}, timeout=10)
    mine = await client.request("GET", "/apis/discovery.k8s.io/v1/endpointslices",
                                params={"labelSelector": f"endpointslice.kubernetes.io/managed-by={MANAGED_BY}", "limit": str(MAX_SERVICES)},
                                timeout=10)
    have = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in (mine or {}).get("items", [])}
    wanted: set[tuple[str, str]] = set()
    for svc in (services or {}).get("items", []):
        selector = (svc.get("spec") or {}).get("selector") or {}
        if not selector:
            continue
        ns = svc["metadata"]["namespace"]
        sel = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        pods = await client.request("GET", f"/api/v1/namespaces/{ns}/pods", params={"labelSelector": sel, "limit": str(MAX_ENDPOINTS)}, timeout=10)
        want = desired_slice(svc, (pods or {}).get("items", []))
        key = (ns, want["metadata"]["name"])
        wanted.add(key)
        cur = have.get(key)
        if cur is None:
            await client.request("POST", SLICES.format(ns=ns), body=want, timeout=10)
        elif _differs(cur, want):
            want["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
            await client.request("PUT", f"{SLICES.format(ns=ns)}/{key[1]}", body=want, timeout=10)
    for ns, name in set(have) - wanted:
        await client.request("DELETE", f"{SLICES.format(ns=ns)}/{name}", timeout=10)


async def sync_once(client: Client) -> None:
    """:func:`sync_serve_slices`, logging (never raising) what the API server refused."""
    try:
        await sync_serve_slices(client)
    except (ApiError, OSError, KeyError, TypeError, ValueError) as e:
        log.warning("serve EndpointSlices: %s", e)
