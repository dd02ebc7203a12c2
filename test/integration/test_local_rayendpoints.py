"""The simulated Ray head's serve EndpointSlices (kaiwo_ctrl.local.rayendpoints) on a real
API server: one slice per KubeRay serve Service, an endpoint per selected Pod with the Pod as
targetRef and its readiness, TEST-NET-1 addresses only, nothing written when nothing changed,
and the slice dropped with its Service."""

from __future__ import annotations

from kaiwo_ctrl.local import rayendpoints

SLICES = "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"


def _pod(admin, ns: str, name: str, ready: bool) -> dict:
    body = {"metadata": {"name": name, "labels": {"ray.io/cluster": "c1", "ray.io/serve": "true"}},
            "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.40.0"}]}}
    r = admin.post(f"/api/v1/namespaces/{ns}/pods", json=body)
    assert r.status_code == 201, r.text
    pod = r.json()
    pod["status"] = {"phase": "Running", "podIP": "127.64.0.9",
                     "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    r = admin.put(f"/api/v1/namespaces/{ns}/pods/{name}/status", json=pod)
    assert r.status_code == 200, r.text
    return r.json()


async def test_serve_service_gets_a_slice_kuberay_counts(admin, client, namespace):
    ns = namespace
    svc = {"metadata": {"name": "rs-serve-svc", "labels": {"ray.io/serve": "rs-serve", "ray.io/originated-from-crd": "RayService"}},
           "spec": {"selector": {"ray.io/cluster": "c1", "ray.io/serve": "true"},
                    "ports": [{"name": "serve", "port": 8000, "targetPort": 8000}]}}
    r = admin.post(f"/api/v1/namespaces/{ns}/services", json=svc)
    assert r.status_code == 201, r.text
    other = {"metadata": {"name": "plain"}, "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]}}
    assert admin.post(f"/api/v1/namespaces/{ns}/services", json=other).status_code == 201
    ready = _pod(admin, ns, "head", ready=True)
    not_ready = _pod(admin, ns, "worker", ready=False)

    await rayendpoints.sync_serve_slices(client)
    mine = admin.get(SLICES.format(ns=ns), params={"labelSelector": f"endpointslice.kubernetes.io/managed-by={rayendpoints.MANAGED_BY}"}).json()["items"]
    assert [s["metadata"]["labels"]["kubernetes.io/service-name"] for s in mine] == ["rs-serve-svc"]  # not the plain Service
    eps = {e["targetRef"]["uid"]: e for e in mine[0]["endpoints"]}
    assert set(eps) == {ready["metadata"]["uid"], not_ready["metadata"]["uid"]}
    assert eps[ready["metadata"]["uid"]]["conditions"]["ready"] is True and eps[not_ready["metadata"]["uid"]]["conditions"]["ready"] is False
    assert all(a.startswith("192.0.2.") for e in eps.values() for a in e["addresses"])  # TEST-NET-1 only, never the Pod's IP
    assert mine[0]["ports"] == [{"name": "serve", "protocol": "TCP", "port": 8000}]
    rv = mine[0]["metadata"]["resourceVersion"]

    await rayendpoints.sync_serve_slices(client)  # nothing changed: nothing written
    assert admin.get(f"{SLICES.format(ns=ns)}/{mine[0]['metadata']['name']}").json()["metadata"]["resourceVersion"] == rv

    assert admin.delete(f"/api/v1/namespaces/{ns}/services/rs-serve-svc").status_code == 200
    await rayendpoints.sync_serve_slices(client)  # no garbage collector here: the loop drops orphans itself
    assert admin.get(SLICES.format(ns=ns), params={"labelSelector": f"endpointslice.kubernetes.io/managed-by={rayendpoints.MANAGED_BY}"}).json()["items"] == []
