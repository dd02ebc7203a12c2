"""KaiwoJob reconciler on the real kube-apiserver.

The operator runs in-process exactly as ``kaiwo-ctrl run`` wires it
(``kaiwo_ctrl.workloads.reconcile.controller.setup``). Kueue, KubeRay and the Job
controller are played by hand: the tests patch child statuses and create
Kueue Workloads, and watch the Kaiwo status go through the machine.
"""

from __future__ import annotations

import pytest

from test_workloads_support import (  # noqa: F401 - fixtures
    job_url,
    container,
    env_of,
    KUEUE,
    MERGE,
    TEST_IMAGE,
    admit,
    complete_job,
    conditions,
    create_kaiwo,
    eventually,
    fail_job,
    get,
    gpu_nodes,
    operator,
    patch_status,
    status_of,
    wait_event,
    wait_object,
    wait_status,
)

pytestmark = pytest.mark.integration





async def test_plain_job_goes_through_the_status_machine(operator, admin, namespace):
    kj = create_kaiwo(admin, "KaiwoJob", namespace, "plain", image="busybox:1.36", entrypoint="echo hello")
    uid = kj["metadata"]["uid"]
    job = await wait_object(admin, job_url(namespace, "plain"), what="child Job")
    # suspended for Kueue, labelled with the queue, owned by the KaiwoJob
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "kaiwo"
    assert job["metadata"]["labels"]["kaiwo.silogen.ai/run-id"] == uid
    (ref,) = job["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["uid"], ref["controller"], ref["blockOwnerDeletion"]) == ("KaiwoJob", uid, True, True)
    c = container(job)
    assert c["image"] == "busybox:1.36" and c["command"] == ["/bin/sh", "-c", "echo hello"]
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["ttlSecondsAfterFinished"] == 3600

    st = await wait_status(admin, "KaiwoJob", namespace, "plain", "PENDING")
    conds = conditions(st)
    assert conds["Schedulable"] == ("True", "Schedulable", "Workload does not require GPU resources")
    assert conds["Admitted"] == ("False", "Pending", "Workload is pending admission into 'kaiwo'")
    assert st["observedGeneration"] == kj["metadata"]["generation"]

    # LocalQueue kaiwo made in the namespace, owned (not controlled) by the ClusterQueue
    lq = await wait_object(admin, f"{KUEUE}/namespaces/{namespace}/localqueues/kaiwo", what="LocalQueue")
    assert lq["spec"]["clusterQueue"] == "kaiwo"
    assert [r["kind"] for r in lq["metadata"]["ownerReferences"]] == ["ClusterQueue"]
    assert not lq["metadata"]["ownerReferences"][0].get("controller")

    created = await wait_event(admin, namespace, "plain", "ResourceCreated")
    assert created["message"] in ("Created batch/v1, Kind=Job: plain", "Created kueue.x-k8s.io/v1beta2, Kind=LocalQueue: kaiwo")
    await wait_event(admin, namespace, "plain", "WorkloadPending")

    # Kueue admits; the Job has no pods yet (still PENDING) ...
    admit(admin, namespace, job)
    await eventually(
        lambda: conditions(status_of(admin, "KaiwoJob", namespace, "plain")).get("Admitted")
        == ("True", "Admitted", "Workload is admitted"),
        what="Admitted=True",
    )
    assert status_of(admin, "KaiwoJob", namespace, "plain")["status"] == "PENDING"
    # ... then a pod is active: STARTING
    patch_status(admin, job_url(namespace, "plain"), {"active": 1, "startTime": "2026-01-01T00:00:00Z"})
    await wait_status(admin, "KaiwoJob", namespace, "plain", "STARTING")
    await wait_event(admin, namespace, "plain", "WorkloadStarting")

    # pods ready: RUNNING with a start time
    patch_status(admin, job_url(namespace, "plain"), {"active": 1, "ready": 1, "startTime": "2026-01-01T00:00:00Z"})
    st = await wait_status(admin, "KaiwoJob", namespace, "plain", "RUNNING")
    assert st["startTime"]
    await wait_event(admin, namespace, "plain", "WorkloadRunning")

    # Kueue's suspend flip belongs to Kueue: an unsuspended Job is not suspended again
    admin.patch(job_url(namespace, "plain"), json={"spec": {"suspend": False}}, headers=MERGE)
    complete_job(admin, job_url(namespace, "plain"))
    st = await wait_status(admin, "KaiwoJob", namespace, "plain", "COMPLETE")
    assert st["completionTime"] and "duration" in st
    assert get(admin, job_url(namespace, "plain"))["spec"]["suspend"] is False
    await wait_event(admin, namespace, "plain", "WorkloadComplete")


async def test_failed_job_is_failed_and_terminal(operator, admin, namespace):
    create_kaiwo(admin, "KaiwoJob", namespace, "boom", image="busybox", entrypoint="exit 1")
    job = await wait_object(admin, job_url(namespace, "boom"))
    admit(admin, namespace, job)
    patch_status(admin, job_url(namespace, "boom"), {"active": 1, "startTime": "2026-01-01T00:00:00Z"})
    await wait_status(admin, "KaiwoJob", namespace, "boom", "STARTING")
    fail_job(admin, job_url(namespace, "boom"))
    st = await wait_status(admin, "KaiwoJob", namespace, "boom", "FAILED")
    assert st["completionTime"]
    ev = await wait_event(admin, namespace, "boom", "WorkloadFailed")
    assert ev["type"] == "Warning"


# --------------------------------------------------------------------------- children shapes


async def test_entrypoint_script_and_env_and_secrets(operator, admin, namespace):
    create_kaiwo(
        admin, "KaiwoJob", namespace, "scripted",
        image="python:3.12",
        entrypoint="#!/bin/bash\necho start \\\n  now\npython -c 'print(1)'",
        env=[{"name": "FOO", "value": "bar"},
             {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}],
        secretVolumes=[{"name": "cfg", "secretName": "app-config", "key": "config.json", "subPath": "config.json",
                        "mountPath": "/etc/app/config.json"}],
    )
    job = await wait_object(admin, job_url(namespace, "scripted"))
    c = container(job)
    assert c["command"] == ["/bin/bash", "-c", "echo start    now\npython -c 'print(1)'"]
    env = {e["name"]: e for e in c["env"]}
    assert env["FOO"]["value"] == "bar"
    assert env["TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "creds", "key": "token"}}
    assert {"NUM_GPUS", "NUM_REPLICAS", "NUM_GPUS_PER_REPLICA"} <= set(env)
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["cfg"]["secret"]["secretName"] == "app-config"
    assert volumes["cfg"]["secret"]["items"] == [{"key": "config.json", "path": "config.json"}]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["cfg"]["mountPath"] == "/etc/app/config.json" and mounts["cfg"]["subPath"] == "config.json"


async def test_user_supplied_job_spec_is_merged(operator, admin, namespace):
    user_job = {
        "spec": {
            "backoffLimit": 4,
            "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "trainer", "image": "python:3.12", "command": ["python", "-c", "print(42)"]}]}},
        }
    }
    create_kaiwo(admin, "KaiwoJob", namespace, "userjob", job=user_job)
    job = await wait_object(admin, job_url(namespace, "userjob"))
    c = container(job)
    assert (c["name"], c["image"], c["command"]) == ("trainer", "python:3.12", ["python", "-c", "print(42)"])
    assert job["spec"]["backoffLimit"] == 0  # no retries whatever the user asked
    assert job["spec"]["suspend"] is True
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels["kaiwo.silogen.ai/name"] == "userjob" and labels["kaiwo.silogen.ai/type"] == "job"
    await wait_status(admin, "KaiwoJob", namespace, "userjob", "PENDING")


async def test_gpu_job_on_simulated_gpu_nodes(operator, admin, namespace, gpu_nodes):
    create_kaiwo(admin, "KaiwoJob", namespace, "gpujob", image="rocm/pytorch", gpus=8, entrypoint="python train.py")
    job = await wait_object(admin, job_url(namespace, "gpujob"))
    c = container(job)
    assert c["resources"]["limits"]["amd.com/gpu"] == "8"
    assert c["resources"]["requests"]["amd.com/gpu"] == "8"
    assert env_of(c)["NUM_GPUS"] == "8" and env_of(c)["NUM_GPUS_PER_REPLICA"] == "8"
    st = await wait_status(admin, "KaiwoJob", namespace, "gpujob", "PENDING")
    assert conditions(st)["Schedulable"] == ("True", "Schedulable", "Cluster has sufficient GPU resources")


async def test_gpu_request_the_cluster_cannot_meet_is_error_and_creates_nothing(operator, admin, namespace, gpu_nodes):
    create_kaiwo(admin, "KaiwoJob", namespace, "toobig", image="rocm/pytorch", gpus=4096)
    st = await wait_status(admin, "KaiwoJob", namespace, "toobig", "ERROR")
    status, reason, message = conditions(st)["Schedulable"]
    assert (status, reason) == ("False", "InsufficientGPUs")
    assert "requested for 4096 GPUs (vendor: amd)" in message
    ev = await wait_event(admin, namespace, "toobig", "InsufficientGPUs")
    assert ev["type"] == "Warning"
    assert get(admin, job_url(namespace, "toobig")) is None


async def test_storage_and_download_gate_the_job(operator, admin, namespace):
    storage = {
        "storageEnabled": True,
        "data": {"storageSize": "1Gi", "mountPath": "/data", "download": {
            "s3": [{"endpointUrl": "http://minio:9000", "accessKeyId": {"secretName": "s3", "secretKey": "id"},
                    "secretKey": {"secretName": "s3", "secretKey": "key"},
                    "buckets": [{"name": "b", "files": [{"path": "a.txt", "targetPath": "a.txt"}]}]}]}},
    }
    create_kaiwo(admin, "KaiwoJob", namespace, "withdata", image="busybox", storage=storage,
                 env=[{"name": "HF_TOKEN", "value": "t"}])
    pvc_url = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/withdata-data"
    pvc = await wait_object(admin, pvc_url, what="data PVC")
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1Gi"
    cm = await wait_object(admin, f"/api/v1/namespaces/{namespace}/configmaps/withdata-download", what="download ConfigMap")
    assert "s3" in cm["data"]["config.yaml"]
    dl = await wait_object(admin, job_url(namespace, "withdata-download"), what="download Job")
    c = container(dl)
    assert c["image"] == TEST_IMAGE  # the operator's own image (KAIWO_CTRL_IMAGE)
    assert c["command"][:2] == ["kaiwo-ctrl", "download"]
    assert env_of(c)["HF_TOKEN"] == "t"
    st = await wait_status(admin, "KaiwoJob", namespace, "withdata", "DOWNLOADING")
    assert get(admin, job_url(namespace, "withdata")) is None, "main Job waits for the download"

    patch_status(admin, pvc_url, {"phase": "Bound"})
    patch_status(admin, job_url(namespace, "withdata-download"), {"active": 1, "ready": 1, "startTime": "2026-01-01T00:00:00Z"})
    await eventually(
        lambda: conditions(status_of(admin, "KaiwoJob", namespace, "withdata")).get("DownloadJobSucceeded", ("",))[0:2]
        == ("False", "JobInProgress"),
        what="download in progress",
    )
    assert conditions(status_of(admin, "KaiwoJob", namespace, "withdata"))["PvcReady"][:2] == ("True", "Bound")
    complete_job(admin, job_url(namespace, "withdata-download"))
    st = await wait_status(admin, "KaiwoJob", namespace, "withdata", "PENDING")
    assert conditions(st)["DownloadJobSucceeded"] == ("True", "JobCompleted", "Download job succeeded")
    job = await wait_object(admin, job_url(namespace, "withdata"), what="main Job after the download")
    mounts = {m["name"]: m["mountPath"] for m in container(job)["volumeMounts"]}
    assert mounts.get("data") == "/data"


async def test_failed_download_fails_the_workload(operator, admin, namespace):
    storage = {"storageEnabled": True, "huggingFace": {"storageSize": "1Gi", "preCacheRepos": [{"repoId": "org/model"}]}}
    create_kaiwo(admin, "KaiwoJob", namespace, "badhf", image="busybox", storage=storage)
    await wait_object(admin, job_url(namespace, "badhf-download"))
    fail_job(admin, job_url(namespace, "badhf-download"))
    st = await wait_status(admin, "KaiwoJob", namespace, "badhf", "FAILED")
    assert conditions(st)["DownloadJobSucceeded"][:2] == ("False", "JobFailed")
    assert get(admin, job_url(namespace, "badhf")) is None


async def test_ray_job(operator, admin, namespace):
    create_kaiwo(admin, "KaiwoJob", namespace, "rayjob", ray=True, image="rayproject/ray:2.40.0",
                 entrypoint="python -c 'import ray; ray.init()'")
    url = f"/apis/ray.io/v1/namespaces/{namespace}/rayjobs/rayjob"
    rj = await wait_object(admin, url, what="RayJob")
    assert rj["spec"]["entrypoint"] == "python -c 'import ray; ray.init()'"
    assert rj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "kaiwo"
    assert rj["metadata"]["ownerReferences"][0]["kind"] == "KaiwoJob"
    head = rj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["image"] == "rayproject/ray:2.40.0"
    await wait_status(admin, "KaiwoJob", namespace, "rayjob", "PENDING")
    admit(admin, namespace, rj)
    await wait_status(admin, "KaiwoJob", namespace, "rayjob", "STARTING")
    patch_status(admin, url, {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"})
    await wait_status(admin, "KaiwoJob", namespace, "rayjob", "RUNNING")
    patch_status(admin, url, {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    st = await wait_status(admin, "KaiwoJob", namespace, "rayjob", "COMPLETE")
    assert st["completionTime"]


async def test_job_not_controlled_by_the_kaiwojob_is_read_never_written(operator, admin, namespace):
    """A Job adopted through the webhook exists before its KaiwoJob and is
    not controlled by it: its status drives the KaiwoJob, but it is never changed."""
    body = {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "adopted", "labels": {"kaiwo.silogen.ai/managed": "true"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "c", "image": "busybox:old"}]}}}}
    r = admin.post(f"/apis/batch/v1/namespaces/{namespace}/jobs", json=body)
    assert r.status_code == 201, r.text
    create_kaiwo(admin, "KaiwoJob", namespace, "adopted", image="busybox:new", entrypoint="true")
    st = await wait_status(admin, "KaiwoJob", namespace, "adopted", "PENDING")
    assert "SpecChangeNotApplied" not in conditions(st)
    job = get(admin, job_url(namespace, "adopted"))
    assert not job["metadata"].get("ownerReferences")
    assert container(job)["image"] == "busybox:old" and "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"]
    complete_job(admin, job_url(namespace, "adopted"))
    await wait_status(admin, "KaiwoJob", namespace, "adopted", "COMPLETE")
    after = get(admin, job_url(namespace, "adopted"))
    assert container(after)["image"] == "busybox:old" and not after["metadata"].get("ownerReferences")
    managers = {m.get("manager") for m in after["metadata"].get("managedFields") or []}
    assert "kaiwo-ctrl" not in managers, f"the operator wrote to a Job it does not control: {managers}"
