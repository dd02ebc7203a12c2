"""The namespace's AIMNamespaceConfig in the Kaiwo builders: download Job
credentials (per item, by endpoint), HF_TOKEN, and pull secrets on pod templates."""

from __future__ import annotations

from kaiwo_ctrl.workloads.reconcile.desired import desired_children
from kaiwo_ctrl.workloads.base.world import World

QUEUES = {"clusterQueues": [{"name": "kaiwo"}]}


def ref(name, key):
    return {"secretName": name, "secretKey": key}


AIM = {"credentials": {
    "huggingFaceToken": ref("hf", "token"),
    "s3": [{"endpointUrl": "http://a:9000", "accessKeyId": ref("a", "id"), "secretAccessKey": ref("a", "secret")},
           {"endpointUrl": "http://b:9000", "accessKeyId": ref("b", "id"), "secretAccessKey": ref("b", "secret")}],
}, "images": {"imagePullSecrets": ["regcred"]}}


def world(aim=None):
    return World.from_dicts(nodes=None, queue_config=QUEUES, aim_configs={"ns": aim} if aim else {})


def kjob(**spec):
    spec.setdefault("user", "test@amd.com")
    spec.setdefault("image", "busybox")
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": 1}, "spec": spec}


STORAGE = {"storageEnabled": True,
           "data": {"storageSize": "1Gi", "download": {"s3": [{"endpointUrl": "http://b:9000/", "buckets": [{"name": "x"}]}]}},
           "huggingFace": {"storageSize": "1Gi", "preCacheRepos": [{"repoId": "org/m"}]}}


def download_job(children):
    return next(c for c in children if c["kind"] == "Job" and c["metadata"]["name"].endswith("download"))


def test_download_job_gets_the_matching_s3_entry_and_hf_token():
    job = download_job(desired_children(kjob(storage=STORAGE), world(AIM)))
    pod = job["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0].get("env", [])}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf", "key": "token"}
    assert {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v} == {
        "secret-b": {"secretName": "b", "items": [{"key": "id", "path": "id"}, {"key": "secret", "path": "secret"}]}}


def test_object_credentials_win():
    own = {**STORAGE, "data": {"storageSize": "1Gi", "download": {"s3": [{
        "endpointUrl": "http://b:9000", "accessKeyId": ref("mine", "id"), "secretKey": ref("mine", "s"),
        "buckets": [{"name": "x"}]}]}}}
    job = download_job(desired_children(kjob(storage=own, env=[{"name": "HF_TOKEN", "value": "t"}]), world(AIM)))
    pod = job["spec"]["template"]["spec"]
    assert [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v] == ["mine"]
    assert [e for e in pod["containers"][0]["env"] if e["name"] == "HF_TOKEN"] == [{"name": "HF_TOKEN", "value": "t"}]


def test_pull_secrets_appended_deduplicated_and_empty_without_config():
    (job,) = desired_children(kjob(imagePullSecrets=[{"name": "regcred"}, {"name": "mine"}]), world(AIM))
    assert job["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mine"}]
    (job,) = desired_children(kjob(), world(AIM))
    assert job["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    # always set, so a secret removed from the config is removed from an updatable template too
    (job,) = desired_children(kjob(), world())
    assert job["spec"]["template"]["spec"]["imagePullSecrets"] == []
