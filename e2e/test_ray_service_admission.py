"""A Ray KaiwoService is admitted by the real Kueue through its AppWrapper.

Kueue's AppWrapper integration builds the Workload from the pod sets the AppWrapper
declares (``spec.components[].podSets``) and admits it. A pod-set key the CRD
does not define is pruned by the API server, and Kueue then refuses the
AppWrapper ("should have at least 1 items"): the service stayed PENDING for ever.
"""

from __future__ import annotations

import uuid

import pytest

from e2e.conftest import condition, get, wait_for

pytestmark = pytest.mark.e2e

NS = "ray-service-e2e"
KAIWO = "/apis/kaiwo.silogen.ai/v1alpha1"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
GPU = "amd.com/gpu"


def gpu_quota(admin) -> int:
    cq = get(admin, f"{KUEUE}/clusterqueues/kaiwo") or {"spec": {"resourceGroups": []}}
    return sum(int(r["nominalQuota"]) for g in cq["spec"]["resourceGroups"] for f in g["flavors"]
               for r in f["resources"] if r["name"] == GPU)


def test_ray_service_appwrapper_is_admitted_by_kueue(operator, admin):
    wait_for(lambda: gpu_quota(admin) >= 8, 120, "ClusterQueue kaiwo with GPU quota")
    r = admin.post("/api/v1/namespaces", json={"metadata": {"name": NS}})
    assert r.status_code in (201, 409), r.text
    name = f"raysvc-{uuid.uuid4().hex[:5]}"
    body = {
        "apiVersion": "kaiwo.silogen.ai/v1alpha1",
        "kind": "KaiwoService",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"user": "e2e@example.com", "image": "rayproject/ray:2.40.0", "gpus": 8, "ray": True,
                 "serveConfigV2": "applications:\n- name: app\n  import_path: model:app\n"},
    }
    r = admin.post(f"{KAIWO}/namespaces/{NS}/kaiwoservices", json=body)
    assert r.status_code == 201, r.text
    aw = wait_for(lambda: get(admin, f"/apis/workload.codeflare.dev/v1beta2/namespaces/{NS}/appwrappers/{name}"),
                  90, "the KaiwoService's AppWrapper")
    (component,) = aw["spec"]["components"]
    assert [ps["path"] for ps in component["podSets"]] == [
        "template.spec.rayClusterConfig.headGroupSpec.template",
        "template.spec.rayClusterConfig.workerGroupSpecs[0].template",
    ]

    def admitted():
        items = get(admin, f"{KUEUE}/namespaces/{NS}/workloads")["items"]
        mine = [w for w in items if w["metadata"]["name"].startswith(f"appwrapper-{name}-")]
        return mine and condition(mine[0], "Admitted").get("status") == "True" and mine[0]

    try:
        wl = wait_for(admitted, 120, "Kueue to create and admit the AppWrapper's Workload")
    except AssertionError as e:
        events = [(ev["reason"], ev["message"]) for ev in get(admin, f"/api/v1/namespaces/{NS}/events")["items"]
                  if ev["involvedObject"].get("name") == name]
        raise AssertionError(f"{e}\nevents: {events}") from None
    assert len(wl["spec"]["podSets"]) == 2, wl["spec"]["podSets"]
    gpus = sum(int((c.get("resources") or {}).get("limits", {}).get(GPU, 0)) * ps["count"]
               for ps in wl["spec"]["podSets"] for c in ps["template"]["spec"]["containers"])
    assert gpus == 8, wl["spec"]["podSets"]
    # Kueue starts what it admitted
    wait_for(lambda: not get(admin, f"/apis/workload.codeflare.dev/v1beta2/namespaces/{NS}/appwrappers/{name}")["spec"].get("suspend"),
             60, "Kueue to unsuspend the admitted AppWrapper")
    admin.delete(f"{KAIWO}/namespaces/{NS}/kaiwoservices/{name}")
