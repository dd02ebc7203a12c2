"""A Ray KaiwoService end to end on the simulated cluster: Kueue admits its AppWrapper,
the real AppWrapper controller creates the RayService, the real KubeRay runs it, and
the simulated Ray head (kaiwo_ctrl.local.raydashboard) reports its Serve
application RUNNING once the Pods are Ready, and writes the serve Service's
EndpointSlice KubeRay counts (kaiwo_ctrl.local.rayendpoints: TEST-NET addresses,
since the API server refuses the Pods' loopback IPs), so the RayService becomes
Ready and the KaiwoService READY; deleting the KaiwoService removes it all."""

from __future__ import annotations

import uuid

import pytest

from e2e.conftest import condition, get, wait_for
from e2e.test_ray_workloads import KAIWO, NS, ray_ns, ray_pods  # noqa: F401 - fixture

pytestmark = pytest.mark.e2e

AW = "/apis/workload.codeflare.dev/v1beta2"


def test_ray_service_in_appwrapper_runs_on_kuberay_and_is_removed_whole(ray_ns):
    admin = ray_ns
    name = f"raysvc-{uuid.uuid4().hex[:5]}"
    body = {
        "apiVersion": "kaiwo.silogen.ai/v1alpha1",
        "kind": "KaiwoService",
        "metadata": {"name": name, "namespace": NS, "labels": {"e2e-team": "ray-serve"},
                     "annotations": {"e2e.example.com/note": "propagated"}},
        "spec": {"user": "e2e@example.com", "image": "rayproject/ray:2.40.0", "gpus": 2, "ray": True,
                 "serveConfigV2": "applications:\n- name: app\n  import_path: model:app\n  route_prefix: /\n"
                                  "  deployments:\n  - name: Model\n"},
    }
    r = admin.post(f"{KAIWO}/namespaces/{NS}/kaiwoservices", json=body)
    assert r.status_code == 201, r.text

    def apps_running():
        rs = get(admin, f"/apis/ray.io/v1/namespaces/{NS}/rayservices/{name}")
        apps = (((rs or {}).get("status") or {}).get("activeServiceStatus") or {}).get("applicationStatuses") or {}
        return (apps.get("app") or {}).get("status") == "RUNNING"

    wait_for(apps_running, 240, "KubeRay to report the Serve application RUNNING")
    rs = get(admin, f"/apis/ray.io/v1/namespaces/{NS}/rayservices/{name}")
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "AppWrapper"  # made by the AppWrapper controller
    apps = rs["status"]["activeServiceStatus"]["applicationStatuses"]
    assert apps["app"]["status"] == "RUNNING", apps
    pods = ray_pods(admin, name)
    assert pods["head"] and pods["worker"], pods
    for p in pods["head"] + pods["worker"]:
        assert p["metadata"]["labels"].get("e2e-team") == "ray-serve", p["metadata"]["labels"]
        assert p["metadata"]["annotations"].get("e2e.example.com/note") == "propagated", p["metadata"]["annotations"]
    aw = get(admin, f"{AW}/namespaces/{NS}/appwrappers/{name}")
    assert aw["status"]["phase"] == "Running", aw["status"]

    def kaiwo_status() -> str:
        return ((get(admin, f"{KAIWO}/namespaces/{NS}/kaiwoservices/{name}") or {}).get("status") or {}).get("status") or ""

    try:
        wait_for(lambda: kaiwo_status() == "READY", 180, "the KaiwoService READY")
    except AssertionError as e:
        seen = {"rayservice": (get(admin, f"/apis/ray.io/v1/namespaces/{NS}/rayservices/{name}") or {}).get("status"),
                "services": [(x["metadata"]["name"], x["metadata"].get("labels")) for x in get(admin, f"/api/v1/namespaces/{NS}/services")["items"]],
                "slices": get(admin, f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices")["items"]}
        raise AssertionError(f"{e}; {seen}") from None
    rs = get(admin, f"/apis/ray.io/v1/namespaces/{NS}/rayservices/{name}")
    assert condition(rs, "Ready").get("status") == "True" and rs["status"]["numServeEndpoints"] >= 1, rs["status"]
    # the endpoints KubeRay counted: the Ready Pods the serve Service selects, at never-routed
    # TEST-NET-1 addresses (RFC 5737); nothing may dial them
    slices = get(admin, f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices?labelSelector=kubernetes.io/service-name")["items"]
    serve = [e for s in slices if s["metadata"]["labels"]["kubernetes.io/service-name"].startswith(name) for e in s.get("endpoints") or []]
    uids = {p["metadata"]["uid"] for p in pods["head"] + pods["worker"]}
    assert serve and all(e["addresses"][0].startswith("192.0.2.") and e["targetRef"]["uid"] in uids for e in serve), serve

    r = admin.delete(f"{KAIWO}/namespaces/{NS}/kaiwoservices/{name}")
    assert r.status_code == 200, r.text

    def all_gone():
        left = [get(admin, f"{AW}/namespaces/{NS}/appwrappers/{name}"), get(admin, f"/apis/ray.io/v1/namespaces/{NS}/rayservices/{name}")]
        clusters = [c for c in get(admin, f"/apis/ray.io/v1/namespaces/{NS}/rayclusters")["items"] if c["metadata"]["name"].startswith(name)]
        return not any(left) and not clusters and not any(ray_pods(admin, name).values())

    wait_for(all_gone, 120, "the AppWrapper, RayService, RayCluster and Pods to be removed")
