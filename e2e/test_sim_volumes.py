"""Volumes on the simulated cluster: claims bind to pre-made PersistentVolumes and
protected claims and volumes go away once unused, as on a real cluster.

Nothing provisions volumes on the plane, but a StorageClass without a provisioner
and static PersistentVolumes are what many real clusters use, and what upstream
Kaiwo's download tests need (their claims name the ``rwx-nfs`` class;
``hack/upstream-chainsaw/kind-test-env.yaml`` supplies it with static volumes).
Before the plane's controller-manager ran the volume binder and the two protection
controllers, such a claim stayed Pending for ever (so a KaiwoJob with storage stayed
DOWNLOADING), and a deleted claim kept its ``kubernetes.io/pvc-protection``
finalizer, which held its namespace terminating.
"""

from __future__ import annotations

import uuid

import pytest

from e2e.conftest import get, wait_for

pytestmark = pytest.mark.e2e


def test_claim_binds_to_a_static_volume_and_is_released_when_unused(admin):
    tag = uuid.uuid4().hex[:6]
    ns, sc, pv, pvc, node = f"sim-vol-{tag}", f"static-{tag}", f"static-pv-{tag}", "data", f"sim-vol-node-{tag}"
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    r = admin.post("/apis/storage.k8s.io/v1/storageclasses", json={
        "metadata": {"name": sc}, "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate"})
    assert r.status_code == 201, r.text
    r = admin.post("/api/v1/persistentvolumes", json={"metadata": {"name": pv}, "spec": {
        "storageClassName": sc, "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany"],
        "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/tmp/{pv}"}}})
    assert r.status_code == 201, r.text
    r = admin.post(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", json={"metadata": {"name": pvc}, "spec": {
        "storageClassName": sc, "accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
    assert r.status_code == 201, r.text
    claim_path, volume_path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{pvc}", f"/api/v1/persistentvolumes/{pv}"
    try:
        # the binder pairs them: the claim Bound to the volume, the volume's claimRef the claim
        claim = wait_for(lambda: (c := get(admin, claim_path)) and c.get("status", {}).get("phase") == "Bound" and c,
                         60, f"claim {pvc} Bound")
        assert claim["spec"]["volumeName"] == pv
        volume = get(admin, volume_path)
        assert volume["spec"]["claimRef"]["name"] == pvc and volume["spec"]["claimRef"]["namespace"] == ns

        # a Pod on a kwok Node uses the claim: deleting the claim then waits for the Pod
        r = admin.post("/api/v1/nodes", json={"metadata": {
            "name": node, "annotations": {"kwok.x-k8s.io/node": "fake"}, "labels": {"type": "kwok"}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"},
                       "capacity": {"cpu": "4", "memory": "8Gi", "pods": "10"}}})
        assert r.status_code == 201, r.text
        r = admin.post(f"/api/v1/namespaces/{ns}/pods", json={"metadata": {"name": "user"}, "spec": {
            "nodeName": node, "containers": [{"name": "c", "image": "busybox",
                                              "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": pvc}}]}})
        assert r.status_code == 201, r.text
        wait_for(lambda: (get(admin, f"/api/v1/namespaces/{ns}/pods/user") or {}).get("status", {}).get("phase") == "Running",
                 60, "the claim's Pod Running")
        assert admin.delete(claim_path).status_code == 200
        claim = get(admin, claim_path)
        assert claim and claim["metadata"].get("deletionTimestamp"), claim  # protected while in use
        assert "kubernetes.io/pvc-protection" in claim["metadata"]["finalizers"]

        # unused: the protection controller lets the claim go; the volume is Released, then deletable
        assert admin.delete(f"/api/v1/namespaces/{ns}/pods/user", params={"gracePeriodSeconds": "0"}).status_code == 200
        wait_for(lambda: get(admin, claim_path) is None, 60, f"claim {pvc} deleted once unused")
        wait_for(lambda: (get(admin, volume_path) or {}).get("status", {}).get("phase") == "Released", 60, f"{pv} Released")
        assert admin.delete(volume_path).status_code == 200
        wait_for(lambda: get(admin, volume_path) is None, 60, f"{pv} deleted")
    finally:
        admin.delete(f"/api/v1/namespaces/{ns}/pods/user", params={"gracePeriodSeconds": "0"})
        admin.delete(claim_path)
        admin.delete(volume_path)
        admin.delete(f"/apis/storage.k8s.io/v1/storageclasses/{sc}")
        admin.delete(f"/api/v1/nodes/{node}")
        admin.delete(f"/api/v1/namespaces/{ns}")
