"""kaiwo_ctrl.aim.effective and kaiwo_ctrl.aim.credentials (pure)."""

from __future__ import annotations

import pytest

from api.config.v1alpha1 import AIMNamespaceConfigSpec
from kaiwo_ctrl.aim import credentials as c
from kaiwo_ctrl.aim.effective import effective_by_namespace, effective_spec, resolve


def cfg(name: str, created: str, ns: str = "team", **spec) -> dict:
    return {"kind": "AIMNamespaceConfig", "metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
            "spec": spec}


def ref(name: str, key: str) -> dict:
    return {"secretName": name, "secretKey": key}


SPEC = {
    "credentials": {
        "huggingFaceToken": ref("hf", "token"),
        "s3": [
            {"endpointUrl": "https://s3.us-east-1.amazonaws.com", "accessKeyId": ref("aws", "id"),
             "secretAccessKey": ref("aws", "secret")},
            {"endpointUrl": "http://minio.store:9000", "accessKeyId": ref("minio", "id"),
             "secretAccessKey": ref("minio", "secret")},
        ],
        "gcs": [{"applicationCredentials": ref("gcp", "key.json")}],
        "azureBlob": [{"connectionString": ref("az", "conn")}],
    },
    "images": {"imagePullSecrets": ["regcred", "other"]},
}


def secret_of(env: dict) -> tuple[str, str]:
    sel = env["valueFrom"]["secretKeyRef"]
    return sel["name"], sel["key"]


# --------------------------------------------------------------------------- effective


def test_oldest_config_wins_then_name():
    a, b, d = cfg("b", "2026-01-01T00:00:00Z"), cfg("a", "2026-01-01T00:00:00Z"), cfg("old", "2025-01-01T00:00:00Z")
    res = resolve([a, b, d])
    assert res.effective_name == "old"
    assert [x["metadata"]["name"] for x in res.conflicting] == ["a", "b"]
    assert resolve([a, b]).effective_name == "a"  # same second: by name
    assert res.conflicts_with("b") and not res.conflicts_with("old")


def test_deleting_config_never_applies_and_none_is_empty():
    gone = cfg("old", "2025-01-01T00:00:00Z")
    gone["metadata"]["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    assert resolve([gone, cfg("new", "2026-01-01T00:00:00Z")]).effective_name == "new"
    assert resolve([]).effective is None and effective_spec([]) is None


def test_effective_by_namespace_groups():
    out = effective_by_namespace([cfg("x", "2026-01-02T00:00:00Z", "a", images={}), cfg("y", "2026-01-01T00:00:00Z", "a"),
                                  cfg("z", "2026-01-03T00:00:00Z", "b")])
    assert {ns: o["metadata"]["name"] for ns, o in out.items()} == {"a": "y", "b": "z"}


# --------------------------------------------------------------------------- sources


def test_hf_token_from_namespace_config_as_secret_key_ref():
    add = c.for_source(SPEC, "hf://org/model")
    assert add.layer == "namespace"
    assert [e["name"] for e in add.env] == ["HF_TOKEN"] and secret_of(add.env[0]) == ("hf", "token")
    assert "value" not in add.env[0] and "optional" not in add.env[0]["valueFrom"]["secretKeyRef"]


@pytest.mark.parametrize(
    ("endpoint", "secret"),
    [
        ("http://minio.store:9000", "minio"),
        ("HTTP://Minio.Store:9000/", "minio"),  # scheme/host case, trailing path ignored
        ("https://s3.us-east-1.amazonaws.com:443", "aws"),  # default port
        ("https://s3.us-east-1.amazonaws.com", "aws"),
    ],
)
def test_s3_entry_chosen_by_endpoint(endpoint, secret):
    add = c.for_source(SPEC, "s3://bucket/m", endpoint=endpoint)
    assert {e["name"]: secret_of(e) for e in add.env} == {
        "AWS_ACCESS_KEY_ID": (secret, "id"), "AWS_SECRET_ACCESS_KEY": (secret, "secret")}


@pytest.mark.parametrize("endpoint", ["https://minio.store:9000", "http://minio.store", "http://other:9000"])
def test_s3_endpoint_mismatch_by_scheme_host_or_port_gives_nothing(endpoint):
    assert not c.for_source(SPEC, "s3://bucket/m", endpoint=endpoint)


def test_s3_single_entry_applies_without_endpoint_and_sets_endpoint():
    one = {"credentials": {"s3": [SPEC["credentials"]["s3"][1]]}}
    add = c.for_source(one, "s3://bucket/m")
    names = {e["name"]: e for e in add.env}
    assert names["AWS_ENDPOINT_URL"]["value"] == "http://minio.store:9000"
    assert secret_of(names["AWS_ACCESS_KEY_ID"]) == ("minio", "id")
    # two entries with endpoints and none on the source: ambiguous, nothing applies
    assert not c.for_source(SPEC, "s3://bucket/m")


def test_s3_incomplete_entry_is_ignored():
    half = {"credentials": {"s3": [{"endpointUrl": "http://a", "accessKeyId": ref("x", "id")}]}}
    assert not c.for_source(half, "s3://b", endpoint="http://a")


def test_gcs_key_mounted_as_file():
    add = c.for_source(SPEC, "gs://bucket/model")
    assert add.env == ({"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": "/secrets/aim-gcs-credentials/credentials.json"},)
    assert add.volumes == ({"name": "aim-gcs-credentials",
                            "secret": {"secretName": "gcp", "items": [{"key": "key.json", "path": "credentials.json"}]}},)
    assert add.mounts == ({"name": "aim-gcs-credentials", "mountPath": "/secrets/aim-gcs-credentials", "readOnly": True},)


def test_azure_connection_string():
    add = c.for_source(SPEC, "azure")
    assert [(e["name"], secret_of(e)) for e in add.env] == [("AZURE_STORAGE_CONNECTION_STRING", ("az", "conn"))]


def test_unknown_scheme_and_empty_config_add_nothing():
    assert not c.for_source(SPEC, "pvc://claim/x")
    assert not c.for_source(None, "hf://org/m")
    assert not c.for_source({}, "s3://b", endpoint="http://minio.store:9000")


# --------------------------------------------------------------------------- precedence


def test_object_wins_over_namespace_and_system():
    system = {"huggingface": "sys-hf", "aws": "sys-aws", "gcp": "sys-gcp"}
    add = c.for_source(SPEC, "hf://o/m", own_env=["HF_TOKEN"], system_secret_names=system)
    assert not add and add.layer == "object"
    assert not c.for_source(SPEC, "s3://b", endpoint="http://minio.store:9000", own_env=["AWS_ACCESS_KEY_ID"])


def test_namespace_wins_over_system():
    add = c.for_source(SPEC, "hf://o/m", system_secret_names={"huggingface": "sys-hf"})
    assert add.layer == "namespace" and secret_of(add.env[0]) == ("hf", "token")


def test_system_secret_names_last_and_optional():
    system = {"huggingface": "sys-hf", "aws": "sys-aws", "gcp": "sys-gcp"}
    hf = c.for_source(None, "hf://o/m", system_secret_names=system)
    assert hf.layer == "system" and hf.env[0]["valueFrom"]["secretKeyRef"] == {"name": "sys-hf", "key": "token", "optional": True}
    s3 = c.for_source({}, "s3://b", system_secret_names=system)
    assert [secret_of(e) for e in s3.env] == [("sys-aws", "accessKeyID"), ("sys-aws", "secretAccessKey")]
    gcs = c.for_source({}, "gs://b/m", system_secret_names=system)
    assert gcs.volumes[0]["secret"]["secretName"] == "sys-gcp" and gcs.volumes[0]["secret"]["optional"] is True
    # S3 endpoint not in the namespace config: the system secret applies
    other = c.for_source(SPEC, "s3://b", endpoint="http://elsewhere", system_secret_names=system)
    assert other.layer == "system"


def test_typed_model_and_whole_object_accepted():
    typed = AIMNamespaceConfigSpec.model_validate(SPEC)
    assert secret_of(c.for_source(typed, "hf://o/m").env[0]) == ("hf", "token")
    assert secret_of(c.for_source(cfg("x", "t", **SPEC), "hf://o/m").env[0]) == ("hf", "token")
    with pytest.raises(TypeError):
        c.config_spec(42)


def test_additions_apply_skips_names_already_there():
    container = {"name": "server", "env": [{"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": "/mine"}]}
    pod: dict = {}
    c.for_source(SPEC, "gs://b/m").apply(container, pod)
    assert container["env"] == [{"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": "/mine"}]
    assert [v["name"] for v in pod["volumes"]] == ["aim-gcs-credentials"]
    empty: dict = {}
    c.Additions().apply(empty, pod)
    assert empty == {}


def test_env_names_of_list_and_map():
    assert c.env_names([{"name": "A", "value": "1"}, {"value": "x"}]) == ["A"]
    assert c.env_names({"B": "2"}) == ["B"]


# --------------------------------------------------------------------------- download items


def test_fill_download_items_by_endpoint_and_keeps_own():
    downloads = {
        "s3": [
            {"endpointUrl": "http://minio.store:9000", "buckets": []},
            {"endpointUrl": "http://minio.store:9000", "accessKeyId": ref("mine", "id"), "secretKey": ref("mine", "s"),
             "buckets": []},
            {"endpointUrl": "http://unknown", "buckets": []},
        ],
        "gcs": [{"applicationCredentials": {}, "buckets": []}],
        "azureBlob": [{"connectionString": {"secretName": "own", "secretKey": "k"}, "containers": []}],
        "git": [{"repository": "r", "targetPath": "t"}],
    }
    out = c.fill_download_items(SPEC, downloads)
    assert out["s3"][0]["accessKeyId"] == ref("minio", "id") and out["s3"][0]["secretKey"] == ref("minio", "secret")
    assert out["s3"][1]["accessKeyId"] == ref("mine", "id")  # the object wins
    assert "accessKeyId" not in out["s3"][2]  # no matching entry: unauthenticated as before
    assert out["gcs"][0]["applicationCredentials"] == ref("gcp", "key.json")
    assert out["azureBlob"][0]["connectionString"] == ref("own", "k")
    assert out["git"] == downloads["git"]
    assert downloads["s3"][0] == {"endpointUrl": "http://minio.store:9000", "buckets": []}  # input untouched
    assert c.fill_download_items(None, downloads) == downloads and c.fill_download_items(SPEC, None) is None


def test_download_env_hf_token_unless_object_sets_one():
    assert [e["name"] for e in c.download_env(SPEC, hf=True)] == ["HF_TOKEN"]
    assert c.download_env(SPEC, hf=True, own_env=["HF_TOKEN"]) == []
    assert c.download_env(SPEC, hf=False) == []


# --------------------------------------------------------------------------- pull secrets


def test_pull_secrets_deduplicated_in_order():
    assert c.pull_secrets(SPEC, [{"name": "other"}, "mine", {"name": "mine"}]) == [
        {"name": "other"}, {"name": "mine"}, {"name": "regcred"}]
    assert c.pull_secrets(None, None) == []
    assert c.pull_secrets({"images": {"imagePullSecrets": ["", "a", "a"]}}) == [{"name": "a"}]


def test_for_model_uses_its_env_as_object_layer_and_endpoint():
    model = {"spec": {"url": "s3://bucket/m", "env": {"AWS_ENDPOINT_URL": "http://minio.store:9000"}}}
    add = c.for_model(SPEC, model)
    assert {e["name"]: secret_of(e) for e in add.env}["AWS_ACCESS_KEY_ID"] == ("minio", "id")
    assert "AWS_ENDPOINT_URL" not in {e["name"] for e in add.env}  # the Model's own stays
    own = {"spec": {"url": "hf://o/m", "env": {"HF_TOKEN": "x"}}}
    assert not c.for_model(SPEC, own) and c.for_model(SPEC, own).layer == "object"
    # an adapter URL on the same Model
    assert c.for_model(SPEC, model, url="gs://b/adapter").volumes[0]["name"] == "aim-gcs-credentials"
