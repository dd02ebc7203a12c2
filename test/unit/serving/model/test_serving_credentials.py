"""AIMNamespaceConfig credentials and pull secrets on Model Pods, loader Jobs and
adapter sidecars (pure builders), and the loader-failure status."""

from __future__ import annotations

from kaiwo_ctrl.serving.model.cache import job_failure, loader_job
from kaiwo_ctrl.serving.model.config import parse_config
from kaiwo_ctrl.serving.model.pods import build_pod
from kaiwo_ctrl.serving.model.status import desired_status


def model(env: dict | None = None, **spec) -> dict:
    base = {"url": "hf://org/repo", "engine": "VLLM", "features": [], "resourceProfile": "cpu:1"}
    base.update(spec)
    if env is not None:
        base["env"] = env
    return {"apiVersion": "kubeai.org/v1", "kind": "Model",
            "metadata": {"name": "m", "namespace": "ns", "uid": "u-1", "generation": 1}, "spec": base}


def ref(name: str, key: str = "k") -> dict:
    return {"secretName": name, "secretKey": key}


NS_CONFIG = {
    "apiVersion": "config.kaiwo.silogen.ai/v1alpha1",
    "kind": "AIMNamespaceConfig",
    "metadata": {"name": "tenant", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
    "spec": {
        "credentials": {
            "huggingFaceToken": ref("ns-hf", "token"),
            "s3": [
                {"endpointUrl": "https://minio.a:9000", "accessKeyId": ref("s3-a", "id"), "secretAccessKey": ref("s3-a", "secret")},
                {"endpointUrl": "https://minio.b", "accessKeyId": ref("s3-b", "id"), "secretAccessKey": ref("s3-b", "secret")},
            ],
            "gcs": [{"applicationCredentials": ref("ns-gcs", "key.json")}],
            "azureBlob": [{"connectionString": ref("ns-az", "conn")}],
        },
        "images": {"imagePullSecrets": ["ns-pull", "shared-pull"]},
    },
}


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env") or ()}


def secret_of(var: dict) -> tuple[str, str]:
    sel = var["valueFrom"]["secretKeyRef"]
    return sel["name"], sel["key"]


def server(pod: dict) -> dict:
    return pod["spec"]["containers"][0]


def test_namespace_hf_token_beats_system_secret_names():
    c = parse_config(None)
    plain = env_of(server(build_pod(model(), c).pod))
    assert secret_of(plain["HF_TOKEN"]) == ("kubeai-huggingface", "token")
    assert plain["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is True
    with_ns = env_of(server(build_pod(model(), c, NS_CONFIG).pod))
    assert secret_of(with_ns["HF_TOKEN"]) == ("ns-hf", "token")
    assert "optional" not in with_ns["HF_TOKEN"]["valueFrom"]["secretKeyRef"]


def test_model_own_env_wins_over_namespace_and_system():
    pod = build_pod(model(env={"HF_TOKEN": "mine"}), parse_config(None), NS_CONFIG).pod
    hf = [e for e in server(pod)["env"] if e["name"] == "HF_TOKEN"]
    assert hf == [{"name": "HF_TOKEN", "value": "mine"}]  # exactly one, the Model's own


def test_s3_entry_chosen_by_model_endpoint():
    c = parse_config({"cacheProfiles": {"f": {"sharedFilesystem": {"storageClassName": "s"}}}})
    m = model(env={"AWS_ENDPOINT_URL": "https://MINIO.b:443/"}, url="s3://bucket/llm", cacheProfile="f")
    env = env_of(server(build_pod(m, c, NS_CONFIG).pod))
    assert secret_of(env["AWS_ACCESS_KEY_ID"]) == ("s3-b", "id") and secret_of(env["AWS_SECRET_ACCESS_KEY"]) == ("s3-b", "secret")
    assert env["AWS_ENDPOINT_URL"] == {"name": "AWS_ENDPOINT_URL", "value": "https://MINIO.b:443/"}
    job_env = env_of(loader_job(m, c, NS_CONFIG)["spec"]["template"]["spec"]["containers"][0])
    assert secret_of(job_env["AWS_ACCESS_KEY_ID"]) == ("s3-b", "id")
    # an endpoint no entry matches falls back to the system secret
    other = model(env={"AWS_ENDPOINT_URL": "https://elsewhere"}, url="s3://bucket/llm", cacheProfile="f")
    assert secret_of(env_of(server(build_pod(other, c, NS_CONFIG).pod))["AWS_ACCESS_KEY_ID"]) == ("kubeai-aws", "accessKeyID")


def test_gcs_key_file_on_loader_job_and_pod():
    c = parse_config({"cacheProfiles": {"f": {"sharedFilesystem": {"storageClassName": "s"}}}})
    m = model(url="gs://bucket/llm", cacheProfile="f")
    job = loader_job(m, c, NS_CONFIG)
    pod_spec = job["spec"]["template"]["spec"]
    loader = pod_spec["containers"][0]
    assert env_of(loader)["GOOGLE_APPLICATION_CREDENTIALS"]["value"] == "/secrets/aim-gcs-credentials/credentials.json"
    vol = next(v for v in pod_spec["volumes"] if v["name"] == "aim-gcs-credentials")
    assert vol["secret"]["secretName"] == "ns-gcs" and vol["secret"]["items"] == [{"key": "key.json", "path": "credentials.json"}]
    assert {"name": "aim-gcs-credentials", "mountPath": "/secrets/aim-gcs-credentials", "readOnly": True} in loader["volumeMounts"]
    assert pod_spec["volumes"][0]["name"] == "model" and pod_spec["imagePullSecrets"] == [{"name": "ns-pull"}, {"name": "shared-pull"}]
    names = [v["name"] for v in build_pod(m, c, NS_CONFIG).pod["spec"]["volumes"]]
    assert "aim-gcs-credentials" in names and "gcp-credentials" not in names


def test_adapter_sidecar_gets_every_scheme_and_shares_volumes():
    c = parse_config(None)
    pod = build_pod(model(adapters=[{"name": "a", "url": "gs://b/a"}]), c, NS_CONFIG).pod
    loader = pod["spec"]["containers"][1]
    env = env_of(loader)
    assert secret_of(env["HF_TOKEN"]) == ("ns-hf", "token")
    assert secret_of(env["OSS_ACCESS_KEY_ID"]) == ("kubeai-alibaba", "accessKeyID")  # system layer only
    assert env["GOOGLE_APPLICATION_CREDENTIALS"]["value"].startswith("/secrets/aim-gcs-credentials/")
    names = [v["name"] for v in pod["spec"]["volumes"]]
    assert len(names) == len(set(names))
    # S3 with two entries and no endpoint on the Model: ambiguous, so the system secret
    assert secret_of(env["AWS_ACCESS_KEY_ID"]) == ("kubeai-aws", "accessKeyID")


def test_pull_secrets_after_system_ones_deduplicated():
    c = parse_config({"modelServerPods": {"imagePullSecrets": [{"name": "shared-pull"}, {"name": "sys"}]}})
    pod = build_pod(model(), c, NS_CONFIG).pod
    assert pod["spec"]["imagePullSecrets"] == [{"name": "shared-pull"}, {"name": "sys"}, {"name": "ns-pull"}]
    assert "imagePullSecrets" not in build_pod(model(), parse_config(None)).pod["spec"]


def test_config_change_changes_hash_and_unrelated_change_does_not():
    c = parse_config(None)
    base = build_pod(model(), c, NS_CONFIG).hash
    assert build_pod(model(), c).hash != base
    rotated = {**NS_CONFIG, "spec": {**NS_CONFIG["spec"], "credentials": {"huggingFaceToken": ref("other", "token")}}}
    assert build_pod(model(), c, rotated).hash != base
    gateway_only = {**NS_CONFIG, "spec": {**NS_CONFIG["spec"], "gateway": {"name": "gw"}}}
    assert build_pod(model(), c, gateway_only).hash == base


def test_azure_env_for_az_adapter_scheme_on_loader_job():
    from kaiwo_ctrl.aim.credentials import for_model

    add = for_model(NS_CONFIG, model(), url="az://container/path")
    assert [secret_of(e) for e in add.env] == [("ns-az", "conn")] and add.layer == "namespace"


def test_failed_loader_job_sets_cache_loaded_false_naming_it():
    job = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                      "message": "Job has reached the specified backoff limit"}]}}
    failure = job_failure(job)
    assert failure == "BackoffLimitExceeded: Job has reached the specified backoff limit"
    assert job_failure({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}) is None
    msg = f"loader Job load-cache-m failed: {failure}"
    st = desired_status(model(cacheProfile="f"), pods=None, config_error=None, cache_loaded=False, cache_error=msg)
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["CacheLoaded"]["status"] == "False" and conds["CacheLoaded"]["reason"] == "LoaderFailed"
    assert "load-cache-m" in conds["CacheLoaded"]["message"]
    assert conds["Ready"]["reason"] == "CacheLoadFailed"


def test_render_applies_namespace_config(tmp_path, capsys):
    import yaml

    from kaiwo_ctrl.cli import main

    m = {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": "m", "namespace": "ns"},
         "spec": {"url": "hf://o/r", "engine": "VLLM", "features": [], "resourceProfile": "cpu:1", "minReplicas": 1}}
    cfg = {k: v for k, v in NS_CONFIG.items() if k != "metadata"} | {"metadata": {"name": "tenant", "namespace": "ns"}}
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump_all([cfg, m]))
    assert main(["render", str(f)]) == 0
    pods = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d["kind"] == "Pod"]
    assert len(pods) == 1 and pods[0]["spec"]["imagePullSecrets"] == [{"name": "ns-pull"}, {"name": "shared-pull"}]
    assert secret_of(env_of(server(pods[0]))["HF_TOKEN"]) == ("ns-hf", "token")


def test_evict_job_gets_pull_secrets_but_no_credentials():
    from kaiwo_ctrl.serving.model.cache import evict_job

    spec = evict_job(model(cacheProfile="f"), parse_config(None), NS_CONFIG)["spec"]["template"]["spec"]
    assert spec["imagePullSecrets"] == [{"name": "ns-pull"}, {"name": "shared-pull"}]
    assert "env" not in spec["containers"][0] and [v["name"] for v in spec["volumes"]] == ["model"]
    assert "imagePullSecrets" not in evict_job(model(cacheProfile="f"), parse_config(None))["spec"]["template"]["spec"]
