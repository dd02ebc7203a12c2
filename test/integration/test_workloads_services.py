"""KaiwoService reconciler on the real kube-apiserver.

No Deployment controller, Kueue, AppWrapper or KubeRay operator runs: the
tests create the Pods, Kueue Workloads and RayService those would, and patch
statuses by hand.
"""

from __future__ import annotations

import pytest

from test_workloads_support import (  # noqa: F401 - fixtures
    dep_url,
    container,
    env_of,
    MERGE,
    admit,
    conditions,
    create_kaiwo,
    eventually,
    get,
    gpu_nodes,
    kaiwo_url,
    operator,
    patch_status,
    status_of,
    wait_event,
    wait_object,
    wait_status,
)

pytestmark = pytest.mark.integration





def make_pod(admin, ns: str, svc: dict, index: int) -> dict:
    """What the Deployment controller would create (the pods Kueue admits one by one)."""
    meta = svc["metadata"]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-pod-{index}",
            "labels": {
                "kaiwo.silogen.ai/run-id": meta["uid"],
                "kaiwo.silogen.ai/name": meta["name"],
                "kaiwo.silogen.ai/type": "service",
                "app": meta["name"],
            },
        },
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    r = admin.post(f"/api/v1/namespaces/{ns}/pods", json=body)
    assert r.status_code == 201, r.text
    return r.json()


async def test_deployment_service_goes_to_ready(operator, admin, namespace):
    svc = create_kaiwo(admin, "KaiwoService", namespace, "web", image="nginx:1.27", entrypoint="nginx -g 'daemon off;'",
                       replicas=2, env=[{"name": "MODE", "value": "prod"}])
    dep = await wait_object(admin, dep_url(namespace, "web"), what="Deployment")
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["selector"]["matchLabels"] == {"app": "web"}
    tlabels = dep["spec"]["template"]["metadata"]["labels"]
    assert tlabels["kueue.x-k8s.io/queue-name"] == "kaiwo" and tlabels["app"] == "web"
    assert tlabels["kaiwo.silogen.ai/run-id"] == svc["metadata"]["uid"]
    assert dep["metadata"]["ownerReferences"][0]["kind"] == "KaiwoService"
    c = container(dep)
    assert c["image"] == "nginx:1.27" and c["command"] == ["/bin/sh", "-c", "nginx -g 'daemon off;'"]
    assert env_of(c)["MODE"] == "prod"
    st = await wait_status(admin, "KaiwoService", namespace, "web", "PENDING")
    assert conditions(st)["Admitted"][:2] == ("False", "Pending")

    # Kueue admits each pod: one admitted pod and one waiting is still PENDING
    pods = [make_pod(admin, namespace, svc, i) for i in range(2)]
    admit(admin, namespace, pods[0])
    admit(admin, namespace, pods[1], admitted=False)
    await eventually(lambda: operator.reconcilers["KaiwoService"].shared.workloads.list(namespace)
                     and len(operator.reconcilers["KaiwoService"].shared.workloads.list(namespace)) == 2,
                     what="workloads cached")
    assert status_of(admin, "KaiwoService", namespace, "web")["status"] == "PENDING"
    admit(admin, namespace, pods[1])
    await wait_status(admin, "KaiwoService", namespace, "web", "STARTING")

    gen = get(admin, dep_url(namespace, "web"))["metadata"]["generation"]
    patch_status(admin, dep_url(namespace, "web"), {"observedGeneration": gen, "replicas": 2, "readyReplicas": 1,
                                                    "availableReplicas": 1, "updatedReplicas": 2})
    st = await wait_status(admin, "KaiwoService", namespace, "web", "RUNNING")
    assert st["startTime"]
    patch_status(admin, dep_url(namespace, "web"), {"observedGeneration": gen, "replicas": 2, "readyReplicas": 2,
                                                    "availableReplicas": 2, "updatedReplicas": 2})
    await wait_status(admin, "KaiwoService", namespace, "web", "READY")
    await wait_event(admin, namespace, "web", "WorkloadReady")

    # a missed progress deadline is ERROR, and recovers
    patch_status(admin, dep_url(namespace, "web"), {"conditions": [{
        "type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "too slow",
        "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    await wait_status(admin, "KaiwoService", namespace, "web", "ERROR")
    patch_status(admin, dep_url(namespace, "web"), {"conditions": [{
        "type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable", "message": "ok",
        "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    await wait_status(admin, "KaiwoService", namespace, "web", "READY")


async def test_service_spec_edits_reach_the_deployment(operator, admin, namespace):
    create_kaiwo(admin, "KaiwoService", namespace, "edit", image="nginx:1.26", replicas=1,
                 env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    dep = await wait_object(admin, dep_url(namespace, "edit"))
    uid = dep["metadata"]["uid"]
    r = admin.patch(kaiwo_url("KaiwoService", namespace, "edit"),
                    json={"spec": {"image": "nginx:1.27", "replicas": 3, "env": [{"name": "A", "value": "10"}]}},
                    headers=MERGE)
    assert r.status_code == 200, r.text

    def updated():
        d = get(admin, dep_url(namespace, "edit"))
        c = container(d)
        return d["spec"]["replicas"] == 3 and c["image"] == "nginx:1.27" and env_of(c).get("A") == "10" and d

    d = await eventually(updated, what="Deployment follows the spec")
    assert "B" not in env_of(container(d)), "a removed env variable is removed"
    assert d["metadata"]["uid"] == uid, "updated in place, not recreated"
    assert "SpecChangeNotApplied" not in conditions(status_of(admin, "KaiwoService", namespace, "edit"))
    # someone edits the Deployment by hand: the operator puts its fields back
    admin.patch(dep_url(namespace, "edit"), json={"spec": {"replicas": 7}}, headers=MERGE)
    await eventually(lambda: get(admin, dep_url(namespace, "edit"))["spec"]["replicas"] == 3, what="drift repaired")


async def test_user_supplied_deployment(operator, admin, namespace):
    user = {"spec": {"template": {"spec": {"containers": [
        {"name": "server", "image": "python:3.12", "command": ["python", "-m", "http.server"],
         "ports": [{"containerPort": 8000}]}]}}}}
    create_kaiwo(admin, "KaiwoService", namespace, "userdep", deployment=user, replicas=2)
    dep = await wait_object(admin, dep_url(namespace, "userdep"))
    c = container(dep)
    assert (c["name"], c["image"], c["command"]) == ("server", "python:3.12", ["python", "-m", "http.server"])
    assert c["ports"][0]["containerPort"] == 8000
    assert dep["spec"]["replicas"] == 2 and dep["spec"]["selector"]["matchLabels"]["app"] == "userdep"
    assert dep["spec"]["template"]["spec"]["restartPolicy"] == "Always"
    await wait_status(admin, "KaiwoService", namespace, "userdep", "PENDING")


async def test_gpu_service_on_simulated_nodes(operator, admin, namespace, gpu_nodes):
    create_kaiwo(admin, "KaiwoService", namespace, "infer", image="rocm/vllm", gpus=16)
    dep = await wait_object(admin, dep_url(namespace, "infer"))
    assert dep["spec"]["replicas"] == 2  # 16 GPUs on 8-GPU nodes: two replicas of 8
    c = container(dep)
    assert c["resources"]["limits"]["amd.com/gpu"] == "8"
    assert env_of(c)["NUM_GPUS"] == "16" and env_of(c)["NUM_REPLICAS"] == "2"


async def test_ray_service_in_an_appwrapper(operator, admin, namespace):
    serve = "applications:\n- name: app\n  import_path: model:app\n"
    create_kaiwo(admin, "KaiwoService", namespace, "raysvc", ray=True, image="rayproject/ray:2.40.0", serveConfigV2=serve)
    aw_url = f"/apis/workload.codeflare.dev/v1beta2/namespaces/{namespace}/appwrappers/raysvc"
    aw = await wait_object(admin, aw_url, what="AppWrapper")
    assert aw["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "kaiwo"
    assert aw["metadata"]["ownerReferences"][0]["kind"] == "KaiwoService"
    (component,) = aw["spec"]["components"]
    # read back as the API server stored it: a key the CRD does not define is pruned
    assert component["podSets"] == [
        {"replicas": 1, "path": "template.spec.rayClusterConfig.headGroupSpec.template"},
        {"replicas": 1, "path": "template.spec.rayClusterConfig.workerGroupSpecs[0].template"},
    ], component
    template = component["template"]
    assert template["kind"] == "RayService" and template["spec"]["serveConfigV2"] == serve
    await wait_status(admin, "KaiwoService", namespace, "raysvc", "PENDING")

    admit(admin, namespace, aw)
    await wait_status(admin, "KaiwoService", namespace, "raysvc", "STARTING")
    # the AppWrapper controller creates the RayService; KubeRay reports it ready
    rs = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "raysvc", "labels": template["metadata"].get("labels", {}), "ownerReferences": [
            {"apiVersion": aw["apiVersion"], "kind": "AppWrapper", "name": "raysvc", "uid": aw["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}]},
        "spec": template["spec"],
    }
    r = admin.post(f"/apis/ray.io/v1/namespaces/{namespace}/rayservices", json=rs)
    assert r.status_code == 201, r.text
    rs_url = f"/apis/ray.io/v1/namespaces/{namespace}/rayservices/raysvc"
    patch_status(admin, rs_url, {"conditions": [{"type": "Ready", "status": "True", "reason": "RayServiceReady",
                                                 "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    st = await wait_status(admin, "KaiwoService", namespace, "raysvc", "READY")
    assert st["startTime"]
