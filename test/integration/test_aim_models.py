"""AIMNamespaceConfig credentials and pull secrets on Models, on the real
kube-apiserver: server Pods, cache loader Jobs and adapter sidecars; precedence
against the Model's own env and the system config's ``secretNames``; a config
change rolls the Pods through the spec hash; a deleted config stops applying.

No kubelet or Job controller runs: loader Jobs are completed through
``jobs/status``."""

from __future__ import annotations

import pytest

from test_aim_workloads import CREDENTIALS, config_url, create_config
from test_serving_cache import complete_job, get_or_none
from test_serving_support import (  # noqa: F401 - fixtures
    MERGE,
    create_model,
    eventually,
    list_pods,
    serving_op,
    server,
    wait_pods,
)

pytestmark = pytest.mark.integration


def secret_env(container: dict) -> dict[str, tuple[str, str] | str]:
    """name -> (secret, key) for Secret references, or the literal value."""
    out: dict[str, tuple[str, str] | str] = {}
    for e in container.get("env") or []:
        sel = (e.get("valueFrom") or {}).get("secretKeyRef")
        out[e["name"]] = (sel["name"], sel["key"]) if sel else e.get("value")
    return out


def secret_volumes(pod_spec: dict) -> dict[str, str]:
    return {v["name"]: v["secret"]["secretName"] for v in pod_spec.get("volumes") or [] if "secret" in v}


async def loader_job(admin, ns: str, model: str) -> dict:
    url = f"/apis/batch/v1/namespaces/{ns}/jobs/load-cache-{model}"
    return await eventually(lambda: get_or_none(admin, url), what=f"loader Job of {model}")


async def test_credentials_on_model_pods_and_loader_jobs(serving_op, admin, namespace):
    create_config(admin, namespace, credentials=CREDENTIALS)
    create_model(admin, namespace, "hf")
    create_model(admin, namespace, "minio", url="s3://bucket/llm", cacheProfile="fast",
                 env={"AWS_ENDPOINT_URL": "http://MINIO.storage:9000/"})
    create_model(admin, namespace, "gcs", url="gs://bucket/llm", cacheProfile="fast")

    [pod] = await wait_pods(admin, namespace, "hf", 1)
    assert secret_env(server(pod))["HF_TOKEN"] == ("hf-creds", "token")

    # S3: of two entries, the one whose endpoint matches the Model's AWS_ENDPOINT_URL
    job = await loader_job(admin, namespace, "minio")
    env = secret_env(job["spec"]["template"]["spec"]["containers"][0])
    assert env["AWS_ACCESS_KEY_ID"] == ("minio-creds", "id") and env["AWS_SECRET_ACCESS_KEY"] == ("minio-creds", "secret")
    assert env["AWS_ENDPOINT_URL"] == "http://MINIO.storage:9000/"
    complete_job(admin, namespace, "load-cache-minio")
    [pod] = await wait_pods(admin, namespace, "minio", 1)
    assert secret_env(server(pod))["AWS_ACCESS_KEY_ID"] == ("minio-creds", "id")

    # GCS: the key mounted as a file, GOOGLE_APPLICATION_CREDENTIALS pointing at it
    job = await loader_job(admin, namespace, "gcs")
    spec = job["spec"]["template"]["spec"]
    loader = spec["containers"][0]
    path = secret_env(loader)["GOOGLE_APPLICATION_CREDENTIALS"]
    mount = next(m for m in loader["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    assert secret_volumes(spec)[mount["name"]] == "gcp-creds"
    complete_job(admin, namespace, "load-cache-gcs")
    [pod] = await wait_pods(admin, namespace, "gcs", 1)
    assert secret_env(server(pod))["GOOGLE_APPLICATION_CREDENTIALS"] == path
    assert secret_volumes(pod["spec"])[mount["name"]] == "gcp-creds"


async def test_adapter_sidecar_gets_namespace_credentials(serving_op, admin, namespace):
    create_config(admin, namespace, credentials=CREDENTIALS)
    create_model(admin, namespace, "lora", adapters=[{"name": "a", "url": "gs://bucket/adapter"}])
    [pod] = await wait_pods(admin, namespace, "lora", 1)
    loader = next(c for c in pod["spec"]["containers"] if c["name"] == "loader")
    env = secret_env(loader)
    assert env["HF_TOKEN"] == ("hf-creds", "token") and "GOOGLE_APPLICATION_CREDENTIALS" in env
    names = [v["name"] for v in pod["spec"]["volumes"]]
    assert len(names) == len(set(names)) and "gcp-creds" in secret_volumes(pod["spec"]).values()


async def test_model_env_wins_then_namespace_then_system(serving_op, admin, namespace):
    create_model(admin, namespace, "before")  # no config yet: the system config's secretNames
    [pod] = await wait_pods(admin, namespace, "before", 1)
    assert secret_env(server(pod))["HF_TOKEN"] == ("hf-secret", "token")

    create_config(admin, namespace, credentials=CREDENTIALS)
    create_model(admin, namespace, "own", env={"HF_TOKEN": "set-by-the-model"})
    [pod] = await wait_pods(admin, namespace, "own", 1)
    hf = [e for e in server(pod)["env"] if e["name"] == "HF_TOKEN"]
    assert hf == [{"name": "HF_TOKEN", "value": "set-by-the-model"}]
    # the config created after the first Model rolls it onto the namespace secret
    await wait_pods(admin, namespace, "before", 1, what="the Pod rolled onto the namespace token",
                    pred=lambda p: secret_env(server(p))["HF_TOKEN"] == ("hf-creds", "token"))


async def test_pull_secrets_roll_and_config_deletion(serving_op, admin, namespace):
    create_config(admin, namespace, credentials={"huggingFaceToken": {"secretName": "hf-creds", "secretKey": "token"}},
                  images={"imagePullSecrets": ["regcred"]})
    create_model(admin, namespace, "m")
    [first] = await wait_pods(admin, namespace, "m", 1, pred=lambda p: p["spec"].get("imagePullSecrets"))
    assert first["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    h1 = first["metadata"]["labels"]["pod-hash"]

    r = admin.patch(config_url(namespace, "tenant"), json={"spec": {"images": {"imagePullSecrets": ["regcred", "mirror"]}}},
                    headers=MERGE)
    assert r.status_code == 200, r.text
    [second] = await wait_pods(admin, namespace, "m", 1, what="the Pod rolled onto the new pull secrets",
                               pred=lambda p: p["metadata"]["labels"]["pod-hash"] != h1)
    assert second["spec"]["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    assert second["metadata"]["name"].startswith(f"model-m-{second['metadata']['labels']['pod-hash']}-")

    # deleting the config stops applying it: the Pod rolls back onto the system config
    assert admin.delete(config_url(namespace, "tenant")).status_code == 200
    [third] = await wait_pods(admin, namespace, "m", 1, what="the Pod rolled once the config is gone",
                              pred=lambda p: not p["spec"].get("imagePullSecrets"))
    assert secret_env(server(third))["HF_TOKEN"] == ("hf-secret", "token")
