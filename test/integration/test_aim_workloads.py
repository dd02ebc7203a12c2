"""AIMNamespaceConfig credentials and pull secrets on Kaiwo workloads, on the
real kube-apiserver: the download Job of a KaiwoJob, the pod templates of Jobs
and Deployments, precedence against the object's own credentials, live changes
(SpecChangeNotApplied for an immutable Job template) and config deletion."""

from __future__ import annotations

import pytest

from test_workloads_support import (  # noqa: F401 - fixtures
    MERGE,
    conditions,
    create_kaiwo,
    dep_url,
    eventually,
    get,
    job_url,
    operator,
    status_of,
    wait_object,
    wait_status,
)

pytestmark = pytest.mark.integration

AIM = "/apis/config.kaiwo.silogen.ai/v1alpha1"


def ref(name: str, key: str) -> dict:
    return {"secretName": name, "secretKey": key}


CREDENTIALS = {
    "huggingFaceToken": ref("hf-creds", "token"),
    "s3": [
        {"endpointUrl": "https://s3.us-east-1.amazonaws.com", "accessKeyId": ref("aws-creds", "accessKeyId"),
         "secretAccessKey": ref("aws-creds", "secretAccessKey")},
        {"endpointUrl": "http://minio.storage:9000", "accessKeyId": ref("minio-creds", "id"),
         "secretAccessKey": ref("minio-creds", "secret")},
    ],
    "gcs": [{"applicationCredentials": ref("gcp-creds", "key.json")}],
    "azureBlob": [{"connectionString": ref("az-creds", "connection")}],
}


def config_url(ns: str, name: str | None = None) -> str:
    base = f"{AIM}/namespaces/{ns}/aimnamespaceconfigs"
    return f"{base}/{name}" if name else base


def create_config(admin, ns: str, name: str = "tenant", **spec) -> dict:
    body = {"apiVersion": "config.kaiwo.silogen.ai/v1alpha1", "kind": "AIMNamespaceConfig",
            "metadata": {"name": name}, "spec": spec}
    r = admin.post(config_url(ns), json=body)
    assert r.status_code == 201, r.text
    return r.json()


def bucket() -> list[dict]:
    return [{"name": "b", "files": [{"path": "x", "targetPath": "x"}]}]


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


def secret_volumes(pod: dict) -> dict[str, dict]:
    return {v["secret"]["secretName"]: v["secret"] for v in pod.get("volumes") or [] if "secret" in v}


def env_refs(pod: dict) -> dict[str, dict]:
    return {e["name"]: e.get("valueFrom", {}).get("secretKeyRef") or e.get("value")
            for e in pod["containers"][0].get("env") or []}


async def test_download_job_gets_namespace_credentials(operator, admin, namespace):
    create_config(admin, namespace, credentials=CREDENTIALS)
    storage = {
        "storageEnabled": True,
        "data": {"storageSize": "1Gi", "download": {
            "s3": [{"endpointUrl": "http://MINIO.storage:9000/", "buckets": bucket()}],
            "gcs": [{"applicationCredentials": {}, "buckets": bucket()}],
            "azureBlob": [{"connectionString": {}, "containers": bucket()}],
        }},
        "huggingFace": {"storageSize": "1Gi", "preCacheRepos": [{"repoId": "org/model"}]},
    }
    create_kaiwo(admin, "KaiwoJob", namespace, "dl", image="busybox", storage=storage)
    job = await wait_object(admin, job_url(namespace, "dl-download"), what="download Job")
    pod = pod_spec(job)
    # the S3 entry matching the item's endpoint (scheme, host, port), not the other one
    volumes = secret_volumes(pod)
    assert set(volumes) == {"minio-creds", "gcp-creds", "az-creds"}
    assert volumes["minio-creds"]["items"] == [{"key": "id", "path": "id"}, {"key": "secret", "path": "secret"}]
    assert volumes["gcp-creds"]["items"] == [{"key": "key.json", "path": "key.json"}]
    assert env_refs(pod)["HF_TOKEN"] == {"name": "hf-creds", "key": "token"}
    # the downloader reads each credential from its mounted file
    cm = get(admin, f"/api/v1/namespaces/{namespace}/configmaps/dl-download")
    text = cm["data"]["config.yaml"]
    for path in ("/app/secrets/minio-creds/id", "/app/secrets/gcp-creds/key.json", "/app/secrets/az-creds/connection"):
        assert path in text
    assert "aws-creds" not in text


async def test_object_credentials_take_precedence(operator, admin, namespace):
    create_config(admin, namespace, credentials=CREDENTIALS)
    storage = {
        "storageEnabled": True,
        "data": {"storageSize": "1Gi", "download": {"s3": [{
            "endpointUrl": "http://minio.storage:9000", "accessKeyId": ref("own", "id"), "secretKey": ref("own", "key"),
            "buckets": bucket()}]}},
        "huggingFace": {"storageSize": "1Gi", "preCacheRepos": [{"repoId": "org/model"}]},
    }
    own_token = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "own-hf", "key": "t"}}}
    create_kaiwo(admin, "KaiwoJob", namespace, "own", image="busybox", storage=storage, env=[own_token])
    pod = pod_spec(await wait_object(admin, job_url(namespace, "own-download"), what="download Job"))
    assert set(secret_volumes(pod)) == {"own"}
    hf = [e for e in pod["containers"][0]["env"] if e["name"] == "HF_TOKEN"]
    assert hf == [own_token]


async def test_pull_secrets_on_jobs_and_deployments_and_live_changes(operator, admin, namespace):
    create_config(admin, namespace, images={"imagePullSecrets": ["regcred", "mine"]})
    create_kaiwo(admin, "KaiwoJob", namespace, "job", image="busybox", entrypoint="sleep 1",
                 imagePullSecrets=[{"name": "mine"}])
    create_kaiwo(admin, "KaiwoService", namespace, "svc", image="busybox", entrypoint="sleep 1")
    job = await wait_object(admin, job_url(namespace, "job"), what="Job")
    assert pod_spec(job)["imagePullSecrets"] == [{"name": "mine"}, {"name": "regcred"}]
    dep = await wait_object(admin, dep_url(namespace, "svc"), what="Deployment")
    assert pod_spec(dep)["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mine"}]
    await wait_status(admin, "KaiwoJob", namespace, "job", "PENDING")

    # a change applies live: the Deployment rolls, the Job's template is immutable
    r = admin.patch(config_url(namespace, "tenant"), json={"spec": {"images": {"imagePullSecrets": ["regcred", "mine", "new"]}}},
                    headers=MERGE)
    assert r.status_code == 200, r.text
    await eventually(lambda: {"name": "new"} in pod_spec(get(admin, dep_url(namespace, "svc")))["imagePullSecrets"],
                     what="Deployment gets the new pull secret")
    st = await eventually(lambda: (s := status_of(admin, "KaiwoJob", namespace, "job"))
                          and "SpecChangeNotApplied" in conditions(s) and s, what="SpecChangeNotApplied on the Job")
    value, reason, message = conditions(st)["SpecChangeNotApplied"]
    assert (value, reason) == ("True", "ImmutableFieldChanged") and "imagePullSecrets" in message
    assert get(admin, job_url(namespace, "job"))["metadata"]["uid"] == job["metadata"]["uid"]

    # a deleted config stops applying
    assert admin.delete(config_url(namespace, "tenant")).status_code == 200
    create_kaiwo(admin, "KaiwoJob", namespace, "after", image="busybox", entrypoint="sleep 1")
    after = await wait_object(admin, job_url(namespace, "after"), what="Job after the config was deleted")
    assert "imagePullSecrets" not in pod_spec(after)
    # the Deployment's template can change: the config's pull secrets leave it
    await eventually(lambda: not {"regcred", "new"} & {s["name"] for s in pod_spec(get(admin, dep_url(namespace, "svc"))).get("imagePullSecrets") or []},
                     what="the Deployment loses the deleted config's pull secrets")
    # The running Job keeps the pull secret it was created with, which no longer applies: it still
    # differs from what its spec now gives, so SpecChangeNotApplied stays, naming the field.
    await eventually(lambda: (c := conditions(status_of(admin, "KaiwoJob", namespace, "job")).get("SpecChangeNotApplied"))
                     and c[0] == "True" and "imagePullSecrets" in c[2],
                     what="the Job still reports the pull secret it keeps after the config is gone")


async def test_oldest_config_applies(operator, admin, namespace):
    create_config(admin, namespace, "aaa-first", images={"imagePullSecrets": ["first"]})
    create_config(admin, namespace, "zzz-second", images={"imagePullSecrets": ["second"]})
    create_kaiwo(admin, "KaiwoJob", namespace, "j", image="busybox", entrypoint="sleep 1")
    job = await wait_object(admin, job_url(namespace, "j"), what="Job")
    assert pod_spec(job)["imagePullSecrets"] == [{"name": "first"}]


async def test_credentials_change_on_an_existing_download_job_is_reported(operator, admin, namespace):
    storage = {"storageEnabled": True, "huggingFace": {"storageSize": "1Gi", "preCacheRepos": [{"repoId": "org/model"}]}}
    create_kaiwo(admin, "KaiwoJob", namespace, "late", image="busybox", storage=storage)
    job = await wait_object(admin, job_url(namespace, "late-download"), what="download Job")
    assert "HF_TOKEN" not in env_refs(pod_spec(job))
    create_config(admin, namespace, credentials={"huggingFaceToken": ref("hf-creds", "token")})
    st = await eventually(lambda: (s := status_of(admin, "KaiwoJob", namespace, "late"))
                          and "SpecChangeNotApplied" in conditions(s) and s, what="SpecChangeNotApplied")
    value, reason, message = conditions(st)["SpecChangeNotApplied"]
    assert (value, reason) == ("True", "ImmutableFieldChanged") and "HF_TOKEN" in message
    assert get(admin, job_url(namespace, "late-download"))["metadata"]["uid"] == job["metadata"]["uid"]
